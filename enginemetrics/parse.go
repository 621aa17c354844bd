package enginemetrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/engine"
)

// Parse reads one scrape of an engine in Prometheus's text exposition
// format (0.0.4, what every engine llmgw runs serves) and picks out the
// quantities names says where to find. at is when the scrape was answered.
// A family the engine should export but the text lacks is listed in
// Sample.Missing, not an error; text that is not the exposition format is
// an error naming the line.
func Parse(r io.Reader, names engine.Metrics, at time.Time) (Sample, error) {
	fams, err := families(r)
	if err != nil {
		return Sample{}, err
	}
	return fromFamilies(fams, names, at), nil
}

// ParseAny is Parse for an engine not known beforehand (the gateway knows
// a replica's model, not its engine): the engine is the one whose names
// the text has most of, among those engine.MetricsOf knows; "" when the
// text has none of any engine's (then the Sample lists every quantity as
// missing).
func ParseAny(r io.Reader, at time.Time) (string, Sample, error) {
	fams, err := families(r)
	if err != nil {
		return "", Sample{}, err
	}
	best, bestN := "", 0
	for _, e := range engine.Engines() {
		names, _ := engine.MetricsOf(e)
		n := 0
		for _, m := range []engine.Metric{names.RequestsWaiting, names.RequestsRunning, names.KVCacheUsage, names.TimeToFirstToken, names.GeneratedTokens} {
			if m.Name != "" && fams[m.Name] != nil {
				n++
			}
		}
		if n > bestN {
			best, bestN = e, n
		}
	}
	if best == "" {
		s := Sample{At: at, Missing: Quantities()}
		return "", s, nil
	}
	names, _ := engine.MetricsOf(best)
	return best, fromFamilies(fams, names, at), nil
}

func families(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

func fromFamilies(fams map[string]*dto.MetricFamily, names engine.Metrics, at time.Time) Sample {
	s := Sample{At: at}
	note := func(field string, m engine.Metric, v Value) Value {
		switch {
		case m.Name == "":
			s.Absent = append(s.Absent, field)
		case !v.Known:
			s.Missing = append(s.Missing, field)
		}
		return v
	}
	s.Waiting = note(FieldRequestsWaiting, names.RequestsWaiting, sum(fams, names.RequestsWaiting))
	s.Running = note(FieldRequestsRunning, names.RequestsRunning, sum(fams, names.RequestsRunning))
	s.KVCache = note(FieldKVCacheUsage, names.KVCacheUsage, ratio(fams, names.KVCacheUsage))
	s.TTFT = histogram(fams, names.TimeToFirstToken)
	ttft := Value{}
	if s.TTFT != nil {
		ttft = Known(s.TTFT.Count)
	}
	note(FieldTTFT, names.TimeToFirstToken, ttft)
	s.Tokens = note(FieldTokensPerSecond, names.GeneratedTokens, total(fams, names.GeneratedTokens))
	s.Adapters = adapterRequests(fams, names.AdapterRequests)
	return s
}

// adapterRequests reads an info gauge of the adapters in use: of its
// series, the one with the greatest value, the time it was last set (an
// engine keeps every set it has had, each at the time it was last
// current). nil when the family is absent or holds no finite value.
func adapterRequests(fams map[string]*dto.MetricFamily, m engine.AdapterRequestsMetric) *AdapterRequests {
	f, xs := series(fams, m.Name, nil)
	var last *dto.Metric
	lastV := math.Inf(-1)
	for _, x := range xs {
		if v, ok := scalar(f.GetType(), x); ok && v > lastV {
			last, lastV = x, v
		}
	}
	if last == nil {
		return nil
	}
	secs, frac := math.Modf(lastV)
	out := &AdapterRequests{Set: time.Unix(int64(secs), int64(frac*1e9))}
	names := func(v string) []string {
		if v == "" {
			return nil
		}
		return strings.Split(v, ",")
	}
	for _, lp := range last.GetLabel() {
		switch lp.GetName() {
		case m.Running:
			out.Running = names(lp.GetValue())
		case m.Waiting:
			out.Waiting = names(lp.GetValue())
		case m.Slots:
			out.Slots, _ = strconv.Atoi(lp.GetValue())
		}
	}
	return out
}

// series are the metrics of m's family that m.Match keeps.
func series(fams map[string]*dto.MetricFamily, name string, match map[string]string) (*dto.MetricFamily, []*dto.Metric) {
	if name == "" {
		return nil, nil
	}
	f := fams[name]
	if f == nil {
		return nil, nil
	}
	var out []*dto.Metric
	for _, x := range f.GetMetric() {
		if matches(x, match) {
			out = append(out, x)
		}
	}
	return f, out
}

// matches reports whether x's labels have the values match names, where x
// has the label at all.
func matches(x *dto.Metric, match map[string]string) bool {
	for _, lp := range x.GetLabel() {
		if want, ok := match[lp.GetName()]; ok && lp.GetValue() != want {
			return false
		}
	}
	return true
}

// scalar is the value of a gauge, counter or untyped series.
func scalar(t dto.MetricType, x *dto.Metric) (float64, bool) {
	var v float64
	switch t {
	case dto.MetricType_GAUGE:
		v = x.GetGauge().GetValue()
	case dto.MetricType_COUNTER:
		v = x.GetCounter().GetValue()
	case dto.MetricType_UNTYPED:
		v = x.GetUntyped().GetValue()
	default:
		return 0, false
	}
	return v, !math.IsNaN(v) && !math.IsInf(v, 0)
}

// sum adds m's series up: unknown when there are none, or one is not a
// finite number.
func sum(fams map[string]*dto.MetricFamily, m engine.Metric) Value {
	f, xs := series(fams, m.Name, m.Match)
	if len(xs) == 0 {
		return Value{}
	}
	total := 0.0
	for _, x := range xs {
		v, ok := scalar(f.GetType(), x)
		if !ok {
			return Value{}
		}
		total += v
	}
	return Known(total)
}

// ratio is m's series' mean, or with m.Per the sum of m over the sum of
// Per.
func ratio(fams map[string]*dto.MetricFamily, m engine.Metric) Value {
	if m.Per == "" {
		v := sum(fams, m)
		_, xs := series(fams, m.Name, m.Match)
		if !v.Known {
			return v
		}
		return Known(v.V / float64(len(xs)))
	}
	used := sum(fams, m)
	of := sum(fams, engine.Metric{Name: m.Per, Match: m.Match})
	if !used.Known || !of.Known || of.V <= 0 {
		return Value{}
	}
	return Known(used.V / of.V)
}

// total is a running total: a counter's series summed, or for m.Sum a
// histogram's sums.
func total(fams map[string]*dto.MetricFamily, m engine.Metric) Value {
	if !m.Sum {
		return sum(fams, m)
	}
	h := histogram(fams, m)
	if h == nil {
		return Value{}
	}
	return Known(h.Sum)
}

// histogram merges m's histogram series: counts and sums added, buckets
// added bound by bound when every series has the same bounds.
func histogram(fams map[string]*dto.MetricFamily, m engine.Metric) *Histogram {
	f, xs := series(fams, m.Name, m.Match)
	if len(xs) == 0 || f.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	var out *Histogram
	sameBounds := true
	for _, x := range xs {
		h := fromDTO(x.GetHistogram())
		if h == nil {
			return nil
		}
		if out == nil {
			out = h
			continue
		}
		out.Count += h.Count
		out.Sum += h.Sum
		if !sameBounds || len(h.Buckets) != len(out.Buckets) {
			sameBounds = false
			continue
		}
		for i := range h.Buckets {
			if h.Buckets[i].UpperBound != out.Buckets[i].UpperBound {
				sameBounds = false
				break
			}
			out.Buckets[i].Count += h.Buckets[i].Count
		}
	}
	if !sameBounds {
		out.Buckets = nil
	}
	return out
}

// fromDTO copies a parsed histogram, its buckets sorted and ending in
// +Inf; nil when a figure is not a finite number.
func fromDTO(h *dto.Histogram) *Histogram {
	if h == nil {
		return nil
	}
	count := float64(h.GetSampleCount())
	if h.SampleCountFloat != nil {
		count = h.GetSampleCountFloat()
	}
	out := &Histogram{Count: count, Sum: h.GetSampleSum()}
	if !finite(out.Count) || !finite(out.Sum) {
		return nil
	}
	for _, b := range h.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if b.CumulativeCountFloat != nil {
			c = b.GetCumulativeCountFloat()
		}
		if !finite(c) || math.IsNaN(b.GetUpperBound()) {
			return nil
		}
		out.Buckets = append(out.Buckets, Bucket{UpperBound: b.GetUpperBound(), Count: c})
	}
	sort.Slice(out.Buckets, func(i, j int) bool { return out.Buckets[i].UpperBound < out.Buckets[j].UpperBound })
	if n := len(out.Buckets); n == 0 || !math.IsInf(out.Buckets[n-1].UpperBound, 1) {
		out.Buckets = append(out.Buckets, Bucket{UpperBound: math.Inf(1), Count: out.Count})
	}
	return out
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/valyala/fasthttp"
)

// loadOne is one client for dur: a request, its whole answer, the next
// (closed loop). Nothing queues, so the latency is the path's own.
func loadOne(client *fasthttp.Client, url string, dur time.Duration) result {
	var r result
	start := time.Now()
	for time.Since(start) < dur {
		r.sent++
		t0 := time.Now()
		if !send(client, url) {
			r.errors++
			continue
		}
		r.lat = append(r.lat, time.Since(t0))
	}
	r.took = time.Since(start)
	return r
}

// summary gathers, per phase and target, one value per round of what
// the goals are stated in, and prints each as the median and range over
// the rounds.
type summary struct {
	targets []target
	// gateways are the targets besides the gateway whose ratios to
	// nginx and minimal-go are printed (-also's).
	gateways []string
	// vals[phase][target][metric] holds one value per round.
	vals map[string][]map[string][]float64
}

func newSummary(targets []target) *summary {
	return &summary{targets: targets, vals: map[string][]map[string][]float64{}}
}

// Metrics of the summary, per target and round.
const (
	mReqs    = "req/s"
	mAdd50   = "added p50 µs"
	mAdd99   = "added p99 µs"
	mCPU     = "cpu/req µs"
	mErrors  = "errors"
	mSamples = "answers"
)

func (s *summary) add(phase string, res []result, proxyCPU []time.Duration) {
	if s.vals[phase] == nil {
		s.vals[phase] = make([]map[string][]float64, len(s.targets))
		for i := range s.vals[phase] {
			s.vals[phase][i] = map[string][]float64{}
		}
	}
	for i, t := range s.targets {
		m := s.vals[phase][i]
		r := res[i]
		m[mReqs] = append(m[mReqs], r.perSecond())
		m[mErrors] = append(m[mErrors], float64(r.errors))
		m[mSamples] = append(m[mSamples], float64(len(r.lat)))
		if i > 0 {
			m[mAdd50] = append(m[mAdd50], micros(r.pct(50)-res[0].pct(50)))
			m[mAdd99] = append(m[mAdd99], micros(r.pct(99)-res[0].pct(99)))
			if t.srv.cpu != nil && r.sent > 0 {
				m[mCPU] = append(m[mCPU], micros(proxyCPU[i])/float64(r.sent))
			}
		}
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// stat is the median of vs and their range, "-" when there are none.
func stat(vs []float64, format string) string {
	if len(vs) == 0 {
		return "-"
	}
	v := slices.Clone(vs)
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", med, v[0], v[len(v)-1])
}

// ratios is a over b round by round.
func ratios(a, b []float64) []float64 {
	if len(a) != len(b) {
		return nil
	}
	out := make([]float64, 0, len(a))
	for i := range a {
		if b[i] != 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

func (s *summary) print(w io.Writer, phases []phaseSpec) {
	idx := func(name string) int {
		return slices.IndexFunc(s.targets, func(t target) bool { return t.name == name })
	}
	gw := idx("gateway+keys")
	if gw < 0 {
		gw = idx("gateway")
	}
	gws := []int{gw}
	for _, name := range s.gateways {
		gws = append(gws, idx(name))
	}
	ngx, minimal := idx("nginx"), idx("minimal-go")
	rounds := 0
	for _, p := range phases {
		if v := s.vals[p.name]; v != nil {
			rounds = len(v[0][mReqs])
		}
	}
	fmt.Fprintf(w, "summary over %d rounds: median [min–max] of the rounds' values; added = the target's percentile minus direct's in the same round\n", rounds)
	fmt.Fprintf(w, "%-8s %-20s %-26s %-26s %-26s %-26s %s\n", "phase", "target", mReqs, mAdd50, mAdd99, mCPU, "errors")
	for _, p := range phases {
		v := s.vals[p.name]
		if v == nil {
			continue
		}
		for i, t := range s.targets {
			m := v[i]
			var errs float64
			for _, e := range m[mErrors] {
				errs += e
			}
			fmt.Fprintf(w, "%-8s %-20s %-26s %-26s %-26s %-26s %.0f\n", p.name, t.name, stat(m[mReqs], "%.0f"), stat(m[mAdd50], "%.0f"), stat(m[mAdd99], "%.0f"), stat(m[mCPU], "%.1f"), errs)
		}
		for _, gw := range gws {
			if gw > 0 && ngx > 0 {
				fmt.Fprintf(w, "%-8s %-20s %-26s %-26s %-26s\n", p.name, s.targets[gw].name+"÷nginx",
					stat(ratios(v[gw][mReqs], v[ngx][mReqs]), "%.2f"), stat(ratios(v[gw][mAdd50], v[ngx][mAdd50]), "%.2f"), stat(ratios(v[gw][mAdd99], v[ngx][mAdd99]), "%.2f"))
			}
			if gw > 0 && minimal > 0 {
				fmt.Fprintf(w, "%-8s %-20s %-26s %-26s %-26s %-26s\n", p.name, s.targets[gw].name+"÷minimal", stat(ratios(v[gw][mReqs], v[minimal][mReqs]), "%.2f"), "", "", stat(ratios(v[gw][mCPU], v[minimal][mCPU]), "%.2f"))
			}
		}
	}
}

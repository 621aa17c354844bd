package controller

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controllerapi"
)

// The Prometheus source (autoscale { prometheus { … } }): each signal with
// a query is read from it instead of the gateways or the engines. Every
// round runs each query as an instant query at the round's wall time,
// within autoscale.timeout, through client_golang's api/prometheus/v1
// client. A query must answer an instant vector with one sample per model,
// the model named by model_label. A query that fails, or answers
// something else, makes its signal missing for every model; a model the
// vector does not name, or names twice, or gives NaN, has no reading of
// that signal (absent is not zero: write the query so that a model with no
// demand answers 0).

// promSource runs the configured queries.
type promSource struct {
	api     promv1.API
	label   model.LabelName
	queries map[string]string
	timeout time.Duration
	address string
}

// promResult is one query's answer: the value per model, or why none.
type promResult struct {
	err    string
	values map[string]float64
	dup    map[string]bool
	query  string
}

func newPromSource(p config.Prometheus, timeout time.Duration) (*promSource, error) {
	client, err := promapi.NewClient(promapi.Config{
		Address:      p.Address,
		RoundTripper: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
	})
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", p.Address, err)
	}
	label := p.ModelLabel
	if label == "" {
		label = config.DefaultModelLabel
	}
	return &promSource{api: promv1.NewAPI(client), label: model.LabelName(label), queries: p.Queries, timeout: timeout, address: p.Address}, nil
}

// query runs every query of the source, a few at a time.
func (p *promSource) query(ctx context.Context, at time.Time) (map[string]promResult, []controllerapi.SourceView) {
	names := make([]string, 0, len(p.queries))
	for n := range p.queries {
		names = append(names, n)
	}
	sort.Strings(names)
	results := make([]promResult, len(names))
	took := make([]time.Duration, len(names))
	forEach(ctx, len(names), promReaders, func(i int) {
		start := time.Now()
		results[i] = p.run(ctx, p.queries[names[i]])
		took[i] = time.Since(start)
	})
	out := map[string]promResult{}
	var sources []controllerapi.SourceView
	for i, name := range names {
		r := results[i]
		if r.err == "" && r.values == nil {
			r.err = fmt.Sprintf("query %q not run: the round ended (%v)", p.queries[name], ctx.Err())
		}
		out[name] = r
		sources = append(sources, controllerapi.SourceView{Source: controllerapi.SourcePrometheus, Name: name, OK: r.err == "", Error: r.err, At: at, Took: took[i].Seconds()})
	}
	return out, sources
}

// promReaders is how many queries run at once.
const promReaders = 4

func (p *promSource) run(ctx context.Context, q string) promResult {
	qctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	// Evaluated at the wall clock's now: Prometheus holds real time,
	// whatever Options.Now says; the round stamps the result with its own
	// time.
	v, _, _, err := p.api.Query(qctx, q, time.Now(), promv1.WithTimeout(p.timeout))
	res := promResult{query: q}
	if err != nil {
		res.err = fmt.Sprintf("prometheus %s: query %q: %s", p.address, q, oneLine(err.Error()))
		return res
	}
	vec, ok := v.(model.Vector)
	if !ok {
		res.err = fmt.Sprintf("prometheus %s: query %q answered a %s, want an instant vector with one sample per %s", p.address, q, v.Type(), p.label)
		return res
	}
	res.values, res.dup = map[string]float64{}, map[string]bool{}
	for _, s := range vec {
		m := string(s.Metric[p.label])
		if m == "" {
			continue
		}
		if _, seen := res.values[m]; seen {
			res.dup[m] = true
		}
		res.values[m] = float64(s.Value)
	}
	return res
}

// forModel is the query's reading for one model.
func (r promResult) forModel(m string) controllerapi.SignalView {
	switch {
	case r.err != "":
		return missing(controllerapi.SourcePrometheus, "%s", r.err)
	case r.dup[m]:
		return missing(controllerapi.SourcePrometheus, "query %q answered several series for model %s; aggregate by its model label", r.query, m)
	}
	v, ok := r.values[m]
	switch {
	case !ok:
		return missing(controllerapi.SourcePrometheus, "query %q has no series for model %s", r.query, m)
	case !finite(v) || v < 0:
		return missing(controllerapi.SourcePrometheus, "query %q gave %s for model %s, not a reading", r.query, strings.TrimSpace(fmt.Sprint(v)), m)
	}
	return reading(controllerapi.SourcePrometheus, v)
}

package gateway

import (
	"maps"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/httpjson"
)

// gatewayapi.Demand returns the gateway's demand now.
func (g *Gateway) Demand() gatewayapi.Demand {
	now := g.now()
	t := g.tbl.Load()
	g.updMu.Lock()
	listErr := g.listErr
	g.updMu.Unlock()
	d := gatewayapi.Demand{SampledAt: now, StartedAt: g.started, ModelListError: listErr, Models: []gatewayapi.ModelDemand{}}
	since := now.Sub(g.started)
	for _, m := range slices.Sorted(maps.Keys(t.models)) {
		ms := t.models[m]
		st := ms.win.stats(now, since)
		md := gatewayapi.ModelDemand{
			Model:         m,
			State:         t.state(m),
			Outstanding:   ms.outstanding.Load(),
			Queued:        int(ms.q.n.Load()),
			ArrivalsTotal: ms.arrivals.Load(),
			TTFTSamples:   st.ttftN,
		}
		if p := t.pools[m]; p != nil {
			md.Replicas = len(p.eps)
			for _, e := range p.eps {
				md.Cache = append(md.Cache, gatewayapi.ReplicaCache{Replica: e.inst.Replica, Endpoint: e.inst.Address,
					PromptTokens: e.cache.prompt.Load(), CachedTokens: e.cache.cached.Load(), UnknownAnswers: e.cache.unknown.Load()})
			}
		}
		md.Routing = t.policies[m].Name()
		if lm, ok := t.listed[m]; ok {
			md.Listed = &lm
		}
		if at := ms.q.oldest(); !at.IsZero() {
			md.OldestQueuedSeconds = max(now.Sub(at).Seconds(), 0)
		}
		if st.span > 0 {
			md.ArrivalRate = float64(st.arrivals) / st.span.Seconds()
		}
		if st.ttftN > 0 {
			v := st.ttftP90.Seconds()
			md.TTFTP90Seconds = &v
		}
		d.Models = append(d.Models, md)
	}
	d.WindowSeconds = windowSpan(slotWidth(g.span), now, since).Seconds()
	return d
}

// demand answers gatewayapi.DemandPath.
func (g *Gateway) demand(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, http.MethodGet)
		return
	}
	httpjson.Write(w, http.StatusOK, g.Demand())
}

// demandCollector exports each known model's outstanding and held
// requests and its arrivals, read at scrape time.
type demandCollector struct{ g *Gateway }

var (
	outstandingDesc = prometheus.NewDesc("llmgw_gateway_outstanding_requests",
		"Requests for the model in the gateway now, being proxied or held.", []string{"model"}, nil)
	queuedDesc = prometheus.NewDesc("llmgw_gateway_queued_requests",
		"Requests for the model held now for want of a replica that can take them.", []string{"model"}, nil)
	arrivalsDesc = prometheus.NewDesc("llmgw_gateway_arrivals_total",
		"Requests for the model that arrived (counted on arrival, not on completion).", []string{"model"}, nil)
)

func (demandCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outstandingDesc
	ch <- queuedDesc
	ch <- arrivalsDesc
}

func (c demandCollector) Collect(ch chan<- prometheus.Metric) {
	for m, ms := range c.g.tbl.Load().models {
		ch <- prometheus.MustNewConstMetric(outstandingDesc, prometheus.GaugeValue, float64(ms.outstanding.Load()), m)
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(ms.q.n.Load()), m)
		ch <- prometheus.MustNewConstMetric(arrivalsDesc, prometheus.CounterValue, float64(ms.arrivals.Load()), m)
	}
}

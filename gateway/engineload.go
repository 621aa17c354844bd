package gateway

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/llmgw/llmgw/enginemetrics"
)

// Engine load. A gateway counts the requests it has in flight to each
// replica, but a replica also serves other gateways' requests. Every
// Options.EngineMetricsInterval the gateway reads each replica engine's
// Prometheus metrics (GET /metrics; the engine is found from its metric
// names, enginemetrics.ParseAny) and keeps the requests the engine holds
// (waiting plus running) beyond this gateway's own at that moment: the
// others' load. pick weighs a replica by its own in-flight count plus that
// share, so least-loaded routing sees every gateway's load, fresh for its
// own and as of the last read for the others'. A read that fails, or an
// engine whose metrics are not known, leaves the others' share at zero:
// the gateway routes on its own counts alone, as it does with the reads
// turned off.

// DefaultEngineMetricsInterval is Options.EngineMetricsInterval's default.
const DefaultEngineMetricsInterval = 5 * time.Second

// engineReaders is how many replica engines are read at once.
const engineReaders = 8

// engineMetricsPath is where every engine llmgw runs serves its metrics.
const engineMetricsPath = "/metrics"

// pollEngines reads every endpoint's engine each interval until ctx ends.
func (g *Gateway) pollEngines(ctx context.Context) {
	tick := time.NewTicker(g.engineEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t := g.tbl.Load()
		var eps []*endpoint
		seen := map[*epState]bool{}
		for _, ep := range t.byID {
			if !seen[ep.epState] {
				seen[ep.epState] = true
				eps = append(eps, ep)
			}
		}
		var wg sync.WaitGroup
		next := make(chan *endpoint)
		for range min(engineReaders, len(eps)) {
			wg.Go(func() {
				for ep := range next {
					g.readEngine(ctx, ep)
				}
			})
		}
		for _, ep := range eps {
			select {
			case next <- ep:
			case <-ctx.Done():
			}
		}
		close(next)
		wg.Wait()
	}
}

// readEngine reads one endpoint's engine and sets its others' share.
func (g *Gateway) readEngine(ctx context.Context, ep *endpoint) {
	if ctx.Err() != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, min(g.engineEvery, enginemetrics.DefaultTimeout))
	defer cancel()
	if listsAdapters(ep.inst.Engine) && len(g.tbl.Load().listed[ep.inst.Model].Adapters) > 0 {
		// The adapters it serves (adapters.go): a replica that restarted
		// with other adapters, or (vLLM) was loaded more, is read again
		// here.
		if lt, err := g.readLoras(cctx, ep); err == nil {
			ep.loras.Store(lt)
		} else if ctx.Err() == nil {
			g.log.Debug("engine adapters unreadable", "model", ep.inst.Model, "replica", ep.inst.Replica, "endpoint", ep.inst.Address, "error", err)
		}
	}
	_, s, err := enginemetrics.ScrapeAny(cctx, g.engineClient, ep.base, engineMetricsPath, nil)
	own := ep.Outstanding.Load()
	waiting, wok := s.Waiting.Get()
	running, rok := s.Running.Get()
	labels := breakerLabels(ep.inst)
	if err != nil || !wok || !rok {
		ep.Others.Store(0)
		ep.Wake()
		if !ep.gone.Load() {
			g.m.engineLoad.Delete(labels)
		}
		if err != nil && ctx.Err() == nil {
			g.log.Debug("engine metrics unreadable", "model", ep.inst.Model, "replica", ep.inst.Replica, "endpoint", ep.inst.Address, "error", err)
		}
		return
	}
	total := int64(waiting + running)
	ep.Others.Store(max(total-own, 0))
	if r := int64(running); waiting > 0 && r > ep.Slots.Load() {
		// Requests wait behind full slots: running is how many it has.
		// (One read of an endpoint at a time: no other store races.)
		ep.Slots.Store(r)
	}
	ep.Wake()
	if !ep.gone.Load() {
		g.m.engineLoad.With(labels).Set(float64(total))
	}
}

// defaultEngineClient reads replica engines: no proxy, a kept-alive
// connection per replica.
func defaultEngineClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}
}

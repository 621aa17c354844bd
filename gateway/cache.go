package gateway

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// epCache counts what a replica's answers said of its engine's prompt
// cache, for the demand (gatewayapi.ReplicaCache); the Prometheus
// counters count the same.
type epCache struct {
	prompt, cached, unknown atomic.Int64
}

// observeCache counts one completion's answer from ep: its prompt and
// cached prompt tokens, or an unknown when it did not say. The series of
// a replica gone from discovery are deleted, not made again.
func (g *Gateway) observeCache(ep *endpoint, c cacheUse) {
	ec := &ep.cache
	in := ep.inst
	if !c.known {
		ec.unknown.Add(1)
		if !ep.gone.Load() {
			epCounter(&ep.cm.unknown, g.m.cacheUnknown, in).Inc()
		}
		return
	}
	ec.prompt.Add(c.prompt)
	ec.cached.Add(c.cached)
	if !ep.gone.Load() {
		epCounter(&ep.cm.prompt, g.m.promptTokens, in).Add(float64(c.prompt))
		epCounter(&ep.cm.cached, g.m.cachedTokens, in).Add(float64(c.cached))
	}
}

// epCounter is vec's series of in, kept in p once looked up.
func epCounter(p *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, in Instance) prometheus.Counter {
	if c := p.Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(in.Model, in.Replica, in.Address)
	p.Store(&c)
	return c
}

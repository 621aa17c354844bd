package gateway

import "sync/atomic"

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
			g.m.cacheUnknown.WithLabelValues(in.Model, in.Replica, in.Address).Inc()
		}
		return
	}
	ec.prompt.Add(c.prompt)
	ec.cached.Add(c.cached)
	if !ep.gone.Load() {
		g.m.promptTokens.WithLabelValues(in.Model, in.Replica, in.Address).Add(float64(c.prompt))
		g.m.cachedTokens.WithLabelValues(in.Model, in.Replica, in.Address).Add(float64(c.cached))
	}
}

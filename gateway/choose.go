package gateway

import (
	"context"

	"github.com/llmgw/llmgw/gateway/routing"
)

// Choose says where the gateway would send a request for model with body
// at path, and why (RouteHeader's word), without sending it or counting
// it anywhere: the replica's address, chosen by the model's policy as a
// request's first attempt would be, from load (requests in flight per
// replica address, all gateways' together; an address not in it holds
// none) or, with load nil, from the gateway's own view now (its requests
// in flight and the others' its engines last reported). Every replica's
// breaker is taken as closed, and a first turn is not held for its
// opening wait (the replica it would wait for is the answer). "" when the
// model has no replica. It is for comparing two gateways' choices from the
// same state, request by request (bench/prefixload).
func (g *Gateway) Choose(model, path string, body []byte, load map[string]int64) (address, route string) {
	t := g.tbl.Load()
	p := t.pools[model]
	if p == nil || len(p.eps) == 0 {
		return "", ""
	}
	// The policy picks on a snapshot of the pool: new replica states with
	// the load given and fresh breakers, so that its pick counts the
	// request there and the gateway's own counters and breakers are not
	// touched.
	var set routing.Set
	for _, e := range p.eps {
		st := routing.NewState(e.inst.Address, newBreaker(BreakerConfig{}.withDefaults(), nil))
		if load != nil {
			st.Outstanding.Store(load[e.inst.Address])
		} else {
			st.Outstanding.Store(e.Outstanding.Load())
			st.Others.Store(e.Others.Load())
		}
		set.Replicas = append(set.Replicas, routing.Replica{Weight: e.inst.Weight, State: st})
	}
	c, ok := p.policy.Pick(&routing.Request{Ctx: context.Background(), Key: p.policy.Key(path, body), Replicas: &set, NoWait: true})
	if !ok {
		return "", ""
	}
	return p.eps[c.Index].inst.Address, c.Route
}

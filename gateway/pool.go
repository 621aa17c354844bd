package gateway

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/llmgw/llmgw/gatewayapi"
)

// endpoint is one replica and what the gateway knows of it beyond
// discovery: requests in flight and its breaker. It outlives snapshots
// that keep its registration at the same address.
type endpoint struct {
	inst Instance
	base string // "http://host:port"
	*epState
}

// addrHash is the hash of the endpoint's address that the prefix policy
// ranks it by (rank).
func (ep *endpoint) addrHash() uint64 {
	if h := ep.hash.Load(); h != 0 {
		return h
	}
	h := xxhash.Sum64String(ep.inst.Address) | 1
	ep.hash.Store(h)
	return h
}

// epState is the part of an endpoint that survives a change of its tags.
type epState struct {
	outstanding atomic.Int64
	// others are the requests the replica's engine held beyond this
	// gateway's at its last read (engineload.go): other gateways' load.
	others atomic.Int64
	// slots is the most requests the replica's engine was seen running at
	// once (engineload.go): its slots, once it has been full at a read.
	slots atomic.Int64
	freed waker // told when a request ends or the engine is read
	br    *breaker
	gone  atomic.Bool // left discovery: its metrics are deleted
	cache epCache
	hash  atomic.Uint64 // addrHash's, 0 until first asked
}

// pool is one model's endpoints.
type pool struct {
	model string
	eps   []*endpoint
	next  atomic.Uint32 // rotates where ties start
}

// table is one routing snapshot; it is replaced whole, never changed
// (the model states and endpoints it points to carry over to the next).
type table struct {
	// models are the known models: in the registry's catalog or in the
	// model list.
	models map[string]*modelState
	listed map[string]gatewayapi.ListedModel // the model list's entries
	pools  map[string]*pool
	served []string // models with at least one endpoint, sorted
	byID   map[string]*endpoint
}

func emptyTable() *table {
	return &table{models: map[string]*modelState{}, listed: map[string]gatewayapi.ListedModel{}, pools: map[string]*pool{},
		byID: map[string]*endpoint{}}
}

// buildTable makes the table for snap and the model list, carrying over
// the model states of old for the models still known and the endpoints of
// old whose ID and address are unchanged. newModel and newEndpoint make
// the others. It returns the endpoints of old that are gone.
func buildTable(old *table, snap Snapshot, list gatewayapi.ModelList, newModel func(string) *modelState, newEndpoint func(Instance) *endpoint) (*table, []*endpoint) {
	snap = snap.normalize()
	t := emptyTable()
	known := func(m string) {
		if t.models[m] != nil {
			return
		}
		if ms := old.models[m]; ms != nil {
			t.models[m] = ms
		} else {
			t.models[m] = newModel(m)
		}
	}
	for _, m := range snap.Models {
		known(m)
	}
	for _, lm := range list.Models {
		t.listed[lm.Name] = lm
		known(lm.Name)
	}
	for _, in := range snap.Instances {
		if _, dup := t.byID[in.ID]; dup {
			continue
		}
		ep := old.byID[in.ID]
		if ep == nil || ep.inst.Address != in.Address || ep.inst.Model != in.Model || ep.inst.Replica != in.Replica {
			ep = newEndpoint(in)
		} else if ep.inst != in {
			// Same replica at the same address, other tags (a weight
			// changed): keep its state.
			ep = ep.withInstance(in)
		}
		t.byID[in.ID] = ep
		p := t.pools[in.Model]
		if p == nil {
			p = &pool{model: in.Model}
			t.pools[in.Model] = p
			t.served = append(t.served, in.Model)
		}
		p.eps = append(p.eps, ep)
	}
	var gone []*endpoint
	for id, ep := range old.byID {
		if nep, ok := t.byID[id]; !ok || nep.epState != ep.epState {
			gone = append(gone, ep)
		}
	}
	slices.Sort(t.served)
	return t, gone
}

// withInstance is ep with new instance details, sharing its counters and
// breaker.
func (ep *endpoint) withInstance(in Instance) *endpoint {
	return &endpoint{inst: in, base: ep.base, epState: ep.epState}
}

// pick chooses the endpoint for the next attempt: among those not in
// tried whose breaker lets a request through at now, the one with the
// fewest requests per unit of weight — this gateway's in flight plus the
// others' its engine last reported (weight 0 only when no other can take
// it). It takes the breaker's permission; probe says the
// request is its half-open probe.
func (p *pool) pick(tried []*epState, now time.Time) (ep *endpoint, probe bool) {
	n := len(p.eps)
	if n == 0 {
		return nil, false
	}
	start := 0
	if n > 1 {
		start = int(p.next.Add(1) % uint32(n))
	}
	for range n { // each round takes one endpoint out of the running
		var best *endpoint
		var bestOut, bestW int64
		for i := range n {
			e := p.eps[(start+i)%n]
			if !usable(e, tried, now) {
				continue
			}
			out, w := e.outstanding.Load()+e.others.Load(), int64(e.inst.Weight)
			if best == nil || better(out, w, bestOut, bestW) {
				best, bestOut, bestW = e, out, w
			}
		}
		if best == nil {
			return nil, false
		}
		if ok, probe := best.br.acquire(now); ok {
			return best, probe
		}
		// Another request took the probe between available and acquire.
		tried = append(tried, best.epState)
	}
	return nil, false
}

// better reports whether out1 requests on weight w1 is a lighter load than
// out2 on w2: out1/w1 < out2/w2, with weight 0 heavier than any other.
func better(out1, w1, out2, w2 int64) bool {
	switch {
	case w1 == 0 && w2 == 0:
		return out1 < out2
	case w1 == 0:
		return false
	case w2 == 0:
		return true
	}
	return (out1+1)*w2 < (out2+1)*w1
}

// retryAfter is how long until some endpoint of p may take a request again:
// the soonest an open breaker lets a probe through, at least a second.
func (p *pool) retryAfter(now time.Time, fallback time.Duration) time.Duration {
	var soonest time.Time
	for _, e := range p.eps {
		if t := e.br.reopensAt(); !t.IsZero() && (soonest.IsZero() || t.Before(soonest)) {
			soonest = t
		}
	}
	if soonest.IsZero() {
		return fallback
	}
	return max(soonest.Sub(now), time.Second)
}

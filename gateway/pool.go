package gateway

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/llmgw/llmgw/gateway/routing"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/prometheus/client_golang/prometheus"
)

// endpoint is one replica and what the gateway knows of it beyond
// discovery: requests in flight and its breaker. It outlives snapshots
// that keep its registration at the same address.
type endpoint struct {
	inst Instance
	base string // "http://host:port"
	*epState
	// cm are its series of the cache metrics, looked up on first use
	// (observeCache).
	cm epMetrics
}

// epMetrics are an endpoint's series of the metrics each of its answers
// counts in.
type epMetrics struct {
	prompt, cached, unknown atomic.Pointer[prometheus.Counter]
}

// epState is the part of an endpoint that survives a change of its tags:
// what the routing policies read and count (routing.State: requests in
// flight, the engine's load and slots), its breaker, its cache counters.
type epState struct {
	*routing.State
	br    *breaker
	gone  atomic.Bool // left discovery: its metrics are deleted
	cache epCache
	// loras is the replica's adapter list as it last read it (nil: not
	// read yet): adapters.go.
	loras atomic.Pointer[loraTable]
}

// pool is one model's endpoints, and the policy that routes among them.
type pool struct {
	model  string
	eps    []*endpoint
	policy routing.Policy
	// set is eps as the policy sees them, in the same order: its choice
	// is an index into both.
	set routing.Set
}

// table is one routing snapshot; it is replaced whole, never changed
// (the model states and endpoints it points to carry over to the next).
type table struct {
	// models are the known models: in the registry's catalog or in the
	// model list.
	models map[string]*modelState
	listed map[string]gatewayapi.ListedModel // the model list's entries
	// policies are the known models' routing policies.
	policies map[string]routing.Policy
	pools    map[string]*pool
	served   []string // models with at least one endpoint, sorted
	byID     map[string]*endpoint
	// adapters are the model list's LoRA adapters by name;
	// adapterRouters route each model's adapters (adapters.go).
	adapters       map[string]adapterRef
	adapterRouters map[string]*routing.Adapters
}

func emptyTable() *table {
	return &table{models: map[string]*modelState{}, listed: map[string]gatewayapi.ListedModel{}, policies: map[string]routing.Policy{},
		pools: map[string]*pool{}, byID: map[string]*endpoint{}, adapters: map[string]adapterRef{}, adapterRouters: map[string]*routing.Adapters{}}
}

// buildTable makes the table for snap and the model list, carrying over
// the model states of old for the models still known and the endpoints of
// old whose ID and address are unchanged. newModel and newEndpoint make
// the others; policyOf chooses each known model's routing policy, given
// the model list's routing of it. It returns the endpoints of old that are
// gone.
func buildTable(old *table, snap Snapshot, list gatewayapi.ModelList, newModel func(string) *modelState, newEndpoint func(Instance) *endpoint,
	policyOf func(model, listed string) routing.Policy) (*table, []*endpoint) {
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
	for m := range t.models {
		t.policies[m] = policyOf(m, t.listed[m].Routing)
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
			p = &pool{model: in.Model, policy: t.policies[in.Model]}
			t.pools[in.Model] = p
			t.served = append(t.served, in.Model)
		}
		p.eps = append(p.eps, ep)
		p.set.Replicas = append(p.set.Replicas, routing.Replica{Weight: ep.inst.Weight, State: ep.State})
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

package gateway

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llmgw/llmgw/gateway/routing"
	"github.com/llmgw/llmgw/gatewayapi"
)

// testEndpoint is an endpoint for in with a breaker of the defaults.
func testEndpoint(in Instance) *endpoint {
	st := &epState{br: newBreaker(BreakerConfig{}.withDefaults(), nil)}
	st.State = routing.NewState(in.Address, st.br)
	return &endpoint{inst: in, base: "http://" + in.Address, epState: st}
}

// retryAfter is the soonest an open breaker lets a probe through.
func TestPoolRetryAfter(t *testing.T) {
	now := time.Unix(0, 0)
	a, b := testEndpoint(Instance{ID: "a", Address: "a:1", Weight: 1}), testEndpoint(Instance{ID: "b", Address: "b:1", Weight: 1})
	p := &pool{model: "m", eps: []*endpoint{a, b}}
	if got := p.retryAfter(now, time.Minute); got != time.Minute {
		t.Errorf("no breaker open: %v, want the fallback 1m", got)
	}
	for range DefaultBreakerFailures {
		b.br.failure(false, now)
	}
	if got := p.retryAfter(now, time.Minute); got != DefaultBreakerOpen {
		t.Errorf("b open: %v, want b's %v", got, DefaultBreakerOpen)
	}
}

// A new snapshot keeps the state of endpoints that stay at one address,
// also when their tags change, and drops the rest.
func TestBuildTableKeepsState(t *testing.T) {
	mk := func(in Instance) *endpoint { return testEndpoint(in) }
	s1 := Snapshot{Models: []string{"idle"}, Instances: []Instance{
		{ID: "1", Model: "m", Address: "h:1", Weight: 1},
		{ID: "2", Model: "m", Address: "h:2", Weight: 1},
		{ID: "3", Model: "n", Address: "h:3", Weight: 1},
	}}
	mkModel := func(m string) *modelState { return newModelState(m, time.Minute) }
	// Each model's policy is chosen as the table is built, from the model
	// list's routing when it has one.
	policyOf := func(_, listed string) routing.Policy {
		if listed == RoutePrefix {
			return &routing.Prefix{}
		}
		return &routing.LeastOutstanding{}
	}
	list := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "zero"}, {Name: "n", Routing: RoutePrefix}}}
	t1, gone := buildTable(emptyTable(), s1, list, mkModel, mk, policyOf)
	if len(gone) != 0 {
		t.Fatalf("gone from empty: %d", len(gone))
	}
	for _, m := range []string{"idle", "zero", "m", "n"} {
		want := RouteLeastOutstanding
		if m == "n" {
			want = RoutePrefix
		}
		if p := t1.policies[m]; p == nil || p.Name() != want {
			t.Errorf("%s's policy: %v, want %s", m, p, want)
		}
		if p := t1.pools[m]; p != nil && p.policy != t1.policies[m] {
			t.Errorf("%s's pool routes by %v, its model by %v", m, p.policy, t1.policies[m])
		}
	}
	if diff := cmp.Diff([]string{"m", "n"}, t1.served); diff != "" {
		t.Errorf("served (-want +got):\n%s", diff)
	}
	if t1.models["idle"] == nil || t1.pools["idle"] != nil {
		t.Errorf("idle: known %v, pool %v", t1.models["idle"] != nil, t1.pools["idle"])
	}
	if t1.models["zero"] == nil || t1.pools["zero"] != nil || !t1.listed["zero"].Holdable() {
		t.Errorf("zero, only in the model list: known %v, pool %v, listed %+v", t1.models["zero"] != nil, t1.pools["zero"], t1.listed["zero"])
	}
	t1.models["m"].arrivals.Add(5)
	t1.byID["1"].Outstanding.Add(3)
	s2 := Snapshot{Instances: []Instance{
		{ID: "1", Model: "m", Address: "h:1", Weight: 4}, // weight changed
		{ID: "2", Model: "m", Address: "h:9", Weight: 1}, // moved
	}}
	t2, gone := buildTable(t1, s2, gatewayapi.ModelList{}, mkModel, mk, policyOf)
	if t2.models["m"] != t1.models["m"] || t2.models["m"].arrivals.Load() != 5 {
		t.Error("model m, still known, lost its state")
	}
	if t2.models["zero"] != nil || t2.models["idle"] != nil || t2.models["n"] != nil {
		t.Errorf("models no longer known are still there: %v", slices.Sorted(maps.Keys(t2.models)))
	}
	if got := t2.byID["1"]; got.epState != t1.byID["1"].epState || got.inst.Weight != 4 || got.Outstanding.Load() != 3 {
		t.Errorf("endpoint 1 lost its state or missed its new weight: %+v", got.inst)
	}
	if t2.byID["2"].epState == t1.byID["2"].epState {
		t.Error("endpoint 2 moved address but kept its state")
	}
	var goneIDs []string
	for _, ep := range gone {
		goneIDs = append(goneIDs, ep.inst.ID+"@"+ep.inst.Address)
	}
	if diff := cmp.Diff([]string{"2@h:2", "3@h:3"}, goneIDs, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("gone (-want +got):\n%s", diff)
	}
}

func TestInstanceFromTags(t *testing.T) {
	tests := []struct {
		name   string
		tags   []string
		weight int
		want   Instance
		ok     bool
	}{
		{"full", []string{"llmgw", "model=llama-3.1-8b", "profile=h200", "replica=llama-3.1-8b-0"}, 0,
			Instance{ID: "id", Model: "llama-3.1-8b", Profile: "h200", Replica: "llama-3.1-8b-0", Address: "10.0.0.1:80", Weight: 1}, true},
		{"weight tag wins", []string{"llmgw", "model=m", "weight=3"}, 7, Instance{ID: "id", Model: "m", Address: "10.0.0.1:80", Weight: 3}, true},
		{"registry weight", []string{"llmgw", "model=m"}, 7, Instance{ID: "id", Model: "m", Address: "10.0.0.1:80", Weight: 7}, true},
		{"weight zero", []string{"llmgw", "model=m", "weight=0"}, 0, Instance{ID: "id", Model: "m", Address: "10.0.0.1:80", Weight: 0}, true},
		{"bad weight ignored", []string{"llmgw", "model=m", "weight=-1"}, 0, Instance{ID: "id", Model: "m", Address: "10.0.0.1:80", Weight: 1}, true},
		{"no llmgw tag", []string{"model=m"}, 0, Instance{}, false},
		{"no model", []string{"llmgw"}, 0, Instance{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := instanceFromTags("id", "10.0.0.1", 80, tt.tags, tt.weight)
			if ok != tt.ok {
				t.Fatalf("ok: got %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

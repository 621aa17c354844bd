package facility

import (
	"errors"
	"slices"
	"testing"
)

func TestRemoveAndRestore(t *testing.T) {
	t.Parallel()
	nodes := fourNodes(map[string][]func(*Node){"n3": {free(0)}, "n4": {free(0)}})
	fac := Facility{Budgets: []Budget{budget("rack=k1", 2000+5600)}} // k1 holds one 8-GPU replica
	running := []Replica{{ID: "old", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 5600, GPU: "H", GPUs: 8}}}}
	nodes[0].GPUs[0].Free = 0 // what old holds
	p, err := NewPlanner(Fleet{Nodes: nodes}, fac, running)
	if err != nil {
		t.Fatal(err)
	}
	m := tmodel("m", tprof("p", 8))
	if d := p.Place(Request{Replica: "m-1", Model: m}); d.Placed {
		t.Fatalf("placed with the budget full: %v", shardNodes(d))
	}
	r, err := p.Remove("old")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := p.Usage(mustDomain("rack=k1"))
	if u.DrawWatts != 2000 || p.Count("m", mustDomain("rack=k1")) != 0 {
		t.Errorf("after remove: draw %v, count %d; want 2000 and 0", u.DrawWatts, p.Count("m", mustDomain("rack=k1")))
	}
	// Its GPUs and watts are free: a new copy fits, on n1 or n2.
	d := p.Place(Request{Replica: "m-1", Model: m})
	if !d.Placed {
		t.Fatalf("not placed after remove: %v", d.Reasons())
	}
	// Restore takes it all back.
	if err := p.Restore(r); err != nil {
		t.Fatal(err)
	}
	u, _ = p.Usage(mustDomain("rack=k1"))
	if u.DrawWatts != 2000+5600 || p.Count("m", mustDomain("rack=k1")) != 1 {
		t.Errorf("after restore: draw %v, count %d", u.DrawWatts, p.Count("m", mustDomain("rack=k1")))
	}
	if d := p.Place(Request{Replica: "m-1", Model: m}); d.Placed {
		t.Errorf("placed after restore: %v", shardNodes(d))
	}
	if err := p.Restore(r); !errors.Is(err, ErrNoRoom) {
		t.Errorf("restore twice: got %v, want ErrNoRoom (n1's GPUs are taken)", err)
	}
	if _, err := p.Remove("nope"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("remove unknown: got %v", err)
	}
	if !slices.ContainsFunc(p.running, func(x Replica) bool { return x.ID == "old" }) {
		t.Error("restored replica not running")
	}
}

// A node's measured draw stays: removing a shard frees only what the
// measurement does not cover.
func TestRemoveUnderMeasuredDraw(t *testing.T) {
	t.Parallel()
	nodes := fourNodes(map[string][]func(*Node){"n1": {measured(5000)}})
	running := []Replica{{ID: "a", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 2800, GPU: "H", GPUs: 4}}}}
	p, err := NewPlanner(Fleet{Nodes: nodes}, Facility{}, running)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := p.Usage(mustDomain("pdu=p1"))
	if u.DrawWatts != 5000 {
		t.Fatalf("draw %v, want the measured 5000", u.DrawWatts)
	}
	if _, err := p.Remove("a"); err != nil {
		t.Fatal(err)
	}
	u, _ = p.Usage(mustDomain("pdu=p1"))
	if u.DrawWatts != 5000 {
		t.Errorf("draw after remove %v, want 5000: the measurement still shows it", u.DrawWatts)
	}
}

// NotServing takes a replica out of the spread counts and nothing else;
// twice is once, and Remove afterwards does not take it out again.
func TestNotServing(t *testing.T) {
	t.Parallel()
	nodes := fourNodes(nil)
	running := []Replica{
		{ID: "a", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 700, GPU: "H", GPUs: 1}}},
		{ID: "b", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 700, GPU: "H", GPUs: 1}}},
	}
	p, err := NewPlanner(Fleet{Nodes: nodes}, Facility{Budgets: []Budget{budget("rack=k1", 100000)}}, running)
	if err != nil {
		t.Fatal(err)
	}
	k1 := mustDomain("rack=k1")
	before, _ := p.Usage(k1)
	for range 2 {
		if err := p.NotServing("a"); err != nil {
			t.Fatal(err)
		}
		u, _ := p.Usage(k1)
		if c := p.Count("m", k1); c != 1 || u.DrawWatts != before.DrawWatts {
			t.Fatalf("after NotServing: count %d, draw %v; want 1 and %v (the draw stays)", c, u.DrawWatts, before.DrawWatts)
		}
	}
	if _, err := p.Remove("a"); err != nil {
		t.Fatal(err)
	}
	u, _ := p.Usage(k1)
	if c := p.Count("m", k1); c != 1 || u.DrawWatts != before.DrawWatts-700 {
		t.Errorf("after Remove: count %d, draw %v; want 1 (b) and %v", c, u.DrawWatts, before.DrawWatts-700)
	}
	if err := p.NotServing("a"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("NotServing of a removed replica: %v, want ErrNotRunning", err)
	}
}

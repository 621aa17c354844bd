package routing

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func newAdapters(slots int, per int64) *Adapters {
	return &Adapters{Slots: slots, PerReplica: per, Now: func() time.Time { return time.Unix(0, 0) }}
}

// adapterOrder is the adapter's rendezvous order over ts, by name.
func adapterOrder(ts *testSet, adapter string) []string {
	var out []string
	for _, i := range order(adapter, &ts.Set, nil, time.Unix(0, 0)) {
		out = append(out, ts.name(i))
	}
	return out
}

// send picks a replica for adapter and leaves the request in flight.
func send(t *testing.T, a *Adapters, ts *testSet, adapter string) (string, string) {
	t.Helper()
	c, ok := a.Pick(adapter, &ts.Set, nil)
	if !ok {
		t.Fatalf("%s: no replica", adapter)
	}
	return ts.name(c.Index), c.Route
}

// end ends one of adapter's requests on the named replica.
func end(a *Adapters, ts *testSet, adapter, name string) {
	s := ts.state(name)
	a.Done(adapter, s)
	s.Release()
}

// An adapter's requests stay on the first k replicas of its own order,
// k growing with its requests in flight (PerReplica each), and go back to
// one when they end.
func TestAdapterHomeGrowsWithLoad(t *testing.T) {
	t.Parallel()
	ts := testPool(5)
	a := newAdapters(0, 3)
	want := adapterOrder(ts, "sql")
	used := map[string]int{}
	for n := 1; n <= 12; n++ {
		name, route := send(t, a, ts, "sql")
		used[name]++
		k := min((n+2)/3, 5) // ⌈n / 3⌉: this request is the n-th in flight
		if route != RouteAdapter || !slices.Contains(want[:k], name) {
			t.Fatalf("request %d went to %s (route %s), want one of the first %d of its order %v", n, name, route, k, want)
		}
	}
	// 12 in flight, 3 per replica: the first four of its order, three each
	// (each request went to the least loaded of its home then).
	for i, name := range want {
		if w := map[bool]int{true: 3, false: 0}[i < 4]; used[name] != w {
			t.Errorf("%s (its order's %d) took %d, want %d: %v", name, i, used[name], w, used)
		}
	}
	for name, n := range used {
		for range n {
			end(a, ts, "sql", name)
		}
	}
	if home, _ := a.Home("sql", &ts.Set); len(home) != 1 || ts.name(home[0]) != want[0] {
		t.Errorf("idle home %v, want just %s", home, want[0])
	}
	if len(a.inflight) != 0 {
		t.Errorf("counts left: %v", a.inflight)
	}
}

// Two gateways, with their replicas listed in other orders, give every
// adapter the same first home; adapters spread over the replicas; a
// replica leaving moves only the adapters whose first home it was.
func TestAdapterHomesAgreeAndMoveLittle(t *testing.T) {
	t.Parallel()
	a, b := testPool(4), reverse(testPool(4))
	firsts := map[string]string{}
	count := map[string]int{}
	for i := range 200 {
		name := fmt.Sprintf("lora-%d", i)
		ha, _ := newAdapters(4, 4).Home(name, &a.Set)
		hb, _ := newAdapters(4, 4).Home(name, &b.Set)
		if a.name(ha[0]) != b.name(hb[0]) {
			t.Fatalf("%s: gateway a's first home %s, b's %s", name, a.name(ha[0]), b.name(hb[0]))
		}
		firsts[name] = a.name(ha[0])
		count[firsts[name]]++
	}
	for _, n := range a.names {
		if count[n] < 25 { // an even share is 50
			t.Errorf("%s is the first home of %d of 200 adapters: %v", n, count[n], count)
		}
	}
	gone := a.without("r2")
	for name, was := range firsts {
		h, _ := newAdapters(4, 4).Home(name, &gone.Set)
		if now := gone.name(h[0]); was != "r2" && now != was {
			t.Errorf("%s moved from %s to %s when r2 left", name, was, now)
		}
	}
}

// No replica holds more adapters than its slots while any replica has
// room: an adapter whose first replica is full of adapters with requests
// in flight goes to the next of its order with room.
func TestAdapterSlotsBound(t *testing.T) {
	t.Parallel()
	ts := testPool(3)
	a := newAdapters(2, 8)
	// Six adapters, one request each in flight: six slots in all. Their
	// first replicas are uneven (so a router without the bound would put
	// three on one).
	var names []string
	firsts := map[string]int{}
	for i := 0; len(names) < 6; i++ {
		name := fmt.Sprintf("a%d", i)
		names = append(names, name)
		firsts[adapterOrder(ts, name)[0]]++
	}
	if slices.Max(mapValues(firsts)) < 3 {
		t.Fatalf("the six adapters' first replicas are even (%v): the test would prove nothing", firsts)
	}
	at := map[string]string{}
	for _, name := range names {
		var route string
		if at[name], route = send(t, a, ts, name); route != RouteAdapter {
			t.Errorf("%s: route %s", name, route)
		}
	}
	for _, n := range ts.names {
		if held := a.Loaded(ts.state(n)); len(held) != 2 {
			t.Errorf("%s holds %v, want two adapters", n, held)
		}
	}
	// A seventh, while all six are in flight: no room anywhere, so its
	// first replica anyway, said so.
	name, route := send(t, a, ts, "a-seventh")
	if route != RouteAdapterFull || name != adapterOrder(ts, "a-seventh")[0] {
		t.Errorf("seventh: %s route %s, want its first replica %s and %s", name, route, adapterOrder(ts, "a-seventh")[0], RouteAdapterFull)
	}
	// Once an adapter's request ends there, an eighth takes its slot: the
	// replica is back within its slots.
	end(a, ts, names[0], at[names[0]])
	before := a.Loaded(ts.state(at[names[0]]))
	var eighth string
	for i := 0; eighth == ""; i++ {
		if c := fmt.Sprintf("b%d", i); adapterOrder(ts, c)[0] == at[names[0]] {
			eighth = c
		}
	}
	if name, route := send(t, a, ts, eighth); name != at[names[0]] || route != RouteAdapter {
		t.Errorf("eighth: %s route %s, want %s", name, route, at[names[0]])
	}
	held := a.Loaded(ts.state(at[names[0]]))
	if slices.Contains(held, names[0]) || !slices.Contains(held, eighth) || len(held) > max(len(before), 2) {
		t.Errorf("%s held %v, then %v: want %s evicted for %s", at[names[0]], before, held, names[0], eighth)
	}
}

func mapValues(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// A hot adapter's home grows over the replicas, but never by evicting a
// cold adapter from its own first replica: the cold one keeps its place
// and its requests go there.
func TestAdapterColdNotStarved(t *testing.T) {
	t.Parallel()
	ts := testPool(2)
	a := newAdapters(1, 1)
	// A hot and a cold adapter with different first replicas.
	hot := "hot"
	var cold string
	for i := 0; cold == ""; i++ {
		if c := fmt.Sprintf("cold-%d", i); adapterOrder(ts, c)[0] != adapterOrder(ts, hot)[0] {
			cold = c
		}
	}
	coldHome := adapterOrder(ts, cold)[0]
	name, _ := send(t, a, ts, cold)
	if name != coldHome {
		t.Fatalf("cold went to %s, want %s", name, coldHome)
	}
	end(a, ts, cold, name)
	// The hot adapter's load would take every replica (one request each),
	// but the only slot of the cold one's first replica holds the cold one.
	hotHome := adapterOrder(ts, hot)[0]
	for n := range 10 {
		if name, route := send(t, a, ts, hot); name != hotHome || route != RouteAdapter {
			t.Fatalf("hot request %d: %s route %s, want %s (its first replica) only", n, name, route, hotHome)
		}
	}
	if held := a.Loaded(ts.state(coldHome)); !slices.Equal(held, []string{cold}) {
		t.Errorf("%s holds %v, want the cold adapter still", coldHome, held)
	}
	if name, route := send(t, a, ts, cold); name != coldHome || route != RouteAdapter {
		t.Errorf("cold again: %s route %s, want %s", name, route, coldHome)
	}
	// Idle, the cold one still keeps its place against the hot one's
	// growth.
	end(a, ts, cold, coldHome)
	if home, _ := a.Home(hot, &ts.Set); len(home) != 1 {
		t.Errorf("hot home %v, want its first replica alone while the cold one holds the other", home)
	}
}

// Replicas a request tried, or whose breaker refuses, are not in a home;
// with none left, Pick says so.
func TestAdapterPickPassesOver(t *testing.T) {
	t.Parallel()
	ts := testPool(3)
	a := newAdapters(0, 1)
	want := adapterOrder(ts, "sql")
	c, ok := a.Pick("sql", &ts.Set, []*State{ts.state(want[0])})
	if !ok || ts.name(c.Index) != want[1] {
		t.Fatalf("tried %s: %v %v, want %s", want[0], ts.name(c.Index), ok, want[1])
	}
	ts.gate(want[1]).open = true
	ts.gate(want[2]).open = true
	if c, ok := a.Pick("sql", &ts.Set, []*State{ts.state(want[0])}); ok {
		t.Errorf("all passed over: chose %s", ts.name(c.Index))
	}
}

// With a LoadFactor, an adapter's first replica busy past its share of
// the model's requests in flight (other adapters', other gateways') is
// passed over for the next of the adapter's order (route adapter-spill);
// without one, or within the bound, the adapter stays on its first.
func TestAdapterHomeBoundedByLoad(t *testing.T) {
	t.Parallel()
	ts := testPool(3)
	want := adapterOrder(ts, "sql")
	busy := ts.state(want[0])
	busy.Others.Store(10) // 10 of the model's 10 requests in flight
	unbounded := newAdapters(0, 4)
	if name, route := send(t, unbounded, ts, "sql"); name != want[0] || route != RouteAdapter {
		t.Errorf("no bound: %s (%s), want the first of its order %s", name, route, want[0])
	}
	end(unbounded, ts, "sql", want[0])
	bounded := newAdapters(0, 4)
	bounded.LoadFactor = 2
	// The bound: ⌈2 × 1/3 × (10 + 1)⌉ = 8; the first would hold 11.
	if name, route := send(t, bounded, ts, "sql"); name != want[1] || route != RouteAdapterSpill {
		t.Errorf("first over the bound: %s (%s), want the next of its order %s (adapter-spill)", name, route, want[1])
	}
	end(bounded, ts, "sql", want[1])
	busy.Others.Store(1) // 2 ≤ ⌈2/3 × (1 + 1)⌉ = 2: within
	if name, route := send(t, bounded, ts, "sql"); name != want[0] || route != RouteAdapter {
		t.Errorf("first within the bound: %s (%s), want %s", name, route, want[0])
	}
}

// With every slot held by adapters in flight, the request still goes by
// the load bound: to the first replica of its order within it (route
// adapter-full), not to a first replica that is past it.
func TestAdapterFullWithinBound(t *testing.T) {
	t.Parallel()
	ts := testPool(3)
	a := newAdapters(1, 8)
	// One adapter in flight on each replica (no bound while they are
	// placed): every slot is held.
	placed := map[string]bool{}
	for i := 0; len(placed) < 3; i++ {
		name := fmt.Sprintf("a%d", i)
		if first := adapterOrder(ts, name)[0]; !placed[first] {
			placed[first] = true
			if at, route := send(t, a, ts, name); at != first || route != RouteAdapter {
				t.Fatalf("%s: %s (%s), want %s", name, at, route, first)
			}
		}
	}
	want := adapterOrder(ts, "x")
	ts.state(want[0]).Others.Store(10)
	a.LoadFactor = 1.25
	// 13 in flight in all. The first: 11, 12 with this one, past
	// ⌈1.25/3 × (13 + 1)⌉ = 6; the second: 2 with this one, within.
	if name, route := send(t, a, ts, "x"); name != want[1] || route != RouteAdapterFull {
		t.Errorf("every slot held, the first past the bound: %s (%s), want the next of its order %s (%s)", name, route, want[1], RouteAdapterFull)
	}
}

package routing

import (
	"math"
	"strings"
	"testing"
	"time"
)

func keys(n int) []Key {
	out := make([]Key, n)
	for i := range out {
		h := mix(uint64(i) + 1)
		out[i] = Key{Shared: h, OK: true}
	}
	return out
}

// choose is the replica PickPrefix chooses for k on an idle set.
func choose(t *testing.T, ts *testSet, k Key) string {
	t.Helper()
	i, _, route := ts.pickPrefix(k, 1.25, nil, time.Unix(0, 0))
	if i < 0 || route != RoutePrefix {
		t.Fatalf("pickPrefix on an idle set: %d, route %q", i, route)
	}
	return ts.name(i)
}

// reverse is ts listed backwards: another gateway's order, other states.
func reverse(ts *testSet) *testSet {
	out := &testSet{}
	for i := len(ts.names) - 1; i >= 0; i-- {
		out.add(ts.names[i], ts.Replicas[i].Weight)
	}
	return out
}

// Two gateways with the same replicas, listed in another order and with
// other state objects, choose the same replica for every key.
func TestPrefixPickAgrees(t *testing.T) {
	a, b := testPool(5), reverse(testPool(5))
	seen := map[string]int{}
	for _, k := range keys(500) {
		ca, cb := choose(t, a, k), choose(t, b, k)
		if ca != cb {
			t.Fatalf("key %x: gateway a chose %s, b %s", k.Shared, ca, cb)
		}
		seen[ca]++
	}
	// And the keys spread: each replica gets some (an even share is 100).
	for _, name := range a.names {
		if seen[name] < 50 {
			t.Errorf("replica %s won %d of 500 keys: %v", name, seen[name], seen)
		}
	}
}

// A replica joining takes only keys from the others (about its share);
// one leaving moves only the keys it held.
func TestPrefixPickMinimalMovement(t *testing.T) {
	const nKeys = 2000
	before := testPool(4)
	joined := testPool(5)
	left := before.without("r0")
	moved, movedLeave, held0 := 0, 0, 0
	for _, k := range keys(nKeys) {
		was := choose(t, before, k)
		if now := choose(t, joined, k); now != was {
			if now != "r4" {
				t.Fatalf("key %x moved from %s to %s when r4 joined: only moves to r4 are allowed", k.Shared, was, now)
			}
			moved++
		}
		now := choose(t, left, k)
		if was == "r0" {
			held0++
		} else if now != was {
			movedLeave++
		}
	}
	if movedLeave != 0 {
		t.Errorf("r0 left: %d keys it did not hold moved", movedLeave)
	}
	// A fifth of the keys move to the newcomer: 400 expected.
	if moved < 300 || moved > 500 {
		t.Errorf("r4 joined: %d of %d keys moved, want about %d", moved, nKeys, nKeys/5)
	}
	if held0 < 400 || held0 > 600 {
		t.Errorf("r0 held %d of %d keys, want about %d", held0, nKeys, nKeys/4)
	}
}

// Weights: a replica of weight 3 wins about three times the keys of one of
// weight 1; weight 0 wins none while another can take the request.
func TestPrefixPickWeights(t *testing.T) {
	ts := (&testSet{}).add("a", 1).add("b", 3).add("z", 0)
	won := map[string]int{}
	for _, k := range keys(2000) {
		i, _, _ := ts.pickPrefix(k, 1.25, nil, time.Unix(0, 0))
		won[ts.name(i)]++
	}
	if won["z"] != 0 || won["b"] < 1350 || won["b"] > 1650 {
		t.Errorf("keys won: %v, want b about 1500 of 2000, z none", won)
	}
}

// A hot key spills: with its replica above the bound the next in the
// key's order takes the request, named spill; breakers and tried
// endpoints are passed over as pick passes them.
func TestPrefixPickSpillsAndAvailability(t *testing.T) {
	now := time.Unix(0, 0)
	ts := testPool(4)
	k := keys(1)[0]
	first, _, route := ts.pickPrefix(k, 1.25, nil, now)
	if route != RoutePrefix {
		t.Fatalf("idle: route %q", route)
	}
	// Load the first choice: 4 in flight, 0 elsewhere; the bound is
	// ceil(1.25 × 5 / 4) = 2.
	second := spillsSteadily(t, ts, k, first, 4)
	// An open breaker: passed over, like a tried replica, and not a spill.
	ts.Replicas[first].gate.(*testGate).open = true
	if i, _, route := ts.pickPrefix(k, 1.25, nil, now); i != second || route != RoutePrefix {
		t.Errorf("first choice's breaker open: %s route %q, want %s, prefix", ts.name(i), route, ts.name(second))
	}
	if i, _, _ := ts.pickPrefix(k, 1.25, []*State{ts.Replicas[second].State}, now); i == first || i == second {
		t.Errorf("first open, second tried: got %s", ts.name(i))
	}
}

// A tenant's traffic (every turn of every conversation behind its system
// prompt: one key) goes to one replica at idle, the same for every
// gateway; tenants spread over the replicas (about a quarter of them each
// among 4); past the bound a tenant's requests spill to the next replica
// in its key's order, always the same one, and past that one's bound to
// the next again (consistent hashing with bounded loads).
func TestPrefixPickTenantAffinity(t *testing.T) {
	now := time.Unix(0, 0)
	p := testPool(4)
	sys := strings.Repeat("You are tenant T's assistant. ", 40)
	home := ""
	for _, user := range []string{"ann", "bob", "cy", "di", "ed", "flo"} {
		for turn := 1; turn <= 4; turn++ {
			k := KeyOf("/v1/chat/completions", chatBody(t, conversation(sys, user, turn)...))
			if got := choose(t, p, k); home == "" {
				home = got
			} else if got != home {
				t.Errorf("%s turn %d: %s, the tenant's other requests %s", user, turn, got, home)
			}
		}
	}

	const tenants = 4000
	won := map[string]int{}
	for _, k := range keys(tenants) {
		won[choose(t, p, k)]++
	}
	for i := range p.Replicas {
		if got := float64(won[p.name(i)]) / tenants; math.Abs(got-0.25) > 0.03 {
			t.Errorf("%s is the first choice of %.3f of the tenants, want about 0.25: %v", p.name(i), got, won)
		}
	}

	// Spills: the first choice loaded, then the second as well.
	k := KeyOf("/v1/chat/completions", chatBody(t, conversation(sys, "ann", 1)...))
	first, _, _ := p.pickPrefix(k, 1.25, nil, now)
	second := spillsSteadily(t, p, k, first, 10)
	f, s := p.Replicas[first], p.Replicas[second]
	for _, user := range []string{"bob", "cy", "di"} {
		// Another conversation of the tenant spills to the same replica.
		k := KeyOf("/v1/chat/completions", chatBody(t, conversation(sys, user, 1)...))
		f.Outstanding.Add(10)
		i, _, route := p.pickPrefix(k, 1.25, nil, now)
		f.Outstanding.Add(-10)
		if i != second || route != RouteSpill {
			t.Errorf("%s with the tenant's first replica loaded: %s route %q, want %s, spill", user, p.name(i), route, p.name(second))
		}
	}
	f.Outstanding.Add(10)
	s.Outstanding.Add(10)
	third, _, route := p.pickPrefix(k, 1.25, nil, now)
	if third == first || third == second || route != RouteSpill {
		t.Errorf("first two choices loaded: %s route %q, want a third replica, spill", p.name(third), route)
	}
	for range 5 {
		if again, _, _ := p.pickPrefix(k, 1.25, nil, now); again != third {
			t.Fatalf("the third choice was %s, then %s", p.name(third), p.name(again))
		}
	}
	// A gateway listing the replicas in another order, with the same
	// loads, agrees.
	q := reverse(p)
	for i, r := range q.Replicas {
		r.Outstanding.Store(p.Replicas[len(p.Replicas)-1-i].Outstanding.Load())
	}
	if i, _, _ := q.pickPrefix(k, 1.25, nil, now); q.name(i) != p.name(third) {
		t.Errorf("the replicas listed in reverse: %s, want %s", q.name(i), p.name(third))
	}
	f.Outstanding.Add(-10)
	s.Outstanding.Add(-10)
	r := reverse(testPool(4))
	for i := range 200 {
		k := Key{Shared: mix(uint64(i) + 9000), OK: true}
		if a, b := choose(t, p, k), choose(t, r, k); a != b {
			t.Fatalf("key %d: %s and %s", i, a, b)
		}
	}
}

// Load the engines reported for other gateways alone does not make a
// spill: a gateway passes a replica over only when its own requests in
// flight are over the bound too (they are current; the others' are as of
// the last read). Its own load alone does.
func TestPrefixPickOthersLoadAlone(t *testing.T) {
	now := time.Unix(0, 0)
	ts := testPool(4)
	k := keys(1)[0]
	first, _, _ := ts.pickPrefix(k, 1.25, nil, now)
	f := ts.Replicas[first]
	f.Others.Store(10)
	if i, _, route := ts.pickPrefix(k, 1.25, nil, now); i != first || route != RoutePrefix {
		t.Errorf("others' load on the first choice: %s route %q, want %s, prefix", ts.name(i), route, ts.name(first))
	}
	// Its own load over the bound as well: a spill.
	f.Outstanding.Add(3)
	if i, _, route := ts.pickPrefix(k, 1.25, nil, now); i == first || route != RouteSpill {
		t.Errorf("own and others' load on the first choice: %s route %q, want another, spill", ts.name(i), route)
	}
	// Own load over its own bound but within the bound counting every
	// gateway's (the others busy elsewhere): no spill.
	for i, r := range ts.Replicas {
		if i != first {
			r.Others.Store(10)
		}
	}
	f.Others.Store(0)
	if i, _, route := ts.pickPrefix(k, 1.25, nil, now); i != first || route != RoutePrefix {
		t.Errorf("others busy elsewhere: %s route %q, want %s, prefix", ts.name(i), route, ts.name(first))
	}
}

// spillsSteadily loads first, key k's first choice, with load requests
// in flight, checks that k then spills to another replica, always the same
// (the next in k's order), unloads first, and returns the spill replica.
func spillsSteadily(t *testing.T, ts *testSet, k Key, first int, load int64) int {
	t.Helper()
	now := time.Unix(0, 0)
	f := ts.Replicas[first]
	f.Outstanding.Add(load)
	defer f.Outstanding.Add(-load)
	spill, _, route := ts.pickPrefix(k, 1.25, nil, now)
	if spill == first || route != RouteSpill {
		t.Fatalf("first choice loaded: got %s route %q, want another replica, spill", ts.name(spill), route)
	}
	for range 5 {
		if again, _, _ := ts.pickPrefix(k, 1.25, nil, now); again != spill {
			t.Fatalf("spill went to %s, then %s", ts.name(spill), ts.name(again))
		}
	}
	return spill
}

// Under a stream of requests for one key held open, no replica goes past
// the bound while another is under it.
func TestPrefixPickBoundedLoad(t *testing.T) {
	ts := testPool(4)
	k := keys(1)[0]
	for i := range 40 {
		j, _, _ := ts.pickPrefix(k, 1.25, nil, time.Unix(0, 0))
		ts.Replicas[j].Outstanding.Add(1)
		total := int64(i + 1)
		limit := int64(1.25*float64(total)/4) + 1
		for j, r := range ts.Replicas {
			if n := r.Outstanding.Load(); n > limit {
				t.Fatalf("after %d requests %s holds %d, bound %d", total, ts.name(j), n, limit)
			}
		}
	}
}

// One prefix routing decision at 100 replicas, some loaded: the rank of
// every replica for the key, the first within the load bound, and the
// breaker's permission; replicas of one weight (the rank without a
// logarithm) and of mixed weights.
func BenchmarkPrefixPick(b *testing.B) {
	for _, weighted := range []bool{false, true} {
		name := "uniform"
		if weighted {
			name = "weighted"
		}
		b.Run(name, func(b *testing.B) {
			ts := testPool(100)
			for i := range ts.Replicas {
				ts.Replicas[i].Outstanding.Add(int64(i % 7))
				if weighted {
					ts.Replicas[i].Weight = 1 + i%3
				}
			}
			ks := keys(1024)
			now := time.Unix(0, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				// 2: the gateway's default load factor.
				if j, _, _ := ts.pickPrefix(ks[i%len(ks)], 2, nil, now); j < 0 {
					b.Fatal("no replica")
				}
			}
		})
	}
}

// The opening limit is the one set, else one more than the engine's slots
// once they are known, else none; reserve counts a request only below it.
func TestOpeningLimitAndReserve(t *testing.T) {
	s := NewState("a:1", &testGate{})
	p := &Prefix{}
	if got := p.openingLimit(s); got != 0 {
		t.Errorf("slots unknown: limit %d, want 0 (none)", got)
	}
	s.Slots.Store(1)
	if got := p.openingLimit(s); got != 2 {
		t.Errorf("1 slot: limit %d, want 2", got)
	}
	p.OpeningLimit = 5
	if got := p.openingLimit(s); got != 5 {
		t.Errorf("limit set: %d, want 5", got)
	}
	s.Outstanding.Store(1)
	s.Others.Store(1)
	if s.reserve(2) {
		t.Error("reserved at the limit (1 own + 1 other, limit 2)")
	}
	s.Others.Store(0)
	if !s.reserve(2) || s.Outstanding.Load() != 2 {
		t.Errorf("below the limit: not reserved, or %d in flight (want 2)", s.Outstanding.Load())
	}
	if !s.reserve(0) || s.Outstanding.Load() != 3 {
		t.Errorf("no limit: not reserved, or %d in flight (want 3)", s.Outstanding.Load())
	}
}

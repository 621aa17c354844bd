package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
)

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func chatBody(t testing.TB, msgs ...msg) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 8})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// conversation is turns user/assistant pairs after a system prompt: the
// body of its turn n (from 1) holds the first n user messages and the
// n-1 answers between them.
func conversation(system, user string, turn int) []msg {
	var ms []msg
	if system != "" {
		ms = append(ms, msg{"system", system})
	}
	for i := 1; i <= turn; i++ {
		ms = append(ms, msg{"user", fmt.Sprintf("%s turn %d", user, i)})
		if i < turn {
			ms = append(ms, msg{"assistant", fmt.Sprintf("answer %d to %s", i, user)})
		}
	}
	return ms
}

// Every turn of a conversation has the same key; conversations of a
// tenant share the shared key, not the conversation key; other tenants
// have other keys.
func TestPrefixKeyFollowsConversations(t *testing.T) {
	sysA, sysB := strings.Repeat("You are tenant A's assistant. ", 100), strings.Repeat("You are tenant B's assistant. ", 100)
	first := keyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "alice", 1)...))
	if !first.ok || first.shared == first.conv {
		t.Fatalf("first turn: %+v, want a key with shared and conversation parts", first)
	}
	for turn := 2; turn <= 6; turn++ {
		if k := keyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "alice", turn)...)); k.shared != first.shared || k.conv != first.conv {
			t.Errorf("turn %d: key %+v, want the first turn's %+v", turn, k, first)
		}
	}
	// The first turn opens a conversation; every later one continues it.
	if first.history || !first.opens {
		t.Errorf("first turn: %+v, want a new conversation (opens, no history)", first)
	}
	later := keyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "alice", 2)...))
	if !later.history || later.opens || later.conv != first.conv {
		t.Errorf("second turn: %+v, want the first turn's conversation with history", later)
	}
	// Cut just after its first user turn, a body may go on: it neither
	// opens nor continues a conversation as far as the key can tell.
	whole := chatBody(t, conversation(sysA, "alice", 2)...)
	cut := whole[:bytes.Index(whole, []byte("alice turn 1"))+len("alice turn 1\"}")]
	if k := keyOf("/v1/chat/completions", cut); !k.ok || k.history || k.opens || k.conv != first.conv {
		t.Errorf("body cut after the first user turn: %+v, want the conversation's key, neither opening nor continuing", k)
	}
	bob := keyOf("/v1/chat/completions", chatBody(t, conversation(sysA, "bob", 3)...))
	if bob.shared != first.shared || bob.conv == first.conv {
		t.Errorf("same tenant, other user: %+v against %+v: want the shared part equal, the conversation's not", bob, first)
	}
	other := keyOf("/v1/chat/completions", chatBody(t, conversation(sysB, "alice", 1)...))
	if other.shared == first.shared || other.conv == first.conv {
		t.Errorf("other tenant: %+v against %+v: want both parts different", other, first)
	}
	// No system prompt: the first user turn is both.
	plain := keyOf("/v1/chat/completions", chatBody(t, conversation("", "carol", 3)...))
	if !plain.ok || plain.shared != plain.conv {
		t.Errorf("no system prompt: %+v, want shared == conv", plain)
	}
	if k := keyOf("/v1/chat/completions", chatBody(t, conversation("", "carol", 1)...)); k.shared != plain.shared || k.conv != plain.conv || k.history || !plain.history {
		t.Errorf("no system prompt, turn 1: %+v, want turn 3's hashes %+v, turn 1 new and turn 3 continuing", k, plain)
	}
}

// A prompt of megabytes is keyed by its first keyBytes: bodies that
// differ only past them have the same key, and the key reads no more.
func TestPrefixKeyBoundedBytes(t *testing.T) {
	huge := strings.Repeat("x", 4<<20)
	a := chatBody(t, msg{"system", huge}, msg{"user", "one"})
	b := chatBody(t, msg{"system", huge + "y"}, msg{"user", "two"})
	ka, kb := keyOf("/v1/chat/completions", a), keyOf("/v1/chat/completions", b)
	if !ka.ok || ka != kb {
		t.Errorf("4 MiB system prompts differing past the bound: keys %+v and %+v, want equal", ka, kb)
	}
	// Cut at the bound, the key is the same as of the whole body.
	if k := keyOf("/v1/chat/completions", a[:keyBytes]); k != ka {
		t.Errorf("body cut at keyBytes: %+v, want %+v", k, ka)
	}
	// Completions: the first block.
	p1, _ := json.Marshal(map[string]any{"model": "m", "prompt": strings.Repeat("p", promptBlock) + "first"})
	p2, _ := json.Marshal(map[string]any{"model": "m", "prompt": strings.Repeat("p", promptBlock) + "second, longer"})
	k1, k2 := keyOf("/v1/completions", p1), keyOf("/v1/completions", p2)
	if !k1.ok || k1 != k2 {
		t.Errorf("completions sharing the first block: %+v and %+v, want one key", k1, k2)
	}
	short, _ := json.Marshal(map[string]any{"model": "m", "prompt": "short"})
	if k := keyOf("/v1/completions", short); k.ok {
		t.Errorf("prompt under one block: key %+v, want none", k)
	}
}

// What cannot be read as the model's JSON has no key (the default policy
// routes it).
func TestPrefixKeyUnreadable(t *testing.T) {
	for _, body := range []string{
		``, `not json`, `[1,2]`, `{"model":"m"}`, `{"model":"m","messages":"text"}`, `{"model":"m","messages":[1,2]}`,
		`{"model":"m","messages":[`, `{"model":"m","prompt":["a","b"]}`, `{"model":"m" "messages":[]}`,
	} {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
			if k := keyOf(path, []byte(body)); k.ok {
				t.Errorf("%s %q: key %+v, want none", path, body, k)
			}
		}
	}
}

func testPool(n int) *pool {
	p := &pool{model: "m"}
	for i := range n {
		p.eps = append(p.eps, testEndpoint(fmt.Sprintf("r%d", i), 1))
	}
	return p
}

func keys(n int) []prefixKey {
	out := make([]prefixKey, n)
	for i := range out {
		h := mix(uint64(i) + 1)
		out[i] = prefixKey{shared: h, conv: h, ok: true}
	}
	return out
}

func choose(t *testing.T, p *pool, k prefixKey) string {
	t.Helper()
	ep, _, route := p.pickPrefix(k, 1.25, nil, time.Unix(0, 0))
	if ep == nil || route != RoutePrefix {
		t.Fatalf("pickPrefix on an idle pool: %v, route %q", ep, route)
	}
	return ep.inst.Address
}

// Two gateways with the same replicas, listed in another order and with
// other state objects, choose the same replica for every key.
func TestPrefixPickAgrees(t *testing.T) {
	a, b := testPool(5), testPool(5)
	b.eps[0], b.eps[4] = b.eps[4], b.eps[0]
	b.eps[1], b.eps[3] = b.eps[3], b.eps[1]
	seen := map[string]int{}
	for _, k := range keys(500) {
		ca, cb := choose(t, a, k), choose(t, b, k)
		if ca != cb {
			t.Fatalf("key %x: gateway a chose %s, b %s", k.conv, ca, cb)
		}
		seen[ca]++
	}
	// And the keys spread: each replica gets some (an even share is 100).
	for _, e := range a.eps {
		if seen[e.inst.Address] < 50 {
			t.Errorf("replica %s won %d of 500 keys: %v", e.inst.Address, seen[e.inst.Address], seen)
		}
	}
}

// A replica joining takes only keys from the others (about its share);
// one leaving moves only the keys it held.
func TestPrefixPickMinimalMovement(t *testing.T) {
	const nKeys = 2000
	before := testPool(4)
	joined := testPool(5)
	left := &pool{model: "m", eps: before.eps[1:]} // r0 leaves
	moved, movedLeave, held0 := 0, 0, 0
	// Conversations of no tenant, then of 100 tenants: a replica's
	// locality for a tenant depends only on the two, so the same holds.
	ks := keys(nKeys)
	for i := range nKeys {
		ks = append(ks, prefixKey{shared: mix(uint64(i%100) + 7000), conv: mix(uint64(i) + 70000), ok: true})
	}
	for i, k := range ks {
		if i == nKeys {
			if moved < 300 || moved > 500 || held0 < 400 || held0 > 600 {
				break // the checks below report it
			}
			moved, held0 = 0, 0
		}
		was := choose(t, before, k)
		if now := choose(t, joined, k); now != was {
			if now != "r4:1" {
				t.Fatalf("key %x moved from %s to %s when r4 joined: only moves to r4 are allowed", k.conv, was, now)
			}
			moved++
		}
		now := choose(t, left, k)
		if was == "r0:1" {
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
	p := &pool{model: "m", eps: []*endpoint{testEndpoint("a", 1), testEndpoint("b", 3), testEndpoint("z", 0)}}
	won := map[string]int{}
	for _, k := range keys(2000) {
		ep, _, _ := p.pickPrefix(k, 1.25, nil, time.Unix(0, 0))
		won[ep.inst.ID]++
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
	p := testPool(4)
	k := keys(1)[0]
	first, _, route := p.pickPrefix(k, 1.25, nil, now)
	if route != RoutePrefix {
		t.Fatalf("idle: route %q", route)
	}
	// Load the first choice: 4 in flight, 0 elsewhere; the bound is
	// ceil(1.25 × 5 / 4) = 2.
	second := spillsSteadily(t, p, k, first, 4)
	// An open breaker: passed over, like a tried replica, and not a spill.
	for range DefaultBreakerFailures {
		first.br.failure(false, now)
	}
	if ep, _, route := p.pickPrefix(k, 1.25, nil, now); ep != second || route != RoutePrefix {
		t.Errorf("first choice's breaker open: %s route %q, want %s, prefix", ep.inst.ID, route, second.inst.ID)
	}
	if ep, _, _ := p.pickPrefix(k, 1.25, []*epState{second.epState}, now); ep == first || ep == second {
		t.Errorf("first open, second tried: got %s", ep.inst.ID)
	}
}

// A tenant's conversations (one shared key, many conversation keys): each
// keeps one replica, the same for every gateway; each replica draws its
// locality's share of them (weighted rendezvous), and over many tenants
// the replica a tenant favours most draws about half of its conversations
// among 4; when its replica is over the bound a conversation spills,
// always to the same next replica.
func TestPrefixPickTenantLocality(t *testing.T) {
	now := time.Unix(0, 0)
	p := testPool(4)
	const shared, convs = 77, 4000
	won := map[string]int{}
	for i := range convs {
		k := prefixKey{shared: mix(shared), conv: mix(uint64(i) + 1000), ok: true}
		won[choose(t, p, k)]++
	}
	var sum float64
	for _, e := range p.eps {
		sum += locality(mix(mix(shared) ^ e.addrHash()))
	}
	for _, e := range p.eps {
		want := locality(mix(mix(shared)^e.addrHash())) / sum
		if got := float64(won[e.inst.Address]) / convs; math.Abs(got-want) > 0.04 {
			t.Errorf("%s drew %.3f of the conversations, want its locality's share %.3f", e.inst.ID, got, want)
		}
	}
	const tenants, perTenant = 400, 25
	top := 0
	for s := range tenants {
		won := map[string]int{}
		for i := range perTenant {
			k := prefixKey{shared: mix(uint64(s) + 5000), conv: mix(uint64(s*perTenant+i) + 90000), ok: true}
			won[choose(t, p, k)]++
		}
		top += slices.Max(slices.Collect(maps.Values(won)))
	}
	if share := float64(top) / (tenants * perTenant); share < 0.45 {
		t.Errorf("the replica a tenant uses most drew %.3f of its conversations on average, want about half", share)
	}

	k := prefixKey{shared: mix(shared), conv: mix(5), ok: true}
	first, _, _ := p.pickPrefix(k, 1.25, nil, now)
	spillsSteadily(t, p, k, first, 10)
	// A gateway listing the replicas in another order agrees.
	q := testPool(4)
	slices.Reverse(q.eps)
	for i := range 200 {
		k := prefixKey{shared: mix(shared + uint64(i%3)), conv: mix(uint64(i) + 9000), ok: true}
		if a, b := choose(t, p, k), choose(t, q, k); a != b {
			t.Fatalf("conversation %d: %s and %s", i, a, b)
		}
	}
}

// Load the engines reported for other gateways alone does not make a
// spill: a gateway passes a replica over only when its own requests in
// flight are over the bound too (they are current; the others' are as of
// the last read). Its own load alone does.
func TestPrefixPickOthersLoadAlone(t *testing.T) {
	now := time.Unix(0, 0)
	p := testPool(4)
	k := keys(1)[0]
	first, _, _ := p.pickPrefix(k, 1.25, nil, now)
	first.others.Store(10)
	if ep, _, route := p.pickPrefix(k, 1.25, nil, now); ep != first || route != RoutePrefix {
		t.Errorf("others' load on the first choice: %s route %q, want %s, prefix", ep.inst.ID, route, first.inst.ID)
	}
	// Its own load over the bound as well: a spill.
	first.outstanding.Add(3)
	if ep, _, route := p.pickPrefix(k, 1.25, nil, now); ep == first || route != RouteSpill {
		t.Errorf("own and others' load on the first choice: %s route %q, want another, spill", ep.inst.ID, route)
	}
	// Own load over its own bound but within the bound counting every
	// gateway's (the others busy elsewhere): no spill.
	for _, e := range p.eps {
		if e != first {
			e.others.Store(10)
		}
	}
	first.others.Store(0)
	if ep, _, route := p.pickPrefix(k, 1.25, nil, now); ep != first || route != RoutePrefix {
		t.Errorf("others busy elsewhere: %s route %q, want %s, prefix", ep.inst.ID, route, first.inst.ID)
	}
}

// spillsSteadily loads first, key k's first choice, with load requests
// in flight, checks that k then spills to another replica, always the same
// (the next in k's order), unloads first, and returns the spill replica.
func spillsSteadily(t *testing.T, p *pool, k prefixKey, first *endpoint, load int64) *endpoint {
	t.Helper()
	now := time.Unix(0, 0)
	first.outstanding.Add(load)
	defer first.outstanding.Add(-load)
	spill, _, route := p.pickPrefix(k, 1.25, nil, now)
	if spill == first || route != RouteSpill {
		t.Fatalf("first choice loaded: got %s route %q, want another replica, spill", spill.inst.ID, route)
	}
	for range 5 {
		if again, _, _ := p.pickPrefix(k, 1.25, nil, now); again != spill {
			t.Fatalf("spill went to %s, then %s", spill.inst.ID, again.inst.ID)
		}
	}
	return spill
}

// Under a stream of requests for one key held open, no replica goes past
// the bound while another is under it.
func TestPrefixPickBoundedLoad(t *testing.T) {
	p := testPool(4)
	k := keys(1)[0]
	for i := range 40 {
		ep, _, _ := p.pickPrefix(k, 1.25, nil, time.Unix(0, 0))
		ep.outstanding.Add(1)
		total := int64(i + 1)
		limit := int64(1.25*float64(total)/4) + 1
		for _, e := range p.eps {
			if n := e.outstanding.Load(); n > limit {
				t.Fatalf("after %d requests %s holds %d, bound %d", total, e.inst.ID, n, limit)
			}
		}
	}
}

// Through the gateway, the bound depends on what a spill costs: with the
// first choice of a conversation between the two bounds, its first turn
// spills (the next replica computes no more than it would have), a later
// turn stays with the history it would lose; past both bounds it spills
// too.
func TestPrefixRoutingHistoryBound(t *testing.T) {
	var insts []Instance
	for i := range 4 {
		insts = append(insts, startReplica(t, "m", fmt.Sprintf("r%d", i), nil).instance())
	}
	tg := startGateway(t, Options{Routing: map[string]string{"m": RoutePrefix}, PrefixLoadFactor: 1.25, PrefixHistoryLoadFactor: 3}, insts...)
	sys := strings.Repeat("You answer in Welsh. ", 50)
	body := func(turn int) string {
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": conversation(sys, "erin", turn), "max_tokens": 4})
		return string(b)
	}
	a := tg.post(t, "/v1/chat/completions", body(1))
	home := a.header.Get(ReplicaHeader)
	if a.status != 200 || a.header.Get(RouteHeader) != RoutePrefix {
		t.Fatalf("idle: %d route %q: %s", a.status, a.header.Get(RouteHeader), a.body)
	}
	ep := tg.tbl.Load().byID[home]
	for _, tt := range []struct {
		load        int64
		turn        int
		route, away string
	}{
		// L in flight on home and nothing elsewhere: home is within a
		// bound f while L+1 <= ceil(f/4 × (L+1)). At 2: past
		// ceil(1.25 × 3 / 4) = 1, within ceil(3 × 3 / 4) = 3; at 3, past
		// both (2 and 3).
		{2, 1, RouteSpill, "away"},
		{2, 2, RoutePrefix, "home"},
		{2, 5, RoutePrefix, "home"},
		{3, 2, RouteSpill, "away"},
	} {
		ep.outstanding.Add(tt.load)
		a := tg.post(t, "/v1/chat/completions", body(tt.turn))
		ep.outstanding.Add(-tt.load)
		got, at := a.header.Get(RouteHeader), a.header.Get(ReplicaHeader)
		if a.status != 200 || got != tt.route || (at == home) != (tt.away == "home") {
			t.Errorf("%d in flight on %s, turn %d: %d route %q at %s, want %q %s", tt.load, home, tt.turn, a.status, got, at, tt.route, tt.away)
		}
	}
}

// Through the gateway: a model routed by prefix sends every turn of a
// conversation to one replica and says so; a body the policy cannot key
// (and other models) goes by least-outstanding, never refused; the model
// list's routing applies when the gateway sets none.
func TestPrefixRoutingThroughGateway(t *testing.T) {
	var insts []Instance
	for i := range 3 {
		insts = append(insts, startReplica(t, "m", fmt.Sprintf("r%d", i), nil).instance(),
			startReplica(t, "n", fmt.Sprintf("n%d", i), nil).instance())
	}
	tg := startGateway(t, Options{Routing: map[string]string{"m": RoutePrefix},
		Models: StaticModels{Models: []gatewayapi.ListedModel{{Name: "m", Min: 1, Replicas: 3}, {Name: "n", Min: 1, Replicas: 3, Routing: RoutePrefix}}}}, insts...)
	tg.UpdateModels(gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "m", Min: 1, Replicas: 3}, {Name: "n", Min: 1, Replicas: 3, Routing: RoutePrefix}}}, nil)
	sys := strings.Repeat("You answer in French. ", 50)
	for _, model := range []string{"m", "n"} {
		for _, user := range []string{"alice", "bob", "carol"} {
			replica := ""
			for turn := 1; turn <= 4; turn++ {
				b, _ := json.Marshal(map[string]any{"model": model, "messages": conversation(sys, user, turn), "max_tokens": 4})
				a := tg.post(t, "/v1/chat/completions", string(b))
				if a.status != 200 || a.header.Get(RouteHeader) != RoutePrefix {
					t.Fatalf("%s %s turn %d: %d route %q: %s", model, user, turn, a.status, a.header.Get(RouteHeader), a.body)
				}
				if got := a.header.Get(ReplicaHeader); replica == "" {
					replica = got
				} else if got != replica {
					t.Errorf("%s %s turn %d went to %s, earlier turns to %s", model, user, turn, got, replica)
				}
			}
		}
	}
	// A chat with no messages array to key: least-outstanding, answered
	// by the engine (which judges the body).
	a := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":"not an array","max_tokens":4}`)
	if a.header.Get(RouteHeader) != RouteLeastOutstanding || a.header.Get(ReplicaHeader) == "" {
		t.Errorf("unkeyable body: %d route %q replica %q: %s", a.status, a.header.Get(RouteHeader), a.header.Get(ReplicaHeader), a.body)
	}
	// The gateway's setting overrides the list's.
	tg.routing = map[string]string{"n": RouteLeastOutstanding}
	b, _ := json.Marshal(map[string]any{"model": "n", "messages": conversation(sys, "dave", 2), "max_tokens": 4})
	if a := tg.post(t, "/v1/chat/completions", string(b)); a.header.Get(RouteHeader) != RouteLeastOutstanding {
		t.Errorf("n set to least-outstanding by the gateway: route %q", a.header.Get(RouteHeader))
	}
}

// A body larger than the scan's first read is read on to keyBytes for
// its key, and passed on whole.
func TestPrefixRoutingLongBody(t *testing.T) {
	var insts []Instance
	for i := range 3 {
		insts = append(insts, startReplica(t, "m", fmt.Sprintf("r%d", i), func(c *fakeengine.Config) { c.MaxModelLen = 1 << 20 }).instance())
	}
	tg := startGateway(t, Options{Routing: map[string]string{"m": RoutePrefix}}, insts...)
	sys := strings.Repeat("A long system prompt. ", 3000) // 66 KB: past keyBytes
	replica := ""
	for _, user := range []string{"alice", "bob", "carol", "dave"} {
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": conversation(sys, user, 2), "max_tokens": 4})
		a := tg.post(t, "/v1/chat/completions", string(b))
		if a.status != 200 || a.header.Get(RouteHeader) != RoutePrefix {
			t.Fatalf("%s: %d route %q: %.300s", user, a.status, a.header.Get(RouteHeader), a.body)
		}
		// The system prompt fills the bound: every user shares its key.
		if got := a.header.Get(ReplicaHeader); replica == "" {
			replica = got
		} else if got != replica {
			t.Errorf("%s went to %s, others to %s", user, got, replica)
		}
	}
}

// One prefix routing decision at 100 replicas, some loaded: the rank of
// every replica for the conversation key, the shared key's first choice,
// and the breaker's permission; replicas of one weight (the rank without
// a logarithm) and of mixed weights.
func BenchmarkPrefixPick(b *testing.B) {
	for _, weighted := range []bool{false, true} {
		name := "uniform"
		if weighted {
			name = "weighted"
		}
		b.Run(name, func(b *testing.B) {
			p := testPool(100)
			for i, e := range p.eps {
				e.outstanding.Add(int64(i % 7))
				if weighted {
					e.inst.Weight = 1 + i%3
				}
			}
			ks := keys(1024)
			for i := range ks {
				ks[i].shared = mix(uint64(i) + 99991)
			}
			now := time.Unix(0, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if ep, _, _ := p.pickPrefix(ks[i%len(ks)], DefaultPrefixLoadFactor, nil, now); ep == nil {
					b.Fatal("no endpoint")
				}
			}
		})
	}
}

// The key of a chat's fourth turn behind a 4 KB system prompt.
func BenchmarkPrefixKey(b *testing.B) {
	body := chatBody(b, conversation(strings.Repeat("You are a helpful assistant. ", 150), "alice", 4)...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if k := keyOf("/v1/chat/completions", body); !k.ok {
			b.Fatal("no key")
		}
	}
}

// Two gateways over the same replicas (discovered in other orders, with
// other IDs) send every conversation to the same replica.
func TestPrefixRoutingTwoGatewaysAgree(t *testing.T) {
	var reps []*replica
	for i := range 4 {
		reps = append(reps, startReplica(t, "m", fmt.Sprintf("r%d", i), nil))
	}
	var one, two []Instance
	for i, r := range reps {
		one = append(one, r.instance())
		in := reps[len(reps)-1-i].instance()
		in.ID = "other-" + in.ID
		two = append(two, in)
	}
	opts := Options{Routing: map[string]string{"m": RoutePrefix}}
	g1, g2 := startGateway(t, opts, one...), startGateway(t, opts, two...)
	sys := strings.Repeat("Shared instructions. ", 40)
	seen := map[string]bool{}
	for u := range 24 {
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": conversation(sys+fmt.Sprint(u%6), fmt.Sprintf("user%d", u), 1+u%3), "max_tokens": 4})
		a1, a2 := g1.post(t, "/v1/chat/completions", string(b)), g2.post(t, "/v1/chat/completions", string(b))
		r1, r2 := a1.header.Get(ReplicaHeader), a2.header.Get(ReplicaHeader)
		if a1.status != 200 || a2.status != 200 || r1 != r2 {
			t.Errorf("conversation %d: gateway 1 sent it to %q (%d), gateway 2 to %q (%d)", u, r1, a1.status, r2, a2.status)
		}
		seen[r1] = true
	}
	if len(seen) < 2 {
		t.Errorf("six system prompts all went to %v: the keys do not spread", seen)
	}
}

// Any body: keyOf does not panic, reads no more than keyBytes (a body
// and its first keyBytes have the same key), and a key is never made of
// nothing.
func FuzzPrefixKey(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"a\"b"},{"x":1}],"model":"m"}`))
	f.Add([]byte(`{"model":"m","prompt":"` + strings.Repeat("p", promptBlock+3) + `"}`))
	f.Add([]byte(`{"messages":[{"role":`))
	f.Add([]byte(`{"messages":[{}, {"role":"user"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			k := keyOf(path, body)
			if len(body) > keyBytes && keyOf(path, body[:keyBytes]) != k {
				t.Errorf("%s: the key reads past keyBytes", path)
			}
			if k.ok && len(body) == 0 {
				t.Errorf("%s: a key of an empty body", path)
			}
		}
	})
}

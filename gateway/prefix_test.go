package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
)

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
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
		ep.Outstanding.Add(tt.load)
		a := tg.post(t, "/v1/chat/completions", body(tt.turn))
		ep.Outstanding.Add(-tt.load)
		got, at := a.header.Get(RouteHeader), a.header.Get(ReplicaHeader)
		if a.status != 200 || got != tt.route || (at == home) != (tt.away == "home") {
			t.Errorf("%d in flight on %s, turn %d: %d route %q at %s, want %q %s", tt.load, home, tt.turn, a.status, got, at, tt.route, tt.away)
		}
	}
}

// Through the gateway: a model routed by prefix sends every turn of every
// conversation behind one system prompt to one replica and says so; a body the policy cannot key
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
		// One system prompt: every user's every turn to one replica.
		replica := ""
		for _, user := range []string{"alice", "bob", "carol"} {
			for turn := 1; turn <= 4; turn++ {
				b, _ := json.Marshal(map[string]any{"model": model, "messages": conversation(sys, user, turn), "max_tokens": 4})
				a := tg.post(t, "/v1/chat/completions", string(b))
				if a.status != 200 || a.header.Get(RouteHeader) != RoutePrefix {
					t.Fatalf("%s %s turn %d: %d route %q: %s", model, user, turn, a.status, a.header.Get(RouteHeader), a.body)
				}
				if got := a.header.Get(ReplicaHeader); replica == "" {
					replica = got
				} else if got != replica {
					t.Errorf("%s %s turn %d went to %s, the system prompt's earlier requests to %s", model, user, turn, got, replica)
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
	// The gateway's setting overrides the list's (read as the next table
	// is built).
	tg.routing = map[string]string{"n": RouteLeastOutstanding}
	tg.UpdateModels(gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "m", Min: 1, Replicas: 3}, {Name: "n", Min: 1, Replicas: 3, Routing: RoutePrefix}}}, nil)
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

// twoPrefixGateways starts n replicas of model m and two prefix-routing
// gateways over them: one lists them as started (one), the other in
// reverse order under other IDs (two).
func twoPrefixGateways(t *testing.T, n int) (g1, g2 *testGateway, one, two []Instance) {
	t.Helper()
	var reps []*replica
	for i := range n {
		reps = append(reps, startReplica(t, "m", fmt.Sprintf("r%d", i), nil))
	}
	for i, r := range reps {
		one = append(one, r.instance())
		in := reps[len(reps)-1-i].instance()
		in.ID = "other-" + in.ID
		two = append(two, in)
	}
	opts := Options{Routing: map[string]string{"m": RoutePrefix}}
	return startGateway(t, opts, one...), startGateway(t, opts, two...), one, two
}

// Two gateways over the same replicas (discovered in other orders, with
// other IDs) send every conversation to the same replica.
func TestPrefixRoutingTwoGatewaysAgree(t *testing.T) {
	g1, g2, _, _ := twoPrefixGateways(t, 4)
	sys := strings.Repeat("Shared instructions. ", 40)
	seen := map[string]bool{}
	for u := range 24 {
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": conversation(sys+fmt.Sprint(u%12), fmt.Sprintf("user%d", u), 1+u%3), "max_tokens": 4})
		a1, a2 := g1.post(t, "/v1/chat/completions", string(b)), g2.post(t, "/v1/chat/completions", string(b))
		r1, r2 := a1.header.Get(ReplicaHeader), a2.header.Get(ReplicaHeader)
		if a1.status != 200 || a2.status != 200 || r1 != r2 {
			t.Errorf("conversation %d: gateway 1 sent it to %q (%d), gateway 2 to %q (%d)", u, r1, a1.status, r2, a2.status)
		}
		seen[r1] = true
	}
	if len(seen) < 2 {
		// Twelve system prompts on one of four replicas: 4^-11 at random.
		t.Errorf("twelve system prompts all went to %v: the keys do not spread", seen)
	}
}

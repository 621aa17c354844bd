package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// rounds feeds the endpoints of p n rounds: engines holding held each on
// average, sent[i] requests routed to the i-th a round; it rebalances
// after each, as the poll loop does.
func rounds(p *pool, n int, held float64, sent ...int64) {
	for range n {
		for i, e := range p.eps {
			e.bal.routed.Add(sent[i])
			e.bal.observe(held)
		}
		p.rebalance()
	}
}

func levels(p *pool) []int32 {
	var out []int32
	for _, e := range p.eps {
		out = append(out, e.bal.level.Load())
	}
	return out
}

// A replica sent well over its share of a busy pool steps its weight
// down, one level per balanceHold rounds, and stops once it is sent its
// share; the others stay at full weight.
func TestBalanceStepsTheBusyReplicaDown(t *testing.T) {
	p := testPool(3)
	rounds(p, balanceHold, 3, 6, 2, 1)
	if got := levels(p); got[0] != 0 {
		t.Fatalf("stepped before its first balanceHold rounds of reads: %v", got)
	}
	rounds(p, 1, 3, 6, 2, 1)
	if got := levels(p); got[0] != 1 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("levels %v, want [1 0 0]", got)
	}
	rounds(p, balanceHold, 3, 6, 2, 1)
	if got := levels(p); got[0] != 1 {
		t.Fatalf("stepped again within balanceHold rounds: %v", got)
	}
	rounds(p, 1, 3, 6, 2, 1)
	if got := levels(p); got[0] != 2 {
		t.Fatalf("levels %v, want the busy one at 2", got)
	}
	// Sent evenly now: once the average has come down, the levels stay.
	rounds(p, 5*balanceTau, 3, 3, 3, 3)
	kept := levels(p)
	rounds(p, 10*balanceTau, 3, 3, 3, 3)
	if got := levels(p); got[0] != kept[0] || got[0] < 2 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("even load: levels %v, then %v, want the first kept lowered", kept, got)
	}
	// Its share falls below the band: it steps back up.
	rounds(p, 10*balanceTau, 3, 1, 4, 4)
	if got := levels(p); got[0] != 0 {
		t.Fatalf("under its share: levels %v, want it back at 0", got)
	}
	// Never below the floor.
	rounds(p, 100*balanceHold, 3, 20, 1, 1)
	if got := levels(p); got[0] != balanceFloor {
		t.Fatalf("levels %v, want %d at most", got, balanceFloor)
	}
}

// No step while the engines are not busy, or the pool is sent less than a
// request a round per replica; a pool gone quiet steps its weights back up.
func TestBalanceQuietPool(t *testing.T) {
	p := testPool(3)
	rounds(p, 10*balanceHold, 0.9, 60, 20, 10) // engines under balanceBusy
	if got := levels(p); got[0] != 0 {
		t.Fatalf("idle engines: levels %v", got)
	}
	p = testPool(3)
	rounds(p, 10*balanceHold, 3, 2, 0, 0) // busy engines, two requests a round
	if got := levels(p); got[0] != 0 {
		t.Fatalf("under a request a round each: levels %v", got)
	}
	p = testPool(3)
	rounds(p, 10*balanceHold, 3, 30, 1, 1)
	if got := levels(p); got[0] == 0 {
		t.Fatalf("busy: levels %v, want the first lowered", got)
	}
	rounds(p, 100*balanceHold, 0, 30, 1, 1)
	if got := levels(p); got[0] != 0 {
		t.Fatalf("quiet: levels %v, want all back at 0", got)
	}
}

// Two replicas both over the band of a third that holds nothing: only the
// ratios order keys, so the least lowered stays at level 0.
func TestBalanceLevelsDoNotSinkTogether(t *testing.T) {
	p := testPool(2)
	p.eps[0].bal.level.Store(3)
	p.eps[1].bal.level.Store(2)
	rounds(p, 1, 3, 1, 1)
	if got := levels(p); got[0] != 1 || got[1] != 0 {
		t.Fatalf("levels %v, want [1 0]", got)
	}
}

// A lowered weight moves keys only off its replica, each to the replica
// next in its order, and every turn of a conversation moves with it.
func TestBalanceMovesOnlyTheBusyReplicasKeys(t *testing.T) {
	p := testPool(3)
	ks := keys(3000)
	before := make([]string, len(ks))
	for i, k := range ks {
		before[i] = choose(t, p, k)
	}
	p.eps[0].bal.level.Store(2)
	moved := 0
	for i, k := range ks {
		now := choose(t, p, k)
		if now == before[i] {
			continue
		}
		if before[i] != "r0:1" {
			t.Fatalf("key %x moved from %s to %s: only r0's keys may move", k.conv, before[i], now)
		}
		moved++
		// A later turn of the same conversation has the same key's
		// order: it follows.
		hist := k
		hist.history = true
		if again, _, _ := p.pickPrefix(hist, 4, nil, time.Unix(0, 0)); again.inst.Address != now {
			t.Fatalf("key %x: first turn to %s, a later turn to %s", k.conv, now, again.inst.Address)
		}
	}
	// At 0.64 of the others' weight r0 wins 0.64/2.64 of the keys
	// instead of a third: about 270 of its 1000 move.
	if moved < 170 || moved > 370 {
		t.Errorf("%d keys moved off r0, want about 270", moved)
	}
}

// Through the gateway: another client keeps both prefix-routed replicas'
// engines busy (three long requests on one, one on the other), and every
// request this gateway sends has one key, whose first choice is the one
// holding three: it is sent them all, and its engine holds more than its
// share. After some rounds of engine reads its balance factor is below 1,
// logged and exported, and the other's is 1.
func TestBalanceFollowsTheDeal(t *testing.T) {
	paced := func(c *fakeengine.Config) { c.TokensPerSecond = 100 }
	a := startReplica(t, "m", "a", paced)
	b := startReplica(t, "m", "b", paced)
	var logs syncbuf.Buffer
	tg := startGateway(t, Options{
		Source:                StaticSource{Instances: []Instance{a.instance(), b.instance()}},
		Routing:               map[string]string{"m": RoutePrefix},
		PrefixBalance:         true,
		EngineMetricsInterval: 100 * time.Millisecond,
		Logger:                slog.New(slog.NewTextHandler(&logs, nil)),
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = tg.Run(ctx) })
	wait.Until(t, "discovery", tg.Synced)
	ep, other := tg.tbl.Load().byID["a"], tg.tbl.Load().byID["b"]
	var body string
	for i := range 100 {
		b, _ := json.Marshal(map[string]any{"model": "m", "messages": conversation("sys", fmt.Sprint("user", i), 1), "max_tokens": 1})
		if k := keyOf("/v1/chat/completions", b); rank(k, ep, false) > rank(k, other, false) {
			body = string(b)
			break
		}
	}
	if body == "" {
		t.Fatal("no conversation of 100 has replica a first")
	}
	for i, r := range []*replica{a, a, a, b} {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.srv.URL+"/v1/chat/completions",
				strings.NewReader(fmt.Sprintf(`{"messages":[{"role":"user","content":"elsewhere %d"}],"max_tokens":3000}`, i)))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	wait.Until(t, "the engines read busy", func() bool { return ep.others.Load() == 3 && other.others.Load() == 1 })
	for i := 0; ep.bal.level.Load() == 0; i++ {
		if i == 20000 {
			t.Fatalf("20000 requests to one of two replicas, its balance level still 0: %s", logs.String())
		}
		if a := tg.post(t, "/v1/chat/completions", body); a.status != http.StatusOK {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
	}
	wait.Until(t, "the factor exported", func() bool {
		return testutil.ToFloat64(tg.m.balance.WithLabelValues("m", "a", a.addr())) < 1
	})
	if got := testutil.ToFloat64(tg.m.balance.WithLabelValues("m", "b", b.addr())); got != 1 {
		t.Errorf("replica b's factor %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "prefix balance") || !strings.Contains(logs.String(), "a=0.80") {
		t.Errorf("no balance step logged:\n%s", logs.String())
	}
}

// With the balance off (the default), or for a model on another policy,
// the weights stay as discovered however the requests are dealt; the same
// deal with it on lowers the first replica's.
func TestBalanceOff(t *testing.T) {
	for name, o := range map[string]Options{
		"off":               {Routing: map[string]string{"m": RoutePrefix}},
		"least-outstanding": {Routing: map[string]string{"m": RouteLeastOutstanding}, PrefixBalance: true},
		"on":                {Routing: map[string]string{"m": RoutePrefix}, PrefixBalance: true},
	} {
		t.Run(name, func(t *testing.T) {
			g := New(o)
			g.Update(Snapshot{Instances: []Instance{{ID: "a", Model: "m", Replica: "a", Address: "127.0.0.1:1", Weight: 1},
				{ID: "b", Model: "m", Replica: "b", Address: "127.0.0.1:2", Weight: 1}}})
			tb := g.tbl.Load()
			p := tb.pools["m"]
			for range 10 * balanceHold {
				p.eps[0].bal.routed.Add(30)
				p.eps[0].bal.observe(30)
				p.eps[1].bal.routed.Add(1)
				p.eps[1].bal.observe(1)
				g.rebalance(tb)
			}
			want := 1.0
			if name == "on" {
				want = balanceFactors[balanceFloor]
			}
			if got := testutil.ToFloat64(g.m.balance.WithLabelValues("m", "a", "127.0.0.1:1")); got != want {
				t.Errorf("factor %v (levels %v), want %v", got, levels(p), want)
			}
		})
	}
}

// A replica sent over its share whose engine holds less than its share of
// the requests held copes: it keeps its weight (early in a run the shares
// are a few conversations' and may name it).
func TestBalanceNeedsTheEngineToAgree(t *testing.T) {
	p := testPool(3)
	for range 10 * balanceHold {
		for i, e := range p.eps {
			e.bal.routed.Add([]int64{8, 4, 4}[i])
			e.bal.observe([]float64{1, 2, 2}[i])
		}
		p.rebalance()
	}
	if got := levels(p); got[0] != 0 {
		t.Fatalf("levels %v, want [0 0 0]", got)
	}
	for range 10 * balanceTau {
		for i, e := range p.eps {
			e.bal.routed.Add([]int64{8, 4, 4}[i])
			e.bal.observe([]float64{3, 2, 2}[i])
		}
		p.rebalance()
	}
	if got := levels(p); got[0] == 0 {
		t.Fatalf("levels %v, want the first lowered once its engine holds its share", got)
	}
}

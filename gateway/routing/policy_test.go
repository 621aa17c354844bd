package routing

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/wait"
)

func clock() time.Time { return time.Unix(0, 0) }

// Every policy's Pick counts the request in flight on the replica it
// chose, and only there; Release ends it; a Pick that finds no replica
// counts nothing.
func TestPickCountsWhatItChose(t *testing.T) {
	keyed := KeyOf("/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"user","content":"v"}]}`))
	opens := KeyOf("/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"u"}]}`))
	if !keyed.OK || !keyed.History || !opens.Opens {
		t.Fatalf("keys: %+v, %+v", keyed, opens)
	}
	prefix := &Prefix{LoadFactor: 2, HistoryLoadFactor: 4, OpeningWait: time.Minute, Now: clock, Waited: func(string, time.Duration) {}}
	for _, tt := range []struct {
		name   string
		policy Policy
		key    Key
		route  string
	}{
		{"least-outstanding", &LeastOutstanding{Now: clock}, Key{}, RouteLeastOutstanding},
		{"prefix, keyed", prefix, keyed, RoutePrefix},
		{"prefix, no key", prefix, Key{}, RouteLeastOutstanding},
		{"prefix, opening with no limit known", prefix, opens, RoutePrefix},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := testPool(3)
			req := &Request{Ctx: t.Context(), Key: tt.key, Replicas: &ts.Set}
			c, ok := tt.policy.Pick(req)
			if !ok || c.Route != tt.route {
				t.Fatalf("Pick: %+v %v, want route %q", c, ok, tt.route)
			}
			for i, r := range ts.Replicas {
				want := int64(0)
				if i == c.Index {
					want = 1
				}
				if got := r.Outstanding.Load(); got != want {
					t.Errorf("%s: %d in flight, want %d", ts.name(i), got, want)
				}
			}
			ts.Replicas[c.Index].Release()
			if got := ts.Replicas[c.Index].Outstanding.Load(); got != 0 {
				t.Errorf("after Release: %d in flight", got)
			}
			// Every replica tried: nothing chosen, nothing counted.
			for _, r := range ts.Replicas {
				req.Tried = append(req.Tried, r.State)
			}
			if c, ok := tt.policy.Pick(req); ok {
				t.Errorf("every replica tried: chose %s", ts.name(c.Index))
			}
			for i, r := range ts.Replicas {
				if got := r.Outstanding.Load(); got != 0 {
					t.Errorf("every replica tried: %s has %d in flight", ts.name(i), got)
				}
			}
		})
	}
}

// table is a routing table whose model's replicas a test replaces.
type table struct {
	mu  sync.Mutex
	set *Set
}

func (tb *table) Replicas() *Set {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.set
}

// waits records how the opening waits ended.
type waits struct {
	mu   sync.Mutex
	seen []string
}

func (w *waits) waited(outcome string, _ time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, outcome)
}

func (w *waits) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprint(w.seen)
}

// A first turn waits while its replica holds the opening limit, and,
// woken when that replica leaves the table, chooses among the table's
// replicas now, left in the request; counted once, where it went.
func TestOpeningWaitChoosesAgainFromTheTable(t *testing.T) {
	before := testPool(1) // r0, full
	before.Replicas[0].Outstanding.Store(1)
	after := testPool(2).without("r0") // r1
	tb := &table{set: &before.Set}
	var w waits
	p := &Prefix{LoadFactor: 2, HistoryLoadFactor: 4, OpeningLimit: 1, OpeningWait: time.Hour, Now: clock, Waited: w.waited}
	opens := KeyOf("/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"u"}]}`))
	req := &Request{Ctx: t.Context(), Key: opens, Replicas: &before.Set, Table: tb}
	type result struct {
		c  Choice
		ok bool
	}
	done := make(chan result, 1)
	go func() {
		c, ok := p.Pick(req)
		done <- result{c, ok}
	}()
	r0 := before.Replicas[0]
	wait.For(t, "the first turn waiting for r0", func() (bool, string) {
		return r0.Waiting() == 1, fmt.Sprintf("%d waiting", r0.Waiting())
	})
	tb.mu.Lock()
	tb.set = &after.Set
	tb.mu.Unlock()
	r0.Wake() // r0 left
	got := <-done
	if !got.ok || req.Replicas != &after.Set || after.name(got.c.Index) != "r1" {
		t.Fatalf("after r0 left: %+v %v, replicas %p (want %p), want r1", got.c, got.ok, req.Replicas, &after.Set)
	}
	if n := after.Replicas[0].Outstanding.Load(); n != 1 || r0.Outstanding.Load() != 1 {
		t.Errorf("in flight: r1 %d (want 1), r0 %d (want its 1)", n, r0.Outstanding.Load())
	}
	if r0.Waiting() != 0 || w.String() != "[sent]" {
		t.Errorf("%d still waiting on r0; waits ended %s, want [sent]", r0.Waiting(), w.String())
	}
}

// A first turn whose client goes away while it waits is not sent: no
// choice, nothing counted, the wait counted as cancelled.
func TestOpeningWaitCancelled(t *testing.T) {
	ts := testPool(1)
	r0 := ts.Replicas[0]
	r0.Outstanding.Store(1)
	var w waits
	p := &Prefix{LoadFactor: 2, HistoryLoadFactor: 4, OpeningLimit: 1, OpeningWait: time.Hour, Now: clock, Waited: w.waited}
	ctx, cancel := context.WithCancel(t.Context())
	opens := KeyOf("/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"u"}]}`))
	req := &Request{Ctx: ctx, Key: opens, Replicas: &ts.Set, Table: &table{set: &ts.Set}}
	done := make(chan bool, 1)
	go func() {
		_, ok := p.Pick(req)
		done <- ok
	}()
	wait.For(t, "the first turn waiting", func() (bool, string) {
		return r0.Waiting() == 1, fmt.Sprintf("%d waiting", r0.Waiting())
	})
	cancel()
	if <-done {
		t.Error("a cancelled wait chose a replica")
	}
	if n := r0.Outstanding.Load(); n != 1 || w.String() != "[cancelled]" {
		t.Errorf("r0 has %d in flight (want the 1 set), waits ended %s (want [cancelled])", n, w.String())
	}
}

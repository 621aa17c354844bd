package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// openingBody is turn of user's conversation with a long system prompt, as
// the prefix policy keys it.
func openingBody(t *testing.T, user string, turn int) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "messages": conversation(strings.Repeat("You answer in Dutch. ", 50), user, turn), "max_tokens": 4})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waiters is how many requests wait for ep to have room.
func waiters(tg *testGateway, id string) int64 {
	ep := tg.tbl.Load().byID[id]
	if ep == nil {
		return -1
	}
	return ep.Waiting()
}

// A conversation's first turn waits while its replica holds the opening
// limit; a later turn of another conversation goes ahead of it, and its end
// wakes the first turn, which waits on while the replica is still full and
// goes when a request ends below the limit.
func TestPrefixOpeningWaitsForItsReplica(t *testing.T) {
	r := startReplica(t, "m", "r0", nil)
	tg := startGateway(t, Options{Routing: map[string]string{"m": RoutePrefix}, PrefixOpeningLimit: 2}, r.instance())
	ep := tg.tbl.Load().byID["r0"]
	ep.Outstanding.Add(2) // two requests of another client's, in flight

	var wg sync.WaitGroup
	var first answer
	wg.Go(func() { first = tg.post(t, "/v1/chat/completions", openingBody(t, "ann", 1)) })
	wait.Until(t, "the first turn waiting", func() bool { return waiters(tg, "r0") == 1 })
	woken := ep.Armed()

	// A continuing turn is not held back, even at the limit.
	if a := tg.post(t, "/v1/chat/completions", openingBody(t, "bob", 3)); a.status != http.StatusOK || a.header.Get(RouteHeader) != RoutePrefix {
		t.Fatalf("continuing turn at the limit: %d route %q: %s", a.status, a.header.Get(RouteHeader), a.body)
	}
	// Its end woke the first turn (closed the channel it waited on),
	// which found the replica still at 2 and waits on (armed anew).
	wait.For(t, "the first turn woken and waiting again", func() (bool, string) {
		select {
		case <-woken:
		default:
			return false, "not woken"
		}
		n, ch := waiters(tg, "r0"), ep.Armed()
		return n == 1 && ch != nil && ch != woken, fmt.Sprintf("woken; %d waiting, armed anew: %v", n, ch != nil && ch != woken)
	})
	if got := testutil.ToFloat64(tg.m.requests.WithLabelValues("m", "200")); got != 1 {
		t.Errorf("requests answered 200: %v, want only the continuing turn's", got)
	}

	ep.Release() // one of the other client's ends: 1 in flight
	wg.Wait()
	if first.status != http.StatusOK || first.header.Get(RouteHeader) != RoutePrefix || first.header.Get(ReplicaHeader) != "r0" {
		t.Errorf("first turn: %d route %q replica %q: %s", first.status, first.header.Get(RouteHeader), first.header.Get(ReplicaHeader), first.body)
	}
	if got := testutil.ToFloat64(tg.m.openingWaits.WithLabelValues("m", "sent")); got != 1 {
		t.Errorf("opening waits sent: %v, want 1", got)
	}
	if got := testutil.CollectAndCount(tg.m.openingWait); got != 1 {
		t.Errorf("opening wait histograms: %d, want 1 (model m)", got)
	}
	ep.Release()
	if got := ep.Outstanding.Load(); got != 0 {
		t.Errorf("in flight after all ended: %d, want 0", got)
	}
}

// Past the opening wait a first turn is sent anyway; a client that goes
// away while its first turn waits is counted as gone, and nothing is sent.
func TestPrefixOpeningWaitBounded(t *testing.T) {
	r := startReplica(t, "m", "r0", nil)
	tg := startGateway(t, Options{Routing: map[string]string{"m": RoutePrefix}, PrefixOpeningLimit: 1, PrefixOpeningWait: 50 * time.Millisecond}, r.instance())
	ep := tg.tbl.Load().byID["r0"]
	ep.Outstanding.Add(1)
	defer ep.Release()

	a := tg.post(t, "/v1/chat/completions", openingBody(t, "ann", 1))
	if a.status != http.StatusOK || a.header.Get(ReplicaHeader) != "r0" {
		t.Errorf("past the wait: %d replica %q: %s", a.status, a.header.Get(ReplicaHeader), a.body)
	}
	if got := testutil.ToFloat64(tg.m.openingWaits.WithLabelValues("m", "expired")); got != 1 {
		t.Errorf("opening waits expired: %v, want 1", got)
	}

	tg.openingWait = time.Hour
	tg.Update(Snapshot{Instances: []Instance{r.instance()}}) // the policy is built with it
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.srv.URL+"/v1/chat/completions", strings.NewReader(openingBody(t, "bob", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ended := tg.ends.track(req)
	errc := make(chan error, 1)
	go func() {
		resp, err := tg.client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	wait.Until(t, "the second first turn waiting", func() bool { return waiters(tg, "r0") == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled client: %v, want context.Canceled", err)
	}
	ended(t)
	if got := testutil.ToFloat64(tg.m.openingWaits.WithLabelValues("m", "cancelled")); got != 1 {
		t.Errorf("opening waits cancelled: %v, want 1", got)
	}
	if got := testutil.ToFloat64(tg.m.requests.WithLabelValues("m", "499")); got != 1 {
		t.Errorf("requests 499: %v, want 1", got)
	}
	if got := r.completions(t); got != "1" {
		t.Errorf("the replica answered %s chats, want 1 (the expired wait's; the cancelled one never sent)", got)
	}
	if got := ep.Outstanding.Load(); got != 1 {
		t.Errorf("in flight: %d, want the 1 set by the test", got)
	}
}

// With no limit set, the limit is one more than the engine's slots, learned
// when a read of its metrics finds requests waiting behind full slots; a
// read that finds the engine emptied wakes the first turn waiting for it.
// Before any such read nothing waits.
func TestPrefixOpeningLimitFromEngineSlots(t *testing.T) {
	r := startReplica(t, "m", "r0", func(c *fakeengine.Config) { c.MaxRunning, c.TokensPerSecond = 1, 5 })
	tg := startGateway(t, Options{
		Source:                StaticSource{Instances: []Instance{r.instance()}},
		Routing:               map[string]string{"m": RoutePrefix},
		EngineMetricsInterval: 200 * time.Millisecond, // also the read's timeout: a failed read counts no one
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = tg.Run(ctx) })
	wait.Until(t, "discovery", func() bool { return tg.tbl.Load().byID["r0"] != nil })
	if a := tg.post(t, "/v1/chat/completions", openingBody(t, "ann", 1)); a.status != http.StatusOK {
		t.Fatalf("idle, slots unknown: %d: %s", a.status, a.body)
	}

	// Another client fills the engine's one slot and queues two behind it.
	busy, stop := context.WithCancel(ctx)
	var others sync.WaitGroup
	for range 3 {
		others.Go(func() {
			req, _ := http.NewRequestWithContext(busy, http.MethodPost, r.srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"elsewhere"}],"max_tokens":1000}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	ep := tg.tbl.Load().byID["r0"]
	wait.Until(t, "the engine read full", func() bool { return ep.Slots.Load() == 1 && ep.Others.Load() == 3 })
	// The limit is now 2 (routing's TestOpeningLimitAndReserve), and the
	// engine holds 3: a first turn waits.
	var first answer
	wg.Go(func() { first = tg.post(t, "/v1/chat/completions", openingBody(t, "bob", 1)) })
	wait.Until(t, "the first turn waiting", func() bool { return waiters(tg, "r0") == 1 })
	stop()
	others.Wait()
	wait.Until(t, "the first turn sent", func() bool { return waiters(tg, "r0") == 0 })
	cancel()
	wg.Wait()
	if first.status != http.StatusOK {
		t.Errorf("first turn after the engine emptied: %d: %s", first.status, first.body)
	}
	if got := testutil.ToFloat64(tg.m.openingWaits.WithLabelValues("m", "sent")); got != 1 {
		t.Errorf("opening waits sent: %v, want 1", got)
	}
	if got := ep.Slots.Load(); got != 1 {
		t.Errorf("slots after the engine emptied: %d, want 1 (the most seen)", got)
	}
}

// A first turn waiting for a replica that leaves discovery chooses again
// among the replicas left.
func TestPrefixOpeningReplicaLeaves(t *testing.T) {
	a, b := startReplica(t, "m", "a", nil), startReplica(t, "m", "b", nil)
	tg := startGateway(t, Options{Routing: map[string]string{"m": RoutePrefix}, PrefixOpeningLimit: 1}, a.instance(), b.instance())
	body := openingBody(t, "ann", 1)
	first := tg.post(t, "/v1/chat/completions", body)
	home := first.header.Get(ReplicaHeader)
	if first.status != http.StatusOK || home == "" {
		t.Fatalf("idle: %d replica %q", first.status, home)
	}
	other := map[string]*replica{"a": b, "b": a}[home]
	// Both replicas full: it waits for home.
	for _, ep := range tg.tbl.Load().byID {
		ep.Outstanding.Add(1)
	}
	var got answer
	var wg sync.WaitGroup
	wg.Go(func() { got = tg.post(t, "/v1/chat/completions", body) })
	wait.Until(t, "the first turn waiting", func() bool { return waiters(tg, home) == 1 })
	left := tg.tbl.Load().byID[home]
	tg.tbl.Load().byID[other.instance().ID].Release()
	tg.Update(Snapshot{Instances: []Instance{other.instance()}})
	wg.Wait()
	if got.status != http.StatusOK || got.header.Get(ReplicaHeader) != other.instance().ID {
		t.Errorf("after %s left: %d replica %q, want %s", home, got.status, got.header.Get(ReplicaHeader), other.instance().ID)
	}
	left.Release()
}

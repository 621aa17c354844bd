package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// postAsync sends a chat completion in the background; a failure to get
// an answer comes back as status -1 with the error in body.
func (tg *testGateway) postAsync(ctx context.Context, body string) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.srv.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			ch <- answer{status: -1, body: []byte(err.Error())}
			return
		}
		resp, err := tg.client.Do(req)
		if err != nil {
			ch <- answer{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			ch <- answer{status: -1, body: []byte(err.Error())}
			return
		}
		ch <- answer{resp.StatusCode, resp.Header, b}
	}()
	return ch
}

// await takes an answer, failing the test if none comes within waitFor.
func await(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		if a.status == -1 {
			t.Fatalf("request failed: %s", a.body)
		}
		return a
	case <-time.After(waitFor):
		t.Fatalf("no answer within %s", waitFor)
	}
	return answer{}
}

// queued is how many requests the gateway holds for model.
func (tg *testGateway) queued(model string) int {
	if ms := tg.tbl.Load().models[model]; ms != nil {
		return int(ms.q.n.Load())
	}
	return -1
}

// holdN sends n requests for model one after the other, each once the one
// before is held, so that their arrival order is 0, 1, ..., n-1 (the
// body's "user"). It returns their answers, in that order.
func (tg *testGateway) holdN(t *testing.T, model string, from, n int) []<-chan answer {
	t.Helper()
	var out []<-chan answer
	for i := from; i < from+n; i++ {
		before := tg.queued(model)
		out = append(out, tg.postAsync(t.Context(), userChat(model, i)))
		wait.Until(t, fmt.Sprintf("request %d held", i), func() bool { return tg.queued(model) == before+1 })
	}
	return out
}

func userChat(model string, user int) string {
	return fmt.Sprintf(`{"model":%q,"user":"u%d","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, model, user)
}

// gatedReplica answers each request only when the test lets it, and
// records the order requests reached it (by their "user") and the most it
// had in flight at once.
type gatedReplica struct {
	srv      *httptest.Server
	arrived  chan string
	release  chan struct{}
	inFlight atomic.Int32
	most     atomic.Int32
}

func startGatedReplica(t *testing.T) *gatedReplica {
	g := &gatedReplica{arrived: make(chan string, 64), release: make(chan struct{})}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ User string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		n := g.inFlight.Add(1)
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
		g.arrived <- body.User
		select {
		case <-g.release:
		case <-r.Context().Done():
		}
		g.inFlight.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"chat.completion","user":%q}`, body.User)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gatedReplica) instance(model, id string) Instance {
	return Instance{ID: id, Model: model, Replica: id, Address: strings.TrimPrefix(g.srv.URL, "http://"), Weight: 1}
}

// next is the next request to reach the replica.
func (g *gatedReplica) next(t *testing.T) string {
	t.Helper()
	select {
	case u := <-g.arrived:
		return u
	case <-time.After(waitFor):
		t.Fatalf("no request reached the replica within %s", waitFor)
	}
	return ""
}

func zeroList(models ...gatewayapi.ListedModel) gatewayapi.ModelList {
	return gatewayapi.ModelList{Models: models}
}

// Held requests for a model at zero are answered once a replica is ready,
// in arrival order, never more than the burst in flight at once; requests
// arriving while some are still held queue behind them.
func TestHoldDrainsInOrderWithinTheBurst(t *testing.T) {
	tg := startGateway(t, Options{Hold: HoldConfig{Timeout: time.Hour, Burst: 2}})
	tg.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "z"}), nil)
	answers := tg.holdN(t, "z", 0, 6)

	rep := startGatedReplica(t)
	tg.Update(Snapshot{Instances: []Instance{rep.instance("z", "z-0")}})
	var order []string
	order = append(order, rep.next(t), rep.next(t))
	// Two in flight, the burst: the other four stay held.
	wait.Until(t, "four still held", func() bool { return tg.queued("z") == 4 })
	if got := tg.tbl.Load().models["z"].q.inFlight(); got != 2 {
		t.Fatalf("released in flight %d, want 2", got)
	}
	// One more arrives while four are held: it queues behind them.
	late := tg.postAsync(t.Context(), userChat("z", 6))
	wait.Until(t, "the late request held", func() bool { return tg.queued("z") == 5 })
	answers = append(answers, late)
	for len(order) < 7 {
		rep.release <- struct{}{} // one answer lets the next in
		order = append(order, rep.next(t))
	}
	rep.release <- struct{}{}
	rep.release <- struct{}{}
	for i, ch := range answers {
		if a := await(t, ch); a.status != http.StatusOK || !strings.Contains(string(a.body), fmt.Sprintf(`"u%d"`, i)) {
			t.Errorf("request %d: %d %s", i, a.status, a.body)
		}
	}
	// The burst's two are released together and race to the replica, so
	// their order there is either; every later one is let in alone, by an
	// answer, and arrives in arrival order.
	if first := []string{order[0], order[1]}; !slices.Contains(first, "u0") || !slices.Contains(first, "u1") {
		t.Errorf("the burst at the replica: %v, want u0 and u1", first)
	}
	if diff := cmp.Diff([]string{"u2", "u3", "u4", "u5", "u6"}, order[2:]); diff != "" {
		t.Errorf("order at the replica after the burst (-arrival +replica):\n%s", diff)
	}
	if got := rep.most.Load(); got != 2 {
		t.Errorf("the replica had %d requests at once, want the burst, 2", got)
	}
	if got := testutil.ToFloat64(tg.m.held.WithLabelValues("z", heldReleased)); got != 7 {
		t.Errorf("held_total{released}: %v, want 7", got)
	}
	// The queue is empty: the next request goes straight to the replica.
	direct := tg.postAsync(t.Context(), userChat("z", 7))
	if u := rep.next(t); u != "u7" {
		t.Errorf("after the drain the replica got %q, want u7", u)
	}
	rep.release <- struct{}{}
	if a := await(t, direct); a.status != http.StatusOK {
		t.Errorf("after the drain: %d %s", a.status, a.body)
	}
	if tg.heldAll.Load() != 0 {
		t.Errorf("held in all: %d, want 0", tg.heldAll.Load())
	}
}

// The burst is per replica: two replicas ready take twice as many.
func TestHoldBurstPerReplica(t *testing.T) {
	tg := startGateway(t, Options{Hold: HoldConfig{Timeout: time.Hour, Burst: 1}})
	tg.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "z"}), nil)
	answers := tg.holdN(t, "z", 0, 4)
	a, b := startGatedReplica(t), startGatedReplica(t)
	tg.Update(Snapshot{Instances: []Instance{a.instance("z", "a"), b.instance("z", "b")}})
	got := map[string]bool{a.next(t): true, b.next(t): true}
	if !got["u0"] || !got["u1"] {
		t.Errorf("first released %v, want u0 and u1", got)
	}
	wait.Until(t, "two still held", func() bool { return tg.queued("z") == 2 })
	for range 4 {
		select {
		case a.release <- struct{}{}:
		case b.release <- struct{}{}:
		}
	}
	for i, ch := range answers {
		if ans := await(t, ch); ans.status != http.StatusOK {
			t.Errorf("request %d: %d %s", i, ans.status, ans.body)
		}
	}
	if a.most.Load() != 1 || b.most.Load() != 1 {
		t.Errorf("most in flight: a %d, b %d; want 1 each", a.most.Load(), b.most.Load())
	}
}

// Past the per-model or the total bound a request is answered 503 with
// Retry-After at once, in OpenAI's error shape.
func TestHoldQueueBounds(t *testing.T) {
	tg := startGateway(t, Options{NoReplicaRetryAfter: 7 * time.Second, Hold: HoldConfig{Timeout: time.Hour, PerModel: 2, Total: 3}})
	tg.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "a"}, gatewayapi.ListedModel{Name: "b"}), nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var held []<-chan answer
	for range 2 {
		before := tg.queued("a")
		held = append(held, tg.postAsync(ctx, chat("a")))
		wait.Until(t, "held", func() bool { return tg.queued("a") == before+1 })
	}
	full := func(model, why string) {
		t.Helper()
		got := tg.post(t, "/v1/chat/completions", chat(model))
		e := decodeError(t, got.body)
		if got.status != http.StatusServiceUnavailable || e.Error.Code != "hold_queue_full" || got.header.Get("Retry-After") != "7" ||
			e.Error.Param == nil || *e.Error.Param != "model" {
			t.Errorf("%s: %d Retry-After %q %s; want 503 hold_queue_full, Retry-After 7", why, got.status, got.header.Get("Retry-After"), got.body)
		}
	}
	full("a", "a third for a (per model 2)")
	held = append(held, tg.postAsync(ctx, chat("b")))
	wait.Until(t, "b held", func() bool { return tg.queued("b") == 1 })
	full("b", "a second for b (3 in all)")
	if got := testutil.ToFloat64(tg.m.held.WithLabelValues("a", heldFull)) + testutil.ToFloat64(tg.m.held.WithLabelValues("b", heldFull)); got != 2 {
		t.Errorf("held_total{full}: %v, want 2", got)
	}
	// Clients that go away leave the queue.
	cancel()
	for _, ch := range held {
		<-ch
	}
	wait.Until(t, "the queues empty", func() bool { return tg.queued("a") == 0 && tg.queued("b") == 0 && tg.heldAll.Load() == 0 })
	wait.Until(t, "cancelled counted", func() bool { return testutil.ToFloat64(tg.m.held.WithLabelValues("a", heldCancelled)) == 2 })
	if got := testutil.ToFloat64(tg.m.requests.WithLabelValues("a", "499")); got != 2 {
		t.Errorf("requests_total{a,499}: %v, want 2", got)
	}
}

// A held request past its deadline is answered 503 hold_timeout with
// Retry-After, exactly at the deadline (in a synctest bubble, whose clock
// moves only when everything waits); the queue forgets it.
func TestHoldDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Options{NoReplicaRetryAfter: 3 * time.Second, Hold: HoldConfig{Timeout: 90 * time.Second}})
		g.Update(Snapshot{})
		g.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "z"}), nil)
		start := time.Now()
		w := httptest.NewRecorder()
		g.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chat("z"))))
		if waited := time.Since(start); waited != 90*time.Second {
			t.Errorf("answered after %s, want the hold timeout, 1m30s", waited)
		}
		e := decodeError(t, w.Body.Bytes())
		if w.Code != http.StatusServiceUnavailable || e.Error.Code != "hold_timeout" || w.Header().Get("Retry-After") != "3" {
			t.Errorf("got %d Retry-After %q %s; want 503 hold_timeout, Retry-After 3", w.Code, w.Header().Get("Retry-After"), w.Body)
		}
		if g.tbl.Load().models["z"].q.n.Load() != 0 || g.heldAll.Load() != 0 {
			t.Error("the timed-out request is still counted as held")
		}
		if got := testutil.ToFloat64(g.m.held.WithLabelValues("z", heldTimeout)); got != 1 {
			t.Errorf("held_total{timeout}: %v", got)
		}
	})
}

// Each request has its own deadline: one that arrived later waits longer,
// and a replica ready in between serves the one still held.
func TestHoldDeadlinePerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Options{Hold: HoldConfig{Timeout: time.Minute}, Upstream: okUpstream{}})
		g.Update(Snapshot{})
		g.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "z"}), nil)
		serve := func() *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			g.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chat("z"))))
			return w
		}
		first, second := make(chan *httptest.ResponseRecorder), make(chan *httptest.ResponseRecorder)
		go func() { first <- serve() }()
		time.Sleep(40 * time.Second)
		go func() { second <- serve() }()
		time.Sleep(30 * time.Second) // 70s: past the first's deadline, not the second's
		if w := <-first; w.Code != http.StatusServiceUnavailable {
			t.Errorf("first, held 60s: %d %s", w.Code, w.Body)
		}
		synctest.Wait()
		if g.tbl.Load().models["z"].q.n.Load() != 1 {
			t.Fatal("the second request is not held")
		}
		g.Update(Snapshot{Instances: []Instance{{ID: "r", Model: "z", Replica: "r", Address: "replica.invalid:80", Weight: 1}}})
		if w := <-second; w.Code != http.StatusOK || w.Header().Get(ReplicaHeader) != "r" {
			t.Errorf("second, released at 70s: %d %s", w.Code, w.Body)
		}
	})
}

// okUpstream answers every request 200 without a network: for synctest
// bubbles.
type okUpstream struct{}

func (okUpstream) Do(_ context.Context, _ string, _ *fasthttp.Request, resp *fasthttp.Response) (io.ReadCloser, bool, error) {
	const body = `{"object":"chat.completion"}`
	resp.SetStatusCode(http.StatusOK)
	resp.Header.SetContentType("application/json")
	resp.Header.SetContentLength(len(body))
	return io.NopCloser(strings.NewReader(body)), true, nil
}

// A model leaving the catalog while requests for it are held: they are
// answered 404, as any unknown model.
func TestHoldModelGone(t *testing.T) {
	tg := startGateway(t, Options{Hold: HoldConfig{Timeout: time.Hour}})
	tg.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "z"}), nil)
	held := tg.holdN(t, "z", 0, 2)
	tg.UpdateModels(zeroList(), nil)
	for _, ch := range held {
		a := await(t, ch)
		if e := decodeError(t, a.body); a.status != http.StatusNotFound || e.Error.Code != "model_not_found" {
			t.Errorf("held for a model that left: %d %s", a.status, a.body)
		}
	}
	if tg.heldAll.Load() != 0 {
		t.Errorf("held in all: %d", tg.heldAll.Load())
	}
}

// Only models that may be at zero are held: a model whose min is above
// zero with no healthy replica is 503 at once, as is every model with
// holding off; a model nothing knows is 404.
func TestHoldOnlyModelsAtZero(t *testing.T) {
	list := zeroList(gatewayapi.ListedModel{Name: "fixed", Min: 2, Replicas: 2}, gatewayapi.ListedModel{Name: "zero"})
	for _, tt := range []struct {
		name, model string
		hold        time.Duration
		status      int
		code        string
	}{
		{"min above zero", "fixed", time.Hour, 503, "no_healthy_replica"},
		{"holding off", "zero", 0, 503, "no_healthy_replica"},
		{"unknown", "other", time.Hour, 404, "model_not_found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tg := startGateway(t, Options{Hold: HoldConfig{Timeout: tt.hold}})
			tg.UpdateModels(list, nil)
			got := tg.post(t, "/v1/chat/completions", chat(tt.model))
			if e := decodeError(t, got.body); got.status != tt.status || e.Error.Code != tt.code {
				t.Errorf("%d %s, want %d %s", got.status, got.body, tt.status, tt.code)
			}
		})
	}
}

// /v1/models lists the models at zero and waking, marked, besides those
// serving; a listed model that may not be at zero and has no replica is
// not listed, as before.
func TestModelsListWithZero(t *testing.T) {
	a := startReplica(t, "served", "a", nil)
	tg := startGateway(t, Options{Hold: HoldConfig{Timeout: time.Hour}}, a.instance())
	tg.UpdateModels(zeroList(
		gatewayapi.ListedModel{Name: "served", Min: 0, Replicas: 1},
		gatewayapi.ListedModel{Name: "asleep", Min: 0, Replicas: 0},
		gatewayapi.ListedModel{Name: "waking", Min: 0, Replicas: 2},
		gatewayapi.ListedModel{Name: "broken", Min: 1, Replicas: 1},
	), nil)
	resp, err := tg.client.Get(tg.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID, Object, OwnedBy, State string
		Replicas                   int
	}
	var got []row
	for _, c := range list.Data {
		got = append(got, row{c.ID, c.Object, c.OwnedBy, c.Llmgw.State, c.Replicas})
	}
	want := []row{
		{"asleep", "model", "llmgw", gatewayapi.StateScaledToZero, 0},
		{"served", "model", "llmgw", gatewayapi.StateServing, 1},
		{"waking", "model", "llmgw", gatewayapi.StateWaking, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" || list.Object != "list" {
		t.Errorf("/v1/models %q (-want +got):\n%s", list.Object, diff)
	}
}

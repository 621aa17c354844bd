package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

func TestRoutesByModel(t *testing.T) {
	a := startReplica(t, "llama-3.1-8b", "a", nil)
	b := startReplica(t, "llama-3.1-8b", "b", nil)
	c := startReplica(t, "bge-m3", "c", nil)
	tg := startGateway(t, Options{}, a.instance(), b.instance(), c.instance())

	seen := map[string]int{}
	for range 4 {
		got := tg.post(t, "/v1/chat/completions", chat("llama-3.1-8b"))
		var resp struct{ Model, Object string }
		if err := json.Unmarshal(got.body, &resp); err != nil || got.status != http.StatusOK {
			t.Fatalf("chat: %d %s", got.status, got.body)
		}
		if resp.Model != "llama-3.1-8b" || resp.Object != "chat.completion" {
			t.Errorf("chat answered by %q, object %q", resp.Model, resp.Object)
		}
		seen[got.header.Get(ReplicaHeader)]++
	}
	if diff := cmp.Diff(map[string]int{"a": 2, "b": 2}, seen); diff != "" {
		t.Errorf("replicas of llama-3.1-8b (-want +got):\n%s", diff)
	}
	for _, path := range []string{"/v1/completions", "/v1/embeddings"} {
		body := `{"prompt":"hi","input":"hi","model":"bge-m3"}`
		got := tg.post(t, path, body)
		if got.status != http.StatusOK || got.header.Get(ReplicaHeader) != "c" {
			t.Errorf("%s: %d from %q: %s", path, got.status, got.header.Get(ReplicaHeader), got.body)
		}
	}
	if got := testutil.ToFloat64(tg.m.requests.WithLabelValues("llama-3.1-8b", "200")); got != 4 {
		t.Errorf("requests_total{llama-3.1-8b,200}: got %v, want 4", got)
	}
}

func TestModelsList(t *testing.T) {
	a := startReplica(t, "m2", "a", nil)
	b := startReplica(t, "m1", "b", nil)
	b2 := startReplica(t, "m1", "b2", nil)
	tg := startGateway(t, Options{})
	tg.Update(Snapshot{Models: []string{"idle"}, Instances: []Instance{a.instance(), b.instance(), b2.instance()}})
	resp, err := tg.client.Get(tg.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string
		Data   []struct {
			ID, Object string
			Replicas   int
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	type card = struct {
		ID, Object string
		Replicas   int
	}
	want := []card{{"m1", "model", 2}, {"m2", "model", 1}}
	if diff := cmp.Diff(want, list.Data); diff != "" || list.Object != "list" {
		t.Errorf("/v1/models %q (-want +got):\n%s", list.Object, diff)
	}
}

func TestErrors(t *testing.T) {
	a := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{MaxBody: BodyLimits{ChatCompletions: 8 << 10}})
	tg.Update(Snapshot{Models: []string{"idle"}, Instances: []Instance{a.instance()}})
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("word ", 4<<10) + `"}],"model":"m"}`
	tests := []struct {
		name, method, path, body string
		status                   int
		code, retryAfter         string
	}{
		{"unknown model", "POST", "/v1/chat/completions", chat("nope"), 404, "model_not_found", ""},
		{"model without healthy replica", "POST", "/v1/chat/completions", chat("idle"), 503, "no_healthy_replica", "5"},
		{"no model", "POST", "/v1/completions", `{"prompt":"x"}`, 400, "invalid_model", ""},
		{"model not a string", "POST", "/v1/completions", `{"model":7}`, 400, "invalid_model", ""},
		{"model twice", "POST", "/v1/completions", `{"model":"m","prompt":"x","model":"other"}`, 400, "invalid_model", ""},
		{"not JSON", "POST", "/v1/embeddings", `model=m`, 400, "invalid_json", ""},
		{"truncated JSON", "POST", "/v1/embeddings", `{"input":["a",`, 400, "invalid_json", ""},
		{"body over the route's limit", "POST", "/v1/chat/completions", big, 413, "request_too_large", ""},
		{"the same body on a route with the default limit", "POST", "/v1/completions", strings.Replace(big, `"m"`, `"nope"`, 1), 404, "model_not_found", ""},
		{"nested too deep", "POST", "/v1/chat/completions", `{"model":"m","x":` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + `}`, 400, "invalid_json", ""},
		{"query string", "POST", "/v1/chat/completions?x=" + strings.Repeat("a", 16<<10), chat("m"), 400, "query_not_allowed", ""},
		{"empty query string", "POST", "/v1/chat/completions?", chat("m"), 400, "query_not_allowed", ""},
		{"wrong method", "GET", "/v1/chat/completions", "", 405, "method_not_allowed", ""},
		{"unknown path", "POST", "/v1/images/generations", chat("m"), 404, "not_found", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tg.srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := tg.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			e := decodeError(t, b)
			type result struct {
				Status           int
				Code, RetryAfter string
			}
			got := result{resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After")}
			want := result{tt.status, tt.code, tt.retryAfter}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\nbody: %s", diff, b)
			}
		})
	}
	if a.hits.Load() != 0 {
		t.Errorf("the replica got %d requests; none should have reached it", a.hits.Load())
	}
	if got := tg.bud.used.Load(); got != 0 {
		t.Errorf("body budget still held: %d", got)
	}
}

// A replica that cannot take the request (refused, 503 while loading)
// costs the client nothing: the request goes to the next one before any
// byte was sent back. One that failed after the request reached it is
// another matter (TestPoisonRequestNotRetried).
func TestFailoverBeforeFirstByte(t *testing.T) {
	bigBody := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("many words ", 30<<10) + `"}],"max_tokens":2}`
	tests := []struct {
		name    string
		breakIt func(*replica)
		body    string
		chunked bool
	}{
		{"refused", func(r *replica) { r.srv.Close() }, chat("m"), false},
		{"refused, large body of unknown length", func(r *replica) { r.srv.Close() }, bigBody, true},
		{"503", func(r *replica) { r.mode.Store(modeUnavailable) }, chat("m"), false},
		{"loading", nil, chat("m"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bad *replica
			if tt.breakIt == nil {
				bad = startReplica(t, "m", "bad", func(c *fakeengine.Config) { c.LoadTime = time.Hour })
			} else {
				bad = startReplica(t, "m", "bad", nil)
				tt.breakIt(bad)
			}
			good := startReplica(t, "m", "good", func(c *fakeengine.Config) { c.MaxModelLen = 1 << 24 })
			tg := startGateway(t, Options{Breaker: BreakerConfig{Failures: 100}}, bad.instance(), good.instance())
			for i := range 6 {
				var body io.Reader = strings.NewReader(tt.body)
				if tt.chunked {
					body = io.MultiReader(body) // hides the length: sent chunked
				}
				resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", body)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Header.Get(ReplicaHeader) != "good" {
					t.Fatalf("request %d: %d from %q: %s", i, resp.StatusCode, resp.Header.Get(ReplicaHeader), b)
				}
			}
			if got := testutil.ToFloat64(tg.m.attempts.WithLabelValues("m", "ok")); got != 6 {
				t.Errorf("ok attempts: %v, want 6", got)
			}
			failed := testutil.ToFloat64(tg.m.attempts.WithLabelValues("m", "error")) + testutil.ToFloat64(tg.m.attempts.WithLabelValues("m", "status"))
			if failed < 1 {
				t.Errorf("failed attempts: %v, want some (the bad replica was never tried?)", failed)
			}
		})
	}
}

// halfStream is replica "half" of model m: it sends one event of a stream
// and breaks off.
func halfStream(t *testing.T) Instance {
	t.Helper()
	half := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"partial\":true}\n\n")
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(half.Close)
	return Instance{ID: "half", Model: "m", Replica: "half", Address: strings.TrimPrefix(half.URL, "http://"), Weight: 1}
}

// Once the client has a byte, the request is not tried again: a replica
// that fails mid-stream ends the client's event stream with an error event
// in OpenAI's shape (a clean end, not a cut that looks like a network
// fault); any other answer is cut off.
func TestNoRetryAfterFirstByte(t *testing.T) {
	good := startReplica(t, "m", "good", nil)
	bad := halfStream(t)
	spare := good.instance()
	spare.Weight = 0 // taken only when "half" cannot be
	tg := startGateway(t, Options{}, bad, spare)

	resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat("m")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(b), "data: {\"error\":{\"message\":\"replica half failed before the stream ended: unexpected EOF\",\"type\":\"server_error\",\"param\":null,\"code\":\"replica_failed\"}}\n\n") {
		t.Errorf("read %q (%v); want the stream to end with an error event naming replica half", b, err)
	}
	if !strings.Contains(string(b), `"partial":true`) || resp.Header.Get(ReplicaHeader) != "half" {
		t.Errorf("got %q from %q; want the partial event from half", b, resp.Header.Get(ReplicaHeader))
	}
	if n := good.hits.Load(); n != 0 {
		t.Errorf("the spare replica got %d requests; a request is retried only before the first byte", n)
	}
	wait.Until(t, "the broken attempt counted", func() bool {
		return testutil.ToFloat64(tg.m.attempts.WithLabelValues("m", "broken")) == 1
	})
}

// An answer that is not an event stream has no way to say it failed: cut
// (on fasthttp's server, an answer to a request that did not ask to
// stream is held until it is whole, so the client gets none of it).
func TestMidResponseFailureCutsAJSONAnswer(t *testing.T) {
	half := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"partial":`)
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(half.Close)
	tg := startGateway(t, Options{}, Instance{ID: "half", Model: "m", Replica: "half", Address: strings.TrimPrefix(half.URL, "http://"), Weight: 1})
	resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat("m")))
	if err != nil {
		return // cut before its head
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("read a whole response (%d, %q); want it cut off", resp.StatusCode, b)
	}
}

func TestBreakerOpensAndRecovers(t *testing.T) {
	clock := newFakeClock()
	a := startReplica(t, "m", "a", nil)
	b := startReplica(t, "m", "b", nil)
	tg := startGateway(t, Options{Now: clock.Now, Breaker: BreakerConfig{Failures: 2, OpenFor: 10 * time.Second}}, a.instance(), b.instance())
	ok := func(why string) answer {
		t.Helper()
		got := tg.post(t, "/v1/chat/completions", chat("m"))
		if got.status != http.StatusOK {
			t.Fatalf("%s: %d %s", why, got.status, got.body)
		}
		return got
	}

	// a fails: its failures count until its breaker opens; clients see
	// nothing of it.
	a.mode.Store(modeUnavailable)
	for i := 0; tg.breakerState("a") != BreakerOpen; i++ {
		if i == 20 {
			t.Fatalf("breaker still %v after 20 requests", tg.breakerState("a"))
		}
		ok("while a fails")
	}
	if got := testutil.ToFloat64(tg.m.breaker.WithLabelValues("m", "a", a.addr())); got != float64(BreakerOpen) {
		t.Errorf("breaker_state gauge: %v, want %d", got, BreakerOpen)
	}
	// Open: a gets no traffic at all.
	hits := a.hits.Load()
	for range 6 {
		ok("while a's breaker is open")
	}
	if a.hits.Load() != hits {
		t.Errorf("a got %d requests while its breaker was open", a.hits.Load()-hits)
	}
	if got := testutil.ToFloat64(tg.m.breaker.WithLabelValues("m", "b", b.addr())); got != float64(BreakerClosed) {
		t.Errorf("b's breaker gauge: %v", got)
	}

	// After the open time one probe goes to a; a still fails, so the
	// breaker opens again (and the client's request went to b).
	clock.Advance(10 * time.Second)
	for i := 0; a.hits.Load() == hits; i++ {
		if i == 10 {
			t.Fatal("no probe reached a after its open time")
		}
		ok("probe while a fails")
	}
	if got := tg.breakerState("a"); got != BreakerOpen {
		t.Fatalf("after a failed probe: %v, want open", got)
	}

	// a recovers; after the (doubled) open time the probe closes it.
	a.mode.Store(modeOK)
	clock.Advance(20 * time.Second)
	hits = a.hits.Load()
	var probe answer
	for i := 0; a.hits.Load() == hits; i++ {
		if i == 10 {
			t.Fatal("no probe reached a after it recovered")
		}
		probe = ok("probe after a recovered")
	}
	if probe.header.Get(ReplicaHeader) != "a" {
		t.Errorf("the probe's answer came from %q, want a", probe.header.Get(ReplicaHeader))
	}
	if got := tg.breakerState("a"); got != BreakerClosed {
		t.Fatalf("after a good probe: %v, want closed", got)
	}
	seen := map[string]bool{}
	for range 4 {
		seen[ok("after recovery").header.Get(ReplicaHeader)] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Errorf("after recovery, replicas answering: %v; want both", seen)
	}
	for state, want := range map[string]float64{"open": 2, "half-open": 2, "closed": 1} {
		if got := testutil.ToFloat64(tg.m.transitions.WithLabelValues("m", state)); got != want {
			t.Errorf("transitions to %s: %v, want %v", state, got, want)
		}
	}
}

// Every replica's breaker open: 503 with a Retry-After of when the first
// may take a probe.
func TestAllBreakersOpen(t *testing.T) {
	clock := newFakeClock()
	a := startReplica(t, "m", "a", nil)
	a.mode.Store(modeUnavailable)
	tg := startGateway(t, Options{Now: clock.Now, Breaker: BreakerConfig{Failures: 1, OpenFor: 30 * time.Second}}, a.instance())
	first := tg.post(t, "/v1/chat/completions", chat("m"))
	if first.status != http.StatusServiceUnavailable || first.header.Get("Retry-After") == "" {
		t.Errorf("the replica's own 503: %d, Retry-After %q", first.status, first.header.Get("Retry-After"))
	}
	clock.Advance(5 * time.Second)
	got := tg.post(t, "/v1/chat/completions", chat("m"))
	e := decodeError(t, got.body)
	if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") != "25" || e.Error.Code != "no_healthy_replica" {
		t.Errorf("got %d, Retry-After %q, %s; want 503, 25, no_healthy_replica", got.status, got.header.Get("Retry-After"), got.body)
	}
	if a.hits.Load() != 1 {
		t.Errorf("replica hits %d, want 1", a.hits.Load())
	}
}

var volatile = regexp.MustCompile(`"(id|created)":("[^"]*"|\d+)`)

func TestStreamingIntact(t *testing.T) {
	r := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{}, r.instance())
	body := `{"model":"m","messages":[{"role":"user","content":"tell me"}],"max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}`
	via := tg.post(t, "/v1/chat/completions", body)
	resp, err := http.Post(r.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	direct, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if via.status != 200 || !strings.HasPrefix(via.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("via the gateway: %d %q", via.status, via.header.Get("Content-Type"))
	}
	norm := func(b []byte) string { return volatile.ReplaceAllString(string(b), `"$1":"-"`) }
	if diff := cmp.Diff(norm(direct), norm(via.body)); diff != "" {
		t.Errorf("stream through the gateway differs from the replica's (-direct +via):\n%s", diff)
	}
	if !strings.HasSuffix(string(via.body), "data: [DONE]\n\n") || strings.Count(string(via.body), "data: ") != 24 {
		t.Errorf("stream: %d events, want 24 ending in [DONE]:\n%s", strings.Count(string(via.body), "data: "), via.body)
	}
}

// Each event reaches the client when the replica flushes it, not when the
// response ends.
func TestStreamingFlushes(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: second\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	tg := startGateway(t, Options{}, Instance{ID: "u", Model: "m", Address: strings.TrimPrefix(up.URL, "http://"), Weight: 1})
	resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := sseLines(resp.Body)
	select {
	case got := <-lines:
		if got != "data: first" {
			t.Fatalf("first line %q", got)
		}
	case <-time.After(waitFor):
		t.Fatal("the first event did not reach the client while the replica held the rest")
	}
	close(release)
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if diff := cmp.Diff([]string{"data: second", "data: [DONE]"}, rest); diff != "" {
		t.Errorf("rest (-want +got):\n%s", diff)
	}
}

// A client that goes away before any of its answer came cancels the
// replica's request, whether it asked to stream (its exchange detached on
// fasthttp's server, the connection watched by its own goroutine) or not
// (the handler on the connection's goroutine, watched from another, by
// the connection's one timer, reset for each request: so also on its
// second request on a kept-alive connection, the first answered and its
// watch stopped).
func TestDisconnectBeforeAnswerCancelsUpstream(t *testing.T) {
	for _, tc := range []struct {
		name           string
		stream, second bool
	}{{"stream", true, false}, {"inline", false, false}, {"inline, second request on a connection", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, gone := make(chan struct{}, 1), make(chan struct{}, 1)
			eng := startEngine(t, "a", "m", func(_ http.ResponseWriter, r *http.Request, body []byte) bool {
				if strings.Contains(string(body), "first") {
					return false // answered by fake-engine
				}
				arrived <- struct{}{}
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-time.After(waitFor):
				}
				return true
			})
			tg := startGateway(t, Options{}, eng)
			if tc.second {
				if a := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"first"}]}`); a.status != http.StatusOK {
					t.Fatalf("first request: %d %s", a.status, a.body)
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			reused := make(chan bool, 1)
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused <- i.Reused }})
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":%v}`, tc.stream)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tg.srv.URL+"/v1/chat/completions", strings.NewReader(body))
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := tg.client.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			select {
			case <-arrived:
			case <-time.After(waitFor):
				t.Fatal("the request never reached the replica")
			}
			if r := <-reused; r != tc.second {
				t.Fatalf("the request went on a reused connection: %v, want %v", r, tc.second)
			}
			cancel()
			<-done
			select {
			case <-gone:
			case <-time.After(waitFor):
				t.Fatal("the replica's request was not cancelled after the client went away")
			}
		})
	}
}

func TestDisconnectCancelsUpstream(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			// 400 tokens at 20 a second: 20 s, longer than the test waits.
			r := startReplica(t, "m", "a", func(c *fakeengine.Config) { c.TokensPerSecond = 20 })
			tg := startGateway(t, Options{}, r.instance())
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"go on"}],"max_tokens":400,"stream":%v}`, stream)
			req, _ := http.NewRequestWithContext(ctx, "POST", tg.srv.URL+"/v1/chat/completions", strings.NewReader(body))
			done := make(chan error, 1)
			go func() {
				resp, err := tg.client.Do(req)
				if err == nil {
					if stream {
						// Read the first event, then hang up.
						_, err = resp.Body.Read(make([]byte, 64))
						cancel()
					} else {
						_, err = io.ReadAll(resp.Body)
					}
					resp.Body.Close()
				}
				done <- err
			}()
			if !stream {
				wait.Until(t, "the request to reach the replica", func() bool { return r.hits.Load() == 1 })
				cancel()
			}
			select {
			case path := <-r.cancelled:
				if path != "/v1/chat/completions" {
					t.Errorf("cancelled %q", path)
				}
			case <-time.After(waitFor):
				t.Fatal("the replica's request was not cancelled after the client went away")
			}
			if err := <-done; err != nil {
				t.Logf("client: %v (expected: it hung up)", err)
			}
			wait.Until(t, "no request in flight", func() bool { return testutil.ToFloat64(tg.m.inFlight) == 0 })
			if got := testutil.ToFloat64(tg.m.requests.WithLabelValues("m", "499")); got != 1 {
				t.Errorf("requests_total{code=499}: %v, want 1", got)
			}
		})
	}
}

// A large body within its route's limit passes through whole, chunked or
// not, and its buffer goes back to the budget.
func TestLargeBodyPassesThrough(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		fmt.Fprintf(w, `{"bytes":%d,"sha256":%q}`, n, hex.EncodeToString(h.Sum(nil)))
	}))
	t.Cleanup(up.Close)
	tg := startGateway(t, Options{MaxBody: BodyLimits{Embeddings: 8 << 20}}, Instance{ID: "u", Model: "m", Address: strings.TrimPrefix(up.URL, "http://"), Weight: 1})
	for _, chunked := range []bool{false, true} {
		body := `{"model":"m","input":"` + strings.Repeat("0123456789", 400<<10) + `"}`
		var r io.Reader = strings.NewReader(body)
		if chunked {
			r = io.MultiReader(r)
		}
		resp, err := tg.client.Post(tg.srv.URL+"/v1/embeddings", "application/json", r)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := sha256.Sum256([]byte(body))
		want := fmt.Sprintf(`{"bytes":%d,"sha256":%q}`, len(body), hex.EncodeToString(sum[:]))
		if string(got) != want {
			t.Errorf("chunked=%v: upstream saw %s, want %s", chunked, got, want)
		}
	}
	wait.Until(t, "body budget released", func() bool { return tg.bud.used.Load() == 0 })
}

func TestHealthz(t *testing.T) {
	g := New(Options{})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	get := func() int {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(); got != http.StatusServiceUnavailable {
		t.Errorf("before discovery: %d, want 503", got)
	}
	g.Update(Snapshot{})
	if got := get(); got != http.StatusOK {
		t.Errorf("after discovery: %d, want 200", got)
	}
}

// Many clients at once, one replica failing now and then: every request
// succeeds, and when all is done nothing is left counted in flight.
func TestConcurrentRequests(t *testing.T) {
	a := startReplica(t, "m", "a", nil)
	b := startReplica(t, "m", "b", nil)
	c := startReplica(t, "m", "c", nil)
	tg := startGateway(t, Options{Breaker: BreakerConfig{Failures: 2, OpenFor: time.Millisecond}}, a.instance(), b.instance(), c.instance())
	errs := make(chan error, 400)
	for w := range 20 {
		go func() {
			for i := range 20 {
				if w == 0 && i%5 == 0 {
					a.mode.Store(int32(i/5) % 2) // flap a: ok, 503, ok, 503
				}
				body := chat("m")
				if i%3 == 0 {
					body = `{"model":"m","messages":[{"role":"user","content":"s"}],"max_tokens":3,"stream":true}`
				}
				resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				errs <- err
			}
		}()
	}
	for range 400 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		ep := tg.tbl.Load().byID[id]
		wait.Until(t, id+" has nothing in flight", func() bool { return ep.Outstanding.Load() == 0 })
	}
	wait.Until(t, "budget released", func() bool { return tg.bud.used.Load() == 0 })
}

// A client that breaks off its body mid-upload is not the replica's fault:
// the gateway reads the whole body before any replica sees it, so none
// does, and no breaker counts it.
func TestClientBrokenBodyIsNotAReplicaFailure(t *testing.T) {
	a := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{Breaker: BreakerConfig{Failures: 1}}, a.instance())
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, `{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("x", 64<<10))
		pw.CloseWithError(fmt.Errorf("client gave up"))
	}()
	resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", pr)
	if err == nil {
		resp.Body.Close()
		t.Logf("client got %d", resp.StatusCode)
	}
	wait.Until(t, "the request answered 400 or 499", func() bool {
		return testutil.ToFloat64(tg.m.requests.WithLabelValues("", "400"))+testutil.ToFloat64(tg.m.requests.WithLabelValues("", "499")) == 1
	})
	if n := a.hits.Load(); n != 0 {
		t.Errorf("the replica got %d requests; want none (the body never came whole)", n)
	}
	if got := tg.breakerState("a"); got != BreakerClosed {
		t.Errorf("breaker %v after a client broke its body; want closed", got)
	}
	if got := tg.post(t, "/v1/chat/completions", chat("m")); got.status != 200 {
		t.Errorf("next request: %d %s", got.status, got.body)
	}
}

// An answer of known length is flushed to the client once its last byte
// is written, before the bookkeeping after it, and keeps its
// Content-Length (no chunked framing from the flush) through the
// gateway's server.
func TestKnownLengthAnswerFlushedWhole(t *testing.T) {
	r := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{}, r.instance())
	rec := httptest.NewRecorder()
	tg.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chat("m"))))
	if rec.Code != 200 || !rec.Flushed {
		t.Fatalf("status %d, flushed %v: %s", rec.Code, rec.Flushed, rec.Body)
	}
	resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat("m")))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(b)) || len(resp.TransferEncoding) != 0 {
		t.Errorf("status %d, Content-Length %d for %d bytes, Transfer-Encoding %v", resp.StatusCode, resp.ContentLength, len(b), resp.TransferEncoding)
	}
}

// A request reaches its replica with the client's headers but the
// hop-by-hop ones and those its Connection header names, the client's
// address added to X-Forwarded-For, and no header the client did not
// send; the answer reaches the client with the replica's headers, the
// same way filtered and without its CORS ones, and the gateway's own;
// served by fasthttp's server (whose writer takes the answer's head as
// bytes) and by net/http's.
func TestProxiedHeaders(t *testing.T) {
	var seen atomic.Pointer[http.Request]
	const answer = `{"object":"chat.completion"}`
	srv := startRaw(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		for {
			req, _, err := readRequest(br)
			if err != nil {
				return
			}
			seen.Store(req)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(answer))+
				"\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nX-Twice: 1\r\nX-Twice: 2\r\n"+
				"Access-Control-Allow-Origin: *\r\n"+ReplicaHeader+": forged\r\n\r\n"+answer)
		}
	})
	addr := srv.ln.Addr().String()
	tg := startGateway(t, Options{}, Instance{ID: "r", Model: "m", Replica: "r", Address: addr, Weight: 1})
	std := httptest.NewServer(tg.Handler())
	t.Cleanup(std.Close)
	for _, tc := range []struct {
		server string
		url    string
	}{{"fasthttp", tg.srv.URL}, {"net/http", std.URL}} {
		t.Run(tc.server, func(t *testing.T) { testProxiedHeaders(t, tc.url, tg.client, addr, &seen, answer) })
	}
}

func testProxiedHeaders(t *testing.T, url string, client *http.Client, addr string, seen *atomic.Pointer[http.Request], answer string) {
	for _, tc := range []struct {
		name   string
		header http.Header
		want   http.Header // at the replica; nil: absent
	}{
		{"hop-by-hop and named", http.Header{
			"Connection": {"X-Drop"}, "X-Drop": {"1"}, "Keep-Alive": {"300"}, "Te": {"trailers"}, "Proxy-Authorization": {"x"},
			"X-Forwarded-For": {"10.0.0.1"}, "X-Multi": {"a", "b"}, "User-Agent": {"test-agent"}, "Content-Type": {"application/json"},
		}, http.Header{
			"X-Drop": nil, "Keep-Alive": nil, "Te": nil, "Proxy-Authorization": nil,
			"X-Forwarded-For": {"10.0.0.1, 127.0.0.1"}, "X-Multi": {"a", "b"}, "User-Agent": {"test-agent"}, "Content-Type": {"application/json"},
		}},
		{"no content type", http.Header{"User-Agent": {"test-agent"}}, http.Header{
			"Content-Type": nil, "X-Forwarded-For": {"127.0.0.1"}, "User-Agent": {"test-agent"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chat("m")))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = tc.header
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != answer {
				t.Fatalf("got %d %s", resp.StatusCode, b)
			}
			got := seen.Load()
			for k, want := range tc.want {
				if v := got.Header.Values(k); !slices.Equal(v, want) {
					t.Errorf("the replica got %s %q, want %q", k, v, want)
				}
			}
			if got.Host != addr || got.ContentLength != int64(len(chat("m"))) || got.RequestURI != "/v1/chat/completions" {
				t.Errorf("the replica got %s %s, Host %q, Content-Length %d", got.Method, got.RequestURI, got.Host, got.ContentLength)
			}
			for k, want := range map[string][]string{
				"X-Secret": nil, "Keep-Alive": nil, "Access-Control-Allow-Origin": nil, "X-Twice": {"1", "2"},
				ReplicaHeader: {"r"}, "Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(answer))},
			} {
				if v := resp.Header.Values(k); !slices.Equal(v, want) {
					t.Errorf("the client got %s %q, want %q", k, v, want)
				}
			}
		})
	}
}

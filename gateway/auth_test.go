package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// startKeyGateway is startGateway with the keys of src in force.
func startKeyGateway(t *testing.T, src string, o Options, insts ...Instance) *testGateway {
	t.Helper()
	ks, err := ParseKeys("keys.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	o.Keys = StaticKeys{Set: ks}
	tg := startGateway(t, o, insts...)
	tg.UpdateKeys(ks, nil)
	return tg
}

// do sends a request with key (none when "") as Authorization: Bearer,
// and returns the answer once the gateway's handler has returned.
func (tg *testGateway) do(t *testing.T, method, path, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, tg.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	ended := tg.ends.track(req)
	resp, err := tg.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	ended(t)
	return answer{resp.StatusCode, resp.Header, b}
}

func keyBlock(name, secret, body string) string {
	return "key \"" + name + "\" {\n  hash = \"" + HashKey(secret) + "\"\n" + body + "}\n"
}

// TestKeyErrors: 401 without a key or with one not in force, 403 for a
// model the key may not use, all in OpenAI's shape; /v1/models lists only
// the key's models; the key never reaches the replica.
func TestKeyErrors(t *testing.T) {
	a := startReplica(t, "m1", "a", nil)
	b := startReplica(t, "m2", "b", nil)
	var upstreamAuth atomic.Value
	upstreamAuth.Store("")
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamAuth.Store(r.Header.Get("Authorization") + "|" + r.Header.Get("Api-Key"))
		a.srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer spy.Close()
	spyInst := Instance{ID: "spy", Model: "m1", Replica: "spy", Address: strings.TrimPrefix(spy.URL, "http://"), Weight: 1}
	tg := startKeyGateway(t, keyBlock("only-m1", "sk-1", "  models = [\"m1\"]\n")+keyBlock("all", "sk-all", ""),
		Options{}, spyInst, b.instance())

	for _, tt := range []struct {
		name, key, model string
		status           int
		code, param      string
	}{
		{"no key", "", "m1", http.StatusUnauthorized, "invalid_api_key", ""},
		{"unknown key", "sk-nope", "m1", http.StatusUnauthorized, "invalid_api_key", ""},
		{"a hash is not a key", HashKey("sk-1"), "m1", http.StatusUnauthorized, "invalid_api_key", ""},
		{"model not allowed", "sk-1", "m2", http.StatusForbidden, "model_not_allowed", "model"},
		{"unknown model not allowed either", "sk-1", "nope", http.StatusForbidden, "model_not_allowed", "model"},
		{"allowed", "sk-1", "m1", http.StatusOK, "", ""},
		{"every model", "sk-all", "m2", http.StatusOK, "", ""},
		{"every model, unknown one", "sk-all", "nope", http.StatusNotFound, "model_not_found", "model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tg.do(t, http.MethodPost, "/v1/chat/completions", tt.key, chat(tt.model))
			if got.status != tt.status {
				t.Fatalf("status %d, want %d: %s", got.status, tt.status, got.body)
			}
			if tt.code == "" {
				return
			}
			e := decodeError(t, got.body)
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if e.Error.Code != tt.code || param != tt.param {
				t.Errorf("code %q param %q, want %q %q: %s", e.Error.Code, param, tt.code, tt.param, got.body)
			}
			if tt.status == http.StatusUnauthorized && got.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if got := upstreamAuth.Load().(string); got != "|" {
		t.Errorf("the replica saw Authorization|Api-Key %q", got)
	}

	// api-key works as well as Authorization.
	req, _ := http.NewRequest(http.MethodPost, tg.srv.URL+"/v1/chat/completions", strings.NewReader(chat("m1")))
	req.Header.Set("Api-Key", "sk-1")
	resp, err := tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("api-key: %d", resp.StatusCode)
	}

	models := func(key string) []string {
		got := tg.do(t, http.MethodGet, "/v1/models", key, "")
		if got.status != http.StatusOK {
			t.Fatalf("/v1/models with %q: %d %s", key, got.status, got.body)
		}
		var l struct{ Data []struct{ ID string } }
		if err := json.Unmarshal(got.body, &l); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range l.Data {
			ids = append(ids, d.ID)
		}
		return ids
	}
	if diff := cmp.Diff([]string{"m1"}, models("sk-1")); diff != "" {
		t.Errorf("/v1/models for only-m1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"m1", "m2"}, models("sk-all")); diff != "" {
		t.Errorf("/v1/models for all (-want +got):\n%s", diff)
	}
	if got := tg.do(t, http.MethodGet, "/v1/models", "", ""); got.status != http.StatusUnauthorized {
		t.Errorf("/v1/models without a key: %d", got.status)
	}
	if got := tg.do(t, http.MethodGet, gatewayapi.DemandPath, "", ""); got.status != http.StatusOK {
		t.Errorf("demand without a key: %d", got.status)
	}
	if got := testutil.ToFloat64(tg.auth.m.rejections.WithLabelValues("", reasonUnauthenticated)); got != 4 {
		t.Errorf("rejections{unauthenticated}: %v, want 4 (3 chats, 1 /v1/models)", got)
	}
	if got := testutil.ToFloat64(tg.auth.m.rejections.WithLabelValues("only-m1", reasonModel)); got != 2 {
		t.Errorf("rejections{only-m1, model_not_allowed}: %v, want 2", got)
	}
	_ = a
}

// blockingReplica holds the first request it gets until release is
// closed (or sent to) and answers the others at once, counting them all.
type blockingReplica struct {
	srv     *httptest.Server
	hits    atomic.Int64
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func startBlockingReplica(t *testing.T) *blockingReplica {
	br := &blockingReplica{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	br.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if br.hits.Add(1) == 1 {
			br.arrived <- struct{}{}
			select {
			case <-br.release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
	}))
	t.Cleanup(br.srv.Close)
	t.Cleanup(br.done)
	return br
}

// done releases the held request, if still held. Tests defer it: the
// gateway's server, closed in a cleanup, waits for the request.
func (br *blockingReplica) done() { br.once.Do(func() { close(br.release) }) }

func (br *blockingReplica) instance() Instance {
	return Instance{ID: "blk", Model: "m1", Replica: "blk", Address: strings.TrimPrefix(br.srv.URL, "http://"), Weight: 1}
}

// TestConcurrencyReservedBeforeSend: with max_concurrency 1 and one
// request held at the replica, the second is 429 without reaching it; once
// the first is answered, the slot is free again.
func TestConcurrencyReservedBeforeSend(t *testing.T) {
	br := startBlockingReplica(t)
	tg := startKeyGateway(t, keyBlock("k", "sk", "  max_concurrency = 1\n"), Options{}, br.instance())
	defer br.done()
	first := make(chan answer, 1)
	go func() { first <- tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1")) }()
	<-br.arrived
	got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1"))
	if got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") != "1" {
		t.Fatalf("second: %d Retry-After %q: %s", got.status, got.header.Get("Retry-After"), got.body)
	}
	if e := decodeError(t, got.body); e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "rate_limit_error" {
		t.Errorf("429 shape: %s", got.body)
	}
	if n := br.hits.Load(); n != 1 {
		t.Errorf("the replica got %d requests, want 1", n)
	}
	br.release <- struct{}{}
	if a := <-first; a.status != http.StatusOK {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1")); got.status != http.StatusOK {
		t.Errorf("third, after the first: %d %s", got.status, got.body)
	}
	if got := testutil.ToFloat64(tg.auth.m.rejections.WithLabelValues("k", reasonConcurrency)); got != 1 {
		t.Errorf("rejections{k, concurrency}: %v", got)
	}
}

// TestRequestsPerMinute: the bucket holds a minute's requests and refills
// continuously; the 429's Retry-After is when the next one is earned.
func TestRequestsPerMinute(t *testing.T) {
	clk := newFakeClock()
	a := startReplica(t, "m1", "a", nil)
	tg := startKeyGateway(t, keyBlock("k", "sk", "  requests_per_minute = 2\n"), Options{Now: clk.Now}, a.instance())
	for i := range 2 {
		if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1")); got.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, got.status, got.body)
		}
	}
	got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1"))
	if got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") != "30" {
		t.Fatalf("third: %d Retry-After %q: %s", got.status, got.header.Get("Retry-After"), got.body)
	}
	clk.Advance(20e9)
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1")); got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") != "10" {
		t.Fatalf("20s later: %d Retry-After %q", got.status, got.header.Get("Retry-After"))
	}
	clk.Advance(10e9)
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1")); got.status != http.StatusOK {
		t.Fatalf("30s later: %d %s", got.status, got.body)
	}
	// A request that reaches no replica gives its request back.
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("nope")); got.status != http.StatusNotFound {
		t.Fatalf("unknown model: %d", got.status)
	}
}

// TestTokensSettleWithUsage: a request reserves its prompt's bytes / 4
// plus max_tokens before it is sent; its answer's usage replaces the
// estimate.
func TestTokensSettleWithUsage(t *testing.T) {
	clk := newFakeClock()
	br := startBlockingReplica(t)
	tg := startKeyGateway(t, keyBlock("k", "sk", "  tokens_per_minute = 1000\n"), Options{Now: clk.Now}, br.instance())
	defer br.done()
	body := `{"model":"m1","messages":[{"role":"user","content":"hello"}],"max_tokens":500}`
	est := float64(len(body)/4 + 500)
	lim := tg.auth.keys.Load().keys[0].lim
	done := make(chan answer, 1)
	go func() { done <- tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", body) }()
	<-br.arrived
	lim.mu.Lock()
	held := lim.toks
	lim.mu.Unlock()
	if held != 1000-est {
		t.Errorf("while in flight the bucket holds %v, want %v", held, 1000-est)
	}
	// A second that would overrun the bucket is refused before it is sent.
	got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", body)
	if got.status != http.StatusTooManyRequests || got.header.Get("Retry-After") == "" {
		t.Fatalf("second: %d %q %s", got.status, got.header.Get("Retry-After"), got.body)
	}
	br.done()
	if a := <-done; a.status != http.StatusOK {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	lim.mu.Lock()
	after := lim.toks
	lim.mu.Unlock()
	if after != 1000-7 {
		t.Errorf("after the answer the bucket holds %v, want 993 (the usage's 7 tokens)", after)
	}
	if got := testutil.ToFloat64(tg.auth.m.tokens.WithLabelValues("k", "completion")); got != 4 {
		t.Errorf("completion tokens: %v", got)
	}
	if n := br.hits.Load(); n != 1 {
		t.Errorf("replica hits %d", n)
	}
}

// TestStreamUsageAddedAndStripped: a stream that did not ask for usage is
// sent asking for it; the usage chunk settles the tokens and is kept from
// the client, whose stream is otherwise the replica's. A client that asked
// gets it.
func TestStreamUsageAddedAndStripped(t *testing.T) {
	var seen atomic.Value
	seen.Store("")
	a := startReplica(t, "m1", "a", func(c *fakeengine.Config) {})
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen.Store(string(b))
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		r.ContentLength = int64(len(b))
		a.srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer spy.Close()
	inst := Instance{ID: "s", Model: "m1", Replica: "s", Address: strings.TrimPrefix(spy.URL, "http://"), Weight: 1}
	clk := newFakeClock()
	tg := startKeyGateway(t, keyBlock("k", "sk", "  tokens_per_minute = 100000\n"), Options{Now: clk.Now}, inst)
	lim := tg.auth.keys.Load().keys[0].lim

	stream := func(body string) []string {
		got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", body)
		if got.status != http.StatusOK {
			t.Fatalf("stream: %d %s", got.status, got.body)
		}
		var lines []string
		for l := range strings.SplitSeq(string(got.body), "\n") {
			if l != "" {
				lines = append(lines, l)
			}
		}
		return lines
	}
	body := `{"model":"m1","messages":[{"role":"user","content":"hello"}],"max_tokens":3,"stream":true}`
	lines := stream(body)
	if s := seen.Load().(string); !strings.Contains(s, `"stream_options":{"include_usage":true}`) {
		t.Errorf("the replica got %s", s)
	}
	for _, l := range lines {
		if strings.Contains(l, `"usage"`) {
			t.Errorf("the client saw the usage chunk the gateway asked for: %s", l)
		}
	}
	// role chunk, 3 tokens, the finish chunk, [DONE]
	if len(lines) != 6 || lines[len(lines)-1] != "data: [DONE]" {
		t.Errorf("client stream:\n%s", strings.Join(lines, "\n"))
	}
	prompt := testutil.ToFloat64(tg.auth.m.tokens.WithLabelValues("k", "prompt"))
	if c := testutil.ToFloat64(tg.auth.m.tokens.WithLabelValues("k", "completion")); c != 3 || prompt < 1 {
		t.Errorf("tokens: prompt %v completion %v", prompt, c)
	}
	lim.mu.Lock()
	if lim.toks != 100000-(prompt+3) {
		t.Errorf("bucket %v, want %v: settled with the stream's usage", lim.toks, 100000-(prompt+3))
	}
	lim.mu.Unlock()

	// The client asked: the body goes as sent, the usage chunk reaches it.
	asked := `{"model":"m1","messages":[{"role":"user","content":"hello"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`
	lines = stream(asked)
	if s := seen.Load().(string); s != asked {
		t.Errorf("the replica got %s, want the client's body", s)
	}
	if !strings.Contains(strings.Join(lines, "\n"), `"usage":{"prompt_tokens"`) {
		t.Errorf("the client asked for usage and got:\n%s", strings.Join(lines, "\n"))
	}
	if c := testutil.ToFloat64(tg.auth.m.tokens.WithLabelValues("k", "completion")); c != 6 {
		t.Errorf("completion tokens after two streams: %v", c)
	}
}

// TestKeysReloadKeepsOld: a key set that fails to load leaves the keys
// in force, and says so in the metrics; a good one replaces them, and a
// key that stays keeps its limiter (its requests in flight).
func TestKeysReloadKeepsOld(t *testing.T) {
	a := startReplica(t, "m1", "a", nil)
	tg := startKeyGateway(t, keyBlock("k", "sk-old", "  max_concurrency = 4\n"), Options{}, a.instance())
	lim := tg.auth.keys.Load().keys[0].lim
	_, err := ParseKeys("keys.hcl", []byte(keyBlock("k", "sk-new", "  max_concurrency = 0\n")))
	tg.UpdateKeys(nil, err)
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk-old", chat("m1")); got.status != http.StatusOK {
		t.Fatalf("old key after a failed reload: %d %s", got.status, got.body)
	}
	if got := testutil.ToFloat64(tg.auth.m.failing); got != 1 {
		t.Errorf("reload_failing %v", got)
	}
	if !strings.Contains(tg.KeysError(), "keys.hcl:3") {
		t.Errorf("KeysError %q", tg.KeysError())
	}
	ks, err := ParseKeys("keys.hcl", []byte(keyBlock("k", "sk-new", "  max_concurrency = 2\n")))
	if err != nil {
		t.Fatal(err)
	}
	tg.UpdateKeys(ks, nil)
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk-old", chat("m1")); got.status != http.StatusUnauthorized {
		t.Errorf("old key after a good reload: %d", got.status)
	}
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk-new", chat("m1")); got.status != http.StatusOK {
		t.Errorf("new key: %d", got.status)
	}
	if tg.auth.keys.Load().keys[0].lim != lim || lim.conc != 2 {
		t.Error("the key's limiter was not kept, or not reconfigured")
	}
	if got := testutil.ToFloat64(tg.auth.m.failing); got != 0 {
		t.Errorf("reload_failing %v after a good reload", got)
	}
}

// TestKeysNotReadYet: with a key source and no keys read yet, every
// request is refused (503) and /healthz is not ready: the gateway fails
// closed.
func TestKeysNotReadYet(t *testing.T) {
	a := startReplica(t, "m1", "a", nil)
	tg := startGateway(t, Options{Keys: StaticKeys{}}, a.instance())
	got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1"))
	if got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
		t.Fatalf("%d %s", got.status, got.body)
	}
	if e := decodeError(t, got.body); e.Error.Code != "keys_unavailable" {
		t.Errorf("code %q", e.Error.Code)
	}
	if got := tg.do(t, http.MethodGet, "/healthz", "", ""); got.status != http.StatusServiceUnavailable {
		t.Errorf("/healthz %d", got.status)
	}
}

// TestLimitShare: with n gateways sharing, each enforces 1/n.
func TestLimitShare(t *testing.T) {
	clk := newFakeClock()
	a := startReplica(t, "m1", "a", nil)
	tg := startKeyGateway(t, keyBlock("k", "sk", "  requests_per_minute = 4\n"), Options{Now: clk.Now}, a.instance())
	tg.SetLimitShare(2)
	for i := range 2 {
		if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1")); got.status != http.StatusOK {
			t.Fatalf("request %d: %d", i, got.status)
		}
	}
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", chat("m1")); got.status != http.StatusTooManyRequests {
		t.Errorf("third with half of 4 per minute: %d", got.status)
	}
}

// TestNomadKeys: the keys follow a Nomad Variable's item "keys" with
// blocking queries; until it exists every request is refused; a write that
// does not parse leaves the keys in force and is reported at its line.
func TestNomadKeys(t *testing.T) {
	fake := nomadfake.New()
	defer fake.Close()
	client := fake.Client(t)
	put := func(src string) {
		t.Helper()
		if _, _, err := client.Variables().Update(&nomadapi.Variable{Path: "llmgw/keys", Items: map[string]string{KeysItem: src}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	a := startReplica(t, "m1", "a", nil)
	tg := startGateway(t, Options{Source: StaticSource{Instances: []Instance{a.instance()}},
		Keys: &NomadKeys{Client: client, Path: "llmgw/keys", Wait: time.Second}})
	runGateway(t, tg.Gateway)
	wait.Until(t, "the missing variable reported", func() bool { return strings.Contains(tg.KeysError(), "not found") })
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk-a", chat("m1")); got.status != http.StatusServiceUnavailable {
		t.Errorf("before any keys: %d", got.status)
	}
	put(keyBlock("a", "sk-a", ""))
	wait.Until(t, "sk-a in force", func() bool {
		return tg.do(t, http.MethodPost, "/v1/chat/completions", "sk-a", chat("m1")).status == http.StatusOK
	})
	put(keyBlock("a", "sk-a", "  requests_per_minute = -1\n"))
	wait.Until(t, "the bad variable reported", func() bool {
		return strings.Contains(tg.KeysError(), "nomad variable llmgw/keys (namespace default) item keys:3: ")
	})
	if got := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk-a", chat("m1")); got.status != http.StatusOK {
		t.Errorf("after a bad write: %d", got.status)
	}
	put(keyBlock("b", "sk-b", ""))
	wait.Until(t, "sk-b replaces sk-a", func() bool {
		return tg.do(t, http.MethodPost, "/v1/chat/completions", "sk-a", chat("m1")).status == http.StatusUnauthorized
	})
	if tg.KeysError() != "" {
		t.Errorf("error still reported: %q", tg.KeysError())
	}
}

// TestUnknownModelsWarned: an allowlisted model the catalog does not know
// is a warning naming the key's line, given once the catalog has been
// read (keys read before it are checked when it is), never an error.
func TestUnknownModelsWarned(t *testing.T) {
	var logs syncLog
	a := startReplica(t, "m1", "a", nil)
	ks, err := ParseKeys("keys.hcl", []byte(keyBlock("k", "sk", "  models = [\"m1\", \"m9\"]\n")))
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{Keys: StaticKeys{Set: ks}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	g.UpdateKeys(ks, nil)
	if strings.Contains(logs.String(), "m9") {
		t.Errorf("warned before the catalog was read:\n%s", logs.String())
	}
	g.Update(Snapshot{Instances: []Instance{a.instance()}})
	out := logs.String()
	if !strings.Contains(out, `keys.hcl:1: key \"k\": model \"m9\" is not in the catalog`) || strings.Contains(out, `model \"m1\"`) {
		t.Errorf("log:\n%s", out)
	}
	if strings.Count(out, "m9") != 1 {
		t.Errorf("warned %d times, want once:\n%s", strings.Count(out, "m9"), out)
	}
	g.Update(Snapshot{Instances: []Instance{a.instance()}})
	g.UpdateKeys(ks, nil) // a reload once synced: checked again
	if n := strings.Count(logs.String(), "m9"); n != 2 {
		t.Errorf("warned %d times after a reload, want 2", n)
	}
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

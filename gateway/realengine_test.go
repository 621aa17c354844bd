package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// recorder is a loopback TCP proxy in front of a real engine that keeps
// every byte the engine sent, so a test can compare what the gateway's
// client got with what the engine wrote.
type recorder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*bytes.Buffer
}

func record(t *testing.T, target string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			buf := &bytes.Buffer{}
			rec.mu.Lock()
			rec.conns = append(rec.conns, buf)
			rec.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
			wg.Go(func() {
				_, _ = io.Copy(c, io.TeeReader(up, lockedWriter{&rec.mu, buf}))
				_ = c.Close()
			})
		}
	})
	return rec
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// bodies are the bodies of every whole response the engine sent.
func (rec *recorder) bodies(t *testing.T) [][]byte {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out [][]byte
	for _, c := range rec.conns {
		br := bufio.NewReader(bytes.NewReader(c.Bytes()))
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				break // a response still being written
			}
			out = append(out, b)
		}
	}
	return out
}

func (rec *recorder) addr() string { return rec.ln.Addr().String() }

func realReplica(t *testing.T, model, id string) (*realengine.Server, *recorder, Instance) {
	t.Helper()
	s := realengine.Start(t, model, "--alias", "tiny", "--context-shift")
	rec := record(t, "127.0.0.1:"+strconv.Itoa(s.Port))
	return s, rec, Instance{ID: id, Model: "tiny", Replica: id, Address: rec.addr(), Weight: 1}
}

// Two real llama.cpp servers behind the gateway: answers, whole and
// streamed, reach the client byte for byte as the engine wrote them; the
// model is listed once.
func TestGatewayOverRealEngines(t *testing.T) {
	model := realengine.TinyModel(t)
	_, rec1, a := realReplica(t, model, "r1")
	_, rec2, b := realReplica(t, model, "r2")
	tg := startGateway(t, Options{}, a, b)

	resp, err := tg.client.Get(tg.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if n := strings.Count(string(mb), `"id":"tiny"`); n != 1 {
		t.Errorf("/v1/models lists tiny %d times: %s", n, mb)
	}

	for _, c := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"Hi"}]}`, `"content":"Hello world!"`},
		{"/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"Hi"}]}`, "data: [DONE]"},
		{"/v1/completions", `{"model":"tiny","prompt":"Once","max_tokens":8}`, `"text":"Hello world!"`},
		{"/v1/completions", `{"model":"tiny","prompt":"Once","max_tokens":8,"stream":true}`, "data: [DONE]"},
	} {
		ans := tg.post(t, c.path, c.body)
		if ans.status != 200 || !strings.Contains(string(ans.body), c.want) {
			t.Fatalf("%s %s: %d %s", c.path, c.body, ans.status, ans.body)
		}
		found := false
		for _, sent := range append(rec1.bodies(t), rec2.bodies(t)...) {
			if bytes.Equal(sent, ans.body) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s %s: the client's body is none the engines sent:\n%s", c.path, c.body, ans.body)
		}
	}
}

// With API keys, a key's tokens settle from the real engine's usage, for
// a whole answer and for a stream the gateway asked usage of (and kept the
// usage chunk from the client, who did not ask).
func TestGatewayKeysSettleFromRealUsage(t *testing.T) {
	model := realengine.TinyModel(t)
	_, _, a := realReplica(t, model, "r1")
	tg := startKeyGateway(t, keyBlock("k", "sk", "  tokens_per_minute = 100000\n"), Options{}, a)

	ans := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", `{"model":"tiny","messages":[{"role":"user","content":"Hi"}]}`)
	var whole struct {
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal(ans.body, &whole); err != nil || ans.status != 200 || whole.Usage.CompletionTokens == 0 {
		t.Fatalf("chat: %d %s (%v)", ans.status, ans.body, err)
	}
	if got := testutil.ToFloat64(tg.auth.m.tokens.WithLabelValues("k", "completion")); got != float64(whole.Usage.CompletionTokens) {
		t.Errorf("completion tokens settled %v, the engine's usage says %d", got, whole.Usage.CompletionTokens)
	}
	if got := testutil.ToFloat64(tg.auth.m.tokens.WithLabelValues("k", "prompt")); got != float64(whole.Usage.PromptTokens) {
		t.Errorf("prompt tokens settled %v, the engine's usage says %d", got, whole.Usage.PromptTokens)
	}

	st := tg.do(t, http.MethodPost, "/v1/chat/completions", "sk", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"Hi"}]}`)
	if st.status != 200 || strings.Contains(string(st.body), `"usage":{`) || !strings.Contains(string(st.body), "data: [DONE]") {
		t.Errorf("stream without include_usage: %d, want no usage chunk and [DONE]:\n%s", st.status, st.body)
	}
	if got := testutil.ToFloat64(tg.auth.m.tokens.WithLabelValues("k", "completion")); got != float64(2*whole.Usage.CompletionTokens) {
		t.Errorf("after the stream, completion tokens %v, want %d (the same answer twice)", got, 2*whole.Usage.CompletionTokens)
	}
}

// A real server killed in the middle of a stream: the client's stream ends
// cleanly with an error event in OpenAI's shape, and the replica's breaker
// counts the failure.
func TestGatewayRealEngineKilledMidStream(t *testing.T) {
	model := realengine.TinyModel(t)
	s, _, a := realReplica(t, model, "r1")
	tg := startGateway(t, Options{}, a)
	resp, err := tg.client.Post(tg.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"tiny","stream":true,"max_tokens":1000000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on."}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("first line: %v", err)
	}
	if err := s.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("the stream was cut (%v) instead of ending with an error event", err)
	}
	lines := strings.Split(strings.TrimSpace(string(rest)), "\n")
	last := lines[len(lines)-1]
	var ev apiError
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "data: ")), &ev); err != nil || ev.Error.Type != "server_error" || !strings.Contains(ev.Error.Message, "replica r1 failed") {
		t.Errorf("last event %q: want an OpenAI error object naming replica r1 (%v)", last, err)
	}
	if got := testutil.ToFloat64(tg.m.attempts.WithLabelValues("tiny", "broken")); got != 1 {
		t.Errorf("broken attempts %v, want 1", got)
	}
}

// The prefix policy over two real llama.cpp servers, three tenants (each its
// own system prompt) with three conversations each, three turns a
// conversation, sent one at a time and interleaved (every conversation's
// first turn, then every second turn, then every third), so that each
// replica serves other conversations between two turns of one: every
// answer is routed "prefix" (one request at a time is never over the
// bound), every request of a tenant goes to one replica (where its system
// prompt is; so every later turn to the replica of its conversation's
// first turn), and every later turn finds part of its prompt in that
// engine's cache, as the gateway's cache counters read it from the
// answers.
//
// The bound random routing fails: each of a tenant's 9 requests lands on
// the replica of its first with probability 1/2 at random, so random
// routing passes the affinity check with probability 2^-24 (about 6e-8;
// the later turns alone on their conversation's replica: 2^-18).
// The cache check alone is not one random routing fails (a tenant's system
// prompt is soon on both replicas); it checks that the engines report what
// they reuse and that affinity keeps more than half of the later turns'
// prompt tokens cached.
func TestPrefixRoutingCachesOnRealEngines(t *testing.T) {
	model := realengine.TinyModel(t)
	_, _, a := realReplica(t, model, "r1")
	_, _, b := realReplica(t, model, "r2")
	tg := startGateway(t, Options{Routing: map[string]string{"tiny": RoutePrefix}}, a, b)
	addr := map[string]string{"r1": a.Address, "r2": b.Address}
	counts := func(replica string) (prompt, cached, unknown float64) {
		l := []string{"tiny", replica, addr[replica]}
		return testutil.ToFloat64(tg.m.promptTokens.WithLabelValues(l...)), testutil.ToFloat64(tg.m.cachedTokens.WithLabelValues(l...)),
			testutil.ToFloat64(tg.m.cacheUnknown.WithLabelValues(l...))
	}
	type conv struct {
		tenant, user int
		msgs         []map[string]string
		replica      string // its first turn's
	}
	var convs []*conv
	for tenant := range 3 {
		system := strings.Repeat(fmt.Sprintf("You are tenant %d's careful assistant and answer briefly and politely. ", tenant), 20)
		for user := range 3 {
			convs = append(convs, &conv{tenant: tenant, user: user, msgs: []map[string]string{{"role": "system", "content": system}}})
		}
	}
	home := map[int]string{} // each tenant's replica
	var laterPrompt, laterCached float64
	for turn := 1; turn <= 3; turn++ {
		for _, cv := range convs {
			cv.msgs = append(cv.msgs, map[string]string{"role": "user", "content": fmt.Sprintf("User %d of tenant %d, turn %d: what is the capital of France?", cv.user, cv.tenant, turn)})
			body, _ := json.Marshal(map[string]any{"model": "tiny", "messages": cv.msgs, "max_tokens": 8})
			before := map[string][2]float64{}
			for r := range addr {
				p, c, _ := counts(r)
				before[r] = [2]float64{p, c}
			}
			ans := tg.post(t, "/v1/chat/completions", string(body))
			var out struct {
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(ans.body, &out); err != nil || ans.status != 200 || len(out.Choices) == 0 {
				t.Fatalf("tenant %d user %d turn %d: %d %s (%v)", cv.tenant, cv.user, turn, ans.status, ans.body, err)
			}
			cv.msgs = append(cv.msgs, map[string]string{"role": "assistant", "content": out.Choices[0].Message.Content})
			replica := ans.header.Get(ReplicaHeader)
			if r := ans.header.Get(RouteHeader); r != RoutePrefix {
				t.Errorf("tenant %d user %d turn %d: route %q, want prefix", cv.tenant, cv.user, turn, r)
			}
			// One request at a time: the counters' change is this answer's.
			p, c, u := counts(replica)
			p, c = p-before[replica][0], c-before[replica][1]
			if p == 0 || u != 0 {
				t.Fatalf("tenant %d user %d turn %d on %s: prompt tokens %v, unknown answers %v: want the engine's report", cv.tenant, cv.user, turn, replica, p, u)
			}
			t.Logf("tenant %d user %d turn %d: %s, %v of %v prompt tokens cached", cv.tenant, cv.user, turn, replica, c, p)
			if h, ok := home[cv.tenant]; !ok {
				home[cv.tenant] = replica
			} else if replica != h {
				t.Errorf("tenant %d user %d turn %d went to %s, the tenant's first request to %s", cv.tenant, cv.user, turn, replica, h)
			}
			if turn == 1 {
				cv.replica = replica
				continue
			}
			if replica != cv.replica {
				t.Errorf("tenant %d user %d turn %d went to %s, its first turn to %s", cv.tenant, cv.user, turn, replica, cv.replica)
			}
			if c <= 0 {
				t.Errorf("tenant %d user %d turn %d on %s: none of %v prompt tokens cached: want its earlier turns found", cv.tenant, cv.user, turn, replica, p)
			}
			laterPrompt += p
			laterCached += c
		}
	}
	t.Logf("later turns: %v of %v prompt tokens cached (%.2f)", laterCached, laterPrompt, laterCached/laterPrompt)
	if 2*laterCached <= laterPrompt {
		t.Errorf("later turns: %v of %v prompt tokens cached: want more than half", laterCached, laterPrompt)
	}
}

// LoRA adapters through the gateway, on two real llama.cpp replicas as the
// controller starts them (--lora … --lora-init-without-apply --cache-ram
// 0): r1 loaded adapters a and b, r2 only b (as a replica whose a was bad
// and left out), so b has id 1 on r1 and id 0 on r2. A request names an
// adapter as its model, by name or as tiny:name, and gets that adapter's
// answer wherever it goes; a's requests never go to r2; the base model's
// requests get the base answer on both (every adapter at scale 0, where a
// request without a "lora" list would get them all). A client's own "lora"
// is refused. llama.cpp's issue 26207 sequence (a on p1, b on p2, b on p1)
// gets b's answer.
func TestAdaptersOverRealEngines(t *testing.T) {
	model := realengine.TinyModel(t)
	const answerA, answerB, answerBase = "Ahoy matey.", "Goodbye moon.", "Hello world!"
	pa := realengine.Adapter(t, tinymodel.Defaults, answerA, 0)
	pb := realengine.Adapter(t, tinymodel.Defaults, answerB, 1)
	start := func(id string, loras string) Instance {
		s := realengine.Start(t, model, "--alias", "tiny", "-np", "1", "--lora", loras, "--lora-init-without-apply", "--cache-ram", "0")
		return Instance{ID: id, Model: "tiny", Replica: id, Address: "127.0.0.1:" + strconv.Itoa(s.Port), Weight: 1, Engine: engine.LlamaCpp}
	}
	r1, r2 := start("r1", pa+","+pb), start("r2", pb)
	tg := startGateway(t, Options{}, r1, r2)
	tg.UpdateModels(gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "tiny", Replicas: 2, Min: 2, Adapters: []gatewayapi.ListedAdapter{
		{Name: "pirate", Path: pa, Scale: 1}, {Name: "farewell", Path: pb, Scale: 1},
	}}}}, nil)

	ask := func(name, prompt string) (string, string) {
		t.Helper()
		p, _ := json.Marshal(prompt)
		n, _ := json.Marshal(name)
		ans := tg.post(t, "/v1/completions", `{"model":`+string(n)+`,"prompt":`+string(p)+`,"max_tokens":16}`)
		var out struct {
			Model   string `json:"model"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(ans.body, &out); err != nil || ans.status != 200 || len(out.Choices) != 1 {
			t.Fatalf("%s: %d %s (%v)", name, ans.status, ans.body, err)
		}
		return out.Choices[0].Text, ans.header.Get(ReplicaHeader)
	}
	byName := map[string]map[string]int{}
	for i := range 6 {
		prompt := fmt.Sprintf("Question %d: what is the capital of France?", i)
		for _, c := range []struct{ name, want string }{
			{"pirate", answerA}, {"tiny:pirate", answerA}, {"farewell", answerB}, {"tiny:farewell", answerB}, {"tiny", answerBase},
		} {
			got, replica := ask(c.name, prompt)
			if got != c.want {
				t.Errorf("%s on %s: %q, want %q", c.name, replica, got, c.want)
			}
			if byName[c.name] == nil {
				byName[c.name] = map[string]int{}
			}
			byName[c.name][replica]++
		}
	}
	t.Logf("answers by model and replica: %v", byName)
	for _, name := range []string{"pirate", "tiny:pirate"} {
		if byName[name]["r2"] != 0 {
			t.Errorf("%s went to r2, which did not load it: %v", name, byName[name])
		}
	}
	if len(byName["tiny"]) != 2 {
		t.Errorf("the base model's requests went to %v: want both replicas (least-outstanding rotates)", byName["tiny"])
	}

	// llama.cpp's 26207: a on p1, b on p2, b on p1, each on whichever
	// replica; with one slot and no host cache, b's answer.
	const p1, p2 = "Tell me a long story about the sea and the ships on it", "What is the capital of France, and why there?"
	for _, c := range []struct{ name, prompt, want string }{{"pirate", p1, answerA}, {"farewell", p2, answerB}, {"farewell", p1, answerB}} {
		if got, replica := ask(c.name, c.prompt); got != c.want {
			t.Errorf("26207 sequence: %s on %q at %s: %q, want %q", c.name, c.prompt, replica, got, c.want)
		}
	}

	if ans := tg.post(t, "/v1/completions", `{"model":"tiny","prompt":"Hi","lora":[{"id":0,"scale":1}]}`); ans.status != 400 || decodeError(t, ans.body).Error.Code != "lora_not_allowed" {
		t.Errorf("a client's own lora list: %d %s, want 400 lora_not_allowed", ans.status, ans.body)
	}
	if ans := tg.post(t, "/v1/completions", `{"model":"other:pirate","prompt":"Hi"}`); ans.status != 404 {
		t.Errorf("an adapter under another model's name: %d %s, want 404", ans.status, ans.body)
	}

	resp, err := tg.client.Get(tg.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{`"id":"tiny"`, `"id":"pirate"`, `"parent":"tiny"`, `"id":"farewell"`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("/v1/models: no %s in %s", want, mb)
		}
	}
}

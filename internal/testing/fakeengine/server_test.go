package fakeengine

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/testing/syncbuf"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines and the
// test's reads.
type syncBuffer struct{ syncbuf.Buffer }

func (s *syncBuffer) lines() []string {
	return strings.Split(strings.TrimSuffix(s.String(), "\n"), "\n")
}

type testServer struct {
	*Server
	stdout, stderr *syncBuffer
}

// newTestServer returns a server for model "m" with tweaks applied; it is
// loaded (ready) unless the tweaks set a load time.
func newTestServer(t *testing.T, tweak func(*Config)) testServer {
	t.Helper()
	cfg := Defaults()
	cfg.Model = "m"
	cfg.TokensPerSecond = 0
	if tweak != nil {
		tweak(&cfg)
	}
	ts := testServer{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	ts.Server = NewServer(cfg, ts.stdout, ts.stderr)
	if cfg.LoadTime == 0 {
		ts.Load(t.Context())
	}
	return ts
}

func (ts testServer) do(method, path, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	ts.Handler().ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w
}

func decodeJSON[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestLoadGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := newTestServer(t, func(c *Config) { c.LoadTime, c.LoadShards = 2500*time.Millisecond, 5 })
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan struct{})
		go func() { defer close(done); ts.Load(ctx) }()

		check := func(at string, wantCode int) {
			t.Helper()
			synctest.Wait()
			if got := ts.do("GET", "/health", "").Code; got != wantCode {
				t.Errorf("at %s: /health = %d, want %d", at, got, wantCode)
			}
			if got := ts.do("GET", "/v1/models", "").Code; got != wantCode {
				t.Errorf("at %s: /v1/models = %d, want %d", at, got, wantCode)
			}
		}
		check("0s", http.StatusServiceUnavailable)
		time.Sleep(2499 * time.Millisecond)
		check("2.499s", http.StatusServiceUnavailable)
		time.Sleep(time.Millisecond)
		check("2.5s", http.StatusOK)
		<-done

		want := []string{
			"INFO fake-engine: loading model m (5 shards, 2.5s)",
			"Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]",
			"Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:01<00:01,  0.50s/it]",
			"Loading safetensors checkpoint shards:  80% Completed | 4/5 [00:02<00:00,  0.50s/it]",
			"Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:02<00:00,  0.50s/it]",
			"INFO fake-engine: model loaded in 2.5s; ready",
			"INFO:     Application startup complete.",
		}
		if diff := cmp.Diff(want, ts.stderr.lines()); diff != "" {
			t.Errorf("stderr (-want +got):\n%s", diff)
		}
	})
}

func TestLoadCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := newTestServer(t, func(c *Config) { c.LoadTime = time.Minute })
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); ts.Load(ctx) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		cancel()
		<-done
		if ts.Ready() {
			t.Error("Ready() after a cancelled load = true, want false")
		}
		if got, want := len(ts.stderr.lines()), 12; got != want {
			t.Errorf("stderr has %d lines, want %d (header, 0%%, one a second):\n%s", got, want, ts.stderr)
		}
	})
}

func TestProgressLine(t *testing.T) {
	tests := []struct {
		elapsed, total time.Duration
		shards         int
		want           string
	}{
		{0, 5 * time.Second, 5, "Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]"},
		{2 * time.Second, 5 * time.Second, 5, "Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:02<00:03,  1.00s/it]"},
		{61 * time.Second, 120 * time.Second, 3, "Loading safetensors checkpoint shards:  33% Completed | 1/3 [01:01<00:59, 40.00s/it]"},
		{9 * time.Second, 5 * time.Second, 5, "Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:05<00:00,  1.00s/it]"},
	}
	for _, tt := range tests {
		if got := progressLine(tt.elapsed, tt.total, tt.shards); got != tt.want {
			t.Errorf("progressLine(%s, %s, %d)\n got %q\nwant %q", tt.elapsed, tt.total, tt.shards, got, tt.want)
		}
	}
}

func TestHealthAndModels(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.Model, c.ServedNames, c.MaxModelLen = "/models/q", []string{"q", "q2"}, 512 })
	if w := ts.do("GET", "/health", ""); w.Code != http.StatusOK {
		t.Errorf("/health = %d, want 200", w.Code)
	}
	w := ts.do("GET", "/v1/models", "")
	got := decodeJSON[modelList](t, w.Body.Bytes())
	want := modelList{Object: "list", Data: []modelCard{
		{ID: "q", Object: "model", Created: ts.created, OwnedBy: "fake-engine", Root: "/models/q", MaxModelLen: 512},
		{ID: "q2", Object: "model", Created: ts.created, OwnedBy: "fake-engine", Root: "/models/q", MaxModelLen: 512},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/v1/models (-want +got):\n%s", diff)
	}
}

func TestTokensDeterministic(t *testing.T) {
	want := []string{"lazy", " power", " humming", " a", " humming"}
	if diff := cmp.Diff(want, Tokens("m", "user: hello", 5)); diff != "" {
		t.Errorf("Tokens (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Tokens("m", "x", 40)[:10], Tokens("m", "x", 10)); diff != "" {
		t.Errorf("a shorter completion is not a prefix of a longer one (-want +got):\n%s", diff)
	}
}

func TestCompletions(t *testing.T) {
	ptr := func(s string) *string { return &s }
	tests := []struct {
		name string
		path string
		body string
		want any
	}{
		{
			name: "chat with max_tokens",
			path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`,
			want: chatResponse{
				ID: "chatcmpl-fake-1", Object: "chat.completion", Model: "m",
				Choices: []chatChoice{{Message: &message{Role: "assistant", Content: "lazy power humming a humming"}, FinishReason: ptr("length")}},
				Usage:   &usage{PromptTokens: 2, CompletionTokens: 5, TotalTokens: 7},
			},
		},
		{
			name: "chat with max_completion_tokens and content parts, no model",
			path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"image_url","image_url":{"url":"x"}}]}],"max_tokens":1,"max_completion_tokens":5}`,
			want: chatResponse{
				ID: "chatcmpl-fake-1", Object: "chat.completion", Model: "m",
				Choices: []chatChoice{{Message: &message{Role: "assistant", Content: "lazy power humming a humming"}, FinishReason: ptr("length")}},
				Usage:   &usage{PromptTokens: 2, CompletionTokens: 5, TotalTokens: 7},
			},
		},
		{
			name: "chat with the default length",
			path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
			want: chatResponse{
				ID: "chatcmpl-fake-1", Object: "chat.completion", Model: "m",
				Choices: []chatChoice{{Message: &message{Role: "assistant", Content: strings.Join(Tokens("m", "user: hello", 3), "")}, FinishReason: ptr("stop")}},
				Usage:   &usage{PromptTokens: 2, CompletionTokens: 3, TotalTokens: 5},
			},
		},
		{
			name: "completion",
			path: "/v1/completions",
			body: `{"model":"m","prompt":"once upon a time","max_tokens":4}`,
			want: completionResponse{
				ID: "cmpl-fake-1", Object: "text_completion", Model: "m",
				Choices: []completionChoice{{Text: strings.Join(Tokens("m", "once upon a time", 4), ""), FinishReason: ptr("length")}},
				Usage:   &usage{PromptTokens: 4, CompletionTokens: 4, TotalTokens: 8},
			},
		},
		{
			name: "completion from token ids",
			path: "/v1/completions",
			body: `{"model":"m","prompt":[1,2,3],"max_tokens":2}`,
			want: completionResponse{
				ID: "cmpl-fake-1", Object: "text_completion", Model: "m",
				Choices: []completionChoice{{Text: strings.Join(Tokens("m", "[1,2,3]", 2), ""), FinishReason: ptr("length")}},
				Usage:   &usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, func(c *Config) { c.MaxTokens = 3 })
			for range 2 { // the same request, the same answer
				w := ts.do("POST", tt.path, tt.body)
				if w.Code != http.StatusOK {
					t.Fatalf("%s = %d %s, want 200", tt.path, w.Code, w.Body)
				}
				var diff string
				switch want := tt.want.(type) {
				case chatResponse:
					got := decodeJSON[chatResponse](t, w.Body.Bytes())
					got.Created, got.ID = 0, "chatcmpl-fake-1"
					diff = cmp.Diff(want, got)
				case completionResponse:
					got := decodeJSON[completionResponse](t, w.Body.Bytes())
					got.Created, got.ID = 0, "cmpl-fake-1"
					diff = cmp.Diff(want, got)
				}
				if diff != "" {
					t.Errorf("%s (-want +got):\n%s", tt.path, diff)
				}
			}
		})
	}
}

// sseEvents splits an SSE body into its data payloads, failing on anything
// that is not `data: ...` followed by a blank line.
func sseEvents(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("SSE body does not end with a blank line: %q", body)
	}
	var data []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(d, "\n") {
			t.Fatalf("SSE event %q is not one data line", ev)
		}
		data = append(data, d)
	}
	return data
}

func TestStreamChat(t *testing.T) {
	ts := newTestServer(t, nil)
	w := ts.do("POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200", w.Code)
	}
	if got := w.Header().Get("Content-Type"); got != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", got)
	}
	events := sseEvents(t, w.Body.String())
	if got := events[len(events)-1]; got != "[DONE]" {
		t.Fatalf("last event %q, want [DONE]", got)
	}
	var got []chatResponse
	for _, e := range events[:len(events)-1] {
		c := decodeJSON[chatResponse](t, []byte(e))
		if c.ID != "chatcmpl-fake-1" || c.Object != "chat.completion.chunk" || c.Model != "m" {
			t.Errorf("chunk %s: want id chatcmpl-fake-1, object chat.completion.chunk, model m", e)
		}
		c.ID, c.Object, c.Model, c.Created = "", "", "", 0
		got = append(got, c)
	}
	str := func(s string) *string { return &s }
	toks := Tokens("m", "user: hello", 3)
	want := []chatResponse{
		{Choices: []chatChoice{{Delta: &delta{Role: "assistant", Content: str("")}}}},
		{Choices: []chatChoice{{Delta: &delta{Content: &toks[0]}}}},
		{Choices: []chatChoice{{Delta: &delta{Content: &toks[1]}}}},
		{Choices: []chatChoice{{Delta: &delta{Content: &toks[2]}}}},
		{Choices: []chatChoice{{Delta: &delta{}, FinishReason: str("length")}}},
		{Choices: []chatChoice{}, Usage: &usage{PromptTokens: 2, CompletionTokens: 3, TotalTokens: 5}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	// The wire shape of a content chunk, as OpenAI clients parse it.
	if !strings.Contains(events[1], `"choices":[{"index":0,"delta":{"content":"lazy"},"logprobs":null,"finish_reason":null}]`) {
		t.Errorf("content chunk %s is not in OpenAI's shape", events[1])
	}
}

func TestStreamCompletion(t *testing.T) {
	ts := newTestServer(t, nil)
	w := ts.do("POST", "/v1/completions", `{"prompt":"hi","max_tokens":2,"stream":true}`)
	events := sseEvents(t, w.Body.String())
	var text []string
	var finish []string
	for _, e := range events[:len(events)-1] {
		c := decodeJSON[completionResponse](t, []byte(e))
		if c.Object != "text_completion" || len(c.Choices) != 1 || c.Usage != nil {
			t.Fatalf("chunk %s: want one choice, object text_completion, no usage", e)
		}
		text = append(text, c.Choices[0].Text)
		if c.Choices[0].FinishReason != nil {
			finish = append(finish, *c.Choices[0].FinishReason)
		}
	}
	toks := Tokens("m", "hi", 2)
	if diff := cmp.Diff([]string{toks[0], toks[1], ""}, text); diff != "" {
		t.Errorf("texts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"length"}, finish); diff != "" {
		t.Errorf("finish reasons (-want +got):\n%s", diff)
	}
	if got := events[len(events)-1]; got != "[DONE]" {
		t.Errorf("last event %q, want [DONE]", got)
	}
}

// timedWriter records when each write reaches it, in the bubble's time.
type timedWriter struct {
	header http.Header
	start  time.Time
	at     []time.Duration
	body   bytes.Buffer
}

func (w *timedWriter) Header() http.Header { return w.header }
func (w *timedWriter) WriteHeader(int)     {}
func (w *timedWriter) Flush()              {}
func (w *timedWriter) Write(b []byte) (int, error) {
	w.at = append(w.at, time.Since(w.start))
	return w.body.Write(b)
}

func TestTokenPacing(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		d := make([]time.Duration, len(n))
		for i, v := range n {
			d[i] = time.Duration(v) * time.Millisecond
		}
		return d
	}
	tests := []struct {
		name string
		tps  float64
		body string
		want []time.Duration // when each write happened
	}{
		{
			name: "stream at 4/s: role now, a token each 250ms, then finish and DONE",
			tps:  4,
			body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"stream":true}`,
			want: ms(0, 250, 500, 750, 750, 750),
		},
		{
			name: "whole at 4/s: one write when the last token is due",
			tps:  4,
			body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":3}`,
			want: ms(750),
		},
		{
			name: "unpaced",
			tps:  0,
			body: `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"stream":true}`,
			want: ms(0, 0, 0, 0, 0, 0),
		},
		{
			name: "default length at 100/s",
			tps:  100,
			body: `{"messages":[{"role":"user","content":"x"}]}`,
			want: ms(160),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ts := newTestServer(t, func(c *Config) { c.TokensPerSecond = tt.tps })
				w := &timedWriter{header: http.Header{}, start: time.Now()}
				ts.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(tt.body)))
				if diff := cmp.Diff(tt.want, w.at); diff != "" {
					t.Errorf("write times (-want +got):\n%s\nbody: %s", diff, w.body.String())
				}
			})
		})
	}
}

func TestStreamClientGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := newTestServer(t, func(c *Config) { c.TokensPerSecond = 1 })
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(1500*time.Millisecond, cancel)
		w := &timedWriter{header: http.Header{}, start: time.Now()}
		r := httptest.NewRequestWithContext(ctx, "POST", "/v1/completions", strings.NewReader(`{"prompt":"x","max_tokens":1000,"stream":true}`))
		ts.Handler().ServeHTTP(w, r)
		if got, want := time.Since(w.start), 1500*time.Millisecond; got != want {
			t.Errorf("handler returned after %s, want %s", got, want)
		}
		if got := len(sseEvents(t, w.body.String())); got != 1 {
			t.Errorf("got %d events before the client left, want 1", got)
		}
		metrics := ts.do("GET", "/metrics", "").Body.String()
		if want := `fake_engine_requests_in_flight{model_name="m"} 0`; !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	})
}

func TestRequestErrors(t *testing.T) {
	tests := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"bad JSON", "POST", "/v1/chat/completions", `{"messages":`, 400, "invalid JSON body"},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"x"}]}`, 404, "The model `other` does not exist."},
		{"model path when served under a name", "POST", "/v1/completions", `{"model":"m","prompt":"x"}`, 404, "does not exist"},
		{"no messages", "POST", "/v1/chat/completions", `{"model":"srv","messages":[]}`, 400, "messages must not be empty"},
		{"bad content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":7}]}`, 400, "message content"},
		{"max_tokens 0", "POST", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "max_tokens must be at least 1"},
		{"too long", "POST", "/v1/completions", `{"prompt":"a b c","max_tokens":98}`, 400, "maximum context length is 100 tokens. However, you requested 101 tokens"},
		{"no prompt", "POST", "/v1/completions", `{"max_tokens":1}`, 400, "missing input"},
		{"many prompts", "POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, "one prompt"},
		{"embedding dims", "POST", "/v1/embeddings", `{"input":"x","dimensions":0}`, 400, "dimensions"},
		{"embedding format", "POST", "/v1/embeddings", `{"input":"x","encoding_format":"int8"}`, 400, "encoding_format"},
		{"embedding input", "POST", "/v1/embeddings", `{"input":{"a":1}}`, 400, "input must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, func(c *Config) { c.MaxModelLen, c.ServedNames = 100, []string{"srv"} })
			w := ts.do(tt.method, tt.path, tt.body)
			if w.Code != tt.code {
				t.Errorf("status %d, want %d (%s)", w.Code, tt.code, w.Body)
			}
			got := decodeJSON[errorResponse](t, w.Body.Bytes())
			if got.Error.Code != tt.code || !strings.Contains(got.Error.Message, tt.msg) {
				t.Errorf("error %+v, want code %d and a message with %q", got.Error, tt.code, tt.msg)
			}
		})
	}
}

func TestRouting(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		method, path string
		code         int
	}{
		{"GET", "/v1/chat/completions", http.StatusMethodNotAllowed},
		{"POST", "/health", http.StatusMethodNotAllowed},
		{"GET", "/nope", http.StatusNotFound},
		{"GET", "/metrics", http.StatusOK},
	}
	for _, tt := range tests {
		if got := ts.do(tt.method, tt.path, "").Code; got != tt.code {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, got, tt.code)
		}
	}
}

func TestEmbeddings(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.EmbeddingDim = 8 })
	type floatResp struct {
		Object string `json:"object"`
		Data   []struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Model string `json:"model"`
		Usage usage  `json:"usage"`
	}
	w := ts.do("POST", "/v1/embeddings", `{"model":"m","input":["hello world","bye"]}`)
	got := decodeJSON[floatResp](t, w.Body.Bytes())
	if got.Object != "list" || got.Model != "m" || len(got.Data) != 2 {
		t.Fatalf("response %s: want a list of 2 for model m", w.Body)
	}
	if diff := cmp.Diff(usage{PromptTokens: 3, TotalTokens: 3}, got.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	for i, d := range got.Data {
		if d.Index != i || d.Object != "embedding" || len(d.Embedding) != 8 {
			t.Errorf("data[%d] = index %d, object %q, %d dims; want %d, embedding, 8", i, d.Index, d.Object, len(d.Embedding), i)
		}
		var sum float64
		for _, f := range d.Embedding {
			sum += float64(f) * float64(f)
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("data[%d] has norm² %g, want 1", i, sum)
		}
	}
	if diff := cmp.Diff(Embedding("m", "hello world", 8), got.Data[0].Embedding); diff != "" {
		t.Errorf("embedding is not deterministic (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float32{0.5243581, -0.31304175, -0.7918671}, Embedding("m", "hi", 3)); diff != "" {
		t.Errorf("Embedding changed (-want +got):\n%s", diff)
	}

	w = ts.do("POST", "/v1/embeddings", `{"input":"hello world","dimensions":3,"encoding_format":"base64"}`)
	b64 := decodeJSON[struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}](t, w.Body.Bytes())
	raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
	if err != nil || len(raw) != 12 {
		t.Fatalf("base64 embedding %q: %v, %d bytes; want 12", b64.Data[0].Embedding, err, len(raw))
	}
	var dec []float32
	for i := 0; i < len(raw); i += 4 {
		dec = append(dec, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
	}
	if diff := cmp.Diff(Embedding("m", "hello world", 3), dec); diff != "" {
		t.Errorf("base64 embedding (-want +got):\n%s", diff)
	}
}

func TestMetricsAndAccessLog(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.do("POST", "/v1/completions", `{"prompt":"a b","max_tokens":3}`)
	ts.do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`)
	ts.do("POST", "/v1/embeddings", `{"input":"a b c d"}`)
	ts.do("GET", "/nope", "")
	metrics := ts.do("GET", "/metrics", "").Body.String()
	for _, want := range []string{
		`fake_engine_generation_tokens_total{model_name="m"} 5`,
		`fake_engine_prompt_tokens_total{model_name="m"} 8`,
		`fake_engine_requests_in_flight{model_name="m"} 0`,
		`fake_engine_ready{model_name="m"} 1`,
		`fake_engine_requests_total{code="200",model_name="m",route="/v1/completions"} 1`,
		`fake_engine_requests_total{code="200",model_name="m",route="/v1/chat/completions"} 1`,
		`fake_engine_requests_total{code="404",model_name="m",route="other"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	want := []string{
		`INFO:     192.0.2.1:1234 - "POST /v1/completions HTTP/1.1" 200 OK`,
		`INFO:     192.0.2.1:1234 - "POST /v1/chat/completions HTTP/1.1" 200 OK`,
		`INFO:     192.0.2.1:1234 - "POST /v1/embeddings HTTP/1.1" 200 OK`,
		`INFO:     192.0.2.1:1234 - "GET /nope HTTP/1.1" 404 Not Found`,
		`INFO:     192.0.2.1:1234 - "GET /metrics HTTP/1.1" 200 OK`,
	}
	if diff := cmp.Diff(want, ts.stdout.lines()); diff != "" {
		t.Errorf("access log (-want +got):\n%s", diff)
	}
}

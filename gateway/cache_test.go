package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/gatewayapi"
)

// The cached prompt tokens come from usage's details, else llama.cpp's
// timings; an answer with neither is unknown, not a miss.
func TestAnswerCache(t *testing.T) {
	for _, tt := range []struct {
		name, answer string
		want         cacheUse
	}{
		{"openai", `{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":64}}}`, cacheUse{100, 64, true}},
		{"openai none cached", `{"usage":{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":0}}}`, cacheUse{100, 0, true}},
		{"llama.cpp timings", `{"usage":{"prompt_tokens":960},"timings":{"cache_n":952,"prompt_n":8,"predicted_n":4}}`, cacheUse{960, 952, true}},
		{"both: usage wins", `{"timings":{"cache_n":1,"prompt_n":9},"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":7}}}`, cacheUse{10, 7, true}},
		{"usage without details", `{"usage":{"prompt_tokens":10,"completion_tokens":2}}`, cacheUse{}},
		{"details null", `{"usage":{"prompt_tokens":10,"prompt_tokens_details":null}}`, cacheUse{}},
		{"cached not a number", `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":"7"}}}`, cacheUse{}},
		{"cached over prompt", `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":70}}}`, cacheUse{}},
		{"timings without prompt_n", `{"timings":{"cache_n":3}}`, cacheUse{}},
		{"no usage", `{"choices":[]}`, cacheUse{}},
		{"not json", `nope`, cacheUse{}},
	} {
		if _, _, got := answerUsage([]byte(tt.answer)); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	// A stream: the usage chunk, or the last chunk's timings.
	for _, tt := range []struct {
		name, stream string
		want         cacheUse
	}{
		{"usage chunk", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"prompt_tokens_details\":{\"cached_tokens\":20}}}\n\ndata: [DONE]\n\n", cacheUse{30, 20, true}},
		{"timings", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[{\"finish_reason\":\"stop\",\"delta\":{}}],\"timings\":{\"cache_n\":5,\"prompt_n\":2}}\n\ndata: [DONE]\n\n", cacheUse{7, 5, true}},
		{"neither", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", cacheUse{}},
	} {
		var s sseUsage
		out := s.rest(s.feed([]byte(tt.stream), nil))
		if s.cache != tt.want || string(out) != tt.stream {
			t.Errorf("%s: %+v, want %+v; passed on %q", tt.name, s.cache, tt.want, out)
		}
	}
}

// Through the gateway, keys off: each replica's answers are counted by
// what they say; those that say nothing are unknown.
func TestCacheCounted(t *testing.T) {
	answers := map[string]string{
		"reports": `{"id":"x","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":60}}}`,
		"silent":  `{"id":"x","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":1}}`,
	}
	var insts []Instance
	for _, name := range []string{"reports", "silent"} {
		body := answers[name]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Accept") == "text/event-stream" {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: %s\n\ndata: [DONE]\n\n", body)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		insts = append(insts, Instance{ID: name, Model: "m", Replica: name, Address: strings.TrimPrefix(srv.URL, "http://"), Weight: 1})
	}
	tg := startGateway(t, Options{}, insts...)
	for range 4 { // least-outstanding: two each
		if a := tg.post(t, "/v1/chat/completions", chat("m")); a.status != 200 || a.header.Get(RouteHeader) != RouteLeastOutstanding {
			t.Fatalf("%d route %q: %s", a.status, a.header.Get(RouteHeader), a.body)
		}
	}
	// A stream, sent to both by excluding one at a time is not possible
	// from outside: send two, least-outstanding takes each in turn.
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, tg.srv.URL+"/v1/chat/completions", strings.NewReader(chat("m")))
		req.Header.Set("Accept", "text/event-stream")
		ended := tg.ends.track(req)
		resp, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ended(t)
	}
	// Embeddings are not completions: not counted.
	tg.post(t, "/v1/embeddings", `{"model":"m","input":"x"}`)
	ep := func(id string) *epCache { return &tg.tbl.Load().byID[id].cache }
	r, s := ep("reports"), ep("silent")
	if r.prompt.Load() != 300 || r.cached.Load() != 180 || r.unknown.Load() != 0 {
		t.Errorf("reports: prompt %d cached %d unknown %d, want 300, 180, 0", r.prompt.Load(), r.cached.Load(), r.unknown.Load())
	}
	if s.prompt.Load() != 0 || s.cached.Load() != 0 || s.unknown.Load() != 3 {
		t.Errorf("silent: prompt %d cached %d unknown %d, want 0, 0, 3", s.prompt.Load(), s.cached.Load(), s.unknown.Load())
	}
	// The demand carries the same counts, per replica.
	_, md := tg.demandOf(t, "m")
	want := []gatewayapi.ReplicaCache{
		{Replica: "reports", Endpoint: insts[0].Address, PromptTokens: 300, CachedTokens: 180},
		{Replica: "silent", Endpoint: insts[1].Address, UnknownAnswers: 3},
	}
	if diff := cmp.Diff(want, md.Cache); diff != "" || md.Routing != RouteLeastOutstanding {
		t.Errorf("demand routing %q, cache (-want +got):\n%s", md.Routing, diff)
	}
	if got := testutil.ToFloat64(tg.m.cachedTokens.WithLabelValues("m", "reports", insts[0].Address)); got != 180 {
		t.Errorf("llmgw_gateway_cached_prompt_tokens_total{replica=reports}: %v, want 180", got)
	}
	if got := testutil.ToFloat64(tg.m.cacheUnknown.WithLabelValues("m", "silent", insts[1].Address)); got != 3 {
		t.Errorf("llmgw_gateway_cache_unknown_answers_total{replica=silent}: %v, want 3", got)
	}
}

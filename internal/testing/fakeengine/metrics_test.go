package fakeengine

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
)

// TestEngineMetricsMoveWithLoad impersonates each engine with one batch
// slot and sends three requests of four tokens each at one token a second:
// one runs while two wait, the KV cache holds the running one's tokens,
// the token counter counts as tokens are generated, and the time to first
// token includes the wait. The scrape is read with the engine package's
// names for that engine, which this package spells independently.
func TestEngineMetricsMoveWithLoad(t *testing.T) {
	for _, e := range Engines {
		t.Run(e, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ts := newTestServer(t, func(c *Config) {
					c.Engine, c.MetricsEnabled, c.MaxRunning, c.KVCacheTokens, c.TokensPerSecond = e, true, 1, 100, 1
				})
				names, ok := engine.MetricsOf(e)
				if !ok {
					t.Fatalf("engine package does not know %s", e)
				}
				scrape := func() enginemetrics.Sample {
					t.Helper()
					w := ts.do("GET", "/metrics", "")
					if w.Code != http.StatusOK {
						t.Fatalf("/metrics: %d %s", w.Code, w.Body)
					}
					s, err := enginemetrics.Parse(w.Body, names, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				// Before any request SGLang has no token or TTFT series (its
				// multiprocess registry lists a labelled family once a
				// process has written to it); the others start at zero.
				idle := scrape()
				var wantMissing []string
				if e == EngineSGLang {
					wantMissing = []string{"ttft", "tokens_per_second"}
				}
				if diff := cmp.Diff(wantMissing, idle.Missing); diff != "" {
					t.Errorf("idle: missing (-want +got):\n%s", diff)
				}
				var wg sync.WaitGroup
				for i := range 3 {
					stream := i != 1 // SGLang splits by is_streaming; both must add up
					body := `{"prompt":"a b c","max_tokens":4,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
					wg.Go(func() {
						w := httptest.NewRecorder()
						ts.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(body)))
						if w.Code != http.StatusOK {
							t.Errorf("completion: %d %s", w.Code, w.Body)
						}
					})
				}
				time.Sleep(1500 * time.Millisecond)
				synctest.Wait()
				mid := scrape()
				if len(mid.Missing) > 0 {
					t.Errorf("busy: missing %v", mid.Missing)
				}
				if mid.Running != enginemetrics.Known(1) || mid.Waiting != enginemetrics.Known(2) {
					t.Errorf("at 1.5s running %v waiting %v, want 1 and 2", mid.Running, mid.Waiting)
				}
				// 3 prompt tokens and 1 generated of 100; TGI reports what the
				// batch may grow to: 3 + 4.
				wantKV := 0.04
				if e == EngineTGI {
					wantKV = 0.07
				}
				if e == EngineLlamaCpp {
					// llama-server 0.4.0 has no KV-cache gauge: absent, not 0.
					if mid.KVCache.Known || !slices.Contains(mid.Absent, enginemetrics.FieldKVCacheUsage) {
						t.Errorf("llamacpp KV %v (absent %v), want absent", mid.KVCache, mid.Absent)
					}
				} else if mid.KVCache != enginemetrics.Known(wantKV) {
					t.Errorf("at 1.5s KV %v, want %v", mid.KVCache, wantKV)
				}
				wg.Wait()
				end := scrape()
				if end.Running != enginemetrics.Known(0) || end.Waiting != enginemetrics.Known(0) || end.KVCache != enginemetrics.Known(0) && e != EngineLlamaCpp {
					t.Errorf("idle again: running %v waiting %v KV %v", end.Running, end.Waiting, end.KVCache)
				}
				// 12 tokens in all, one of them by 1.5s, the last at 12s; TGI
				// counts a request's tokens when it finishes (none by 1.5s).
				wantTokens, wantRate := 12.0, 11/10.5
				if e == EngineTGI {
					wantRate = 12 / 10.5
				}
				r := enginemetrics.Between(mid, end)
				if end.Tokens != enginemetrics.Known(wantTokens) || !near(r.TokensPerSecond, wantRate) {
					t.Errorf("tokens %v, %v/s over %s; want %v, %v/s", end.Tokens, r.TokensPerSecond, end.At.Sub(mid.At), wantTokens, wantRate)
				}
				if names.TimeToFirstToken.Name == "" {
					return
				}
				// First tokens 1s, 5s and 9s after arrival: the first by
				// 1.5s, the other two after.
				if end.TTFT == nil || end.TTFT.Count != 3 || end.TTFT.Sum != 15 {
					t.Errorf("ttft histogram %+v, want 3 observations summing to 15s", end.TTFT)
				}
				if r.TTFT.Count != enginemetrics.Known(2) || r.TTFT.Mean != enginemetrics.Known(7) {
					t.Errorf("ttft %+v, want 2 requests with mean 7s", r.TTFT)
				}
				if p50, _ := r.TTFT.P50.Get(); p50 <= 4 || p50 > 6 {
					t.Errorf("ttft p50 %v, want in (4s, 6s] (SGLang's and vLLM's buckets)", r.TTFT.P50)
				}
			})
		})
	}
}

func near(v enginemetrics.Value, want float64) bool {
	return v.Known && math.Abs(v.V-want) < 1e-9
}

// TestMetricsSwitches: SGLang serves /metrics only with --enable-metrics
// and llama.cpp only with --metrics; vLLM and TGI always.
func TestMetricsSwitches(t *testing.T) {
	cases := []struct {
		engine  string
		enabled bool
		code    int
		body    string
	}{
		{EngineVLLM, false, 200, "vllm:num_requests_waiting"},
		{EngineTGI, false, 200, "tgi_queue_size"},
		{EngineSGLang, false, 404, `{"detail":"Not Found"}`},
		{EngineSGLang, true, 200, "sglang:num_queue_reqs"},
		{EngineLlamaCpp, false, 501, "Start it with `--metrics`"},
		{EngineLlamaCpp, true, 200, "llamacpp:requests_deferred"},
	}
	for _, c := range cases {
		ts := newTestServer(t, func(cfg *Config) { cfg.Engine, cfg.MetricsEnabled = c.engine, c.enabled })
		w := ts.do("GET", "/metrics", "")
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s enabled=%v: %d %s, want %d with %q", c.engine, c.enabled, w.Code, w.Body, c.code, c.body)
		}
	}
}

// TestEngineInferredFromCommandLine: run through the driver's recipes,
// fake-engine serves the metrics of the engine whose command line it got.
func TestEngineInferredFromCommandLine(t *testing.T) {
	for _, e := range []string{engine.VLLM, engine.SGLang, engine.TGI, engine.LlamaCpp} {
		cmd, err := engine.Build(engine.Input{Engine: e, Executable: "/bin/fake-engine", Model: "m", Host: "127.0.0.1", Port: 8000, Layout: engine.Layout{Tensor: 1}})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Parse(cmd.Args, env())
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if diff := cmp.Diff([2]any{e, true}, [2]any{cfg.Engine, cfg.MetricsEnabled || (e != engine.SGLang && e != engine.LlamaCpp)}); diff != "" {
			t.Errorf("%s: %v: (-want +got):\n%s", e, cmd.Args, diff)
		}
	}
}

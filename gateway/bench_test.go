//go:build unix

package gateway

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/gatewayapi"
)

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkProxy is one small chat completion through the gateway to an
// in-process fake-engine, sequentially, against the same request sent
// straight to the replica: the difference is what the gateway costs in
// CPU and allocations. cpu-ns/op is the process's CPU time (client,
// gateway and fake-engine together) per request. gateway-keys is the
// gateway with an API key and
// every limit on (none reached): what access control costs. docs/perf.md has the latency under load
// (bench/gwload).
func BenchmarkProxy(b *testing.B) {
	r := startReplica(b, "m", "a", nil)
	tg := startGateway(b, Options{}, r.instance())
	ks := benchKeys(b)
	keyed := startGateway(b, Options{Keys: StaticKeys{Set: ks}}, r.instance())
	keyed.UpdateKeys(ks, nil)
	client := tg.client
	body := chat("m")
	for _, target := range []struct{ name, url string }{{"direct", r.srv.URL}, {"gateway", tg.srv.URL}, {"gateway-keys", keyed.srv.URL}} {
		b.Run(target.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				req, err := http.NewRequest(http.MethodPost, target.url+"/v1/chat/completions", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer sk-bench")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkHoldWake is a request held for a model at zero until its
// replica becomes ready: wake-ns/op is the time from the discovery update
// that makes the replica ready (Gateway.Update) to the client having the
// whole answer — what a held request pays once there is a replica, against
// BenchmarkProxy/gateway's whole request to a replica that was there. Each
// iteration holds one request (the loop is bounded by -benchtime).
func BenchmarkHoldWake(b *testing.B) {
	r := startReplica(b, "m", "a", nil)
	tg := startGateway(b, Options{Hold: HoldConfig{Timeout: time.Minute}})
	tg.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "m"}), nil)
	ready := Snapshot{Instances: []Instance{r.instance()}}
	body := chat("m")
	var wake, update time.Duration
	for b.Loop() {
		tg.Update(Snapshot{})
		ch := tg.postAsync(b.Context(), body)
		deadline := time.Now().Add(waitFor)
		for tg.queued("m") != 1 {
			if time.Now().After(deadline) {
				b.Fatalf("the request was not held within %s", waitFor)
			}
			runtime.Gosched()
		}
		t0 := time.Now()
		tg.Update(ready)
		update += time.Since(t0)
		a := <-ch
		wake += time.Since(t0)
		if a.status != 200 {
			b.Fatalf("held request: %d %s", a.status, a.body)
		}
	}
	b.ReportMetric(float64(wake.Nanoseconds())/float64(b.N), "wake-ns/op")
	b.ReportMetric(float64(update.Nanoseconds())/float64(b.N), "update-ns/op")
}

// BenchmarkModelAccounting is what the demand adds to every proxied
// request: counting its arrival (counter, outstanding, the window's slot)
// and its TTFT sample. parallel is the same from every CPU on one model,
// the contended case (one lock per model).
func BenchmarkModelAccounting(b *testing.B) {
	ms := newModelState("m", DefaultDemandWindow)
	now := time.Now()
	one := func() {
		ms.arrive(now)
		ms.win.ttft(now, 420*time.Millisecond)
		ms.outstanding.Add(-1)
	}
	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			one()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	})
}

// BenchmarkKeyPath is the work API keys add to one request, alone: the
// key's lookup (header, hash, map), its allowlist, the body's fields, the
// reservation and its settlement, and the usage read from the answer
// (fake-engine's 265-byte answer to chat("m")). The gateway-keys case of
// BenchmarkProxy is the same in a whole request.
func BenchmarkKeyPath(b *testing.B) {
	r := startReplica(b, "m", "a", nil)
	ks := benchKeys(b)
	g := startGateway(b, Options{Keys: StaticKeys{Set: ks}}, r.instance())
	g.UpdateKeys(ks, nil)
	resp, err := http.Post(r.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat("m")))
	if err != nil {
		b.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := []byte(chat("m"))
	req, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	req.Header.Set("Authorization", "Bearer sk-bench")
	b.ReportAllocs()
	for b.Loop() {
		k := g.authenticate(nil, req)
		if k == nil || !k.Allows("m") {
			b.Fatal("no key")
		}
		f := readRequestFields(body)
		taken, reason, _ := k.lim.reserve(g.now(), int64(len(body))/4+f.maxTokens)
		if reason != "" {
			b.Fatal(reason)
		}
		u, ok := responseUsage(answer)
		if !ok {
			b.Fatalf("no usage in %s", answer)
		}
		k.lim.settle(g.now(), taken, u.total(), true, true)
		g.auth.m.requests.WithLabelValues(k.Name).Inc()
		g.auth.m.tokens.WithLabelValues(k.Name, "prompt").Add(float64(u.PromptTokens))
		g.auth.m.tokens.WithLabelValues(k.Name, "completion").Add(float64(u.CompletionTokens))
	}
}

// benchKeys is one key, sk-bench, for model m, with every limit set and
// none reached.
func benchKeys(b *testing.B) *KeySet {
	b.Helper()
	ks, err := ParseKeys("bench-keys.hcl", []byte(`key "bench" {
  hash                = "`+HashKey("sk-bench")+`"
  models              = ["m"]
  requests_per_minute = 100000000
  tokens_per_minute   = 100000000000
  max_concurrency     = 1000
}
`))
	if err != nil {
		b.Fatal(err)
	}
	return ks
}

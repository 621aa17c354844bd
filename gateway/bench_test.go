//go:build unix

package gateway

import (
	"context"
	"io"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
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
// gateway and fake-engine together) per request. gateway-nethttp is the
// gateway with net/http's Transport in place of its own (what
// upstreamTransport saves). docs/perf.md has the latency under load
// (gwload).
func BenchmarkProxy(b *testing.B) {
	r := startReplica(b, "m", "a", nil)
	tg := startGateway(b, Options{}, r.instance())
	std := startGateway(b, Options{Transport: newStdTransport(DefaultDialTimeout, DefaultHeaderTimeout)}, r.instance())
	client := tg.client
	body := chat("m")
	for _, target := range []struct{ name, url string }{{"direct", r.srv.URL}, {"gateway", tg.srv.URL}, {"gateway-nethttp", std.srv.URL}} {
		b.Run(target.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				resp, err := client.Post(target.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
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
	tg.UpdateModels(zeroList(ListedModel{Name: "m"}), nil)
	ready := Snapshot{Instances: []Instance{r.instance()}}
	body := chat("m")
	var wake, update time.Duration
	for b.Loop() {
		tg.Update(Snapshot{})
		ch := tg.postAsync(context.Background(), body)
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

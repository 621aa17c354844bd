//go:build unix

package gateway

import (
	"io"
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

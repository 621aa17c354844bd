package gateway

import (
	"io"
	"strings"
	"testing"
)

// BenchmarkProxy is one small chat completion through the gateway to an
// in-process fake-engine, sequentially, against the same request sent
// straight to the replica: the difference is what the gateway costs in
// CPU and allocations. docs/perf.md has the latency under load (gwload).
func BenchmarkProxy(b *testing.B) {
	r := startReplica(b, "m", "a", nil)
	tg := startGateway(b, Options{}, r.instance())
	client := tg.client
	body := chat("m")
	for _, target := range []struct{ name, url string }{{"direct", r.srv.URL}, {"gateway", tg.srv.URL}} {
		b.Run(target.name, func(b *testing.B) {
			b.ReportAllocs()
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
		})
	}
}

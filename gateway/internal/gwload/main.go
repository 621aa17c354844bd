// Command gwload measures the latency the gateway adds: it starts a
// fake-engine replica and a gateway in front of it, in this process on
// loopback, then sends the same small chat completion at fixed rates
// (open loop), straight to the replica and through the gateway in
// alternating slices (direct, gateway, gateway, direct, ...), so both see
// the same machine, and prints the latency percentiles of each side by
// side. It is bounded: each target gets -duration (at most 30s) of load per
// rate, at most rate×duration requests, at most -inflight outstanding.
//
//	go run ./gateway/internal/gwload -rates 1000,5000 -duration 5s
//
// Results are in docs/perf.md ("Gateway").
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/internal/fakeengine"
)

const body = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":1}`

func main() {
	rates := flag.String("rates", "1000,5000", "requests per second, comma-separated")
	dur := flag.Duration("duration", 5*time.Second, "length of each measured phase (at most 30s)")
	warm := flag.Duration("warmup", time.Second, "unmeasured load on each target before each rate (at most 5s)")
	slice := flag.Duration("slice", 250*time.Millisecond, "length of one slice of load on one target")
	inflight := flag.Int("inflight", 256, "most requests outstanding at once")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gwload:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*rates, min(*dur, 30*time.Second), min(*warm, 5*time.Second), max(*slice, 10*time.Millisecond), *inflight); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "gwload:", err)
		os.Exit(1)
	}
}

func run(rateList string, dur, warm, slice time.Duration, inflight int) error {
	var rates []int
	for f := range strings.SplitSeq(rateList, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 1 || r > 50000 {
			return fmt.Errorf("-rates: %q: want 1 to 50000", f)
		}
		rates = append(rates, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cfg := fakeengine.Defaults()
	cfg.Model, cfg.TokensPerSecond = "m", 0
	fe := fakeengine.NewServer(cfg, io.Discard, io.Discard)
	fe.Load(ctx)
	engineAddr, stopEngine, err := serve(fe.Handler())
	if err != nil {
		return err
	}
	defer stopEngine()

	g := gateway.New(gateway.Options{
		Registerer: prometheus.NewRegistry(),
		Logger:     slog.New(slog.DiscardHandler),
		Source: gateway.StaticSource{Instances: []gateway.Instance{
			{ID: "r0", Model: "m", Replica: "r0", Address: engineAddr, Weight: 1},
		}},
	})
	go func() { _ = g.Run(ctx) }()
	gwAddr, stopGateway, err := serve(g.Handler())
	if err != nil {
		return err
	}
	defer stopGateway()
	for !g.Synced() {
		time.Sleep(time.Millisecond)
	}

	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: inflight, MaxIdleConnsPerHost: inflight, DisableCompression: true,
	}}
	fmt.Printf("gwload: %s %s/%s, GOMAXPROCS %d, %d CPUs; fake-engine, gateway and load generator in one process\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Printf("per rate and target: %s of load in %s slices alternating targets, after %s warm-up each; open loop, at most %d in flight;\nlatency = request sent to response read; late = sent over 1 ms after its due time\n\n", dur, slice, warm, inflight)
	fmt.Printf("%-6s %-8s %8s %7s %6s %9s %9s %9s %9s %9s\n", "rate", "target", "sent", "errors", "late", "p50", "p90", "p99", "p99.9", "max")
	for _, rate := range rates {
		urls := [2]string{"http://" + engineAddr + "/v1/chat/completions", "http://" + gwAddr + "/v1/chat/completions"}
		for _, u := range urls {
			load(client, u, rate, warm, inflight) // warm-up, discarded
		}
		var res [2]result
		nslices := max(int(dur/slice), 1)
		for k := range 2 * nslices {
			i := k % 2
			if (k/2)%2 == 1 {
				i = 1 - i // ABBA: neither target always goes first
			}
			res[i].add(load(client, urls[i], rate, slice, inflight))
		}
		for i, name := range []string{"direct", "gateway"} {
			r := res[i]
			r.sort()
			res[i] = r
			fmt.Printf("%-6d %-8s %8d %7d %6d %9s %9s %9s %9s %9s\n", rate, name, r.sent, r.errors, r.late,
				us(r.pct(50)), us(r.pct(90)), us(r.pct(99)), us(r.pct(99.9)), us(r.pct(100)))
		}
		fmt.Printf("%-6d %-8s %8s %7s %6s %9s %9s %9s\n\n", rate, "added", "", "", "",
			us(res[1].pct(50)-res[0].pct(50)), us(res[1].pct(90)-res[0].pct(90)), us(res[1].pct(99)-res[0].pct(99)))
	}
	return nil
}

func us(d time.Duration) string { return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond)) }

// serve serves h on a loopback port.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

type result struct {
	sent, errors, late int
	lat                []time.Duration
}

func (r *result) add(o result) {
	r.sent += o.sent
	r.errors += o.errors
	r.late += o.late
	r.lat = append(r.lat, o.lat...)
}

func (r *result) sort() { slices.Sort(r.lat) }

func (r result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(float64(len(r.lat)-1) * p / 100)
	return r.lat[i]
}

// load sends rate requests a second to url for dur, open loop: request i
// is due at i/rate; one that cannot start on time (all slots busy, or the
// sender behind) is sent as soon as it can and counted late.
func load(client *http.Client, url string, rate int, dur time.Duration, inflight int) result {
	n := int(int64(rate) * int64(dur) / int64(time.Second))
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	slots := make(chan struct{}, inflight)
	var late atomic.Int64
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else if d < -time.Millisecond {
			late.Add(1)
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			t0 := time.Now()
			resp, err := client.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				return
			}
			lat[i], ok[i] = time.Since(t0), true
		})
	}
	wg.Wait()
	r := result{sent: n, late: int(late.Load())}
	for i := range n {
		if ok[i] {
			r.lat = append(r.lat, lat[i])
		} else {
			r.errors++
		}
	}
	return r
}

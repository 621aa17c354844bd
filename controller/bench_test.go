package controller

// Benchmarks quoted in docs/perf.md ("Controller"):
//
//	go test ./controller -run '^$' -bench Adoption -benchtime=3x -benchmem
//	go test ./controller -run '^$' -bench NoopPass -benchtime=100x -benchmem

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

// bigEnv seeds a fake with replicas two-shard replicas (or single-shard
// ones when shards is 1), each a serving job pinned to its nodes, on
// nodes of 8 H200s: 10 nodes a rack, a PDU per pair of nodes, budgets on
// every PDU and rack with room to spare. Every slot of the catalog has its
// job, so a pass has nothing to do.
func bigEnv(b *testing.B, replicas, shards int) *env {
	b.Helper()
	const gpusPerNode, models = 8, 10
	nodes := replicas * shards / gpusPerNode
	defs, fac := rackedFleet(nodes, gpusPerNode)
	var cat strings.Builder
	for m := range models {
		fmt.Fprintf(&cat, `
model "m%d" {
  source   = "org/m%d"
  replicas = %d
  profile "p" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 1
    nodes       = %d
    keep_within = "rack"
    watts       = 500
  }
}
`, m, m, replicas/models, shards)
	}
	e := newEnv(b, defs, cat.String(), fac, nomadfake.WithAutoRun(true))
	start := time.Now()
	groups := nodes / shards // node groups a replica can sit on
	for k := range replicas {
		g := k % groups
		var on []string
		for s := range shards {
			on = append(on, defs[g*shards+s].Name)
		}
		e.Seed(e.RenderJob(fmt.Sprintf("m%d", k%models), "p", k/models, 0, on...))
	}
	b.Logf("seeded %d jobs, %d allocations on %d nodes in %s", replicas, len(e.Fake.Allocations("")), nodes, time.Since(start).Round(time.Millisecond))
	return e
}

// BenchmarkAdoption measures a controller start over 5,000 jobs with
// 10,000 allocations: from New to its first pass done (which must do
// nothing), with the time until every Nomad list, and the checks of the
// serving allocations, were loaded (synced).
func BenchmarkAdoption(b *testing.B) {
	e := bigEnv(b, 5000, 2)
	e.HoldLock()
	ctx := b.Context()
	var synced, total time.Duration
	var lists [4]time.Duration // nodes, allocations, jobs, checks: until each was loaded
	n := 0
	for b.Loop() {
		start := time.Now()
		c := e.start(fmt.Sprintf("ctl-%d", n))
		n++
		tick := time.NewTicker(time.Millisecond)
		var seen [4]bool
		for {
			snap := c.obs.snapshot()
			now := [4]bool{snap.nodesSynced, snap.allocSynced, snap.jobsSynced, snap.checksSynced}
			for i := range now {
				if now[i] && !seen[i] {
					seen[i] = true
					lists[i] += time.Since(start)
				}
			}
			if now == [4]bool{true, true, true, true} {
				break
			}
			<-tick.C
		}
		tick.Stop()
		synced += time.Since(start)
		if err := c.Pass(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		if w := c.Tap.Writes(); w != 0 {
			b.Fatalf("first pass sent %d job writes, want 0", w)
		}
		b.StopTimer()
		c.Stop()
		b.StartTimer()
	}
	for i, what := range []string{"nodes", "allocs", "jobs", "checks"} {
		b.ReportMetric(float64(lists[i].Milliseconds())/float64(n), "ms-"+what)
	}
	b.ReportMetric(float64(synced.Milliseconds())/float64(n), "ms-synced")
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms-first-pass-done")
}

// BenchmarkNoopPass measures a reconcile pass over 1,000 serving replicas
// with nothing to do.
func BenchmarkNoopPass(b *testing.B) {
	e := bigEnv(b, 1000, 1)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	if w := c.Tap.Writes(); w != 0 {
		b.Fatalf("first pass sent %d job writes, want 0", w)
	}
	ctx := b.Context()
	for b.Loop() {
		if err := c.Pass(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if w := c.Tap.Writes(); w != 0 {
		b.Fatalf("passes sent %d job writes, want 0", w)
	}
}

package controller

// The scale harness of docs/perf.md ("Controller at fleet scale",
// issue 38). Run by hand, one size at a time or all three (it takes
// minutes: each size holds a 30 s steady-state window):
//
//	go test ./controller -run '^$' -bench Scale -benchtime=1x -timeout 60m
//	LLMGW_SCALE_NODES=10000 LLMGW_SCALE_STEADY=160s go test ./controller -run '^$' -bench Scale -benchtime=1x -timeout 60m
//
// With LLMGW_SCALE_PROMETHEUS=1 and LLMGW_PROMETHEUS_BIN (a Prometheus
// server binary: powersource_real_test.go) the controller reads the
// GPUs' draw from a real Prometheus (power_source) scraping a
// dcgm-exporter's series of every GPU every 5 s, and the steady state is
// measured once the first power round (every node's client stats) is done.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

const (
	scaleReplicas = 2500
	scaleModels   = 10
	scaleGPUs     = 8 // per node
)

// scaleSteady is the steady-state window: one power round of the shipped
// power_interval (30 s) falls in it. LLMGW_SCALE_STEADY (a duration)
// makes it longer: the serving allocations' checks are first re-read
// 50 to 150 s after adoption with 2,500 of them (health.go).
func scaleSteady(b *testing.B) time.Duration {
	v := os.Getenv("LLMGW_SCALE_STEADY")
	if v == "" {
		return 30 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("LLMGW_SCALE_STEADY: %q is not a positive duration", v)
	}
	return d
}

func scaleCatalog(models, replicasEach int) string {
	var cat strings.Builder
	for m := range models {
		fmt.Fprintf(&cat, `
model "m%d" {
  source   = "org/m%d"
  replicas = %d
  profile "p" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 2
    keep_within = "rack"
    watts       = 900
  }
}
`, m, m, replicasEach)
	}
	return cat.String()
}

// rackedFleet is nodes nodes of gpus H200s each, 10 a rack and a PDU per
// pair, and a facility with budgets on every PDU (20 kW) and rack
// (100 kW): room for every GPU at full draw.
func rackedFleet(nodes, gpus int) ([]ctlharness.Node, string) {
	var defs []ctlharness.Node
	var fac strings.Builder
	fac.WriteString("headroom = 0.05\n")
	for i := range nodes {
		pair := i / 2
		d := ctlharness.Node{Name: fmt.Sprintf("n%05d", i), Rack: fmt.Sprintf("r%04d", pair/5), PDU: fmt.Sprintf("p%05d", pair), GPUs: gpus}
		defs = append(defs, d)
		if i%2 == 0 {
			fmt.Fprintf(&fac, "budget %q { watts = 20000 }\n", "pdu="+d.PDU)
		}
		if i%10 == 0 {
			fmt.Fprintf(&fac, "budget %q { watts = 100000 }\n", "rack="+d.Rack)
		}
	}
	return defs, fac.String()
}

// fleetEnv is a fleet of nodes nodes of 8 H200s (10 a rack, a PDU per
// pair, budgets on every PDU and rack with room), with 2,500 serving
// two-GPU replicas of ten models seeded on it, replica k on node k mod
// nodes. The controller config is the shipped default (check interval
// 10 s, power_interval 30 s) but for the harness's reconcile interval.
func fleetEnv(b *testing.B, nodes int) *env {
	b.Helper()
	defs, fac := rackedFleet(nodes, scaleGPUs)
	start := time.Now()
	e := &env{ctlharness.New(b, ctlharness.Spec{
		Nodes: defs, Catalog: scaleCatalog(scaleModels, scaleReplicas/scaleModels), Facility: fac,
		RealTime: true, LogLevel: slog.LevelWarn, // warnings and errors only: a fleet's info lines would drown the output
		Fake: []nomadfake.Option{nomadfake.WithAutoRun(true), nomadfake.WithoutRequestLog()},
	})}
	e.Config.Nomad.EventStream = true // what this harness measures (nomad.event_stream)
	for k := range scaleReplicas {
		e.Seed(e.RenderJob(fmt.Sprintf("m%d", k%scaleModels), "p", k/scaleModels, 0, defs[k%nodes].Name))
	}
	b.Logf("%d nodes: seeded %d jobs, %d allocations in %s", nodes, scaleReplicas, len(e.Fake.Allocations("")), time.Since(start).Round(time.Millisecond))
	return e
}

// scalePowerSource is the controller's power_source with
// LLMGW_SCALE_PROMETHEUS=1: a real Prometheus (LLMGW_PROMETHEUS_BIN)
// scraping, every 5 s, a dcgm-exporter's series of every GPU of the fleet
// at 350 W, once it holds them all; nil without it.
func scalePowerSource(b *testing.B, nodes int) *config.PowerSource {
	if os.Getenv("LLMGW_SCALE_PROMETHEUS") != "1" {
		return nil
	}
	bin := os.Getenv("LLMGW_PROMETHEUS_BIN")
	if bin == "" {
		b.Fatal("LLMGW_SCALE_PROMETHEUS=1 needs LLMGW_PROMETHEUS_BIN, a Prometheus server binary")
	}
	exp := newDCGMExporter(b)
	for i := range nodes {
		for g := range scaleGPUs {
			exp.set(fmt.Sprintf("n%05d", i), g, 350)
		}
	}
	url, _ := realPrometheus(b, bin, strings.TrimPrefix(exp.srv.URL, "http://"), 5*time.Second)
	pp, err := newPromPower(config.PowerPrometheus{Address: url, Selector: config.DefaultPowerSelector, UUIDLabel: config.DefaultPowerUUIDLabel,
		MaxAge: config.DefaultPowerMaxAge, ClientStatsInterval: config.DefaultClientStatsInterval})
	if err != nil {
		b.Fatal(err)
	}
	wait.For(b, "Prometheus holding every GPU's series", func() (bool, string) {
		d, err := pp.draws(b.Context())
		if err != nil {
			return false, err.Error()
		}
		return len(d) == nodes*scaleGPUs, fmt.Sprintf("%d series", len(d))
	}, wait.Within(2*time.Minute), wait.Every(time.Second))
	return &config.PowerSource{Prometheus: &config.PowerPrometheus{Address: url, Selector: config.DefaultPowerSelector, UUIDLabel: config.DefaultPowerUUIDLabel,
		MaxAge: config.DefaultPowerMaxAge, ClientStatsInterval: config.DefaultClientStatsInterval}}
}

func scaleSizes(b *testing.B) []int {
	v := os.Getenv("LLMGW_SCALE_NODES")
	if v == "" {
		return []int{1000, 5000, 10000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n*scaleGPUs < 2*scaleReplicas {
			b.Fatalf("LLMGW_SCALE_NODES: %q is not a node count of at least %d", f, 2*scaleReplicas/scaleGPUs)
		}
		out = append(out, n)
	}
	return out
}

// passUntil runs passes (waiting out ErrBehind and ErrNotSynced) until
// done reports true, and returns how many it ran.
func passUntil(b *testing.B, c *ctl, done func() bool) (passes int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for ; !done(); passes++ {
		if time.Now().After(deadline) {
			b.Fatal("no progress in 5 minutes")
		}
		if err := c.Pass(b.Context()); err != nil && !errors.Is(err, ErrBehind) && !errors.Is(err, ErrNotSynced) {
			b.Fatal(err)
		}
		if !done() {
			time.Sleep(time.Millisecond)
		}
	}
	return passes
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func rssMiB() (rss, hwm float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb, _ := strconv.ParseFloat(f[1], 64)
			if f[0] == "VmRSS:" {
				rss = kb / 1024
			} else {
				hwm = kb / 1024
			}
		}
	}
	return rss, hwm
}

// BenchmarkScale runs the controller's real code (the event stream, the
// health reader, the power poll at the shipped 30 s, reconcile passes,
// job writes) against nomadfake at each fleet size, in one process, and
// reports: adoption (New to first pass done), reconcile pass p50/p99 in a
// steady state, Nomad API requests and bytes per second by endpoint in
// that steady state, catalog change (a new model of 250 replicas) to
// every new job registered, node down to its replicas' replacements
// registered, the plan of every slot, and the process's RSS (the fake's
// and the harness's memory included: an upper bound of the
// controller's).
func BenchmarkScale(b *testing.B) {
	for _, nodes := range scaleSizes(b) {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for b.Loop() {
				scaleRun(b, nodes)
			}
		})
	}
}

func scaleRun(b *testing.B, nodes int) {
	// The report goes to stdout whole (a benchmark's log is cut at a few
	// lines).
	logf := func(format string, args ...any) {
		fmt.Printf("nodes=%d: "+format+"\n", append([]any{nodes}, args...)...)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	logf("loadavg at start: %s", strings.TrimSpace(string(load)))
	e := fleetEnv(b, nodes)
	source := scalePowerSource(b, nodes)
	e.HoldLock()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	rssBase, _ := rssMiB()

	// Adoption: New, every list and check read, the first pass done.
	start := time.Now()
	c := e.start("ctl", func(o *Options) {
		o.PowerInterval = config.DefaultPowerInterval
		o.Config.PowerSource = source
	})
	var lists [4]time.Duration // nodes, allocations, jobs, checks
	var seen [4]bool
	for {
		snap := c.obs.snapshot()
		now := [4]bool{snap.nodesSynced, snap.allocSynced, snap.jobsSynced, snap.checksSynced}
		for i := range now {
			if now[i] && !seen[i] {
				seen[i], lists[i] = true, time.Since(start)
			}
		}
		if now == [4]bool{true, true, true, true} {
			break
		}
		time.Sleep(time.Millisecond)
	}
	synced := time.Since(start)
	if err := c.Pass(b.Context()); err != nil {
		b.Fatal(err)
	}
	adoption := time.Since(start)
	if w := c.Tap.Writes(); w != 0 {
		b.Errorf("first pass sent %d job writes, want 0", w)
	}
	logf("adoption: synced %s (nodes %s, allocations %s, jobs %s, checks %s), first pass done %s",
		synced.Round(time.Millisecond), lists[0].Round(time.Millisecond), lists[1].Round(time.Millisecond),
		lists[2].Round(time.Millisecond), lists[3].Round(time.Millisecond), adoption.Round(time.Millisecond))
	adoptTraffic := e.Fake.Traffic()
	if source != nil {
		wait.For(b, "the first power round: every node's client stats", func() (bool, string) {
			n := len(c.obs.snapshot().power)
			return n == nodes, fmt.Sprintf("%d nodes read", n)
		}, wait.Within(time.Duration(nodes/powerReadRate+60)*time.Second), wait.Every(100*time.Millisecond))
		logf("power source prometheus: first power round done %s after start (%d client-stats reads)",
			time.Since(start).Round(time.Millisecond), e.Fake.Traffic()["GET /v1/client/stats"].Requests)
	}

	// Steady state: nothing changes in Nomad; a pass a second.
	before := e.Fake.Traffic()
	steadyStart := time.Now()
	var passes []time.Duration
	for steady := scaleSteady(b); time.Since(steadyStart) < steady; {
		t0 := time.Now()
		if err := c.Pass(b.Context()); err != nil {
			b.Fatal(err)
		}
		passes = append(passes, time.Since(t0))
		time.Sleep(time.Second - min(time.Since(t0), time.Second))
	}
	window := time.Since(steadyStart).Seconds()
	after := e.Fake.Traffic()
	var eps []string
	for k := range after {
		eps = append(eps, k)
	}
	sort.Strings(eps)
	var total, totalBytes float64
	var table strings.Builder
	for _, k := range eps {
		dr := float64(after[k].Requests - before[k].Requests)
		db := float64(after[k].Bytes - before[k].Bytes)
		if dr == 0 && db == 0 {
			continue
		}
		total += dr
		totalBytes += db
		fmt.Fprintf(&table, "\n  %-40s %8.2f req/s %12.0f B/s  (adoption: %d requests, %d B)", k, dr/window, db/window, adoptTraffic[k].Requests, adoptTraffic[k].Bytes)
	}
	logf("steady state over %.1f s: %.2f req/s, %.0f B/s; passes p50 %s p99 %s (%d)%s", window, total/window, totalBytes/window,
		percentile(passes, 0.5).Round(time.Microsecond), percentile(passes, 0.99).Round(time.Microsecond), len(passes), table.String())
	if source != nil {
		logf("power source prometheus: GPUs whose draw the last round took from prometheus %g, from client stats %g; queries failed %g",
			testutil.ToFloat64(c.metrics.powerGPUDraws.WithLabelValues(fromPrometheus)), testutil.ToFloat64(c.metrics.powerGPUDraws.WithLabelValues(fromClientStats)),
			testutil.ToFloat64(c.metrics.powerSourceFailures))
	}

	// The plan of every slot, as a pass makes it: reconcile.Plan on a
	// pass's input, under passMu as a pass (the controller's planner
	// cache is its passes').
	planLocked := func() (reconcile.Result, time.Duration) {
		in, _, _, _, err := c.input()
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		res, err := reconcile.Plan(in)
		if err != nil {
			b.Fatal(err)
		}
		return res, time.Since(t0)
	}
	var plans []time.Duration
	c.passMu.Lock()
	for range 10 {
		_, d := planLocked()
		plans = append(plans, d)
	}
	c.passMu.Unlock()

	// Catalog change: a new model of 250 replicas, to every job of it
	// registered.
	e.WriteCatalog(scaleCatalog(scaleModels+1, scaleReplicas/scaleModels))
	w0 := c.Tap.Writes()
	t0 := time.Now()
	if err := c.Reload(); err != nil {
		b.Fatal(err)
	}
	catalogPasses := passUntil(b, c, func() bool { return c.Tap.Writes()-w0 >= scaleReplicas/scaleModels })
	catalog := time.Since(t0)
	logf("catalog change: %d passes", catalogPasses)
	if n := c.Tap.Writes() - w0; n != scaleReplicas/scaleModels {
		b.Errorf("catalog change sent %d job writes, want %d", n, scaleReplicas/scaleModels)
	}
	passUntil(b, c, func() bool {
		ok, _ := e.caughtUp(c.Controller)
		return ok
	})

	// Node lost: a node with replicas goes down; to every one of them
	// registered again elsewhere.
	victim := "n00000"
	onVictim := 0
	for _, a := range e.Fake.Allocations("") {
		if a.NodeName == victim && a.DesiredStatus == api.AllocDesiredStatusRun {
			onVictim++
		}
	}
	w0 = c.Tap.Writes()
	t0 = time.Now()
	if err := e.Fake.SetNodeStatus(e.NodeIDs[victim], api.NodeStatusDown); err != nil {
		b.Fatal(err)
	}
	var seenDown time.Duration
	lostPasses := passUntil(b, c, func() bool {
		if n := c.obs.snapshot().nodes[e.NodeIDs[victim]]; seenDown == 0 && n != nil && n.Status == api.NodeStatusDown {
			seenDown = time.Since(t0)
		}
		return c.Tap.Writes()-w0 >= onVictim
	})
	lost := time.Since(t0)
	logf("node lost: the controller saw it down after %s; %d passes to the replacement", seenDown.Round(time.Millisecond), lostPasses)

	// The planning step of a node-lost pass: a second node with a
	// replica goes down; from the first plan that places its replicas
	// elsewhere, reconcile.Plan on the pass's input (the controller's
	// planner cache kept from the passes before) is timed 5 times; then
	// passes run until they are registered.
	victim2 := "n00001"
	onVictim2 := 0
	for _, a := range e.Fake.Allocations("") {
		if a.NodeName == victim2 && a.DesiredStatus == api.AllocDesiredStatusRun {
			onVictim2++
		}
	}
	// Under passMu, so that no pass acts on the loss first (with real
	// time the harness's hold of the leader lock lapses, and the
	// controller's own loop runs passes too): once the controller has seen
	// the node down and its replicas lost (the node's event and its
	// allocations' come apart), the first plan that places them, then 4
	// more.
	w0 = c.Tap.Writes()
	c.passMu.Lock()
	if err := e.Fake.SetNodeStatus(e.NodeIDs[victim2], api.NodeStatusDown); err != nil {
		b.Fatal(err)
	}
	var lostPlans []time.Duration
	for deadline := time.Now().Add(time.Minute); len(lostPlans) < 5; {
		res, d := planLocked()
		if len(res.Actions) > 0 || len(lostPlans) > 0 {
			lostPlans = append(lostPlans, d)
			continue
		}
		if time.Now().After(deadline) {
			b.Fatalf("no plan places %s's replicas a minute after it went down", victim2)
		}
		time.Sleep(10 * time.Millisecond) // the observer does not wait on passMu
	}
	c.passMu.Unlock()
	passUntil(b, c, func() bool { return c.Tap.Writes()-w0 >= onVictim2 })
	logf("node-lost pass's plan (%s down, %d replicas): p50 %s, max %s of %d", victim2, onVictim2,
		percentile(lostPlans, 0.5).Round(time.Microsecond), slices.Max(lostPlans).Round(time.Microsecond), len(lostPlans))

	rss, hwm := rssMiB()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	logf("plan of every slot p50 %s; catalog change (%d new replicas) registered in %s; node lost (%d replicas) replaced in %s",
		percentile(plans, 0.5).Round(time.Microsecond), scaleReplicas/scaleModels, catalog.Round(time.Millisecond), onVictim, lost.Round(time.Millisecond))
	logf("process (controller, fake and harness) RSS %.0f MiB, peak %.0f MiB, %.0f MiB before the controller started; live heap after GC %.0f MiB, %.0f MiB before it started (the difference is the controller's, and the fake's 250 new jobs)",
		rss, hwm, rssBase, float64(ms.HeapAlloc)/(1<<20), float64(base.HeapAlloc)/(1<<20))

	load, _ = os.ReadFile("/proc/loadavg")
	logf("loadavg at end: %s", strings.TrimSpace(string(load)))
	b.ReportMetric(float64(adoption.Milliseconds()), "ms-adoption")
	b.ReportMetric(float64(percentile(passes, 0.5).Microseconds())/1000, "ms-pass-p50")
	b.ReportMetric(float64(percentile(passes, 0.99).Microseconds())/1000, "ms-pass-p99")
	b.ReportMetric(total/window, "req/s")
	b.ReportMetric(totalBytes/window, "B/s")
	b.ReportMetric(float64(catalog.Milliseconds()), "ms-catalog")
	b.ReportMetric(float64(lost.Milliseconds()), "ms-node-lost")
	b.ReportMetric(float64(percentile(plans, 0.5).Microseconds())/1000, "ms-plan")
	b.ReportMetric(float64(percentile(lostPlans, 0.5).Microseconds())/1000, "ms-plan-node-lost")
	b.ReportMetric(hwm, "MiB-peak-RSS")
	c.Stop()
}

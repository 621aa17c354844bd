package autoscale

// A day of traffic, replayed against the real scaler (this package), the
// real reconciler and the real facility planner: the benchmark's workload
// is a model of request queueing at the gateway, and of jobs that take
// minutes to load. Nothing here stands in for Nomad beyond "a created job
// serves once it has loaded; a stopped one takes no new request".

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/facility"
)

// simModel is one model's traffic and engine.
type simModel struct {
	name     string
	gpus     int
	watts    float64
	priority int
	policy   facility.Autoscale
	// Traffic: requests/s between lo and hi over the day, peaking at peak
	// (hours); idle hours [idleFrom, idleTo) with no request at all.
	lo, hi, peak     float64
	idleFrom, idleTo float64
	bursts           int     // per day, 3–8 minutes each, ×1.8–2.5
	service          float64 // mean service time, s (log-normal, σ 0.5)
	capacity         int     // requests a replica serves at once
	load, loadJitter time.Duration
}

// simConfig is a day to replay.
type simConfig struct {
	seed     uint64
	day      time.Duration
	sample   time.Duration // signal rounds
	pass     time.Duration // controller passes
	bound    time.Duration // the SLO: queued less than this
	pduWatts float64
	models   []simModel
}

func defaultSim() simConfig {
	pol := func(minN, maxN int, target float64, idle time.Duration) facility.Autoscale {
		p := facility.DefaultAutoscale()
		p.Min, p.Max, p.Target = minN, maxN, facility.Target{Kind: facility.TargetOutstanding, Value: target}
		if minN == 0 {
			p.IdleAfter = idle
		}
		return p
	}
	return simConfig{
		seed: 1, day: 24 * time.Hour, sample: 5 * time.Second, pass: 15 * time.Second, bound: 2 * time.Second,
		pduWatts: 22000,
		models: []simModel{
			{name: "llama-70b", gpus: 4, watts: 2600, priority: 80, policy: pol(1, 10, 8, 0),
				lo: 0.5, hi: 10, peak: 14, idleFrom: -1, bursts: 5, service: 6, capacity: 16,
				load: 4 * time.Minute, loadJitter: 30 * time.Second},
			{name: "qwen-7b", gpus: 1, watts: 700, priority: 50, policy: pol(0, 16, 6, 30*time.Minute),
				lo: 1, hi: 24, peak: 11, idleFrom: 1, idleTo: 6, bursts: 5, service: 3, capacity: 12,
				load: 2 * time.Minute, loadJitter: 20 * time.Second},
			{name: "mistral-24b", gpus: 1, watts: 700, priority: 30, policy: pol(1, 8, 6, 0),
				lo: 0.3, hi: 8, peak: 20, idleFrom: -1, bursts: 4, service: 4, capacity: 12,
				load: 150 * time.Second, loadJitter: 20 * time.Second},
		},
	}
}

// simMode is what sets the counts: the autoscaler, or a fixed count.
type simMode int

const (
	modeAutoscale simMode = iota
	modeStaticMax
	modeStaticMin
)

func (m simMode) String() string {
	return [...]string{"autoscale", "static-max", "static-min"}[m]
}

// simResult is what a day gave.
type simResult struct {
	requests, onTime  int
	perModel          map[string][2]int // requests, on time
	replicaHours, kWh float64
	events            int
	flaps, reversals  int
	staticMaxHours    float64
	// toZero and woken count a model going to zero replicas and coming back.
	toZero, woken int
}

func (r simResult) attainment() float64 { return 100 * float64(r.onTime) / float64(max(r.requests, 1)) }

// completions is a min-heap of end times.
type completions []float64

func (h completions) Len() int           { return len(h) }
func (h completions) Less(i, j int) bool { return h[i] < h[j] }
func (h completions) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *completions) Push(x any)        { *h = append(*h, x.(float64)) }
func (h *completions) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// queueSim is one model's gateway: requests in service, and a FIFO of
// arrival times waiting for a free place.
type queueSim struct {
	m        *simModel
	rng      *rand.Rand // arrivals: the same in every mode
	svc      *rand.Rand // service times
	busy     completions
	queue    []float64 // arrival times
	capacity int
	arrivals int // this round
	requests int
	onTime   int
	bound    float64
	bursts   [][3]float64 // start, end (s), factor
	mu       float64      // log-normal μ for the service time
}

func (q *queueSim) rate(t float64) float64 {
	h := math.Mod(t/3600, 24)
	m := q.m
	if m.idleFrom >= 0 && h >= m.idleFrom && h < m.idleTo {
		return 0
	}
	x := (1 + math.Cos(2*math.Pi*(h-m.peak)/24)) / 2
	r := m.lo + (m.hi-m.lo)*math.Pow(x, 1.5)
	for _, b := range q.bursts {
		if t >= b[0] && t < b[1] {
			r *= b[2]
		}
	}
	return r
}

func (q *queueSim) start(now, arrived float64) {
	if now-arrived < q.bound {
		q.onTime++
	}
	heap.Push(&q.busy, now+math.Exp(q.mu+0.5*q.svc.NormFloat64()))
}

// fill starts queued requests while there is room.
func (q *queueSim) fill(now float64) {
	for len(q.busy) < q.capacity && len(q.queue) > 0 {
		q.start(now, q.queue[0])
		q.queue = q.queue[1:]
	}
}

// advance runs the queue from t to end, arrivals at the rate of each
// second.
func (q *queueSim) advance(t, end float64) {
	q.fill(t)
	for sec := t; sec < end; sec++ {
		lambda := q.rate(sec)
		next := math.Inf(1)
		if lambda > 0 {
			next = sec + q.rng.ExpFloat64()/lambda
		}
		for {
			done := math.Inf(1)
			if len(q.busy) > 0 {
				done = q.busy[0]
			}
			if math.Min(next, done) >= sec+1 {
				break
			}
			if done <= next {
				heap.Pop(&q.busy)
				q.fill(done)
				continue
			}
			q.requests++
			q.arrivals++
			if len(q.busy) < q.capacity && len(q.queue) == 0 {
				q.start(next, next)
			} else {
				q.queue = append(q.queue, next)
			}
			next += q.rng.ExpFloat64() / lambda
		}
	}
}

var simDebug = false

type simJob struct {
	job   reconcile.Job
	ready time.Time
}

// simFleet is the simulated data centre: 3 racks, one PDU each of
// pduWatts, 4 nodes of 8 H200 (700 W) per rack, 1000 W base per node.
func simFleet(pduWatts float64) ([]facility.Node, []facility.Budget) {
	var nodes []facility.Node
	var budgets []facility.Budget
	for r := 1; r <= 3; r++ {
		rack := fmt.Sprintf("k%d", r)
		for n := 1; n <= 4; n++ {
			nodes = append(nodes, facility.Node{
				Name: fmt.Sprintf("n-%s-%d", rack, n), Location: facility.Location{Site: "s", Room: "a", Row: "r1", Rack: rack, PDU: "p-" + rack},
				CPUCores: 128, MemoryGB: 2048, BaseWatts: 1000,
				GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 8, Free: 8, PowerLimitWatts: 700}},
			})
		}
		budgets = append(budgets, facility.Budget{Domain: facility.Domain{Level: facility.LevelPDU, Value: "p-" + rack}, Watts: pduWatts})
	}
	return nodes, budgets
}

// runSim replays a day in one mode.
func runSim(cfg simConfig, mode simMode) simResult {
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5ca1e)) // bursts, then load times
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	end := start.Add(cfg.day)

	nodes, budgets := simFleet(cfg.pduWatts)
	fac := facility.Facility{Budgets: budgets}

	var cat facility.Catalog
	queues := map[string]*queueSim{}
	scalers := map[string]*Scaler{}
	res := simResult{perModel: map[string][2]int{}}
	for i := range cfg.models {
		m := &cfg.models[i]
		fm := facility.Model{
			Name: m.name, Source: "org/" + m.name, Priority: m.priority, MaxSurge: 1,
			Profiles: []facility.Profile{{Name: "p", Engine: "vllm", GPU: "NVIDIA H200", GPUs: m.gpus, Nodes: 1, Watts: m.watts,
				Spread: facility.DefaultSpread(), Weight: 1}},
		}
		switch mode {
		case modeAutoscale:
			p := m.policy
			fm.Autoscale, fm.Replicas = &p, p.Min
		case modeStaticMax:
			fm.Replicas = m.policy.Max
		case modeStaticMin:
			fm.Replicas = m.policy.Min
		}
		cat.Models = append(cat.Models, fm)
		q := &queueSim{m: m, rng: rand.New(rand.NewPCG(cfg.seed, uint64(i)+1)), svc: rand.New(rand.NewPCG(cfg.seed, uint64(i)+100)), bound: cfg.bound.Seconds(),
			mu: math.Log(m.service) - 0.125}
		for b := 0; b < m.bursts; b++ {
			at := rng.Float64() * cfg.day.Seconds()
			q.bursts = append(q.bursts, [3]float64{at, at + 180 + rng.Float64()*300, 1.8 + rng.Float64()*0.7})
		}
		queues[m.name] = q
		scalers[m.name] = New(Config{})
		res.staticMaxHours += float64(m.policy.Max) * cfg.day.Hours()
	}

	var jobs []simJob
	gens := map[string]int{}
	var idx uint64
	// The fleet as the controller sees it: free GPUs less the jobs'.
	fleet := func() facility.Fleet {
		used := map[string]int{}
		for _, j := range jobs {
			for _, s := range j.job.Shards {
				used[s.Node] += s.GPUs
			}
		}
		out := slices.Clone(nodes)
		for i := range out {
			out[i].GPUs = slices.Clone(out[i].GPUs)
			out[i].GPUs[0].Free -= used[out[i].Name]
		}
		return facility.Fleet{Nodes: out}
	}
	apply := func(now time.Time, acts []reconcile.Action) {
		for _, a := range acts {
			switch a.Kind {
			case reconcile.Create:
				idx++
				m := queues[a.Model.Name].m
				load := m.load + time.Duration((rng.Float64()*2-1)*float64(m.loadJitter))
				if now.Equal(start) {
					load = 0 // the day starts with what runs warm
				}
				gens[a.Replica] = max(gens[a.Replica], a.Gen)
				jobs = append(jobs, simJob{job: reconcile.Job{
					ID: fmt.Sprintf("%s-g%d", a.Replica, a.Gen), Replica: a.Replica, Model: a.Model.Name, Profile: a.Profile.Name,
					FP: a.FP, Gen: a.Gen, Shards: a.Decision.Shards, Domain: a.Decision.Domain, State: reconcile.Starting,
					Since: now, CreateIndex: idx, ModifyIndex: idx,
				}, ready: now.Add(load)})
			case reconcile.Stop:
				jobs = slices.DeleteFunc(jobs, func(j simJob) bool { return j.job.ID == a.JobID })
			}
		}
	}
	type event struct {
		at time.Time
		up bool
	}
	events := map[string][]event{}
	lastCount := map[string]int{}
	slotCount := func() map[string]int {
		n := map[string]int{}
		seen := map[string]bool{}
		for _, j := range jobs {
			if !seen[j.job.Replica] {
				seen[j.job.Replica] = true
				n[j.job.Model]++
			}
		}
		return n
	}
	pass := func(now time.Time) {
		var in []reconcile.Job
		for i := range jobs {
			if jobs[i].job.State == reconcile.Starting && !now.Before(jobs[i].ready) {
				jobs[i].job.State, jobs[i].job.Since = reconcile.Serving, now
			}
			in = append(in, jobs[i].job)
		}
		var want map[string]reconcile.Want
		if mode == modeAutoscale {
			want = map[string]reconcile.Want{}
			counts := slotCount()
			for _, m := range cat.Models {
				d := scalers[m.Name].Decide(*m.Autoscale, now, counts[m.Name])
				want[m.Name] = reconcile.Want{N: d.Want, Reason: d.Reason}
			}
		}
		out, err := reconcile.Plan(reconcile.Input{Now: now, Catalog: cat, Fleet: fleet(), Facility: fac, Jobs: in,
			PartialDeadline: 10 * time.Minute, Gens: gens, Want: want})
		if err != nil {
			panic(err)
		}
		apply(now, out.Actions)
		counts := slotCount()
		for _, m := range cat.Models {
			n := counts[m.Name]
			if old, ok := lastCount[m.Name]; ok && n != old {
				events[m.Name] = append(events[m.Name], event{now, n > old})
				if n == 0 {
					res.toZero++
				}
				if old == 0 {
					res.woken++
				}
			}
			lastCount[m.Name] = n
		}
	}

	pass(start)
	for i := range jobs {
		jobs[i].job.State = reconcile.Serving
	}
	clear(events)
	for now := start; now.Before(end); now = now.Add(cfg.sample) {
		t := now.Sub(start).Seconds()
		// Capacity: serving replicas × their places.
		serving := map[string]int{}
		for _, j := range jobs {
			if j.job.State == reconcile.Serving || (j.job.State == reconcile.Starting && !now.Before(j.ready)) {
				serving[j.job.Model]++
			}
		}
		for name, q := range queues {
			q.capacity = serving[name] * q.m.capacity
			q.arrivals = 0
			q.advance(t, t+cfg.sample.Seconds())
		}
		at := now.Add(cfg.sample)
		if mode == modeAutoscale {
			for name, q := range queues {
				outstanding := float64(len(q.busy) + len(q.queue))
				kv := 0.0
				if q.capacity > 0 {
					kv = float64(len(q.busy)) / float64(q.capacity)
				}
				scalers[name].Observe(Sample{
					At: at, Outstanding: Reading(outstanding, at), Queued: Reading(float64(len(q.queue)), at),
					Arrivals: Reading(float64(q.arrivals)/cfg.sample.Seconds(), at), TTFT: Reading(0.2, at),
					Waiting: Reading(float64(len(q.queue)), at), KVCache: Reading(kv, at), Serving: serving[name],
				})
			}
		}
		// Cost, over the round: every job holds its GPUs and is counted at
		// its declared draw, loading or serving.
		for _, j := range jobs {
			res.replicaHours += cfg.sample.Hours()
			for _, s := range j.job.Shards {
				res.kWh += s.Watts * cfg.sample.Hours() / 1000
			}
		}
		if at.Sub(start)%cfg.pass == 0 {
			pass(at)
		}
	}
	for _, m := range cfg.models {
		q := queues[m.name]
		res.requests += q.requests
		res.onTime += q.onTime
		res.perModel[m.name] = [2]int{q.requests, q.onTime}
		evs := events[m.name]
		res.events += len(evs)
		dw := m.policy.DownWindow
		for i := range evs {
			// A flap: up, down, up again inside the down window.
			if evs[i].up {
				for j := i + 1; j < len(evs) && evs[j].at.Sub(evs[i].at) < dw; j++ {
					if !evs[j].up {
						for k := j + 1; k < len(evs) && evs[k].at.Sub(evs[i].at) < dw; k++ {
							if evs[k].up {
								res.flaps++
								break
							}
						}
						break
					}
				}
			}
			// A reversal: a down undone by an up inside the down window.
			if !evs[i].up && i+1 < len(evs) && evs[i+1].up && evs[i+1].at.Sub(evs[i].at) < dw {
				res.reversals++
				if simDebug {
					fmt.Printf("reversal %s: down at %s, up at %s\n", m.name, evs[i].at.Format("15:04:05"), evs[i+1].at.Format("15:04:05"))
				}
			}
		}
	}
	return res
}

func reportSim(b *testing.B, r simResult, hours float64) {
	b.ReportMetric(r.attainment(), "attain_%")
	b.ReportMetric(r.replicaHours, "replica_h")
	b.ReportMetric(100*r.replicaHours/r.staticMaxHours, "of_max_%")
	b.ReportMetric(r.kWh, "kWh")
	b.ReportMetric(float64(r.events)/hours, "events/h")
	b.ReportMetric(float64(r.flaps), "flaps")
	b.ReportMetric(float64(r.reversals), "reversals")
	b.ReportMetric(float64(r.requests), "requests")
	b.ReportMetric(float64(r.toZero), "to_zero")
}

// BenchmarkAutoscaleSim replays a seeded day (diurnal traffic per model,
// bursts, an idle night for the model with min 0, engines that load for
// minutes) with the autoscaler, with every model at its max, and at its
// min. docs/perf.md has the table and the command.
func BenchmarkAutoscaleSim(b *testing.B) {
	cfg := defaultSim()
	for _, mode := range []simMode{modeAutoscale, modeStaticMax, modeStaticMin} {
		b.Run(mode.String(), func(b *testing.B) {
			var r simResult
			for b.Loop() {
				r = runSim(cfg, mode)
			}
			reportSim(b, r, cfg.day.Hours())
		})
	}
	// Budgets too small for every model's peak: the watts go by priority.
	tight := cfg
	tight.pduWatts = 13500
	b.Run("autoscale-tight-budget", func(b *testing.B) {
		var r simResult
		for b.Loop() {
			r = runSim(tight, modeAutoscale)
		}
		reportSim(b, r, tight.day.Hours())
		names := make([]string, 0, len(r.perModel))
		for n := range r.perModel {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			pm := r.perModel[n]
			b.ReportMetric(100*float64(pm[1])/float64(max(pm[0], 1)), n+"_attain_%")
		}
	})
}

// The goal, checked: at least 99 % of requests queued less than the bound,
// with at most 60 % of static max's replica-hours, and no flapping.
func TestAutoscaleSimMeetsItsGoal(t *testing.T) {
	t.Parallel()
	cfg := defaultSim()
	r := runSim(cfg, modeAutoscale)
	share := 100 * r.replicaHours / r.staticMaxHours
	t.Logf("autoscale: %.2f %% on time of %d requests, %.0f replica-hours (%.1f %% of static max), %.0f kWh, %d events, %d flaps, %d reversals, %d to zero, %d woken",
		r.attainment(), r.requests, r.replicaHours, share, r.kWh, r.events, r.flaps, r.reversals, r.toZero, r.woken)
	for n, pm := range r.perModel {
		t.Logf("  %s: %.2f %% of %d", n, 100*float64(pm[1])/float64(max(pm[0], 1)), pm[0])
	}
	if r.attainment() < 99 {
		t.Errorf("attainment %.2f %%, want at least 99 %%", r.attainment())
	}
	if share > 60 {
		t.Errorf("replica-hours %.1f %% of static max, want at most 60 %%", share)
	}
	if r.flaps != 0 {
		t.Errorf("%d flaps (up, down, up inside a down window)", r.flaps)
	}
	if r.events == 0 {
		t.Error("no scale event at all: the day did not exercise the scaler")
	}
	if r.toZero == 0 || r.woken == 0 {
		t.Errorf("went to zero %d times, woke %d times: the idle night did not exercise scale to zero", r.toZero, r.woken)
	}
	// The comparison makes sense only if static max meets the SLO and
	// static min does not.
	mx, mn := runSim(cfg, modeStaticMax), runSim(cfg, modeStaticMin)
	t.Logf("static max: %.2f %%, %.0f replica-hours; static min: %.2f %%, %.0f replica-hours", mx.attainment(), mx.replicaHours, mn.attainment(), mn.replicaHours)
	for n, pm := range mx.perModel {
		t.Logf("  max %s: %.2f %% of %d", n, 100*float64(pm[1])/float64(max(pm[0], 1)), pm[0])
	}
	if mx.attainment() < 99.9 || mn.attainment() > 90 {
		t.Errorf("static max %.2f %%, static min %.2f %%: the trace does not tell them apart", mx.attainment(), mn.attainment())
	}
}

// With budgets too small for every peak, the model of highest priority
// keeps its attainment; the others give.
func TestAutoscaleSimTightBudgetGoesByPriority(t *testing.T) {
	t.Parallel()
	cfg := defaultSim()
	cfg.pduWatts = 13500
	r := runSim(cfg, modeAutoscale)
	att := func(n string) float64 { pm := r.perModel[n]; return 100 * float64(pm[1]) / float64(max(pm[0], 1)) }
	t.Logf("tight: llama-70b %.2f %%, qwen-7b %.2f %%, mistral-24b %.2f %%", att("llama-70b"), att("qwen-7b"), att("mistral-24b"))
	if att("llama-70b") < 99 {
		t.Errorf("llama-70b (priority 80) at %.2f %%, want at least 99 %%", att("llama-70b"))
	}
	if att("qwen-7b") > 98 && att("mistral-24b") > 98 {
		t.Errorf("every model near its goal: the budget is not tight, the test shows nothing")
	}
	if r.flaps != 0 {
		t.Errorf("%d flaps", r.flaps)
	}
}

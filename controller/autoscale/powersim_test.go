package autoscale

// Measured admission with GPU power caps, replayed over the autoscaling
// simulator's day of traffic (sim_test.go: the same demand traces and
// queue model, the same fleet): the real facility planner places the
// replicas, declared or measured, and the real cap allocator
// (facility/powercap) holds each PDU. Per-GPU draw comes from a model of
// load, second by second. docs/power.md ("The simulation") states every
// parameter and gives the table; docs/perf.md the command.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/facility/powercap"
)

// powerModel is how a GPU draws, and how the caps are applied.
type powerModel struct {
	pduWatts float64
	want     map[string]int // replicas asked for per model: more than fit
	// Per GPU, watts: no request in service; decoding (from decodeLo at
	// the first request to decodeHi with every place of the replica busy);
	// prefilling; a GPU no replica holds.
	idle, decodeLo, decodeHi, prefill, unused float64
	noise                                     float64            // each second's draw × (1 ± noise), uniform
	prefillSec                                map[string]float64 // a request's prefill time per model
	prefillScale                              float64            // × every prefill time (the sweep)
	floor, max                                float64            // a GPU's least and greatest power limit
	poll, apply                               time.Duration      // the controller reads draws every poll; a node applies a cap within apply
	// nodeLoop: each node holds its share (the controller's
	// powercap.Shares, written every poll, in place after apply) itself
	// every second with devicesapi.ShareHolder: its caps decided from a
	// second's readings are in place the next second.
	nodeLoop bool
}

func defaultPower() powerModel {
	return powerModel{
		pduWatts: 13500,
		want:     map[string]int{"llama-70b": 12, "qwen-7b": 32, "mistral-24b": 16}, // 96 GPUs: the whole fleet
		idle:     90, decodeLo: 137, decodeHi: 300, prefill: 680, unused: 60, noise: 0.03,
		prefillSec: map[string]float64{"llama-70b": 0.10, "qwen-7b": 0.03, "mistral-24b": 0.06}, prefillScale: 1,
		floor: 200, max: 700,
		poll: 5 * time.Second, apply: 2 * time.Second,
	}
}

// shippedPower is defaultPower as llmgw ships: the controller polls every
// power_interval (30 s by default) and every node holds its share each
// second.
func shippedPower() powerModel {
	pm := defaultPower()
	pm.poll, pm.nodeLoop = 30*time.Second, true
	return pm
}

// capBound is the longest a PDU may stay over its limit: with the node
// loop, the second a node goes over and the second its caps are in place
// (goal: 3 s at most); without it, a poll to see it and the node's apply.
func (pm powerModel) capBound() time.Duration {
	if pm.nodeLoop {
		return 3 * time.Second
	}
	return pm.poll + pm.apply
}

type powerResult struct {
	replicas     map[string]int
	total, gpus  int
	pduSeconds   int // PDU × second samples
	over         int // of them over the PDU's limit
	longestOver  int // seconds, the longest run of one PDU over its limit
	engages      int // times a PDU's caps engaged
	engagedSecs  int // PDU × seconds with caps engaged
	capDecisions int // cap, change and lift decisions
	nodeEngages  int // times a node's share holder engaged
	// watts: Σ over the PDUs of what the plan admitted, in their count
	// (declared or measured), the nodes' base draw left out; declared:
	// the same with every shard at its declared draw.
	watts, declared float64
	lost, work      map[string]float64
	learned         []facility.Learned
	peakPDU         float64 // the most any PDU drew in one second
}

func (r powerResult) lostPct(model string) float64 {
	return 100 * r.lost[model] / max(r.work[model], 1)
}

func (r powerResult) overPct() float64 { return 100 * float64(r.over) / float64(max(r.pduSeconds, 1)) }

type simGPU struct {
	node, pdu string
	model     string // "" unused
	replica   int
	cap       float64 // the controller's, in place; pm.max uncapped
	pending   float64 // the next cap, from at
	pendingAt int
	ncap      float64 // the node's own (share) cap in place; 0 none
	draw      float64
}

// limit is what the GPU may draw now: the lower of the controller's cap
// and the node's.
func (g *simGPU) limit() float64 {
	if g.ncap > 0 {
		return math.Min(g.cap, g.ncap)
	}
	return g.cap
}

// simNode is one node's share loop.
type simNode struct {
	first, n  int // its GPUs: gpus[first : first+n]
	share     float64
	pending   float64 // the next share (-1 none), from pendingAt
	pendingAt int
	holder    *devicesapi.ShareHolder
	in        []devicesapi.ShareGPU
}

// runPower places the replicas of pm.want on the simulated fleet, counting
// as mode says (with learned draws for measured), and replays the day
// second by second, with caps when caps is set.
func runPower(cfg simConfig, pm powerModel, mode facility.CountMode, learned []facility.Learned, caps bool, surge float64) powerResult {
	nodes, budgets := simFleet(pm.pduWatts)
	fac := facility.Facility{Budgets: budgets, Count: mode}
	var cat facility.Catalog
	for _, m := range cfg.models {
		cat.Models = append(cat.Models, facility.Model{Name: m.name, Source: "org/" + m.name, Priority: m.priority, MaxSurge: 1, Replicas: pm.want[m.name],
			Profiles: []facility.Profile{{Name: "p", Engine: "vllm", GPU: "NVIDIA H200", GPUs: m.gpus, Nodes: 1, Watts: m.watts,
				Spread: facility.DefaultSpread(), Weight: 1}}})
	}
	plan, err := facility.PlanCatalog(facility.Fleet{Nodes: nodes, Learned: learned}, fac, cat)
	if err != nil {
		panic(err)
	}
	res := powerResult{replicas: map[string]int{}, lost: map[string]float64{}, work: map[string]float64{}}
	for _, du := range plan.Domains {
		res.watts += du.DrawWatts
		res.declared += du.DeclaredWatts
	}
	for _, n := range nodes {
		res.watts -= n.BaseWatts
		res.declared -= n.BaseWatts
	}

	// GPUs: per node in order; a replica takes the node's next free ones.
	var gpus []simGPU
	first := map[string]int{}
	pduOf := map[string]string{}
	for _, n := range nodes {
		first[n.Name] = len(gpus)
		pduOf[n.Name] = n.Location.PDU
		for range n.GPUs[0].Count {
			gpus = append(gpus, simGPU{node: n.Name, pdu: n.Location.PDU, cap: pm.max, pending: -1})
		}
	}
	next := map[string]int{}
	replicasOf := map[string][][]int{} // model → replica → its GPUs
	for _, d := range plan.Placements {
		var idx []int
		for _, s := range d.Shards {
			for range s.GPUs {
				g := first[s.Node] + next[s.Node]
				next[s.Node]++
				gpus[g].model, gpus[g].replica = d.Model, len(replicasOf[d.Model])
				idx = append(idx, g)
			}
		}
		replicasOf[d.Model] = append(replicasOf[d.Model], idx)
		res.replicas[d.Model]++
		res.total++
		res.gpus += len(idx)
	}
	uuids := make([]string, len(gpus))
	for i := range uuids {
		uuids[i] = fmt.Sprintf("GPU-%03d", i)
	}
	var snodes []*simNode
	for _, n := range nodes {
		snodes = append(snodes, &simNode{first: first[n.Name], n: n.GPUs[0].Count, pending: -1,
			holder: devicesapi.NewShareHolder(devicesapi.ShareConfig{}), in: make([]devicesapi.ShareGPU, n.GPUs[0].Count)})
	}

	// The day's demand, as the autoscaling simulator makes it.
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5ca1e))
	queues := map[string]*queueSim{}
	var names []string
	for i := range cfg.models {
		m := &cfg.models[i]
		q := &queueSim{m: m, rng: rand.New(rand.NewPCG(cfg.seed, uint64(i)+1)), svc: rand.New(rand.NewPCG(cfg.seed, uint64(i)+100)), bound: cfg.bound.Seconds(),
			mu: math.Log(m.service) - 0.125}
		for b := 0; b < m.bursts; b++ {
			at := rng.Float64() * cfg.day.Seconds()
			q.bursts = append(q.bursts, [3]float64{at, at + 180 + rng.Float64()*300, 1.8 + rng.Float64()*0.7})
		}
		if surge != 1 {
			q.bursts = append(q.bursts, [3]float64{0, cfg.day.Seconds(), surge}) // the whole day × surge
		}
		q.capacity = len(replicasOf[m.name]) * m.capacity
		queues[m.name] = q
		names = append(names, m.name)
	}
	prio := map[string]int{}
	for _, m := range cfg.models {
		prio[m.name] = m.priority
	}

	pdus := make([]string, 0, len(budgets))
	limit := map[string]float64{}
	base := map[string]float64{}
	for _, b := range budgets {
		pdus = append(pdus, b.Domain.Value)
		limit[b.Domain.Value] = b.Watts // no headroom: the limit is the budget
	}
	for _, n := range nodes {
		base[n.Location.PDU] += n.BaseWatts
	}
	alloc, err := powercap.NewAllocator(powercap.DefaultConfig())
	if err != nil {
		panic(err)
	}
	learner := powercap.NewLearner(facility.DefaultMeasured())
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	prng := rand.New(rand.NewPCG(cfg.seed, 0x90e7))
	overRun := map[string]int{}
	engaged := map[string]bool{}
	pduDraw := map[string]float64{}
	poll, apply := int(pm.poll.Seconds()), int(pm.apply.Seconds())
	perReplica := []int{}
	worst := map[facility.LearnedKey]facility.Learned{}
	for sec := 0; sec < int(cfg.day.Seconds()); sec++ {
		t := float64(sec)
		if sec%3600 == 0 && sec > 0 {
			// The learned draw at the day's worst hour: what a controller
			// placing then would have counted.
			for _, l := range learner.Learned(start.Add(time.Duration(sec) * time.Second)) {
				if w, ok := worst[l.LearnedKey]; !ok || l.Watts > w.Watts {
					worst[l.LearnedKey] = l
				}
			}
		}
		for _, name := range names {
			q := queues[name]
			reps := replicasOf[name]
			q.arrivals = 0
			q.advance(t, t+1)
			n := len(reps)
			if n == 0 {
				continue
			}
			// This second's arrivals, each to a replica at random; the
			// requests in service spread evenly.
			perReplica = slices.Grow(perReplica[:0], n)[:n]
			clear(perReplica)
			for range q.arrivals {
				perReplica[prng.IntN(n)]++
			}
			busy := float64(len(q.busy)) / float64(n)
			u := math.Min(1, busy/float64(q.m.capacity))
			for r, idx := range reps {
				p := pm.idle
				if busy > 0 {
					p = pm.decodeLo + (pm.decodeHi-pm.decodeLo)*u
				}
				f := math.Min(1, float64(perReplica[r])*pm.prefillSec[name]*pm.prefillScale)
				p = f*pm.prefill + (1-f)*p
				shard := 0.0
				for _, g := range idx {
					d := math.Min(pm.max, p*(1+pm.noise*(2*prng.Float64()-1)))
					gg := &gpus[g]
					gg.draw = math.Min(d, gg.limit())
					res.work[name] += d
					res.lost[name] += d - gg.draw
					shard += gg.draw
				}
				_ = learner.Add(facility.LearnedKey{Model: name, Profile: "p", GPU: "NVIDIA H200"}, start.Add(time.Duration(sec)*time.Second), shard)
			}
		}
		clear(pduDraw)
		for i := range gpus {
			g := &gpus[i]
			if g.pending >= 0 && sec >= g.pendingAt {
				g.cap, g.pending = g.pending, -1
			}
			if g.model == "" {
				g.draw = math.Min(pm.unused, g.limit())
			}
			pduDraw[g.pdu] += g.draw
		}
		for _, p := range pdus {
			d := base[p] + pduDraw[p]
			pduDraw[p] = d
			res.pduSeconds++
			res.peakPDU = max(res.peakPDU, d)
			if d > limit[p] {
				res.over++
				overRun[p]++
				res.longestOver = max(res.longestOver, overRun[p])
			} else {
				overRun[p] = 0
			}
			if engaged[p] {
				res.engagedSecs++
			}
		}
		if pm.nodeLoop {
			// Each node reads this second's draws and sets its caps for
			// the next, as the plugin does every share_interval.
			now := start.Add(time.Duration(sec) * time.Second)
			for _, sn := range snodes {
				if sn.pending >= 0 && sec >= sn.pendingAt {
					sn.share, sn.pending = sn.pending, -1
				}
				was := sn.holder.Engaged()
				for k := range sn.n {
					g := &gpus[sn.first+k]
					pr := -1
					if g.model != "" {
						pr = prio[g.model]
					}
					sn.in[k] = devicesapi.ShareGPU{UUID: uuids[sn.first+k], Priority: pr, DrawWatts: g.draw, FloorWatts: pm.floor, MaxWatts: g.cap}
				}
				caps := sn.holder.Step(now, sn.share, sn.in)
				for k, c := range caps {
					g := &gpus[sn.first+k]
					switch {
					case c <= 0:
						g.ncap = 0
					case g.ncap > 0 && c > g.ncap && c < g.ncap*1.02:
						// a rise under 2 % keeps the lower cap, as the plugin does
					default:
						g.ncap = math.Floor(c)
					}
				}
				if sn.holder.Engaged() && !was {
					res.nodeEngages++
				}
			}
		}
		if caps && sec%poll == 0 {
			var doms []powercap.Domain
			for _, p := range pdus {
				doms = append(doms, powercap.Domain{Domain: facility.Domain{Level: facility.LevelPDU, Value: p}, LimitWatts: limit[p], BaseWatts: base[p], DrawWatts: pduDraw[p]})
			}
			in := make([]powercap.GPU, len(gpus))
			for i, g := range gpus {
				pr := -1 // a GPU no replica holds: capped first
				if g.model != "" {
					pr = prio[g.model]
				}
				in[i] = powercap.GPU{UUID: uuids[i], Node: g.node, Model: g.model, Priority: pr, DrawWatts: g.draw,
					FloorWatts: pm.floor, MaxWatts: pm.max, Domains: []facility.Domain{{Level: facility.LevelPDU, Value: g.pdu}}}
			}
			out := alloc.Decide(start.Add(time.Duration(sec)*time.Second), doms, in)
			for i, c := range out.Caps {
				if c.Watts != gpus[i].cap {
					gpus[i].pending, gpus[i].pendingAt = c.Watts, sec+apply
				}
			}
			if pm.nodeLoop {
				// The nodes' shares, as the controller writes them: a node
				// whose share leaves every GPU its max gets none.
				want := make([]float64, len(in))
				for i := range in {
					lim := gpus[i].limit()
					if lim >= pm.max {
						lim = 0
					}
					want[i] = powercap.Want(in[i], lim)
				}
				sh := powercap.Shares(doms, in, want)
				for _, sn := range snodes {
					total, most := 0.0, 0.0
					for k := range sn.n {
						total += sh.Caps[sn.first+k].Watts
						most += pm.max
					}
					total = math.Floor(total + 1e-6)
					if total >= most {
						total = 0
					}
					sn.pending, sn.pendingAt = total, sec+apply
				}
			}
			for _, st := range out.Domains {
				if st.Engaged && !engaged[st.Domain.Value] {
					res.engages++
				}
				engaged[st.Domain.Value] = st.Engaged
			}
			res.capDecisions += len(out.Decisions)
		}
	}
	for _, l := range learner.Learned(start.Add(cfg.day)) {
		if w, ok := worst[l.LearnedKey]; !ok || l.Watts > w.Watts {
			worst[l.LearnedKey] = l
		}
	}
	for _, l := range worst {
		res.learned = append(res.learned, l)
	}
	slices.SortFunc(res.learned, func(a, b facility.Learned) int { return strings.Compare(a.Model, b.Model) })
	return res
}

// powerDay runs the comparison: declared admission (which also learns the
// draws), then measured admission with what was learned, with caps, on
// the same day with every model's traffic × surge.
func powerDay(cfg simConfig, pm powerModel, surge float64) (declared, measured powerResult) {
	declared = declaredDay(cfg, pm)
	return declared, measuredDay(cfg, pm, declared, surge)
}

// declaredDay is the declared day (no caps; it learns the draws), and
// measuredDay the measured day with caps after it.
func declaredDay(cfg simConfig, pm powerModel) powerResult {
	return runPower(cfg, pm, facility.CountDeclared, nil, false, 1)
}

func measuredDay(cfg simConfig, pm powerModel, declared powerResult, surge float64) powerResult {
	return runPower(cfg, pm, facility.CountMeasured, declared.learned, true, surge)
}

func reportPower(b *testing.B, r powerResult) {
	b.ReportMetric(float64(r.total), "replicas")
	b.ReportMetric(float64(r.gpus), "gpus")
	b.ReportMetric(r.watts, "admitted_W")
	b.ReportMetric(r.declared, "declared_W")
	b.ReportMetric(float64(r.nodeEngages), "node_engages")
	b.ReportMetric(r.overPct(), "over_%")
	b.ReportMetric(float64(r.longestOver), "longest_over_s")
	b.ReportMetric(float64(r.engages), "engages")
	b.ReportMetric(100*float64(r.engagedSecs)/float64(max(r.pduSeconds, 1)), "engaged_%")
	b.ReportMetric(float64(r.capDecisions), "cap_decisions")
	b.ReportMetric(r.peakPDU, "peak_pdu_W")
	for _, n := range []string{"llama-70b", "qwen-7b", "mistral-24b"} {
		b.ReportMetric(float64(r.replicas[n]), n+"_replicas")
		b.ReportMetric(r.lostPct(n), n+"_lost_%")
	}
}

// BenchmarkPowerSim replays the seeded day with declared admission, then
// with measured admission and caps as llmgw ships them (the controller
// every power_interval, 30 s; every node holding its share each second),
// and as the issue-22 design ran them (the controller alone, every 5 s):
// on the same traffic, and with every model's traffic doubled (what was
// learned the day before no longer holds: the caps must). docs/perf.md has
// the table and the command.
func BenchmarkPowerSim(b *testing.B) {
	cfg := defaultSim()
	for _, pm := range []powerModel{shippedPower(), defaultPower()} {
		for _, surge := range []float64{1, 2} {
			var d, m powerResult
			b.Run(fmt.Sprintf("%s/surge=%g", pm.name(), surge), func(b *testing.B) {
				for b.Loop() {
					d, m = powerDay(cfg, pm, surge)
				}
				b.ReportMetric(float64(d.total), "declared_replicas")
				b.ReportMetric(d.watts, "declared_admitted_W")
				reportPower(b, m)
			})
		}
	}
}

// name says how the caps run: "node1s+ctl30s", "ctl5s".
func (pm powerModel) name() string {
	if pm.nodeLoop {
		return fmt.Sprintf("node1s+ctl%s", pm.poll)
	}
	return fmt.Sprintf("ctl%s", pm.poll)
}

// goalMisses checks the goals of issues 22 and 38 on one day: at least
// +25 % replicas under the same PDU budgets; no PDU over its limit for
// longer than the cap bound, and under 0.1 % of 1-second samples over;
// under 5 % of the highest-priority model's work lost to caps. It returns
// the goals missed, by name.
func goalMisses(cfg simConfig, pm powerModel, d, m powerResult) map[string]string {
	top := cfg.models[0]
	for _, mm := range cfg.models {
		if mm.priority > top.priority {
			top = mm
		}
	}
	miss := map[string]string{}
	if gain := float64(m.total)/float64(max(d.total, 1)) - 1; gain < 0.25 {
		miss["capacity"] = fmt.Sprintf("measured admits %d replicas, declared %d: %+.1f %%, want at least +25 %%", m.total, d.total, 100*gain)
	}
	if bound := int(pm.capBound().Seconds()); m.longestOver > bound {
		miss["bound"] = fmt.Sprintf("a PDU stayed over its limit for %d s, longer than the cap bound %d s", m.longestOver, bound)
	}
	if m.overPct() >= 0.1 {
		miss["over"] = fmt.Sprintf("%.4f %% of PDU-seconds over the limit, want under 0.1 %%", m.overPct())
	}
	if lost := m.lostPct(top.name); lost >= 5 {
		miss["priority"] = fmt.Sprintf("%s (the highest priority) lost %.2f %% of its work to caps, want under 5 %%", top.name, lost)
	}
	return miss
}

func logDay(t *testing.T, name string, r powerResult) {
	t.Helper()
	t.Logf("%s: %d replicas (%v) on %d GPUs, %.0f W admitted (declared %.0f W); %d PDU-seconds of %d (%.4f %%) over, longest %d s, peak %.0f W; %d engages, %.1f %% engaged, %d cap decisions, %d node engages; lost llama %.2f %%, qwen %.2f %%, mistral %.2f %%",
		name, r.total, r.replicas, r.gpus, r.watts, r.declared, r.over, r.pduSeconds, r.overPct(), r.longestOver, r.peakPDU, r.engages,
		100*float64(r.engagedSecs)/float64(max(r.pduSeconds, 1)), r.capDecisions, r.nodeEngages,
		r.lostPct("llama-70b"), r.lostPct("qwen-7b"), r.lostPct("mistral-24b"))
}

// The goals, checked on the seeded day as llmgw ships (the controller every
// 30 s, the nodes holding their shares every second) and as issue 22 ran
// it (the controller alone every 5 s): they hold on the same traffic and
// with it doubled, where the caps must act.
func TestPowerSimMeetsItsGoals(t *testing.T) {
	t.Parallel()
	cfg := defaultSim()
	for _, pm := range []powerModel{shippedPower(), defaultPower()} {
		for _, surge := range []float64{1, 2} {
			d, m := powerDay(cfg, pm, surge)
			logDay(t, "declared", d)
			logDay(t, fmt.Sprintf("measured, %s, traffic ×%g", pm.name(), surge), m)
			if surge == 1 && !pm.nodeLoop {
				for _, l := range d.learned {
					t.Logf("learned %s: %.0f W over %d samples (the day's worst hour)", l.LearnedKey, l.Watts, l.Samples)
				}
			}
			for _, why := range goalMisses(cfg, pm, d, m) {
				t.Errorf("%s ×%g: %s", pm.name(), surge, why)
			}
			if surge > 1 && m.engages == 0 && m.nodeEngages == 0 {
				t.Errorf("%s ×%g: caps never engaged: the surge did not exercise them", pm.name(), surge)
			}
		}
	}
}

// sweepPoint is one point of the sweep: the full-load decode draw per GPU
// (decodeHi) and the prefill times' scale.
type sweepPoint struct {
	decode, prefill float64
}

func (sp sweepPoint) String() string {
	return fmt.Sprintf("decode=%gW/prefill=x%g", sp.decode, sp.prefill)
}

// sweep is the sweep of issue 38: full-load decode from 300 to 550 W of
// 700, prefill times × 1 and × 2.
var sweep = []sweepPoint{{300, 1}, {300, 2}, {425, 1}, {425, 2}, {550, 1}, {550, 2}}

// sweepMisses are the goals the shipped caps miss at a point of the sweep
// and a traffic (× 1, × 2), as docs/perf.md ("Power held where it is
// drawn") states them: a change to the model that makes a goal hold or
// fail where the docs say otherwise fails TestPowerSimSweep, so the docs
// and the simulation stay together.
var sweepMisses = map[sweepPoint]map[float64][]string{
	{300, 2}: {1: {"capacity"}, 2: {"capacity", "priority"}},
	{425, 1}: {1: {"capacity"}, 2: {"capacity"}},
	{425, 2}: {1: {"capacity"}, 2: {"capacity", "priority"}},
	{550, 1}: {1: {"capacity"}, 2: {"capacity", "priority"}},
	{550, 2}: {1: {"capacity"}, 2: {"capacity", "priority"}},
}

func (sp sweepPoint) model(pm powerModel) powerModel {
	pm.decodeHi, pm.prefillScale = sp.decode, sp.prefill
	return pm
}

// BenchmarkPowerSimSweep runs the sweep, as shipped and with the
// controller alone at its shipped 30 s: docs/perf.md has the table.
func BenchmarkPowerSimSweep(b *testing.B) {
	cfg := defaultSim()
	ctl30 := defaultPower()
	ctl30.poll = 30 * time.Second
	for _, sp := range sweep {
		d := declaredDay(cfg, sp.model(shippedPower())) // the caps do not run on the declared day
		for _, pm := range []powerModel{shippedPower(), ctl30} {
			for _, surge := range []float64{1, 2} {
				var m powerResult
				b.Run(fmt.Sprintf("%s/%s/surge=%g", sp, pm.name(), surge), func(b *testing.B) {
					for b.Loop() {
						m = measuredDay(cfg, sp.model(pm), d, surge)
					}
					b.ReportMetric(float64(d.total), "declared_replicas")
					b.ReportMetric(d.watts, "declared_admitted_W")
					reportPower(b, m)
				})
			}
		}
	}
}

// TestPowerSimSweep checks the goals across the sweep as shipped: the
// safety goals (the bound, the share of seconds over) at every point, the
// capacity and the highest priority's loss where docs/perf.md says they
// hold, and that they miss where it says they miss.
func TestPowerSimSweep(t *testing.T) {
	t.Parallel()
	cfg := defaultSim()
	pm := shippedPower()
	type day struct {
		sp    sweepPoint
		surge float64 // 0: the declared day
		r     powerResult
	}
	// The declared days first, then the measured ones, two at a time: the
	// days are independent.
	run := func(days []day, f func(*day)) {
		sem := make(chan struct{}, 2)
		done := make(chan struct{})
		for i := range days {
			go func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				f(&days[i])
				done <- struct{}{}
			}()
		}
		for range days {
			<-done
		}
	}
	declared := make([]day, len(sweep))
	for i, sp := range sweep {
		declared[i].sp = sp
	}
	run(declared, func(d *day) { d.r = declaredDay(cfg, d.sp.model(pm)) })
	var measured []day
	for i := range sweep {
		for _, surge := range []float64{1, 2} {
			measured = append(measured, day{sp: sweep[i], surge: surge})
		}
	}
	run(measured, func(m *day) {
		for _, d := range declared {
			if d.sp == m.sp {
				m.r = measuredDay(cfg, m.sp.model(pm), d.r, m.surge)
			}
		}
	})
	for _, m := range measured {
		var d powerResult
		for _, dd := range declared {
			if dd.sp == m.sp {
				d = dd.r
			}
		}
		name := fmt.Sprintf("%s ×%g", m.sp, m.surge)
		if m.surge == 1 {
			logDay(t, m.sp.String()+" declared", d)
		}
		logDay(t, name+" measured", m.r)
		misses := goalMisses(cfg, pm, d, m.r)
		expected := map[string]bool{}
		for _, g := range sweepMisses[m.sp][m.surge] {
			expected[g] = true
		}
		for g, why := range misses {
			if g == "bound" || g == "over" || !expected[g] {
				t.Errorf("%s: %s", name, why)
			}
		}
		for g := range expected {
			if _, missed := misses[g]; !missed {
				t.Errorf("%s: goal %q holds, but docs/perf.md says it does not here: update sweepMisses and the docs", name, g)
			}
		}
	}
}

// boundResult is the over-limit bound at one fleet size.
type boundResult struct {
	nodes, domains int
	domainSeconds  int // domain × second samples
	over           int // of them over the domain's limit
	longestOver    int // seconds, the longest run of one domain over its limit
	nodeEngages    int
}

// runBound holds a fleet of n nodes of 8 GPUs under one PDU tree (a PDU
// for every 4 nodes, a row for every 25 PDUs, one site; every level
// budgeted, the PDUs at 400 W a GPU over their nodes' base, each row at 97
// % of its PDUs' limits, the site at 95 % of its rows') through 240
// seconds: every GPU wanting 250 W ± 10 % and, each second, one in ten
// prefilling at 680 W, the whole fleet surging to 700 W from 75 to 135 s
// (halfway between two polls). The controller (the real
// allocator and powercap.Shares) runs every poll and its word is in place
// apply later; with nodeLoop every node holds its share each second
// (devicesapi.ShareHolder). What it measures: how long any domain stays
// over its limit, in 1-second samples.
func runBound(n int, nodeLoop bool) boundResult {
	const (
		gpusPer        = 8
		base, floor    = 1000.0, 200.0
		maxW           = 700.0
		poll, apply    = 30, 2
		secs           = 240
		perPDU, perRow = 4, 25
	)
	type bgpu struct {
		node      int
		prio      int
		cap, ncap float64
		pending   float64
		pendingAt int
		draw      float64
		doms      []facility.Domain
	}
	var gpus []bgpu
	var doms []powercap.Domain
	limit := map[facility.Domain]float64{}
	baseOf := map[facility.Domain]float64{}
	dom := func(l facility.Level, v string) facility.Domain { return facility.Domain{Level: l, Value: v} }
	site := dom(facility.LevelSite, "s")
	rowOf := map[facility.Domain]facility.Domain{} // a PDU's row
	for i := range n {
		pdu := dom(facility.LevelPDU, fmt.Sprintf("p%d", i/perPDU))
		row := dom(facility.LevelRow, fmt.Sprintf("r%d", i/(perPDU*perRow)))
		ds := []facility.Domain{pdu, row, site}
		rowOf[pdu] = row
		limit[pdu] += base + gpusPer*400
		for _, d := range ds {
			baseOf[d] += base
		}
		for k := range gpusPer {
			prio := 80
			if k >= gpusPer/2 {
				prio = 30
			}
			gpus = append(gpus, bgpu{node: i, prio: prio, cap: maxW, pending: -1, doms: ds})
		}
	}
	for pdu, row := range rowOf {
		limit[row] += 0.97 * limit[pdu]
	}
	for row := range limit {
		if row.Level == facility.LevelRow {
			limit[site] += 0.95 * limit[row]
		}
	}
	for d, l := range limit {
		doms = append(doms, powercap.Domain{Domain: d, LimitWatts: l, BaseWatts: baseOf[d]})
	}
	slices.SortFunc(doms, func(a, b powercap.Domain) int { return strings.Compare(a.Domain.String(), b.Domain.String()) })
	di := map[facility.Domain]int{}
	for i, d := range doms {
		di[d.Domain] = i
	}
	uuids := make([]string, len(gpus))
	for i := range uuids {
		uuids[i] = fmt.Sprintf("GPU-%06d", i)
	}
	holders := make([]*devicesapi.ShareHolder, n)
	share := make([]float64, n)
	pendingShare := make([]float64, n)
	shareAt := make([]int, n)
	for i := range holders {
		holders[i] = devicesapi.NewShareHolder(devicesapi.ShareConfig{})
		pendingShare[i] = -1
	}
	alloc, err := powercap.NewAllocator(powercap.DefaultConfig())
	if err != nil {
		panic(err)
	}
	rng := rand.New(rand.NewPCG(38, uint64(n)))
	start := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	res := boundResult{nodes: n, domains: len(doms)}
	draw := make([]float64, len(doms))
	run := make([]int, len(doms))
	in := make([]powercap.GPU, len(gpus))
	sg := make([]devicesapi.ShareGPU, gpusPer)
	limOf := func(g *bgpu) float64 {
		if g.ncap > 0 {
			return math.Min(g.cap, g.ncap)
		}
		return g.cap
	}
	for sec := range secs {
		surge := sec >= 75 && sec < 135
		clear(draw)
		for i := range gpus {
			g := &gpus[i]
			if g.pending >= 0 && sec >= g.pendingAt {
				g.cap, g.pending = g.pending, -1
			}
			want := 250 * (0.9 + 0.2*rng.Float64())
			if rng.IntN(10) == 0 {
				want = 680
			}
			if surge {
				want = maxW
			}
			g.draw = math.Min(want, limOf(g))
			for _, d := range g.doms {
				draw[di[d]] += g.draw
			}
		}
		for i, d := range doms {
			total := d.BaseWatts + draw[i]
			doms[i].DrawWatts = total
			res.domainSeconds++
			if total > d.LimitWatts {
				res.over++
				run[i]++
				res.longestOver = max(res.longestOver, run[i])
			} else {
				run[i] = 0
			}
		}
		now := start.Add(time.Duration(sec) * time.Second)
		if nodeLoop {
			for node := range n {
				if pendingShare[node] >= 0 && sec >= shareAt[node] {
					share[node], pendingShare[node] = pendingShare[node], -1
				}
				was := holders[node].Engaged()
				for k := range gpusPer {
					g := &gpus[node*gpusPer+k]
					sg[k] = devicesapi.ShareGPU{UUID: uuids[node*gpusPer+k], Priority: g.prio, DrawWatts: g.draw, FloorWatts: floor, MaxWatts: g.cap}
				}
				caps := holders[node].Step(now, share[node], sg)
				for k, c := range caps {
					g := &gpus[node*gpusPer+k]
					switch {
					case c <= 0:
						g.ncap = 0
					case g.ncap > 0 && c > g.ncap && c < g.ncap*1.02:
					default:
						g.ncap = math.Floor(c)
					}
				}
				if holders[node].Engaged() && !was {
					res.nodeEngages++
				}
			}
		}
		if sec%poll == 0 {
			for i := range gpus {
				g := &gpus[i]
				in[i] = powercap.GPU{UUID: uuids[i], Node: strconv.Itoa(g.node), Priority: g.prio, DrawWatts: g.draw, FloorWatts: floor, MaxWatts: maxW, Domains: g.doms}
			}
			out := alloc.Decide(now, doms, in)
			for i, c := range out.Caps {
				if c.Watts != gpus[i].cap {
					gpus[i].pending, gpus[i].pendingAt = c.Watts, sec+apply
				}
			}
			if nodeLoop {
				want := make([]float64, len(in))
				for i := range in {
					lim := limOf(&gpus[i])
					if lim >= maxW {
						lim = 0
					}
					want[i] = powercap.Want(in[i], lim)
				}
				sh := powercap.Shares(doms, in, want)
				for node := range n {
					total := 0.0
					for k := range gpusPer {
						total += sh.Caps[node*gpusPer+k].Watts
					}
					total = math.Floor(total + 1e-6)
					if total >= gpusPer*maxW {
						total = 0
					}
					pendingShare[node], shareAt[node] = total, sec+apply
				}
			}
		}
	}
	return res
}

// TestPowerBoundDoesNotGrowWithTheFleet: with every node holding its share
// each second, no domain (PDU, row, site) stays over its limit longer than
// the 3 s goal, at 10 nodes as at 10,000, through a surge of the whole
// fleet at once halfway between two of the controller's 30 s polls; the
// controller alone (its 30 s poll) stays over far longer, and the surge
// does take the domains over (a test of the bound that nothing reached
// would prove nothing).
func TestPowerBoundDoesNotGrowWithTheFleet(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 10000} {
		held := runBound(n, true)
		alone := runBound(n, false)
		for _, r := range []struct {
			name string
			r    boundResult
		}{{"node 1 s + controller 30 s", held}, {"controller 30 s alone", alone}} {
			t.Logf("%d nodes, %s: %d domains, %d of %d domain-seconds over (%.3f %%), longest %d s, %d node engages",
				n, r.name, r.r.domains, r.r.over, r.r.domainSeconds, 100*float64(r.r.over)/float64(r.r.domainSeconds), r.r.longestOver, r.r.nodeEngages)
		}
		if held.longestOver > 3 {
			t.Errorf("%d nodes: a domain stayed over its limit for %d s with the node loop, want at most 3 s", n, held.longestOver)
		}
		if alone.longestOver <= 3 {
			t.Errorf("%d nodes: without the node loop a domain stayed over for %d s at most: the surge did not test the bound", n, alone.longestOver)
		}
		if held.over == 0 {
			t.Errorf("%d nodes: no domain ever went over with the node loop: the surge did not reach a limit", n)
		}
	}
}

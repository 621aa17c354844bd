package reconcile

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/facility"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// world is a small fleet: 2 rows × 2 racks × 2 nodes of 8 H200, one PDU a
// rack, and a simulated Nomad holding jobs.
type world struct {
	nodes   []facility.Node
	fac     facility.Facility
	cat     facility.Catalog
	jobs    []Job
	nextIdx uint64
	now     time.Time
}

func newWorld() *world {
	w := &world{now: t0, nextIdx: 100}
	for _, row := range []string{"r1", "r2"} {
		for _, k := range []string{"k1", "k2"} {
			rack := row + "-" + k
			for n := 1; n <= 2; n++ {
				w.nodes = append(w.nodes, facility.Node{
					Name:     fmt.Sprintf("n-%s-%d", rack, n),
					Location: facility.Location{Site: "s", Room: "a", Row: row, Rack: rack, PDU: "p-" + rack},
					CPUCores: 128, MemoryGB: 2048, BaseWatts: 1000,
					GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 8, Free: 8, PowerLimitWatts: 700, MemoryMiB: 143771}},
				})
			}
		}
	}
	w.cat = facility.Catalog{Models: []facility.Model{model("m", 4, "p", 4, nil)}}
	return w
}

func model(name string, replicas int, profile string, gpus int, args []string) facility.Model {
	return facility.Model{Name: name, Source: "org/" + name, Replicas: replicas, Profiles: []facility.Profile{{
		Name: profile, Engine: "vllm", GPU: "NVIDIA H200", GPUs: gpus, Nodes: 1, Watts: 2600,
		CPUCores: 8, MemoryGB: 64, Spread: []facility.Level{facility.LevelRack, facility.LevelPDU}, Weight: 1, Args: args,
	}}}
}

// fleet returns the nodes with free GPUs reduced by the jobs' shards.
func (w *world) fleet() facility.Fleet {
	used := map[string]int{}
	for _, j := range w.jobs {
		for _, s := range j.Shards {
			used[s.Node] += s.GPUs
		}
	}
	nodes := make([]facility.Node, len(w.nodes))
	for i, n := range w.nodes {
		n.GPUs = append([]facility.GPU(nil), n.GPUs...)
		n.GPUs[0].Free = max(0, n.GPUs[0].Count-used[n.Name])
		nodes[i] = n
	}
	return facility.Fleet{Nodes: nodes}
}

func (w *world) plan(t *testing.T) Result {
	t.Helper()
	res, err := Plan(Input{Now: w.now, Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac, Jobs: w.jobs, PartialDeadline: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// apply carries out actions the way Nomad would: new jobs start, stops
// remove them, replacements move them.
func (w *world) apply(acts []Action) {
	for _, a := range acts {
		switch a.Kind {
		case Create:
			w.nextIdx++
			w.jobs = append(w.jobs, Job{
				ID: fmt.Sprintf("llmgw-%s-%s-%d", a.Replica, a.FP[:4], a.Gen), Replica: a.Replica, Model: a.Model.Name,
				Profile: a.Profile.Name, FP: a.FP, Gen: a.Gen, Shards: a.Decision.Shards, State: Starting,
				Since: w.now, CreateIndex: w.nextIdx, ModifyIndex: w.nextIdx,
			})
		case Stop:
			w.remove(a.JobID)
		case Replace:
			for i := range w.jobs {
				if w.jobs[i].ID == a.JobID {
					w.nextIdx++
					w.jobs[i].Shards, w.jobs[i].State, w.jobs[i].Since, w.jobs[i].ModifyIndex = a.Decision.Shards, Starting, w.now, w.nextIdx
				}
			}
		}
	}
}

func (w *world) remove(id string) {
	out := w.jobs[:0]
	for _, j := range w.jobs {
		if j.ID != id {
			out = append(out, j)
		}
	}
	w.jobs = out
}

func (w *world) serveAll() {
	for i := range w.jobs {
		w.jobs[i].State = Serving
	}
}

// converge plans, applies and serves until nothing is left to do.
func (w *world) converge(t *testing.T) {
	t.Helper()
	for i := 0; i < 20; i++ {
		res := w.plan(t)
		if len(res.Actions) == 0 {
			return
		}
		w.apply(res.Actions)
		w.serveAll()
	}
	t.Fatalf("no convergence after 20 passes; jobs: %v", w.jobIDs())
}

func (w *world) jobIDs() []string {
	var out []string
	for _, j := range w.jobs {
		out = append(out, j.ID)
	}
	sort.Strings(out)
	return out
}

func kinds(acts []Action) []string {
	var out []string
	for _, a := range acts {
		out = append(out, a.Kind.String()+" "+a.Replica)
	}
	return out
}

func racksOf(w *world) map[string]int {
	rack := map[string]string{}
	for _, n := range w.nodes {
		rack[n.Name] = n.Location.Rack
	}
	out := map[string]int{}
	for _, j := range w.jobs {
		out[rack[j.Shards[0].Node]]++
	}
	return out
}

func TestCreatesMissingReplicasSpreadOverRacks(t *testing.T) {
	t.Parallel()
	w := newWorld()
	res := w.plan(t)
	if diff := cmp.Diff([]string{"create m-0", "create m-1", "create m-2", "create m-3"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	w.apply(res.Actions)
	if diff := cmp.Diff(map[string]int{"r1-k1": 1, "r1-k2": 1, "r2-k1": 1, "r2-k2": 1}, racksOf(w)); diff != "" {
		t.Fatalf("replicas per rack (-want +got):\n%s", diff)
	}
	// Level-based: with the jobs registered (not yet running), the next
	// pass does nothing.
	if res := w.plan(t); len(res.Actions) != 0 {
		t.Fatalf("second pass: %v", kinds(res.Actions))
	}
}

func TestStopsWhatLeftTheCatalog(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models = append(w.cat.Models, model("x", 2, "p", 1, nil))
	w.converge(t)
	w.cat.Models = w.cat.Models[:1]
	w.cat.Models[0].Replicas = 2
	res := w.plan(t)
	got := kinds(res.Actions)
	sort.Strings(got)
	if diff := cmp.Diff([]string{"stop m-2", "stop m-3", "stop x-0", "stop x-1"}, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	for _, a := range res.Actions {
		if a.Replica[0] == 'x' && a.Reason != "model x left the catalog" {
			t.Errorf("reason %q", a.Reason)
		}
	}
}

func TestDuplicatesKeepTheServingOne(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.converge(t)
	// A second controller (or a retry) made a copy of m-1 that is still
	// starting: the serving one stays, the copy goes.
	dup := w.jobs[1]
	dup.ID, dup.State, dup.CreateIndex = "llmgw-m-1-copy", Starting, 1
	w.jobs = append(w.jobs, dup)
	res := w.plan(t)
	if diff := cmp.Diff([]string{"stop m-1"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if res.Actions[0].JobID != "llmgw-m-1-copy" {
		t.Fatalf("stopped %s, want the copy", res.Actions[0].JobID)
	}
}

func TestRollNewCopyFirst(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models[0].MaxSurge = 4
	w.converge(t)
	before := w.jobIDs()
	w.cat.Models[0].Profiles[0].Args = []string{"--max-model-len", "8192"} // changes the fingerprint
	res := w.plan(t)
	if diff := cmp.Diff([]string{"create m-0", "create m-1", "create m-2", "create m-3"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("first pass (-want +got):\n%s", diff)
	}
	for _, a := range res.Actions {
		if a.Gen != 1 {
			t.Errorf("%s: gen %d, want 1", a.Replica, a.Gen)
		}
	}
	w.apply(res.Actions)
	// New copies starting: the old ones must keep serving.
	if res := w.plan(t); len(res.Actions) != 0 {
		t.Fatalf("while new copies start: %v", kinds(res.Actions))
	}
	w.serveAll()
	res = w.plan(t)
	var stopped []string
	for _, a := range res.Actions {
		if a.Kind != Stop {
			t.Fatalf("unexpected %v", a)
		}
		stopped = append(stopped, a.JobID)
	}
	sort.Strings(stopped)
	if diff := cmp.Diff(before, stopped); diff != "" {
		t.Fatalf("stopped (-want +got):\n%s", diff)
	}
}

// max_surge caps how many replicas of a model have a new copy coming up
// at once; the others wait and say why.
func TestRollObeysMaxSurge(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models[0].MaxSurge = 2
	w.converge(t)
	w.cat.Models[0].Profiles[0].Args = []string{"--max-model-len", "8192"}
	res := w.plan(t)
	if diff := cmp.Diff([]string{"create m-0", "create m-1"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("first pass (-want +got):\n%s", diff)
	}
	for _, slot := range []string{"m-2", "m-3"} {
		if !strings.Contains(res.Waits[slot], "max_surge 2 reached") {
			t.Errorf("%s waits %q, want max_surge named", slot, res.Waits[slot])
		}
	}
	w.apply(res.Actions)
	if res := w.plan(t); len(res.Actions) != 0 || len(res.Waits) != 2 {
		t.Fatalf("while the first two start: %v, waits %v", kinds(res.Actions), res.Waits)
	}
	w.serveAll()
	res = w.plan(t)
	if diff := cmp.Diff([]string{"stop m-0", "stop m-1", "create m-2", "create m-3"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("once they serve (-want +got):\n%s", diff)
	}
}

// A full fleet leaves no room for a second copy: with max_unavailable 0
// the roll waits and says so; with max_unavailable 1 one replica at a time
// stops first and is placed again on what it freed.
func TestRollWithoutRoom(t *testing.T) {
	t.Parallel()
	for _, unavailable := range []int{0, 1} {
		t.Run(fmt.Sprint("max_unavailable=", unavailable), func(t *testing.T) {
			w := newWorld()
			w.cat.Models[0].Replicas = 16 // 4 GPUs each: fills the 8 nodes of 8 GPUs
			w.cat.Models[0].MaxUnavailable = unavailable
			w.converge(t)
			w.cat.Models[0].Profiles[0].Args = []string{"--max-model-len", "8192"}
			res := w.plan(t)
			if unavailable == 0 {
				if len(res.Actions) != 0 {
					t.Fatalf("roll without room and max_unavailable 0: %v", kinds(res.Actions))
				}
				if !strings.Contains(res.Waits["m-0"], "no room for a new copy beside the serving one, and max_unavailable is 0") {
					t.Fatalf("m-0 waits %q", res.Waits["m-0"])
				}
				return
			}
			if diff := cmp.Diff([]string{"stop m-0"}, kinds(res.Actions)); diff != "" {
				t.Fatalf("first pass (-want +got):\n%s", diff)
			}
			w.apply(res.Actions)
			res = w.plan(t)
			if diff := cmp.Diff([]string{"create m-0"}, kinds(res.Actions)); diff != "" {
				t.Fatalf("second pass (-want +got):\n%s", diff)
			}
		})
	}
}

// MaxStops caps the stops of one pass; the rest come in later passes.
func TestMaxStops(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.converge(t)
	w.cat.Models[0].Replicas = 0
	res, err := Plan(Input{Now: w.now, Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac, Jobs: w.jobs, MaxStops: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Actions) != 3 || res.DeferredStops != 1 {
		t.Fatalf("actions %v, deferred %d; want 3 stops and 1 deferred", kinds(res.Actions), res.DeferredStops)
	}
	for _, a := range res.Actions {
		if !a.Catalog {
			t.Errorf("%v: not marked as a stop the catalog caused", a)
		}
	}
}

func TestDrainHoldMovesNewFirst(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.converge(t)
	held, _ := facility.ParseDomain("rack=r1-k1")
	w.fac.Holds = []facility.Hold{{Domain: held, Reason: "PDU swap", Drain: true}}
	var inRack string
	for _, j := range w.jobs {
		if strings.HasPrefix(j.Shards[0].Node, "n-r1-k1") {
			inRack = j.ID
		}
	}
	res := w.plan(t)
	if len(res.Actions) != 1 || res.Actions[0].Kind != Create || strings.HasPrefix(res.Actions[0].Decision.Shards[0].Node, "n-r1-k1") {
		t.Fatalf("want one create outside r1-k1, got %v", res.Actions)
	}
	w.apply(res.Actions)
	if res := w.plan(t); len(res.Actions) != 0 {
		t.Fatalf("while the new copy starts: %v", kinds(res.Actions))
	}
	w.serveAll()
	res = w.plan(t)
	if len(res.Actions) != 1 || res.Actions[0].Kind != Stop || res.Actions[0].JobID != inRack {
		t.Fatalf("want stop %s, got %v", inRack, res.Actions)
	}
}

func TestHoldWithoutDrainKeepsWhatRuns(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.converge(t)
	held, _ := facility.ParseDomain("rack=r1-k1")
	w.fac.Holds = []facility.Hold{{Domain: held, Reason: "inspection"}}
	if res := w.plan(t); len(res.Actions) != 0 {
		t.Fatalf("hold without drain changed running replicas: %v", kinds(res.Actions))
	}
	w.cat.Models[0].Replicas = 8
	res := w.plan(t)
	for _, a := range res.Actions {
		if strings.HasPrefix(a.Decision.Shards[0].Node, "n-r1-k1") {
			t.Errorf("%s placed in held rack: %v", a.Replica, a.Decision.Shards)
		}
	}
}

func TestFailedReplicaPlacedAgain(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.converge(t)
	// The node under m-2 is gone from the fleet (down); its job failed.
	lost := w.jobs[2].Shards[0].Node
	w.jobs[2].State = Failed
	var nodes []facility.Node
	for _, n := range w.nodes {
		if n.Name != lost {
			nodes = append(nodes, n)
		}
	}
	w.nodes = nodes
	res := w.plan(t)
	if len(res.Actions) != 1 || res.Actions[0].Kind != Replace || res.Actions[0].JobID != w.jobs[2].ID {
		t.Fatalf("want replace of %s, got %v", w.jobs[2].ID, res.Actions)
	}
	if n := res.Actions[0].Decision.Shards[0].Node; n == lost {
		t.Fatalf("placed again on the lost node %s", n)
	}
	if res.Actions[0].ExpectIndex != w.jobs[2].ModifyIndex {
		t.Fatalf("replace must be check-and-set on index %d, got %d", w.jobs[2].ModifyIndex, res.Actions[0].ExpectIndex)
	}
}

// Two replicas lost with one node are placed again in the rack that lost
// them when it has room, not both beside the third replica: a failed copy
// serves nowhere, so it does not count for spread (the chaos suite's seed
// 1796650643575754265 put all three on one node before, docs/reliability.md).
func TestFailedReplicasKeepTheirSpread(t *testing.T) {
	t.Parallel()
	var nodes []facility.Node
	for _, n := range []struct{ name, rack string }{{"a1", "k1"}, {"a2", "k1"}, {"b1", "k2"}, {"b2", "k2"}} {
		nodes = append(nodes, facility.Node{
			Name: n.name, Location: facility.Location{Site: "s", Room: "a", Row: "r1", Rack: n.rack, PDU: "p-" + n.name},
			CPUCores: 128, MemoryGB: 2048, BaseWatts: 1000,
			GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 8, Free: 8, PowerLimitWatts: 700, MemoryMiB: 143771}},
		})
	}
	m := model("m", 3, "p", 1, nil)
	m.Profiles[0].Spread = []facility.Level{facility.LevelRack}
	fp := facility.ProfileFingerprint(m, m.Profiles[0])
	job := func(slot int, node string, st State) Job {
		return Job{
			ID: fmt.Sprintf("llmgw-m-%d-g0", slot), Replica: facility.ReplicaID("m", slot), Model: "m", Profile: "p", FP: fp,
			Shards: []facility.Shard{{Node: node, Watts: 2600, GPU: "NVIDIA H200", GPUs: 1, CPUCores: 8, MemoryGB: 64}},
			State:  st, Since: t0, CreateIndex: uint64(10 + slot), ModifyIndex: uint64(10 + slot),
		}
	}
	// b1 is down: still in the fleet (what ran there drew power), nothing free.
	nodes[0].GPUs[0].Free = 7
	nodes[2].GPUs[0].Free = 0
	jobs := []Job{job(0, "a1", Serving), job(1, "b1", Failed), job(2, "b1", Failed)}
	res, err := Plan(Input{Now: t0, Catalog: facility.Catalog{Models: []facility.Model{m}}, Fleet: facility.Fleet{Nodes: nodes}, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	rack := map[string]string{"a1": "k1", "a2": "k1", "b1": "k2", "b2": "k2"}
	byRack, byNode := map[string]int{"k1": 1}, map[string]int{"a1": 1}
	for _, a := range res.Actions {
		if a.Kind != Replace {
			t.Fatalf("want only replaces of the failed jobs, got %v", kinds(res.Actions))
		}
		n := a.Decision.Shards[0].Node
		byRack[rack[n]]++
		byNode[n]++
	}
	if len(res.Actions) != 2 {
		t.Fatalf("want the two failed jobs replaced, got %v", kinds(res.Actions))
	}
	if byRack["k2"] == 0 {
		t.Errorf("replicas by rack %v, by node %v: want one placed again in k2, where b2 has room (spread = [\"rack\"])", byRack, byNode)
	}
	for n, k := range byNode {
		if k > 2 {
			t.Errorf("replicas by node %v: %d on %s", byNode, k, n)
		}
	}
}

func TestPartialPlacementDeadline(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.converge(t)
	lost := w.jobs[0].Shards[0].Node
	w.jobs[0].State, w.jobs[0].Since = Partial, w.now
	var nodes []facility.Node
	for _, n := range w.nodes {
		if n.Name != lost {
			nodes = append(nodes, n)
		}
	}
	w.nodes = nodes
	w.now = w.now.Add(9 * time.Minute)
	if res := w.plan(t); len(res.Actions) != 0 {
		t.Fatalf("before the deadline: %v", kinds(res.Actions))
	}
	w.now = w.now.Add(time.Minute)
	res := w.plan(t)
	if len(res.Actions) != 1 || res.Actions[0].Kind != Replace || !strings.Contains(res.Actions[0].Reason, "partial for 10m0s") {
		t.Fatalf("at the deadline: %v", res.Actions)
	}
}

func TestBudgetLeavesReplicaUnplacedWithReason(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models[0].Replicas = 2
	pdu, _ := facility.ParseDomain("pdu=p-r1-k1")
	site, _ := facility.ParseDomain("site=s")
	// Each node draws 1000 W base; the site cap fits the 8 nodes' base
	// load plus exactly two 2600 W shards.
	w.fac.Budgets = []facility.Budget{{Domain: site, Watts: 8*1000 + 2*2600}, {Domain: pdu, Watts: 100000}}
	w.converge(t)
	if len(w.jobs) != 2 {
		t.Fatalf("got %d jobs, want 2", len(w.jobs))
	}
	w.cat.Models[0].Replicas = 3
	res := w.plan(t)
	if len(res.Actions) != 0 {
		t.Fatalf("placed over budget: %v", res.Actions)
	}
	d := res.Decisions["m-2"]
	var msgs []string
	for _, r := range d.Rejections {
		msgs = append(msgs, r.Message)
	}
	if d.Placed || !strings.Contains(strings.Join(msgs, "\n"), "over budget: site=s") {
		t.Fatalf("m-2: placed=%v rejections=%q", d.Placed, msgs)
	}
}

func TestSlotIndex(t *testing.T) {
	t.Parallel()
	for replica, want := range map[string]int{"m-0": 0, "m-12": 12, "m-": -1, "m-01": -1, "m-x": -1, "mm-1": -1, "m-1-2": -1} {
		if got := slotIndex(replica, "m"); got != want {
			t.Errorf("slotIndex(%q) = %d, want %d", replica, got, want)
		}
	}
}

// TestInterruptedPassesConverge applies a random prefix of each pass's
// actions (a controller killed mid-pass), with random jobs becoming ready
// in between, and checks at every step that no budget is exceeded and no
// slot ends with two current copies outside holds; at the end, exactly the
// catalog runs.
func TestInterruptedPassesConverge(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		w := newWorld()
		w.cat.Models = append(w.cat.Models, model("small", 1+rng.IntN(6), "one", 1, nil))
		w.cat.Models[0].Replicas = 1 + rng.IntN(5)
		site, _ := facility.ParseDomain("site=s")
		w.fac.Budgets = []facility.Budget{{Domain: site, Watts: float64(8*1000 + 2600*(2+rng.IntN(6)))}}
		limit := w.fac.Budgets[0].Watts
		for step := 0; step < 60; step++ {
			if step == 10 && rng.IntN(2) == 0 {
				w.cat.Models[0].Profiles[0].Args = []string{"--new"} // a roll midway
			}
			res := w.plan(t)
			n := len(res.Actions)
			if n > 0 {
				n = rng.IntN(n + 1)
			}
			w.apply(res.Actions[:n])
			for i := range w.jobs {
				if rng.IntN(3) == 0 {
					w.jobs[i].State = Serving
				}
			}
			if draw := siteDraw(w); draw > limit {
				t.Fatalf("trial %d step %d: site draws %.0f W of %.0f", trial, step, draw, limit)
			}
		}
		w.serveAll()
		w.converge(t)
		for _, m := range w.cat.Models {
			per := map[string]int{}
			for _, j := range w.jobs {
				if j.Model == m.Name {
					per[j.Replica]++
				}
			}
			placed := 0
			for slot, n := range per {
				if n != 1 {
					t.Fatalf("trial %d: slot %s has %d jobs", trial, slot, n)
				}
				placed++
			}
			if placed > m.Replicas {
				t.Fatalf("trial %d: model %s has %d slots, want at most %d", trial, m.Name, placed, m.Replicas)
			}
		}
	}
}

func siteDraw(w *world) float64 {
	shards := map[string]float64{}
	for _, j := range w.jobs {
		for _, s := range j.Shards {
			shards[s.Node] += s.Watts
		}
	}
	total := 0.0
	for _, n := range w.nodes {
		total += n.BaseWatts + shards[n.Name]
	}
	return total
}

func TestFailedReplicaFallsBackToAnotherProfile(t *testing.T) {
	t.Parallel()
	w := newWorld()
	m := model("m", 1, "big", 8, nil)
	m.Profiles = append(m.Profiles, facility.Profile{Name: "small", Engine: "vllm", GPU: "NVIDIA H200", GPUs: 2, Nodes: 1,
		Watts: 1400, CPUCores: 8, MemoryGB: 64, Spread: []facility.Level{facility.LevelRack}, Weight: 1})
	w.cat.Models = []facility.Model{m}
	w.converge(t)
	if w.jobs[0].Profile != "big" {
		t.Fatalf("placed on %s, want big", w.jobs[0].Profile)
	}
	// Every node but the failed job's own loses 7 GPUs to other work: the
	// 8-GPU profile fits nowhere else.
	w.jobs[0].State = Failed
	for i := range w.nodes {
		if w.nodes[i].Name != w.jobs[0].Shards[0].Node {
			w.nodes[i].GPUs[0].Count = 2
		}
	}
	res := w.plan(t)
	if len(res.Actions) != 1 || res.Actions[0].Kind != Create || res.Actions[0].Profile.Name != "small" || res.Actions[0].Gen != 1 {
		t.Fatalf("want a create of gen 1 on profile small, got %v", res.Actions)
	}
	w.apply(res.Actions)
	res = w.plan(t)
	if len(res.Actions) != 1 || res.Actions[0].Kind != Stop || res.Actions[0].JobID != w.jobs[0].ID {
		t.Fatalf("want the failed job stopped as a duplicate, got %v", res.Actions)
	}
}

// A new job's generation is above every job Nomad still holds for its
// slot, stopped ones included, whose IDs are not free yet.
func TestNewGenerationAboveStoppedJobs(t *testing.T) {
	t.Parallel()
	w := newWorld()
	res, err := Plan(Input{Now: w.now, Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac,
		Gens: map[string]int{"m-0": 2, "m-3": 0}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, a := range res.Actions {
		if a.Kind == Create {
			got[a.Replica] = a.Gen
		}
	}
	want := map[string]int{"m-0": 3, "m-1": 0, "m-2": 0, "m-3": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("generations of new jobs (-want +got):\n%s", diff)
	}
}

// Result.After is the budgets once the pass's actions are done: what
// Before counts on the jobs Nomad holds after them. Before counts every
// job Nomad holds, those leaving the catalog too (Usage does not).
func TestAfterIsBeforeOfTheNextPass(t *testing.T) {
	t.Parallel()
	w := newWorld()
	fac, err := facility.ParseFacility("facility.hcl", []byte(`
budget "site=s"     { watts = 60000 }
budget "rack=r1-k1" { watts = 20000 }
budget "rack=r2-k2" { watts = 20000 }
`))
	if err != nil {
		t.Fatal(err)
	}
	w.fac = fac
	w.cat.Models = append(w.cat.Models, model("x", 2, "p", 1, nil))
	w.converge(t)
	held, _ := facility.ParseDomain("rack=r1-k1")
	w.fac.Holds = []facility.Hold{{Domain: held, Drain: true}}
	w.cat.Models = w.cat.Models[:1] // x leaves: stops
	w.cat.Models[0].Replicas = 6    // m grows: creates
	in := func() Input {
		return Input{Now: w.now, Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac, Jobs: w.jobs, PartialDeadline: 10 * time.Minute}
	}
	before, err := Before(in())
	if err != nil {
		t.Fatal(err)
	}
	res := w.plan(t)
	var stops, creates int
	for _, a := range res.Actions {
		switch a.Kind {
		case Stop:
			stops++
		case Create:
			creates++
		}
	}
	if stops == 0 || creates == 0 {
		t.Fatalf("actions %v: want stops and creates", kinds(res.Actions))
	}
	usage := map[string]float64{}
	for _, u := range res.Usage {
		usage[u.Domain.String()] = u.DrawWatts
	}
	if b := before[0]; b.Domain.String() != "site=s" || b.DrawWatts <= usage["site=s"] {
		t.Errorf("Before %s = %g W, Usage %g W: want Before to count x's jobs, which Usage leaves out", b.Domain, b.DrawWatts, usage["site=s"])
	}
	w.apply(res.Actions)
	next, err := Before(in())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(next, res.After); diff != "" {
		t.Errorf("After differs from the budgets once the actions are done (-done +After):\n%s", diff)
	}

	// The new copies serve: the next pass stops the old ones in the
	// drained rack, jobs the planner counted.
	w.serveAll()
	res = w.plan(t)
	if got := kinds(res.Actions); len(got) == 0 || !strings.HasPrefix(got[0], "stop ") {
		t.Fatalf("second pass %v: want the drained copies' stops", got)
	}
	w.apply(res.Actions)
	next, err = Before(in())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(next, res.After); diff != "" {
		t.Errorf("After the drain's stops differs from the budgets once done (-done +After):\n%s", diff)
	}
	if next[1].Domain.String() != "rack=r1-k1" || next[1].DrawWatts >= before[1].DrawWatts {
		t.Errorf("rack r1-k1 draws %g W after its copies stop, %g W before", next[1].DrawWatts, before[1].DrawWatts)
	}
}

package reconcile

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/facility"
)

// autoModel is an autoscaled model of 4-GPU, 2600 W replicas.
func autoModel(name string, minN, maxN, priority int) facility.Model {
	m := model(name, minN, "p", 4, nil)
	p := facility.DefaultAutoscale()
	p.Min, p.Max, p.Target = minN, maxN, facility.Target{Kind: facility.TargetOutstanding, Value: 8}
	m.Autoscale, m.Priority = &p, priority
	return m
}

func (w *world) planWant(t *testing.T, want map[string]int, maxStops int) Result {
	t.Helper()
	wants := map[string]Want{}
	for m, n := range want {
		wants[m] = Want{N: n, Reason: fmt.Sprintf("the autoscaler wants %d", n)}
	}
	res, err := Plan(Input{Now: w.now, Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac, Jobs: w.jobs,
		PartialDeadline: 10 * time.Minute, Want: wants, MaxStops: maxStops})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// slotsOf returns the model's slots with a job, sorted.
func (w *world) slotsOf(model string) []string {
	var out []string
	for _, j := range w.jobs {
		if j.Model == model && !slices.Contains(out, j.Replica) {
			out = append(out, j.Replica)
		}
	}
	sort.Strings(out)
	return out
}

// pduBudgets caps every PDU (two nodes of 1000 W base) at n replicas of
// 2600 W.
func (w *world) pduBudgets(n int) {
	w.fac.Budgets = nil
	for _, rack := range []string{"r1-k1", "r1-k2", "r2-k1", "r2-k2"} {
		d, _ := facility.ParseDomain("pdu=p-" + rack)
		w.fac.Budgets = append(w.fac.Budgets, facility.Budget{Domain: d, Watts: 2*1000 + float64(n)*2600})
	}
}

func TestScaleUpAndDownFollowWant(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models = []facility.Model{autoModel("m", 1, 8, 50)}
	res := w.planWant(t, map[string]int{"m": 4}, 0)
	if diff := cmp.Diff([]string{"create m-0", "create m-1", "create m-2", "create m-3"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if s := res.Scale["m"]; s.Want != 4 || s.Had != 0 || s.Has != 4 || s.Explain() != "wants 4, has 4" || len(s.Added) != 4 {
		t.Errorf("scale %+v", s)
	}
	if !strings.HasPrefix(res.Actions[1].Reason, "scale up 0→4: the autoscaler wants 4") && !strings.HasPrefix(res.Actions[1].Reason, "autoscale min") {
		t.Errorf("reason %q", res.Actions[1].Reason)
	}
	w.apply(res.Actions)
	w.serveAll()
	if diff := cmp.Diff(map[string]int{"r1-k1": 1, "r1-k2": 1, "r2-k1": 1, "r2-k2": 1}, racksOf(w)); diff != "" {
		t.Errorf("spread (-want +got):\n%s", diff)
	}
	// Level-based: the same want does nothing more.
	if res := w.planWant(t, map[string]int{"m": 4}, 0); len(res.Actions) != 0 {
		t.Fatalf("again: %v", kinds(res.Actions))
	}
	// Down to 2: two go, and the two left are in two racks.
	res = w.planWant(t, map[string]int{"m": 2}, 0)
	if len(res.Actions) != 2 || res.Actions[0].Kind != Stop || !strings.HasPrefix(res.Actions[0].Reason, "scale down 4→2: the autoscaler wants 2") {
		t.Fatalf("down: %v", res.Actions)
	}
	w.apply(res.Actions)
	if got := racksOf(w); len(got) != 2 {
		t.Errorf("after the scale down: %v", got)
	}
	// No want: keeps what it has (counts never move on missing data).
	if res := w.planWant(t, nil, 0); len(res.Actions) != 0 || res.Scale["m"].Want != 2 ||
		!strings.Contains(res.Scale["m"].Reason, "no autoscaler decision: keeps its 2 slots") {
		t.Fatalf("no want: %v %+v", kinds(res.Actions), res.Scale["m"])
	}
	// A want past max is held to it; max lowered stops the slots past it.
	res = w.planWant(t, map[string]int{"m": 99}, 0)
	if s := res.Scale["m"]; s.Want != 8 || s.Has != 8 || !strings.Contains(s.Reason, "within autoscale min 1, max 8: 8") {
		t.Errorf("over max: %+v", s)
	}
	w.apply(res.Actions)
	w.cat.Models[0].Autoscale.Max = 3
	res = w.planWant(t, map[string]int{"m": 3}, 0)
	stops := 0
	for _, a := range res.Actions {
		if a.Kind == Stop {
			stops++
			if !a.Catalog && !strings.HasPrefix(a.Reason, "scale down") {
				t.Errorf("stop %s: %q", a.Replica, a.Reason)
			}
			if a.Catalog && a.Reason != "model m has autoscale max = 3" {
				t.Errorf("catalog stop %s: %q", a.Replica, a.Reason)
			}
		}
		if a.Kind == Create {
			t.Errorf("create %s", a.Replica)
		}
	}
	w.apply(res.Actions)
	if got := w.slotsOf("m"); len(got) != 3 || stops != 5 {
		t.Errorf("after max = 3: %v (%d stops)", got, stops)
	}
}

func TestNoWantKeepsAtLeastOne(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models = []facility.Model{autoModel("m", 0, 8, 50)}
	res := w.planWant(t, nil, 0)
	if diff := cmp.Diff([]string{"create m-0"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if s := res.Scale["m"]; s.Want != 1 || !strings.Contains(s.Reason, "no autoscaler decision: keeps its 0 slots, at least 1") {
		t.Errorf("scale %+v", s)
	}
	// With a decision, zero is zero.
	if res := w.planWant(t, map[string]int{"m": 0}, 0); len(res.Actions) != 0 {
		t.Errorf("want 0: %v", kinds(res.Actions))
	}
}

func TestNoWantStartsAtMin(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models = []facility.Model{autoModel("m", 2, 8, 50)}
	res := w.planWant(t, nil, 0)
	if diff := cmp.Diff([]string{"create m-0", "create m-1"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if res.Actions[0].Reason != "autoscale min 2" {
		t.Errorf("reason %q", res.Actions[0].Reason)
	}
}

// The victims of a scale down: first what does not serve, then what keeps
// the spread, then the highest slot.
func TestScaleDownVictimsKeepTheSpread(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.cat.Models = []facility.Model{autoModel("m", 1, 8, 50)}
	// Slots 0, 1 and 3 in rack r1-k1 (two nodes), slot 2 in r2-k1.
	place := map[string]string{"m-0": "n-r1-k1-1", "m-1": "n-r1-k1-2", "m-2": "n-r2-k1-1", "m-3": "n-r1-k1-1"}
	for i, slot := range []string{"m-0", "m-1", "m-2", "m-3"} {
		w.jobs = append(w.jobs, Job{
			ID: "j-" + slot, Replica: slot, Model: "m", Profile: "p", FP: facility.ProfileFingerprint(w.cat.Models[0], w.cat.Models[0].Profiles[0]),
			Shards: []facility.Shard{{Node: place[slot], Watts: 2600, GPU: "NVIDIA H200", GPUs: 4}}, State: Serving,
			CreateIndex: uint64(10 + i), ModifyIndex: uint64(10 + i),
		})
	}
	stopped := func(res Result) []string {
		var out []string
		for _, a := range res.Actions {
			if a.Kind == Stop {
				out = append(out, a.Replica)
			}
		}
		sort.Strings(out)
		return out
	}
	// One to go: of r1-k1's three, the highest slot; not m-2, alone in its rack.
	if diff := cmp.Diff([]string{"m-3"}, stopped(w.planWant(t, map[string]int{"m": 3}, 0))); diff != "" {
		t.Errorf("down by 1 (-want +got):\n%s", diff)
	}
	// Two to go: m-3, then of m-0 and m-1 (both in r1-k1, on two nodes:
	// the PDU level ties too) the higher, m-1. m-2 stays.
	if diff := cmp.Diff([]string{"m-1", "m-3"}, stopped(w.planWant(t, map[string]int{"m": 2}, 0))); diff != "" {
		t.Errorf("down by 2 (-want +got):\n%s", diff)
	}
	// A failed slot goes first, wherever it is.
	w.jobs[2].State = Failed // m-2
	if diff := cmp.Diff([]string{"m-2"}, stopped(w.planWant(t, map[string]int{"m": 3}, 0))); diff != "" {
		t.Errorf("down by 1 with m-2 failed (-want +got):\n%s", diff)
	}
	w.jobs[2].State = Serving
	w.jobs[0].State = Starting // m-0: not serving yet, before any serving one
	if diff := cmp.Diff([]string{"m-0"}, stopped(w.planWant(t, map[string]int{"m": 3}, 0))); diff != "" {
		t.Errorf("down by 1 with m-0 starting (-want +got):\n%s", diff)
	}
}

func TestBudgetStopsAScaleUpWithItsReason(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(1)
	w.cat.Models = []facility.Model{autoModel("m", 1, 8, 50)}
	res := w.planWant(t, map[string]int{"m": 6}, 0)
	w.apply(res.Actions)
	s := res.Scale["m"]
	if s.Has != 4 {
		t.Fatalf("has %d, want 4 (one per PDU): %v", s.Has, kinds(res.Actions))
	}
	if want := "wants 6, has 4: pdu=p-r1-k1 would draw 7.2 kW of 4.6 kW"; s.Explain() != want {
		t.Errorf("explain %q, want %q", s.Explain(), want)
	}
	if d := res.Decisions["m-4"]; d.Placed || len(d.Rejections) == 0 {
		t.Errorf("m-4's decision: %+v", d)
	}
	// The next pass asks again, and says the same.
	if res := w.planWant(t, map[string]int{"m": 6}, 0); len(res.Actions) != 0 || res.Scale["m"].Short == "" {
		t.Errorf("again: %v %+v", kinds(res.Actions), res.Scale["m"])
	}
}

func TestHigherPriorityGetsTheWattsFirst(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(1) // 4 replicas in all
	w.cat.Models = []facility.Model{autoModel("low", 1, 8, 20), autoModel("high", 1, 8, 80)}
	res := w.planWant(t, map[string]int{"low": 4, "high": 4}, 0)
	// Each gets its min first; then high takes what is left.
	lo, hi := res.Scale["low"], res.Scale["high"]
	if lo.Has != 1 || hi.Has != 3 {
		t.Fatalf("low has %d, high %d; want 1 and 3", lo.Has, hi.Has)
	}
	if !strings.Contains(lo.Short, "high (priority 80) holds the rest") {
		t.Errorf("low: %q", lo.Explain())
	}
	if !strings.Contains(hi.Short, "low (priority 20, at its floor of 1) holds the rest") {
		t.Errorf("high: %q", hi.Explain())
	}
}

// One priority shares what is left in proportion to what each lacks.
func TestSamePriorityShares(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(2) // 8 replicas in all
	w.cat.Models = []facility.Model{autoModel("a", 1, 16, 50), autoModel("b", 1, 16, 50)}
	// Beyond their mins (1 each), a lacks 9 and b 3; 6 places are left:
	// a gets 4.5 and b 1.5 of them, rounded as the steps fall: 4 and 2.
	res := w.planWant(t, map[string]int{"a": 10, "b": 4}, 0)
	a, b := res.Scale["a"], res.Scale["b"]
	if a.Has+b.Has != 8 {
		t.Fatalf("a %d + b %d, want the 8 the budgets hold", a.Has, b.Has)
	}
	if a.Has != 5 || b.Has != 3 {
		t.Errorf("a has %d, b %d; want 5 and 3 (1 + 4 and 1 + 2)", a.Has, b.Has)
	}
	if !strings.Contains(a.Short, "b (priority 50, as high)") {
		t.Errorf("a: %q", a.Explain())
	}
}

func TestHigherPriorityTakesReplicasAboveTheFloorNewCopyFirst(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(1) // 4 replicas in all
	w.cat.Models = []facility.Model{autoModel("low", 1, 8, 20), autoModel("high", 1, 8, 80)}
	w.apply(w.planWant(t, map[string]int{"low": 4, "high": 0}, 0).Actions) // high's min 1 first: low 3, high 1
	w.serveAll()
	if got := len(w.slotsOf("low")); got != 3 {
		t.Fatalf("low has %d", got)
	}
	res := w.planWant(t, map[string]int{"low": 4, "high": 4}, 0)
	// high takes low's two above its floor of 1; not the last.
	var order []string
	for _, a := range res.Actions {
		order = append(order, a.Kind.String()+" "+a.Replica+" "+a.Yields)
		if a.Kind == Stop && (a.Yields == "" || !strings.Contains(a.Reason, "yields its place to "+a.Yields+" of high (priority 80 over 20")) {
			t.Errorf("stop %s: yields %q, reason %q", a.Replica, a.Yields, a.Reason)
		}
	}
	// New copy first: each create before the stop that makes room for it.
	for i, a := range res.Actions {
		if a.Kind == Stop {
			if j := slices.IndexFunc(res.Actions, func(c Action) bool { return c.Kind == Create && c.Replica == a.Yields }); j < 0 || j > i {
				t.Errorf("stop %s at %d; its create %s at %d", a.Replica, i, a.Yields, j)
			}
		}
	}
	lo, hi := res.Scale["low"], res.Scale["high"]
	if hi.Has != 3 || lo.Has != 1 || len(lo.Yielded) != 2 {
		t.Fatalf("high %d, low %d (yielded %v); want 3 and 1: %v", hi.Has, lo.Has, lo.Yielded, order)
	}
	if !strings.Contains(hi.Explain(), "wants 4, has 3: ") || !strings.Contains(hi.Short, "low (priority 20, at its floor of 1) holds the rest") {
		t.Errorf("high: %q", hi.Explain())
	}
	w.apply(res.Actions)
	// Stable: the next pass moves nothing.
	if res := w.planWant(t, map[string]int{"low": 4, "high": 4}, 0); len(res.Actions) != 0 {
		t.Errorf("again: %v", kinds(res.Actions))
	}
}

func TestNoTakingAtTheSamePriority(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(1)
	w.cat.Models = []facility.Model{autoModel("a", 1, 8, 50)}
	w.apply(w.planWant(t, map[string]int{"a": 4}, 0).Actions)
	w.cat.Models = append(w.cat.Models, autoModel("b", 0, 8, 50))
	res := w.planWant(t, map[string]int{"a": 4, "b": 2}, 0)
	for _, a := range res.Actions {
		t.Errorf("action %v", a)
	}
	if s := res.Scale["b"]; s.Has != 0 || !strings.Contains(s.Short, "a (priority 50, as high) holds the rest") {
		t.Errorf("b: %q", s.Explain())
	}
}

// A preemption waits while the pass has no stops left under max_stops.
func TestTakingRespectsMaxStops(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(1)
	w.cat.Models = []facility.Model{autoModel("low", 1, 8, 20)}
	w.apply(w.planWant(t, map[string]int{"low": 4}, 0).Actions)
	w.cat.Models = append(w.cat.Models, autoModel("high", 0, 8, 80))
	res := w.planWant(t, map[string]int{"low": 4, "high": 3}, 2)
	if s := res.Scale["high"]; s.Has != 2 {
		t.Errorf("high has %d, want 2 (max_stops 2)", s.Has)
	}
	if res.DeferredStops != 0 {
		t.Errorf("deferred %d stops: a yielded stop must never be left behind its create", res.DeferredStops)
	}
}

// A big replica takes several small ones' watts, and no more than it needs.
func TestTakingSeveralForOneBigReplica(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(2) // 2 × 2600 W per PDU
	small := autoModel("small", 1, 16, 20)
	small.Profiles[0].GPUs, small.Profiles[0].Watts = 1, 1300
	big := autoModel("big", 0, 4, 80)
	big.Profiles[0].GPUs, big.Profiles[0].Watts = 8, 5200
	w.cat.Models = []facility.Model{small}
	w.apply(w.planWant(t, map[string]int{"small": 16}, 0).Actions) // 4 per PDU
	w.serveAll()
	if got := len(w.slotsOf("small")); got != 16 {
		t.Fatalf("small has %d", got)
	}
	w.cat.Models = append(w.cat.Models, big)
	res := w.planWant(t, map[string]int{"small": 16, "big": 1}, 0)
	b, s := res.Scale["big"], res.Scale["small"]
	if b.Has != 1 || s.Has != 12 || len(s.Yielded) != 4 {
		t.Fatalf("big %d, small %d (yielded %v); want 1 and 12 (a PDU's 4 small for one big): %v", b.Has, s.Has, s.Yielded, kinds(res.Actions))
	}
	// The ones taken all sit where the big one goes.
	create := res.Actions[slices.IndexFunc(res.Actions, func(a Action) bool { return a.Kind == Create })]
	pdu := map[string]string{}
	for _, n := range w.nodes {
		pdu[n.Name] = n.Location.PDU
	}
	for _, a := range res.Actions {
		if a.Kind == Stop {
			j := w.jobs[slices.IndexFunc(w.jobs, func(j Job) bool { return j.ID == a.JobID })]
			if pdu[j.Shards[0].Node] != pdu[create.Decision.Shards[0].Node] {
				t.Errorf("took %s on %s for a replica on %s", a.Replica, pdu[j.Shards[0].Node], pdu[create.Decision.Shards[0].Node])
			}
		}
	}
}

// With autoscaling on, a fixed model's missing slots take their place by
// priority among the floors.
func TestFixedFloorsByPriority(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(1) // 4 in all
	fixed := model("fixed", 3, "p", 4, nil)
	fixed.Priority = 10
	w.cat.Models = []facility.Model{fixed, autoModel("auto", 2, 8, 90)}
	res := w.planWant(t, map[string]int{"auto": 2}, 0)
	if got := res.Scale["auto"].Has; got != 2 {
		t.Errorf("auto has %d, want its min 2", got)
	}
	placed := 0
	for _, a := range res.Actions {
		if a.Kind == Create && a.Model.Name == "fixed" {
			placed++
		}
	}
	if placed != 2 {
		t.Errorf("fixed placed %d, want 2 of its 3", placed)
	}
	if d := res.Decisions["fixed-2"]; d.Placed {
		t.Errorf("fixed-2 placed")
	}
	// And nothing takes a fixed model's replicas: its floor is all of them.
	w.apply(res.Actions)
	res = w.planWant(t, map[string]int{"auto": 8}, 0)
	for _, a := range res.Actions {
		if a.Kind == Stop {
			t.Errorf("stopped %s", a.Replica)
		}
	}
}

// Of the replicas taken together, those the new one fits without are
// given back; and a model above its floor by one gives one, never more.
func TestTakingGivesBackWhatItDoesNotNeed(t *testing.T) {
	t.Parallel()
	setup := func(mediumMin int) *world {
		w := newWorld()
		w.fac.Budgets = nil
		for _, rack := range []string{"r1-k1", "r1-k2", "r2-k1", "r2-k2"} {
			d, _ := facility.ParseDomain("pdu=p-" + rack)
			watts := 2000.0 // the base of its two nodes: full
			if rack == "r1-k1" {
				watts = 2000 + 2*2600 + 1300 // what runs there now
			}
			w.fac.Budgets = append(w.fac.Budgets, facility.Budget{Domain: d, Watts: watts})
		}
		small := autoModel("small", 0, 4, 10)
		small.Profiles[0].GPUs, small.Profiles[0].Watts = 1, 1300
		medium := autoModel("medium", mediumMin, 4, 20)
		big := autoModel("big", 0, 2, 80)
		big.Profiles[0].GPUs, big.Profiles[0].Watts = 8, 5200
		w.cat.Models = []facility.Model{small, medium, big}
		job := func(m facility.Model, slot, node string) Job {
			p := m.Profiles[0]
			return Job{ID: "j-" + slot, Replica: slot, Model: m.Name, Profile: p.Name, FP: facility.ProfileFingerprint(m, p),
				Shards: []facility.Shard{{Node: node, Watts: p.Watts, GPU: p.GPU, GPUs: p.GPUs}}, State: Serving}
		}
		w.jobs = []Job{job(small, "small-0", "n-r1-k1-2"), job(medium, "medium-0", "n-r1-k1-1"), job(medium, "medium-1", "n-r1-k1-1")}
		return w
	}
	w := setup(0)
	res := w.planWant(t, map[string]int{"small": 1, "medium": 2, "big": 1}, 0)
	var yielded []string
	for _, a := range res.Actions {
		if a.Kind == Stop {
			yielded = append(yielded, a.Replica)
		}
	}
	sort.Strings(yielded)
	if diff := cmp.Diff([]string{"medium-0", "medium-1"}, yielded); diff != "" || res.Scale["big"].Has != 1 {
		t.Errorf("big has %d; stopped (-want +got):\n%s", res.Scale["big"].Has, diff)
	}
	// medium at min 1 has one above its floor: big needs two of them, so
	// it takes nothing.
	w = setup(1)
	res = w.planWant(t, map[string]int{"small": 1, "medium": 2, "big": 1}, 0)
	for _, a := range res.Actions {
		t.Errorf("with medium's floor at 1: %v", a)
	}
	// (pdu=p-r1-k1 has no node with 8 GPUs free: over budget is what the
	// other PDUs say.)
	if s := res.Scale["big"]; s.Has != 0 || s.Short != "pdu=p-r1-k2 would draw 7.2 kW of 2.0 kW" {
		t.Errorf("big: %q", s.Explain())
	}
}

// A model whose replica yields its place grows back in a later pass, into
// the slot it gave up, never into a slot past its max in the same pass.
func TestYieldedModelGrowsBackWithinItsMax(t *testing.T) {
	t.Parallel()
	w := newWorld()
	small := facility.Node{Name: "n-small", Location: facility.Location{Site: "s", Room: "a", Row: "r2", Rack: "r2-k2", PDU: "p-r2-k2"},
		CPUCores: 128, MemoryGB: 2048, BaseWatts: 1000, GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 1, Free: 1, PowerLimitWatts: 700, MemoryMiB: 143771}}}
	w.nodes = w.nodes[:2]
	high := autoModel("high", 1, 2, 80)
	high.Profiles[0].GPUs = 8
	low := autoModel("low", 0, 1, 20)
	low.Profiles[0].GPUs = 1
	w.cat.Models = []facility.Model{high, low}
	// high-0 fills one node, low-0 is on the other; then a node with one
	// GPU joins.
	w.apply(w.planWant(t, map[string]int{"high": 1, "low": 1}, 0).Actions)
	w.serveAll()
	if got := w.slotsOf("low"); len(got) != 1 {
		t.Fatalf("low: %v", got)
	}
	w.nodes = append(w.nodes, small)

	// high wants a second 8-GPU replica: only low-0's node can hold it.
	res := w.planWant(t, map[string]int{"high": 2, "low": 1}, 0)
	if diff := cmp.Diff([]string{"create high-1", "stop low-0"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("actions (-want +got):\n%s", diff)
	}
	if _, tried := res.Decisions["low-1"]; tried {
		t.Errorf("low-1, past low's max of 1, was tried: %+v", res.Decisions["low-1"])
	}
	if s := res.Scale["low"]; s.Has != 0 || !strings.Contains(s.Short, "every slot below autoscale max 1 still has a job") {
		t.Errorf("low: has %d, %q", s.Has, s.Explain())
	}
	w.apply(res.Actions)
	w.serveAll()
	// Next pass: low-0 again, a new generation, on the small node.
	res = w.planWant(t, map[string]int{"high": 2, "low": 1}, 0)
	if diff := cmp.Diff([]string{"create low-0"}, kinds(res.Actions)); diff != "" {
		t.Fatalf("the next pass (-want +got):\n%s", diff)
	}
	if d := res.Actions[0].Decision; d.Shards[0].Node != "n-small" {
		t.Errorf("low-0 placed on %s", d.Shards[0].Node)
	}
}

// A replica whose engine sleeps is given up first when a model of higher
// priority needs room, before the awake replicas of a model of lower
// priority.
func TestAsleepReplicasGiveWayFirst(t *testing.T) {
	t.Parallel()
	w := newWorld()
	w.pduBudgets(1) // 4 replicas in all
	sleepy := autoModel("sleepy", 0, 8, 40)
	sleepy.Autoscale.WhenIdle = facility.IdleSleep
	w.cat.Models = []facility.Model{autoModel("low", 1, 8, 20), sleepy, autoModel("high", 1, 8, 80)}
	w.apply(w.planWant(t, map[string]int{"low": 2, "sleepy": 1, "high": 0}, 0).Actions)
	w.serveAll()
	if len(w.slotsOf("low")) != 2 || len(w.slotsOf("sleepy")) != 1 || len(w.slotsOf("high")) != 1 {
		t.Fatalf("low %v, sleepy %v, high %v", w.slotsOf("low"), w.slotsOf("sleepy"), w.slotsOf("high"))
	}
	plan := func(asleep map[string]bool) Result {
		wants := map[string]Want{"low": {N: 2}, "sleepy": {N: 1}, "high": {N: 2}}
		res, err := Plan(Input{Now: w.now, Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac, Jobs: w.jobs,
			PartialDeadline: 10 * time.Minute, Want: wants, Asleep: asleep})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	stopped := func(res Result) []string {
		var out []string
		for _, a := range res.Actions {
			if a.Kind == Stop {
				out = append(out, a.Replica)
			}
		}
		return out
	}
	// Awake: the lowest priority gives way.
	if got := stopped(plan(nil)); len(got) != 1 || !strings.HasPrefix(got[0], "low-") {
		t.Errorf("awake: stops %v, want one of low's", got)
	}
	// Asleep: sleepy's sleeping replica goes first, and sleepy, idle,
	// takes no one's place to come back.
	if got := stopped(plan(map[string]bool{w.slotsOf("sleepy")[0]: true})); len(got) != 1 || !strings.HasPrefix(got[0], "sleepy-") {
		t.Errorf("asleep: stops %v, want sleepy's sleeping replica", got)
	}
}

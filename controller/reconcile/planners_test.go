package reconcile

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/weightsapi"
)

// randomFleetWorld is a random data centre for the planners' property
// test: rows of racks of PDUs of nodes, some measured (not in whole
// watts), budgets on some domains, a catalog of fixed, autoscaled,
// multi-node and warm-spared models.
func randomFleetWorld(r *rand.Rand) *world {
	w := &world{now: t0, nextIdx: 100}
	id := 0
	for row := range 1 + r.IntN(3) {
		for rack := range 1 + r.IntN(3) {
			for pdu := range 1 + r.IntN(2) {
				for range 1 + r.IntN(3) {
					id++
					n := facility.Node{
						Name:     fmt.Sprintf("n%03d", id),
						Location: facility.Location{Site: "s", Row: fmt.Sprintf("r%d", row), Rack: fmt.Sprintf("r%d-k%d", row, rack), PDU: fmt.Sprintf("r%d-k%d-p%d", row, rack, pdu)},
						CPUCores: 128, MemoryGB: 2048, BaseWatts: float64(800 + r.IntN(400)),
						GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 8, Free: 8, PowerLimitWatts: 700, MemoryMiB: 143771}},
					}
					if r.IntN(3) == 0 {
						n.MeasuredWatts = 1000 + r.Float64()*4000
					}
					w.nodes = append(w.nodes, n)
				}
			}
		}
	}
	for _, n := range w.nodes {
		for _, d := range []facility.Domain{{Level: facility.LevelPDU, Value: n.Location.PDU}, {Level: facility.LevelRack, Value: n.Location.Rack}, {Level: facility.LevelSite, Value: "s"}} {
			if r.IntN(3) != 0 || hasBudget(w.fac, d) {
				continue
			}
			w.fac.Budgets = append(w.fac.Budgets, facility.Budget{Domain: d, Watts: float64(5000 + r.IntN(60000))})
		}
	}
	w.fac.Headroom = []float64{0, 0.05}[r.IntN(2)]
	for m := range 1 + r.IntN(3) {
		md := model(fmt.Sprintf("m%d", m), 1+r.IntN(4), "p", []int{1, 2, 4, 8}[r.IntN(4)], nil)
		if r.IntN(3) == 0 {
			md.Profiles = append(md.Profiles, facility.Profile{Name: "two", Engine: "vllm", GPU: "NVIDIA H200", GPUs: 8, Nodes: 2,
				KeepWithin: facility.LevelRow, Watts: 5000, Spread: []facility.Level{facility.LevelRack}, Weight: 1})
		}
		if r.IntN(4) == 0 {
			md = autoModel(md.Name, 1, 4, 10*m)
		}
		if r.IntN(4) == 0 {
			md.Weights = &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/" + md.Name, Files: []string{"m.gguf"}}}
			md.WarmSpares = 1
		}
		w.cat.Models = append(w.cat.Models, md)
	}
	return w
}

func hasBudget(fac facility.Facility, d facility.Domain) bool {
	for _, b := range fac.Budgets {
		if b.Domain == d {
			return true
		}
	}
	return false
}

// TestPlanWithPlannersMatchesPlan: over random fleets living through
// passes — replicas placed, serving, failing, nodes lost and gone, holds
// and drains coming and going, rolls, autoscaled counts moving — a pass
// whose planner comes from a kept PlannerCache decides exactly what a
// pass building its own decides, and the cache builds the layout's index
// again only when the layout changed.
func TestPlanWithPlannersMatchesPlan(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(38, 2))
	passes, refits := 0, 0
	kinds := map[string]int{}
	var cache facility.PlannerCache
	for trial := range 60 {
		w := randomFleetWorld(r)
		refits += cache.Refits()
		cache = facility.PlannerCache{}
		gone := map[string]bool{}
		for step := range 30 {
			where := fmt.Sprintf("trial %d step %d", trial, step)
			switch r.IntN(8) {
			case 0: // a node is lost: its replicas fail, it has nothing free
				n := &w.nodes[r.IntN(len(w.nodes))]
				n.GPUs[0].Count, n.CPUCores, n.MemoryGB = 0, 0, 0
				for i := range w.jobs {
					for _, s := range w.jobs[i].Shards {
						if s.Node == n.Name {
							w.jobs[i].State = Failed
						}
					}
				}
			case 1: // a node leaves the fleet (its jobs' shards there are left out)
				gone[w.nodes[r.IntN(len(w.nodes))].Name] = true
			case 2: // a hold, with or without drain, comes or goes
				d := facility.Domain{Level: facility.LevelRack, Value: w.nodes[r.IntN(len(w.nodes))].Location.Rack}
				if len(w.fac.Holds) > 0 {
					w.fac.Holds = nil
				} else {
					w.fac.Holds = []facility.Hold{{Domain: d, Reason: "swap", Drain: r.IntN(2) == 0}}
				}
			case 3: // a roll
				m := &w.cat.Models[r.IntN(len(w.cat.Models))]
				m.Profiles[0].Args = []string{fmt.Sprintf("--step=%d", step)}
			case 4: // a reading of the draw, not in whole watts
				w.nodes[r.IntN(len(w.nodes))].MeasuredWatts = r.Float64() * 5000
			case 5: // a node comes back
				n := &w.nodes[r.IntN(len(w.nodes))]
				n.GPUs[0].Count, n.CPUCores, n.MemoryGB = 8, 128, 2048
				delete(gone, n.Name)
			}
			fleet := w.fleet()
			kept := fleet.Nodes[:0]
			for _, n := range fleet.Nodes {
				if !gone[n.Name] {
					kept = append(kept, n)
				}
			}
			fleet.Nodes = kept
			r.Shuffle(len(fleet.Nodes), func(i, j int) { fleet.Nodes[i], fleet.Nodes[j] = fleet.Nodes[j], fleet.Nodes[i] })
			want := map[string]Want{}
			for _, m := range w.cat.Models {
				if m.Autoscale != nil && r.IntN(2) == 0 {
					want[m.Name] = Want{N: 1 + r.IntN(4), Reason: "test"}
				}
			}
			in := Input{Now: w.now, Catalog: w.cat, Fleet: fleet, Facility: w.fac, Jobs: w.jobs,
				PartialDeadline: 10 * time.Minute, MaxStops: r.IntN(3), Want: want}
			fresh, ferr := Plan(in)
			in.Planners = &cache
			kept2, kerr := Plan(in)
			if fmt.Sprint(ferr) != fmt.Sprint(kerr) {
				t.Fatalf("%s: Plan: %v; with planners: %v", where, ferr, kerr)
			}
			if ferr != nil {
				continue
			}
			passes++
			for _, a := range fresh.Actions {
				kinds[a.Kind.String()]++
			}
			if len(fresh.Spares) > 0 {
				kinds["spares"]++
			}
			for _, d := range fresh.Decisions {
				if !d.Placed {
					kinds["unplaced"]++
				}
			}
			if diff := cmp.Diff(fresh, kept2); diff != "" {
				t.Fatalf("%s: the pass with a kept planner cache decides otherwise (-fresh +kept):\n%s", where, diff)
			}
			n := len(fresh.Actions)
			if n > 0 {
				n = r.IntN(n + 1)
			}
			w.apply(fresh.Actions[:n])
			for i := range w.jobs {
				if w.jobs[i].State != Failed && r.IntN(2) == 0 {
					w.jobs[i].State = Serving
				}
			}
			w.now = w.now.Add(time.Minute)
		}
	}
	refits += cache.Refits()
	t.Logf("%d passes compared, %d planners brought up to date from the pass before's; actions and decisions in them: %v", passes, refits, kinds)
	// Most passes' planners must be the pass before's brought up to date
	// (the first pass of a trial and those after a layout change build
	// theirs), or the test compared little of that.
	if refits*4 < passes*3 {
		t.Fatalf("%d of %d passes' planners were brought up to date", refits, passes)
	}
	// The layout changes in a quarter of the steps at most (a node gone,
	// a hold): most passes must have kept the index.
	if b := cache.Builds(); passes == 0 || b*2 > 30 {
		t.Fatalf("%d passes; the last trial's cache built its index %d times in 30 steps", passes, b)
	}
}

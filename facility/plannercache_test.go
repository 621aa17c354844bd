package facility

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

// liveFleet is the world's fleet as a live one reads while running runs:
// each node's free GPUs, cores and memory less the shards on it, nothing
// free on a lost node.
func liveFleet(w *world, running []Replica, lost map[string]bool) Fleet {
	fleet := w.fleet
	fleet.Nodes = slices.Clone(w.fleet.Nodes)
	idx := map[string]int{}
	for i := range fleet.Nodes {
		n := &fleet.Nodes[i]
		n.GPUs = slices.Clone(n.GPUs)
		idx[n.Name] = i
		if lost[n.Name] {
			n.GPUs[0].Free, n.CPUCores, n.MemoryGB = 0, 0, 0
		}
	}
	for _, r := range running {
		for _, s := range r.Shards {
			n := &fleet.Nodes[idx[s.Node]]
			n.GPUs[0].Free = max(0, n.GPUs[0].Free-s.GPUs)
			n.CPUCores, n.MemoryGB = max(0, n.CPUCores-s.CPUCores), max(0, n.MemoryGB-s.MemoryGB)
		}
	}
	return fleet
}

// aPass does to a planner what a controller's pass does, from r's draws:
// the replicas on lost nodes and some others not serving, a few placed
// and committed (one of them a request nothing can hold), one stopped,
// one stopped and put back; it returns what each step said, and the
// replicas committed and stopped. Given two planners in the same state
// and two generators in the same state, it does the same to both.
func aPass(r *rand.Rand, p *Planner, w *world, running []Replica, lost map[string]bool, seq int) (said []any, placed []Replica, stopped []string) {
	for _, x := range running {
		if lost[x.Shards[0].Node] || r.IntN(8) == 0 {
			said = append(said, p.NotServing(x.ID))
		}
	}
	for i := range r.IntN(4) {
		m := pick(r, w.cat.Models...)
		if i == 0 && r.IntN(3) == 0 {
			m.Profiles = []Profile{{Name: "huge", Engine: "vllm", GPU: "H", GPUs: 64, Nodes: 1, Weight: 1}} // fails
		}
		d := p.Place(Request{Replica: fmt.Sprintf("%s-x%d-%d", m.Name, seq, i), Model: m})
		said = append(said, d)
		if d.Placed {
			said = append(said, p.Commit(d))
			placed = append(placed, d.Running())
		}
	}
	if len(running) > 0 && r.IntN(2) == 0 {
		id := pick(r, running...).ID
		x, err := p.Remove(id)
		said = append(said, x, fmt.Sprint(err))
		if err == nil {
			stopped = append(stopped, id)
			if r.IntN(3) == 0 {
				said = append(said, p.Restore(x))
				x, err = p.Remove(id)
				said = append(said, x, fmt.Sprint(err))
			}
		}
	}
	return append(said, p.Budgeted(), p.Draining()), placed, stopped
}

// TestPlannerCacheRefits: a PlannerCache's planner, used by a pass
// (replicas not serving, placed, committed, stopped, put back, a request
// nothing holds) and brought up to date for the next — nodes lost and
// back, their draws, weights and fetch rates changing, hold reasons and
// learned draws changing, replicas stopped, replaced, placed, the same
// input twice, a pass's writes lost (the next pass given what the one
// before was), warm spares picked between passes — is at every pass the
// planner NewPlanner builds: every field (diffPlanners), its indexes as
// they would be built again (checkIndexes), and the same pass on both
// says the same.
func TestPlannerCacheRefits(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(38, 3))
	passes, refitted := 0, 0
	for iter := range 150 {
		w := randomWorld(r, iter%4 != 0)
		var c PlannerCache
		var running []Replica
		lost := map[string]bool{}
		// The catalog placed once, in placement order: what runs at first.
		if plan, err := PlanCatalog(w.fleet, w.fac, w.cat); err == nil {
			for _, d := range plan.Placements {
				running = append(running, d.Running())
			}
		}
		for pass := range 10 {
			where := fmt.Sprintf("world %d, pass %d", iter, pass)
			fleet := liveFleet(&w, running, lost)
			for range 1 + r.IntN(2) { // now and then the same input twice
				refits := c.refits
				want, werr := NewPlanner(fleet, w.fac, running)
				got, gerr := c.NewPlanner(fleet, w.fac, running)
				if fmt.Sprint(werr) != fmt.Sprint(gerr) {
					t.Fatalf("%s: NewPlanner: %v; the cache's: %v", where, werr, gerr)
				}
				if werr != nil {
					t.Fatalf("%s: %v", where, werr)
				}
				passes++
				if c.refits > refits {
					refitted++
				}
				if f := diffPlanners(want, got); f != "" {
					t.Fatalf("%s: the cache's planner differs from NewPlanner's in %s", where, f)
				}
				if f := checkIndexes(got); f != "" {
					t.Fatalf("%s: %s", where, f)
				}
			}
			want, _ := NewPlanner(fleet, w.fac, running)
			got := c.slots[0].last
			seed := r.Uint64()
			wsaid, placed, stopped := aPass(rand.New(rand.NewPCG(seed, 1)), want, &w, running, lost, pass)
			gsaid, _, _ := aPass(rand.New(rand.NewPCG(seed, 1)), got, &w, running, lost, pass)
			if d := gocmp.Diff(wsaid, gsaid, gocmp.Comparer(func(a, b error) bool { return errors.Is(a, b) || fmt.Sprint(a) == fmt.Sprint(b) })); d != "" {
				t.Fatalf("%s: the pass says otherwise on the cache's planner (-NewPlanner +cache):\n%s", where, d)
			}
			if f := diffPlanners(want, got); f != "" {
				t.Fatalf("%s: after the same pass, the cache's planner differs from NewPlanner's in %s", where, f)
			}
			if r.IntN(3) == 0 { // warm spares, between passes
				ws, werr := WarmSpares(fleet, w.fac, w.cat.Models, running)
				gs, gerr := c.WarmSpares(fleet, w.fac, w.cat.Models, running)
				if d := gocmp.Diff(ws, gs); d != "" || fmt.Sprint(werr) != fmt.Sprint(gerr) {
					t.Fatalf("%s: warm spares differ (-NewPlanner +cache): %v %v\n%s", where, werr, gerr, d)
				}
			}

			if r.IntN(4) == 0 {
				continue // the pass's writes failed: the next sees the same
			}
			// What runs next: the stopped gone, the replicas of lost nodes
			// replaced (the same id, where placement put it now), the
			// placed after the rest.
			next := running[:0:0]
			for _, x := range running {
				if slices.Contains(stopped, x.ID) {
					continue
				}
				if lost[x.Shards[0].Node] {
					if i := slices.IndexFunc(placed, func(p Replica) bool { return len(p.Shards) == len(x.Shards) }); i >= 0 {
						y := placed[i]
						placed = slices.Delete(placed, i, i+1)
						y.ID, y.Model, y.Profile = x.ID, x.Model, x.Profile
						next = append(next, y)
					}
					continue
				}
				next = append(next, x)
			}
			running = append(next, placed...)
			// The fleet.
			n := &w.fleet.Nodes[r.IntN(len(w.fleet.Nodes))]
			switch r.IntN(9) {
			case 0, 1:
				lost[n.Name] = true
			case 2:
				for name := range lost {
					delete(lost, name) // back
					break
				}
			case 3:
				n.MeasuredWatts = pick(r, 0, r.Float64()*6000)
			case 4:
				n.BaseWatts = float64(r.IntN(1500)) + pick(r, 0, 0.3)
			case 5:
				n.FetchBytesPerSecond = pick(r, 0, 50e6, 250e6)
				if n.Weights != nil {
					n.Weights = nil
				} else if len(w.fleet.Nodes[0].Weights) > 0 {
					n.Weights = w.fleet.Nodes[0].Weights
				}
			case 6:
				for i := range w.fac.Holds {
					w.fac.Holds[i].Reason, w.fac.Holds[i].Drain = pick(r, "test", "swap"), r.IntN(2) == 0
				}
			case 7:
				m := pick(r, w.cat.Models...)
				pr := pick(r, m.Profiles...)
				w.fleet.Learned = []Learned{{LearnedKey: LearnedKey{Model: m.Name, Profile: pr.Name, GPU: pr.GPU}, Watts: 100 + r.Float64()*900, Samples: 1000}}
			case 8:
				r.Shuffle(len(w.fleet.Nodes), func(i, j int) { w.fleet.Nodes[i], w.fleet.Nodes[j] = w.fleet.Nodes[j], w.fleet.Nodes[i] })
			}
		}
	}
	// Most passes must have brought the planner before up to date, or the
	// test compared little of that.
	if refitted*2 < passes {
		t.Fatalf("%d of %d planners brought up to date", refitted, passes)
	}
	t.Logf("%d planners compared, %d brought up to date from the one before", passes, refitted)
}

// align keeps a longest common subsequence of the same replicas, in
// order, and gives up past maxEdits; a planner whose replicas come in
// another order altogether (past maxEdits) is built again, and is
// NewPlanner's.
func TestAlignKeepsALongestCommonSubsequence(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(38, 4))
	rep := func(i int) Replica {
		return Replica{ID: fmt.Sprint(i % 7), Model: "m", Shards: []Shard{{Node: fmt.Sprint(i), GPUs: 1}}}
	}
	var df differ
	var keepA []bool
	var fromA []int32
	for range 500 {
		var a, b []Replica
		for range r.IntN(40) {
			a = append(a, rep(r.IntN(12)))
		}
		for range r.IntN(40) {
			b = append(b, rep(r.IntN(12)))
		}
		if !df.align(a, b, &keepA, &fromA) {
			t.Fatalf("%d and %d replicas: gave up under %d edits", len(a), len(b), maxEdits)
		}
		// The longest common subsequence's length, by dynamic programming.
		l := make([][]int, len(a)+1)
		for i := range l {
			l[i] = make([]int, len(b)+1)
		}
		for i := len(a) - 1; i >= 0; i-- {
			for k := len(b) - 1; k >= 0; k-- {
				if sameReplica(&a[i], &b[k]) {
					l[i][k] = 1 + l[i+1][k+1]
				} else {
					l[i][k] = max(l[i+1][k], l[i][k+1])
				}
			}
		}
		kept, last := 0, -1
		for k, i := range fromA {
			if i < 0 {
				continue
			}
			if int(i) <= last || !keepA[i] || !sameReplica(&a[i], &b[k]) {
				t.Fatalf("b[%d] kept as a[%d] after a[%d]", k, i, last)
			}
			last, kept = int(i), kept+1
		}
		if marked := len(slices.DeleteFunc(slices.Clone(keepA), func(k bool) bool { return !k })); kept != l[0][0] || marked != kept {
			t.Fatalf("kept %d (%d of a marked), the longest common subsequence has %d", kept, marked, l[0][0])
		}
	}
	a := make([]Replica, 200)
	for i := range a {
		a[i] = Replica{ID: fmt.Sprint(i)}
	}
	b := slices.Clone(a)
	slices.Reverse(b)
	if df.align(a, b, &keepA, &fromA) {
		t.Fatalf("aligned 200 replicas with their reverse within %d edits", maxEdits)
	}

	fleet, fac := benchWorld(400)
	plan, err := PlanCatalog(fleet, fac, benchCatalog(150))
	if err != nil {
		t.Fatal(err)
	}
	var running []Replica
	for _, d := range plan.Placements {
		running = append(running, d.Running())
	}
	var c PlannerCache
	if _, err := c.NewPlanner(fleet, fac, running); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(running)
	got, err := c.NewPlanner(fleet, fac, running)
	if err != nil {
		t.Fatal(err)
	}
	want, err := NewPlanner(fleet, fac, running)
	if err != nil {
		t.Fatal(err)
	}
	if c.refits != 0 || len(running) <= maxEdits/2 {
		t.Fatalf("%d replicas reversed: %d planners brought up to date", len(running), c.refits)
	}
	if f := diffPlanners(want, got); f != "" {
		t.Fatalf("the replicas reversed, the cache's planner differs from NewPlanner's in %s", f)
	}
}

package facility

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// diffPlanners names the first field in which two planners differ, ""
// when none does: a planner from a PlannerCache must be, field for field
// and bit for bit, the one NewPlanner builds, in all that a decision,
// budget or drain reads. Left out are the topology (a kept one holds the
// skeletons of earlier passes) and whether the planner owns it, what the
// cache keeps to bring its planner up to date (isDirty, dirty), and the
// planner's caches, which a planner brought up to date keeps from the
// passes before: its shapes and their indexes (checkIndexes holds those
// to what they would be built again), the change log they read, the
// cells' versions, model numbers, weights keys and the decisions'
// scratch. A model's spread counts compare with none when all zero (a
// shape placing it makes them).
func diffPlanners(a, b *Planner) string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	// The fields are unexported: read them through their addresses.
	field := func(v reflect.Value, i int) any {
		f := v.Field(i)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
	}
	for i := range va.NumField() {
		n := va.Type().Field(i).Name
		if cacheField[n] {
			continue
		}
		fa, fb := field(va, i), field(vb, i)
		if n == "counts" {
			fa, fb = nonZeroCounts(fa.(map[string][]int32)), nonZeroCounts(fb.(map[string][]int32))
		}
		if !reflect.DeepEqual(fa, fb) {
			return n
		}
	}
	return ""
}

// cacheField names the Planner's fields diffPlanners leaves out.
var cacheField = map[string]bool{
	"topo": true, "ownsTopo": true, "isDirty": true, "dirty": true,
	"shapes": true, "shapeOrder": true, "chg": true, "chgGen": true, "cellVer": true, "modelIDs": true, "wkeys": true,
	"stamp": true, "mark": true, "slot": true, "col": true, "cands": true, "gsort": true, "gscratch": true,
	"gruns": true, "picked": true, "best": true, "addW": true, "touched": true, "added": true,
}

func nonZeroCounts(cs map[string][]int32) map[string][]int32 {
	out := map[string][]int32{}
	for m, c := range cs {
		if slices.ContainsFunc(c, func(n int32) bool { return n != 0 }) {
			out[m] = c
		}
	}
	return out
}

// checkIndexes names the first of the planner's shapes whose caches are
// not what they would be built again now, "" when none: every cell cache
// that claims to be current, every index caught up through the change log
// against the same evaluated afresh from every cell.
func checkIndexes(p *Planner) string {
	opts := []gocmp.Option{gocmp.AllowUnexported(oneAgg{}, oneEval{}, gangEval{}, gcand{}, centry{}, cellHot{}), cmpopts.EquateEmpty()}
	for key, sh := range p.shapes {
		if sh.invalid != nil {
			continue
		}
		if sh.one != nil {
			p.index(sh)
		}
		if sh.gang != nil {
			p.gangIndex(sh)
		}
		cells, lists := slices.Clone(sh.cells), slices.Clone(sh.lists)
		for i := range lists {
			lists[i] = slices.Clone(lists[i])
		}
		for i := range sh.cells {
			if cells[i].version != p.cellVer[cells[i].cell] {
				continue // stale, and known to be
			}
			p.recache(sh, int32(i))
			if d := gocmp.Diff(cells[i].cellHot, sh.cells[i].cellHot, opts...); d != "" {
				return fmt.Sprintf("shape %v: cell %d's cache (-kept +afresh):\n%s", key, i, d)
			}
			if lists != nil {
				if d := gocmp.Diff(lists[i], sh.lists[i], opts...); d != "" {
					return fmt.Sprintf("shape %v: cell %d's list (-kept +afresh):\n%s", key, i, d)
				}
			}
		}
		if ix := sh.one; ix != nil {
			kept := *ix
			kept.eval, kept.tree = slices.Clone(ix.eval), slices.Clone(ix.tree)
			kept.over, kept.spread, kept.absent = slices.Clone(ix.over), slices.Clone(ix.spread), slices.Clone(ix.absent)
			p.rebuildOne(sh, ix)
			for _, f := range []struct {
				name string
				a, b any
			}{{"eval", kept.eval, ix.eval}, {"tree", kept.tree, ix.tree}, {"over", kept.over, ix.over}, {"spread", kept.spread, ix.spread}, {"absent", kept.absent, ix.absent}} {
				if d := gocmp.Diff(f.a, f.b, opts...); d != "" {
					return fmt.Sprintf("shape %v: index %s (-caught up +afresh):\n%s", key, f.name, d)
				}
			}
		}
		if gx := sh.gang; gx != nil {
			kept := make([]gangEval, len(gx.evals))
			for i, e := range gx.evals {
				kept[i] = e
				kept[i].runs, kept[i].picked = slices.Clone(e.runs), slices.Clone(e.picked)
			}
			counts := p.countsOf(sh.model)
			for gi := range sh.gangDoms {
				p.evalGangDom(sh, &sh.gangDoms[gi], counts, &gx.evals[gi])
			}
			if d := gocmp.Diff(kept, gx.evals, opts...); d != "" {
				return fmt.Sprintf("shape %v: gang index (-caught up +afresh):\n%s", key, d)
			}
		}
	}
	return ""
}

// mutate changes a world between two passes as a live fleet changes:
// mostly what the planner takes fresh each pass (free GPUs, cores,
// memory, draws, weights, hold reasons, the nodes' order, learned draws),
// sometimes the layout itself (a node moved, renamed, gone or new, a GPU
// model changed, a budget or hold added or taken away, the headroom), and
// now and then into something NewPlanner refuses.
func mutate(r *rand.Rand, w *world) {
	nodes := w.fleet.Nodes
	for range 1 + r.IntN(4) {
		n := &nodes[r.IntN(len(nodes))]
		switch r.IntN(7) {
		case 0:
			n.GPUs[0].Free = r.IntN(n.GPUs[0].Count + 1)
		case 1:
			n.CPUCores, n.MemoryGB = r.IntN(n.CPUCores+1), r.IntN(n.MemoryGB+1)
		case 2:
			// Not whole: a reading of the node's draw.
			n.MeasuredWatts = pick(r, 0, r.Float64()*6000)
		case 3:
			n.BaseWatts = float64(r.IntN(1500)) + pick(r, 0, 0.3)
		case 4:
			n.GPUs[0].PowerLimitWatts = pick(r, 500.0, 700, 612.5)
		case 5:
			n.FetchBytesPerSecond = pick(r, 0, 50e6, 250e6)
		case 6:
			n.Weights = nil
		}
	}
	for i := range w.fac.Holds {
		w.fac.Holds[i].Reason, w.fac.Holds[i].Drain = pick(r, "test", "swap"), r.IntN(2) == 0
	}
	r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	if r.IntN(3) == 0 && len(w.cat.Models) > 0 {
		m := w.cat.Models[r.IntN(len(w.cat.Models))]
		p := m.Profiles[r.IntN(len(m.Profiles))]
		w.fleet.Learned = []Learned{{LearnedKey: LearnedKey{Model: m.Name, Profile: p.Name, GPU: p.GPU}, Watts: 100 + r.Float64()*900, Samples: 1000}}
	}
	if r.IntN(4) != 0 {
		return
	}
	// The layout.
	n := &nodes[r.IntN(len(nodes))]
	switch r.IntN(10) {
	case 0:
		n.Location = nodes[r.IntN(len(nodes))].Location
	case 1:
		n.Name += "x"
	case 2:
		if len(nodes) > 1 {
			w.fleet.Nodes = nodes[1:]
		}
	case 3:
		m := *n
		m.Name, m.GPUs = n.Name+"-new", slices.Clone(n.GPUs)
		w.fleet.Nodes = append(nodes, m)
	case 4:
		n.GPUs = []GPU{{Model: pick(r, "H", "B"), Count: 8, Free: 8, PowerLimitWatts: 700}}
	case 5:
		n.Pool, n.Fabric = pick(r, "", "batch"), pick(r, "", "ib-1", "ib-3")
	case 6:
		w.fac.Headroom = pick(r, 0, 0.05, 0.1)
	case 7:
		if len(w.fac.Budgets) > 0 {
			i := r.IntN(len(w.fac.Budgets))
			w.fac.Budgets[i].Watts = pick(r, w.fac.Budgets[i].Watts*2, 0) // 0: refused
		}
	case 8:
		d := Domain{LevelRack, n.Location.Rack}
		if i := slices.IndexFunc(w.fac.Holds, func(h Hold) bool { return h.Domain == d }); i >= 0 {
			w.fac.Holds = slices.Delete(w.fac.Holds, i, i+1)
		} else {
			w.fac.Holds = append(w.fac.Holds, Hold{Domain: d, Reason: "new", Drain: true})
		}
	case 9:
		n.Name = nodes[r.IntN(len(nodes))].Name // maybe a duplicate: refused
	}
}

// runningOn picks, from a plan of the world's catalog, the replicas that
// run: a random part of them, in random order, their shards taken out of
// the nodes' free GPUs, cores and memory as a live fleet's are.
func runningOn(r *rand.Rand, w *world) []Replica {
	plan, err := PlanCatalog(w.fleet, w.fac, w.cat)
	if err != nil {
		return nil
	}
	var out []Replica
	for _, d := range plan.Placements {
		if r.IntN(3) == 0 {
			continue
		}
		out = append(out, d.Running())
		for _, s := range d.Shards {
			for i := range w.fleet.Nodes {
				n := &w.fleet.Nodes[i]
				if n.Name == s.Node && len(n.GPUs) > 0 {
					n.GPUs[0].Free = max(0, n.GPUs[0].Free-s.GPUs)
					n.CPUCores, n.MemoryGB = max(0, n.CPUCores-s.CPUCores), max(0, n.MemoryGB-s.MemoryGB)
				}
			}
		}
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// placeCatalog places and commits every replica of the catalog, round robin
// by replica index, and returns the decisions and the budgets after.
func placeCatalog(p *Planner, cat Catalog) ([]Decision, []DomainUsage, []string) {
	var ds []Decision
	for i := 0; ; i++ {
		more := false
		for _, m := range cat.Models {
			if i >= m.Replicas {
				continue
			}
			more = true
			d := p.Place(Request{Replica: ReplicaID(m.Name, i), Model: m})
			if d.Placed {
				if err := p.Commit(d); err != nil {
					panic(err)
				}
			}
			ds = append(ds, d)
		}
		if !more {
			return ds, p.Budgeted(), p.Draining()
		}
	}
}

// TestPlannerCacheMatchesNewPlanner: over random fleets changing from pass
// to pass, a planner from the cache is the planner NewPlanner builds from
// scratch on the same input — the same fields, bit for bit, the same
// decisions for a whole catalog placed on it, the same budgets after, the
// same drains — or both refuse the input with the same error; and the
// cache builds the layout's index again only when the layout changed.
func TestPlannerCacheMatchesNewPlanner(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(38, 1))
	passes, reused, refitted := 0, 0, 0
	for iter := range 150 {
		w := randomWorld(r, iter%4 != 0)
		var c PlannerCache
		for pass := range 8 {
			where := fmt.Sprintf("world %d, pass %d", iter, pass)
			if pass > 0 {
				mutate(r, &w)
			}
			fleet := w.fleet
			fleet.Nodes = slices.Clone(w.fleet.Nodes)
			for i := range fleet.Nodes {
				fleet.Nodes[i].GPUs = slices.Clone(fleet.Nodes[i].GPUs)
			}
			running := runningOn(r, &world{fleet: fleet, fac: w.fac, cat: w.cat})
			built, refits := c.built, c.refits
			want, werr := NewPlanner(fleet, w.fac, running)
			got, gerr := c.NewPlanner(fleet, w.fac, running)
			if fmt.Sprint(werr) != fmt.Sprint(gerr) {
				t.Fatalf("%s: NewPlanner: %v; the cache's: %v", where, werr, gerr)
			}
			if werr != nil {
				continue
			}
			passes++
			if c.built == built {
				reused++
			}
			if c.refits > refits {
				refitted++
			}
			if f := diffPlanners(want, got); f != "" {
				t.Fatalf("%s: the cache's planner differs from NewPlanner's in %s", where, f)
			}
			if f := checkIndexes(got); f != "" {
				t.Fatalf("%s: %s", where, f)
			}
			wd, wb, wdr := placeCatalog(want, w.cat)
			gd, gb, gdr := placeCatalog(got, w.cat)
			if diff := gocmp.Diff(wd, gd); diff != "" {
				t.Fatalf("%s: decisions differ (-NewPlanner +cache):\n%s", where, diff)
			}
			if diff := gocmp.Diff(wb, gb); diff != "" {
				t.Fatalf("%s: budgets after differ (-NewPlanner +cache):\n%s", where, diff)
			}
			if diff := gocmp.Diff(wdr, gdr); diff != "" {
				t.Fatalf("%s: drains differ (-NewPlanner +cache):\n%s", where, diff)
			}
			if f := diffPlanners(want, got); f != "" {
				t.Fatalf("%s: after the same decisions, the cache's planner differs from NewPlanner's in %s", where, f)
			}
		}
	}
	// The layout changes in about one pass in four: most passes must have
	// reused the index, or the test compared nothing kept.
	if reused*2 < passes {
		t.Fatalf("the cache reused its index in %d of %d passes", reused, passes)
	}
	t.Logf("%d passes compared, %d on a kept index, %d of them on the planner of the pass before brought up to date", passes, reused, refitted)
}

// A planner from the cache is its own: placing on it changes neither the
// cache nor the next planner it builds.
func TestPlannerCachePlannersAreIndependent(t *testing.T) {
	t.Parallel()
	fleet, fac := benchWorld(400)
	cat := benchCatalog(300)
	var c PlannerCache
	first, err := c.NewPlanner(fleet, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	placed, _, _ := placeCatalog(first, cat)
	second, err := c.NewPlanner(fleet, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := NewPlanner(fleet, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.built != 1 {
		t.Fatalf("built the index %d times for one layout", c.built)
	}
	if f := diffPlanners(fresh, second); f != "" {
		t.Fatalf("after placing on the first planner, the second differs from a fresh one in %s", f)
	}
	again, _, _ := placeCatalog(second, cat)
	if diff := gocmp.Diff(placed, again); diff != "" {
		t.Fatalf("the second planner decides otherwise (-first +second):\n%s", diff)
	}
}

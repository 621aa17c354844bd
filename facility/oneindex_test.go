package facility

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// twin is two planners on one world: one placing single-node replicas from
// the shapes' indexes (placeOne), one visiting every cell (placeOneScan).
type twin struct {
	t            *testing.T
	idx, scan    *Planner
	ops, placed  int
	removed      int
	singleChecks int
}

func newTwin(t *testing.T, fleet Fleet, fac Facility) *twin {
	t.Helper()
	a, err := NewPlanner(fleet, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPlanner(fleet, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.scanOnly = true
	return &twin{t: t, idx: a, scan: b}
}

// place places req on both and fails unless the decisions, rejections
// included, are the same; it commits a placed one on both.
func (w *twin) place(where string, req Request) {
	w.t.Helper()
	got, want := w.idx.Place(req), w.scan.Place(req)
	w.ops++
	if diff := cmp.Diff(want, got); diff != "" {
		w.t.Fatalf("%s: %s: indexed and scanned decisions differ (-scan +indexed):\n%s", where, req.Replica, diff)
	}
	if len(req.Model.Profiles) > 0 && req.Model.Profiles[0].Nodes <= 1 {
		w.singleChecks++
	}
	if !got.Placed {
		return
	}
	w.placed++
	if err := w.idx.Commit(got); err != nil {
		w.t.Fatalf("%s: commit: %v", where, err)
	}
	if err := w.scan.Commit(want); err != nil {
		w.t.Fatalf("%s: commit: %v", where, err)
	}
}

// remove takes a random running replica off both.
func (w *twin) remove(r *rand.Rand) {
	w.t.Helper()
	if len(w.idx.running) == 0 {
		return
	}
	id := w.idx.running[r.IntN(len(w.idx.running))].ID
	if _, err := w.idx.Remove(id); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.scan.Remove(id); err != nil {
		w.t.Fatal(err)
	}
	w.removed++
}

// TestIndexedPlaceMatchesScan places random worlds, with commits and
// removals between decisions, from the index and by the full scan: every
// decision and every rejection must be the same.
func TestIndexedPlaceMatchesScan(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(23, 5))
	total := 0
	for iter := range 300 {
		w := randomWorld(r, iter%4 != 0)
		tw := newTwin(t, w.fleet, w.fac)
		var reqs []Request
		for _, m := range w.cat.Models {
			for i := range m.Replicas + 2 {
				reqs = append(reqs, Request{Replica: ReplicaID(m.Name, i), Model: m})
			}
		}
		r.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
		for k, req := range reqs {
			tw.place(fmt.Sprintf("world %d, request %d", iter, k), req)
			if r.IntN(5) == 0 {
				tw.remove(r)
			}
		}
		total += tw.ops
	}
	if total < 3000 {
		t.Errorf("only %d decisions compared", total)
	}
}

// TestIndexedPlaceMatchesScanBench does the same on a slice of the bench
// fleet (fractional limits, measured nodes, holds, more than MaxListed
// domains of each kind), placing the bench catalog twice over, taking
// replicas out between, and long enough that the change log starts again.
func TestIndexedPlaceMatchesScanBench(t *testing.T) {
	t.Parallel()
	fleet, fac := benchWorld(640)
	cat := benchCatalog(400)
	r := rand.New(rand.NewPCG(9, 9))
	tw := newTwin(t, fleet, fac)
	reqs := benchRequests(cat)
	for round := range 2 {
		for k, req := range reqs {
			tw.place(fmt.Sprintf("round %d, request %d", round, k), req)
			if r.IntN(4) == 0 {
				tw.remove(r)
			}
		}
	}
	// Churn: remove and place one model's replicas again until the log wraps.
	gen := tw.idx.chgGen
	for k := 0; tw.idx.chgGen == gen || k < 200; k++ {
		tw.remove(r)
		tw.place(fmt.Sprintf("churn %d", k), reqs[r.IntN(len(reqs))])
		if k > 100_000 {
			t.Fatal("the change log never started again")
		}
	}
	t.Logf("%d decisions (%d single-node), %d placed, %d removed", tw.ops, tw.singleChecks, tw.placed, tw.removed)
}

// TestShapeCacheBound: a planner keeps at most maxShapes shapes, dropping
// the oldest, and decides exactly as one that keeps them all. Forty
// models of two profiles each, their requests interleaved so that a shape
// is dropped and built again between two of its model's replicas, with
// removals between decisions.
func TestShapeCacheBound(t *testing.T) {
	t.Parallel()
	fleet, fac := benchWorld(320)
	base := benchCatalog(400)
	var cat Catalog
	for i := range 20 {
		for _, m := range base.Models[:4] { // single-node models
			m.Name = fmt.Sprintf("%s-%02d", m.Name, i)
			m.Replicas = max(m.Replicas/8, 2)
			if len(m.Profiles) == 1 {
				p := m.Profiles[0]
				p.Name += "-alt"
				p.GPUs = max(p.GPUs/2, 1)
				m.Profiles = append(m.Profiles, p)
			}
			cat.Models = append(cat.Models, m)
		}
	}
	bounded, err := NewPlanner(fleet, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	all, err := NewPlanner(fleet, fac, nil)
	if err != nil {
		t.Fatal(err)
	}
	all.shapeCap = 1 << 30
	r := rand.New(rand.NewPCG(34, 1))
	reqs := benchRequests(cat)
	r.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	placed := 0
	for k, req := range reqs {
		got, want := bounded.Place(req), all.Place(req)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("request %d, %s: decisions differ (-all shapes +at most %d):\n%s", k, req.Replica, maxShapes, diff)
		}
		if n := len(bounded.shapes); n > maxShapes {
			t.Fatalf("request %d: %d shapes kept, more than %d", k, n, maxShapes)
		}
		if got.Placed {
			placed++
			if err := bounded.Commit(got); err != nil {
				t.Fatal(err)
			}
			if err := all.Commit(want); err != nil {
				t.Fatal(err)
			}
		}
		if r.IntN(5) == 0 && len(bounded.running) > 0 {
			id := bounded.running[r.IntN(len(bounded.running))].ID
			if _, err := bounded.Remove(id); err != nil {
				t.Fatal(err)
			}
			if _, err := all.Remove(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(all.shapes); n <= 2*maxShapes || placed < len(reqs)/4 {
		t.Errorf("%d shapes in all, %d of %d placed: the test does not make the bounded planner drop shapes", n, placed, len(reqs))
	}
	t.Logf("%d requests, %d placed, %d shapes without the bound", len(reqs), placed, len(all.shapes))
}

// TestIndexedPlaceMatchesScanWeights is TestIndexedPlaceMatchesScanBench
// with weights: a quarter of the racks hold each model's, a seventh of the
// nodes fetch faster.
func TestIndexedPlaceMatchesScanWeights(t *testing.T) {
	t.Parallel()
	fleet, fac := benchWorld(640)
	fleet, cat := benchWeights(fleet, benchCatalog(400), 4)
	r := rand.New(rand.NewPCG(9, 10))
	tw := newTwin(t, fleet, fac)
	reqs := benchRequests(cat)
	for round := range 2 {
		for k, req := range reqs {
			tw.place(fmt.Sprintf("round %d, request %d", round, k), req)
			if r.IntN(4) == 0 {
				tw.remove(r)
			}
		}
	}
	held := 0
	for _, rr := range tw.idx.running {
		for _, s := range rr.Shards {
			if _, ok := fleet.Nodes[slices.IndexFunc(fleet.Nodes, func(n Node) bool { return n.Name == s.Node })].Weights[cat.Models[0].Weights.Key()]; ok && rr.Model == cat.Models[0].Name {
				held++
			}
		}
	}
	if held == 0 {
		t.Error("no replica of the first model on a node that holds its weights")
	}
	t.Logf("%d decisions (%d single-node), %d placed, %d removed; %d shards of %s where its weights are",
		tw.ops, tw.singleChecks, tw.placed, tw.removed, held, cat.Models[0].Name)
}

// An index over one cell (its leaf is its root) catches up with a change
// that marks that cell alone: here NotServing, one entry in the change
// log. It once climbed from the root to a node 0 above it, and on for
// ever.
func TestIndexOfOneCellCatchesUp(t *testing.T) {
	t.Parallel()
	fleet := Fleet{Nodes: []Node{{Name: "n1", Location: Location{Rack: "k1"}, CPUCores: 64, MemoryGB: 512,
		GPUs: []GPU{{Model: "H", Count: 8, Free: 6, PowerLimitWatts: 700}}}}}
	prof := Profile{Name: "p", Engine: "vllm", GPU: "H", GPUs: 2, Nodes: 1, Weight: 1, Spread: []Level{LevelRack}}
	m := Model{Name: "m", Replicas: 2, Profiles: []Profile{prof}}
	running := []Replica{{ID: "m-0", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 1400, GPU: "H", GPUs: 2}}}}
	p, err := NewPlanner(fleet, Facility{}, running)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Place(Request{Replica: "m-1", Model: m}); !d.Placed {
		t.Fatalf("m-1 not placed: %v", d.Reasons())
	}
	if err := p.NotServing("m-0"); err != nil {
		t.Fatal(err)
	}
	d := p.Place(Request{Replica: "m-1", Model: m})
	if !d.Placed || d.Shards[0].Node != "n1" {
		t.Fatalf("m-1: %+v", d)
	}
	if sh := p.shapes[shapeKey{"m", "p"}]; sh == nil || len(sh.cells) != 1 || sh.one == nil {
		t.Fatalf("the test placed no index over one cell")
	}
}

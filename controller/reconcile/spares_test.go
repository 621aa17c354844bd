package reconcile

import (
	"testing"
	"time"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/weightsapi"
)

// Warm spares land where a scale-up would: on nodes serving nothing of the
// model, spread away from its replicas, a node that holds the weights
// first; a model without warm_spares has none.
func TestSparesWhereAScaleUpWouldLand(t *testing.T) {
	t.Parallel()
	w := newWorld()
	m := model("m", 2, "p", 4, nil)
	m.Weights = &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m", Files: []string{"m.gguf"}}}
	m.WarmSpares = 2
	w.cat.Models = []facility.Model{m, model("other", 1, "p", 4, nil)}
	w.apply(w.plan(t).Actions)
	w.serveAll()
	serving := map[string]string{} // node -> rack
	for _, j := range w.jobs {
		if j.Model == "m" {
			for _, s := range j.Shards {
				serving[s.Node] = rackOf(w, s.Node)
			}
		}
	}
	key := m.Weights.Key()
	// One node in a rack without a replica of m holds its weights
	// already: the last one by name, which a tie on name would not pick.
	racks := map[string]bool{}
	for _, r := range serving {
		racks[r] = true
	}
	var holder string
	for i := len(w.nodes) - 1; i >= 0; i-- {
		if !racks[w.nodes[i].Location.Rack] {
			holder = w.nodes[i].Name
			w.nodes[i].Weights = map[string]int64{key: 5 << 20}
			break
		}
	}
	if holder == "" {
		t.Fatalf("every rack serves m: %v", serving)
	}
	in := Input{Now: w.now, Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac, Jobs: w.jobs, PartialDeadline: 10 * time.Minute}
	spares, err := Spares(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(spares) != 2 {
		t.Fatalf("spares %+v, want 2", spares)
	}
	held := 0
	for _, s := range spares {
		if s.Model != "m" || s.Key != key {
			t.Errorf("spare %+v", s)
		}
		if _, ok := serving[s.Node]; ok {
			t.Errorf("spare %s serves m already", s.Node)
		}
		if s.Held {
			held++
			if s.Node != holder {
				t.Errorf("spare %s said held; only %s holds the weights", s.Node, holder)
			}
		}
	}
	if held != 1 {
		t.Errorf("spares %+v: want the node holding the weights among them", spares)
	}
	// Deterministic.
	again, _ := Spares(in)
	if len(again) != len(spares) || again[0] != spares[0] || again[1] != spares[1] {
		t.Errorf("again %+v, first %+v", again, spares)
	}
	// None asked: none.
	m.WarmSpares = 0
	w.cat.Models[0] = m
	if s, _ := Spares(Input{Catalog: w.cat, Fleet: w.fleet(), Facility: w.fac, Jobs: w.jobs}); len(s) != 0 {
		t.Errorf("warm_spares 0: %+v", s)
	}
}

func rackOf(w *world, node string) string {
	for _, n := range w.nodes {
		if n.Name == node {
			return n.Location.Rack
		}
	}
	return ""
}

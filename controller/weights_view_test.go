package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/weightsapi"
)

// A model whose weights the nodes' stores fetch says which nodes hold
// them whole; one whose engine finds its own says nothing.
func TestModelViewWeights(t *testing.T) {
	t.Parallel()
	w := &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m", Files: []string{"m.gguf"}}}
	key := w.Key()
	in := reconcile.Input{
		Catalog: facility.Catalog{Models: []facility.Model{
			{Name: "chat", Source: "org/m", File: "m.gguf", Weights: w, WarmSpares: 1, Replicas: 1},
			{Name: "plain", Source: "/models/p.gguf", Replicas: 1},
		}},
		Fleet: facility.Fleet{Nodes: []facility.Node{
			{Name: "n1", Weights: map[string]int64{key: 5 << 20}},
			{Name: "n2"},
			{Name: "n3", Weights: map[string]int64{key: 5 << 20, "other": 1}},
		}},
	}
	views := modelViews(in, reconcile.Result{}, scaleInfo{}, nil)
	want := &controllerapi.WeightsView{Key: key, Source: "org/m@main (m.gguf)", Bytes: 5 << 20, Nodes: []string{"n1", "n3"}, WarmSpares: 1}
	if diff := cmp.Diff(want, views[0].Weights); diff != "" {
		t.Errorf("chat (-want +got):\n%s", diff)
	}
	if views[1].Weights != nil {
		t.Errorf("plain: %+v", views[1].Weights)
	}
}

package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

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

// A replica's start read from its allocation's task events: each phase
// once, in time order, with the driver's words; Nomad's own events left
// out.
func TestPhasesFromTaskEvents(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ev := func(sec float64, msg string) *api.TaskEvent {
		return &api.TaskEvent{Type: "Driver", DisplayMessage: msg, Time: t0.Add(time.Duration(sec * float64(time.Second))).UnixNano()}
	}
	a := &api.AllocationListStub{CreateTime: t0.UnixNano(), TaskStates: map[string]*api.TaskState{
		"weights": {Events: []*api.TaskEvent{
			{Type: "Received", DisplayMessage: "Task received by client", Time: t0.Add(100 * time.Millisecond).UnixNano()},
			ev(0.2, "Fetch started: org/m@main (m.gguf), 1 files, 61.6 MiB"),
			ev(3.0, "Fetch finished: org/m@main (m.gguf), 61.6 MiB fetched in 2.8 s (22.0 MiB/s)"),
		}},
		"engine": {Events: []*api.TaskEvent{
			{Type: "Started", DisplayMessage: "Task started by client", Time: t0.Add(3100 * time.Millisecond).UnixNano()},
			ev(3.2, "Weights present: org/m@main (m.gguf) (61.6 MiB), nothing fetched"),
			ev(3.3, "Started llamacpp on GPUs GPU-1 (tensor parallel 1): llama-server -m …"),
			ev(3.5, "Loading the model: 0%"),
			ev(3.9, "Loading the model: 100%"),
			ev(4.0, "Ready after 700ms"),
		}},
	}}
	var got []string
	for _, p := range phases(a) {
		got = append(got, fmt.Sprintf("%s +%s", p.Name, p.At.Sub(t0)))
	}
	want := []string{"placed +0s", "fetch_started +200ms", "fetch_finished +3s", "weights_present +3.2s", "engine_started +3.3s", "model_loaded +3.9s", "ready +4s"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if phases(nil) != nil {
		t.Error("phases of no allocation")
	}
}

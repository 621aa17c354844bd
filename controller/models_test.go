package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/weightsapi"
)

// Each pass writes the catalog's model list for the gateways when it
// changed, and only then: a model with replicas = 0 is in it at zero.
func TestPassWritesTheGatewaysModelList(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	read := func() (gatewayapi.ModelList, uint64) {
		t.Helper()
		v, _, err := e.API.Variables().Peek(gatewayapi.ModelsVariable, nil)
		if err != nil || v == nil {
			t.Fatalf("read %s: %v %v", gatewayapi.ModelsVariable, v, err)
		}
		l, err := gatewayapi.ParseModelList(v.Items)
		if err != nil {
			t.Fatal(err)
		}
		return l, v.ModifyIndex
	}
	e.Pass(c)
	l, index := read()
	want := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "alpha", Min: 3, Replicas: 3}, {Name: "beta", Min: 1, Replicas: 1}}}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("model list (-want +got):\n%s", diff)
	}
	e.Pass(c)
	if _, again := read(); again != index {
		t.Errorf("an unchanged list was written again (index %d, then %d)", index, again)
	}

	e.WriteCatalog(strings.Replace(alphaBeta, "replicas = 1", "replicas = 0", 1))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.Pass(c)
	l, _ = read()
	want.Models[1] = gatewayapi.ListedModel{Name: "beta", Min: 0, Replicas: 0}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("model list with beta at zero (-want +got):\n%s", diff)
	}
	if !l.Models[1].Holdable() {
		t.Error("beta at zero is not holdable")
	}

	// An autoscaled model: its min, and the slots the pass gave it: beta
	// was at zero, and with no signal (no gateway here) the autoscaler
	// holds it there — counts never move on missing data.
	e.WriteCatalog(strings.Replace(alphaBeta, "replicas = 1", `autoscale {
    min = 0
    max = 4
    target { outstanding_per_replica = 8 }
  }`, 1))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.Pass(c)
	l, _ = read()
	want.Models[1] = gatewayapi.ListedModel{Name: "beta", Min: 0, Replicas: 0}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Errorf("model list with beta autoscaled (-want +got):\n%s", diff)
	}
}

// modelList takes an autoscaled model's count from the pass's Scale.
func TestModelListOfAutoscaledModels(t *testing.T) {
	cat := facility.Catalog{Models: []facility.Model{
		{Name: "fixed", Replicas: 2, Routing: gatewayapi.RoutingPrefix, Adapters: []facility.Adapter{
			{Name: "sql", Weights: weightsapi.Source{Path: "/srv/lora/sql.gguf"}, Scale: 1},
			{Name: "chat", Weights: weightsapi.Source{Path: "/srv/lora/chat.gguf"}, Scale: 0.5},
		}},
		{Name: "asleep", Autoscale: &facility.Autoscale{Min: 0, Max: 4}},
		{Name: "busy", Replicas: 1, Autoscale: &facility.Autoscale{Min: 1, Max: 8}},
	}}
	got := modelList(cat, map[string]reconcile.Scale{"asleep": {Want: 0, Has: 0}, "busy": {Want: 6, Has: 4}})
	want := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{
		{Name: "asleep", Min: 0, Replicas: 0}, {Name: "busy", Min: 1, Replicas: 4}, {Name: "fixed", Min: 2, Replicas: 2, Routing: gatewayapi.RoutingPrefix, Adapters: []gatewayapi.ListedAdapter{
			{Name: "sql", Path: "/srv/lora/sql.gguf", Scale: 1}, {Name: "chat", Path: "/srv/lora/chat.gguf", Scale: 0.5},
		}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

package ctlcmd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
)

// llmgw ctl weights lists the models whose stores fetch their weights,
// with the nodes that hold them; others are left out.
func TestWeightsTable(t *testing.T) {
	models := []controllerapi.ModelView{
		{Name: "plain"},
		{Name: "chat", Weights: &controllerapi.WeightsView{Key: "org--m--main-0123456789", Source: "org/m@main (m.gguf)", Bytes: 16_100_000_000, Nodes: []string{"n1", "n3"}, WarmSpares: 1}},
		{Name: "cold", Weights: &controllerapi.WeightsView{Key: "org--c--main-9876543210", Source: "org/c@main (c.gguf)", Nodes: []string{}}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(models)
	}))
	defer srv.Close()
	r := run(t, map[string]string{EnvAddr: srv.URL}, "weights")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	out := r.stdout
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, want := range []string{"chat  org/m@main (m.gguf)  16.1 GB  n1,n3  1", "cold  org/c@main (c.gguf)  -        -      0"} {
		if !strings.Contains(squeeze(out), squeeze(want)) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "plain") {
		t.Errorf("a model without a weights block is listed:\n%s", out)
	}
}

// llmgw ctl explain REPLICA shows the start's phases when Nomad told of
// more than the placement.
func TestExplainShowsPhases(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	d := controllerapi.ReplicaDetail{ReplicaView: controllerapi.ReplicaView{ID: "chat-0", Model: "chat", State: "serving",
		Phases: []controllerapi.Phase{
			{Name: "placed", At: t0},
			{Name: "weights_present", At: t0.Add(115 * time.Millisecond), Detail: "Weights present: org/m@main (m.gguf) (61.6 MiB), nothing fetched"},
			{Name: "engine_started", At: t0.Add(214 * time.Millisecond), Detail: "Started llamacpp"},
			{Name: "ready", At: t0.Add(716 * time.Millisecond), Detail: "Ready after 502ms"},
		}}}
	d.Explain = &controllerapi.Explain{Replica: "chat-0", Placed: true, Profile: "x1", Nodes: []string{"n3"}, At: t0,
		Readiness: []string{"n3: weights present, nothing to fetch"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/replicas/chat-0" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(d)
	}))
	defer srv.Close()
	r := run(t, map[string]string{EnvAddr: srv.URL}, "explain", "chat-0")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for _, want := range []string{"Start (from Nomad's task events)", "weights_present 12:00:00.115 +115ms Weights present:", "ready 12:00:00.716 +716ms Ready after 502ms", "Weights: n3: weights present, nothing to fetch"} {
		if !strings.Contains(squeeze(r.stdout), want) {
			t.Errorf("no %q in:\n%s", want, r.stdout)
		}
	}
}

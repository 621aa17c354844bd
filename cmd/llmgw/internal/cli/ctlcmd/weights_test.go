package ctlcmd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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

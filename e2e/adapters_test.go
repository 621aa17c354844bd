package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// adapterCatalog: a model on llama.cpp's real server with two LoRA
// adapters, the first for a model of another width.
const adapterCatalog = `
model "chat" {
  source   = %q
  replicas = 1
  adapter "other" {
    path = %q
  }
  adapter "pirate" {
    path = %q
  }
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    args   = ["-np", "1", "-c", "2048"]
  }
}
`

// writeAdapter writes a tiny adapter for base into dir, readable by the
// engine's user (nobody), and returns its path.
func writeAdapter(t *testing.T, dir, name string, base tinymodel.Options, answer string) string {
	t.Helper()
	base.Vocab = llamabuild.Vocab()
	p := filepath.Join(dir, name)
	if err := tinymodel.WriteAdapter(p, tinymodel.AdapterOptions{Base: base, Name: name, Answer: answer}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAdaptersOverRealNomad runs a llama.cpp model with a good and a bad
// LoRA adapter through the controller on a real Nomad: the driver leaves
// the bad one out with a task event naming it and the cause, the replica
// serves, the controller shows only the good adapter loaded (with its
// llama.cpp id) and an event for the bad one, and a request straight to
// the replica with the good adapter's id gets that adapter's answer, one
// with its scale 0 the base model's.
func TestAdaptersOverRealNomad(t *testing.T) {
	in := installRealEngine(t, "Hello world!")
	dir := filepath.Dir(in.Model)
	base := tinymodel.Defaults
	base.Answer = "Hello world!"
	wide := base
	wide.Embed = 128
	other := writeAdapter(t, dir, "other.gguf", wide, "Goodbye moon.")
	pirate := writeAdapter(t, dir, "pirate.gguf", base, "Ahoy matey.")

	c, engine := sameRackClients(t, 1, in.Binary)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary),
		fmt.Sprintf(adapterCatalog, in.Model, other, pirate), "headroom = 0\n")
	_, ctlURL, _ := runController(t, cfg, "ctl")
	waitServing(t, ctlURL, 4*time.Minute, "chat-0")

	// The controller's view of the replica's adapters, from the engine.
	var rep controllerapi.ReplicaView
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		var reps []controllerapi.ReplicaView
		getJSON(t, ctlURL+"/v1/replicas", &reps)
		for _, r := range reps {
			if r.ID == "chat-0" {
				rep = r
			}
		}
		if rep.Engine == nil || len(rep.Engine.Adapters) != 2 {
			return false, fmt.Sprintf("chat-0: %+v", rep.Engine)
		}
		a := rep.Engine.Adapters
		ev := rep.Engine.AdapterEvents
		return !a[0].Loaded && a[0].Name == "other" && a[1].Loaded && a[1].Name == "pirate" && a[1].ID != nil && *a[1].ID == 0 &&
				len(ev) == 1 && ev[0].Adapter == "other" && ev[0].Event == "not loaded",
			fmt.Sprintf("adapters %+v, events %+v, error %q", a, ev, rep.Engine.AdaptersError)
	})
	t.Logf("chat-0's adapters: %+v; events: %+v", rep.Engine.Adapters, rep.Engine.AdapterEvents)

	// The driver's task event names the bad adapter and the cause.
	allocs, _, err := c.API.Jobs().Allocations(rep.JobID, false, nil)
	if err != nil || len(allocs) == 0 {
		t.Fatalf("allocations of %s: %d, %v", rep.JobID, len(allocs), err)
	}
	var events []string
	for _, stub := range allocs {
		a, _, err := c.API.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ts := a.TaskStates[render.TaskName]; ts != nil {
			for _, e := range ts.Events {
				events = append(events, eventText(e))
			}
		}
	}
	want := `LoRA adapter "other" not loaded: ` + other + `: tensor "blk.0.attn_output.weight" does not fit the model's shape`
	found := false
	for _, e := range events {
		if strings.Contains(e, want) {
			found = true
			t.Logf("task event: %s", e)
		}
	}
	if !found {
		t.Errorf("task events %q: want one with %q", events, want)
	}

	// Straight to the replica: the good adapter by its id, and the base.
	url := strings.TrimSuffix(rep.Engine.URL, "/metrics")
	for _, c := range []struct{ lora, want string }{
		{`[{"id":0,"scale":1}]`, "Ahoy matey."},
		{`[{"id":0,"scale":0}]`, "Hello world!"},
	} {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Hi","max_tokens":16,"lora":`+c.lora+`}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 || out.Choices[0].Text != c.want {
			t.Errorf("lora %s at %s: %d %s, want %q", c.lora, url, resp.StatusCode, b, c.want)
		}
	}
}

// eventText is a task event's words: the driver's message, else Nomad's
// description.
func eventText(e *api.TaskEvent) string {
	if e.DisplayMessage != "" {
		return e.DisplayMessage
	}
	return e.Type + ": " + e.Message
}

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
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

// waitPirateAndBad waits for the controller's view of chat-0's adapters,
// read from its engine, to be bad not loaded (with its one "not loaded"
// event) and pirate loaded as llama.cpp's id 0, and returns the replica.
func waitPirateAndBad(t *testing.T, ctlURL, bad string) controllerapi.ReplicaView {
	t.Helper()
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
		return !a[0].Loaded && a[0].Name == bad && a[1].Loaded && a[1].Name == "pirate" && a[1].ID != nil && *a[1].ID == 0 &&
				len(ev) == 1 && ev[0].Adapter == bad && ev[0].Event == "not loaded",
			fmt.Sprintf("adapters %+v, events %+v, error %q", a, ev, rep.Engine.AdaptersError)
	})
	t.Logf("chat-0's adapters: %+v; events: %+v", rep.Engine.Adapters, rep.Engine.AdapterEvents)
	return rep
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

	rep := waitPirateAndBad(t, ctlURL, "other")

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

// storeAdapterCatalog: a model on llama.cpp's real server with two LoRA
// adapters its node's store fetches from the local hub: moon from a URL
// with a sha256 its bytes do not have, pirate from a hub repository.
const storeAdapterCatalog = `
model "chat" {
  source   = %q
  replicas = 1
  adapter "moon" {
    weights {
      urls   = [%q]
      sha256 = { "moon.gguf" = %q }
    }
  }
  adapter "pirate" {
    source = "llmgw/pirate-lora"
    weights {
      revision = "main"
      files    = ["pirate.gguf"]
    }
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

// Issue 37's adapters through issue 35's store, on a real Nomad with
// llama.cpp's real server: the catalog's two adapters come from a local
// hub, fetched and verified by the node's store before the engine starts.
// moon's sha256 is wrong: the store refuses it after its tries, the driver
// leaves it out with a task event naming it and the cause, and the base
// model starts without it; the controller never reports moon loaded (an
// event says it is not) and reports pirate loaded as llama.cpp's id 0;
// through the llmgw gateway, pirate answers with its adapter's answer, the
// base model with its own, and a request for moon gets no answer from any
// model. The hub served pirate once and moon once per try.
func TestAdaptersFromTheStoreOverRealNomad(t *testing.T) {
	in := installRealEngine(t, "Hello world!")
	dir := filepath.Dir(in.Model)
	base := tinymodel.Defaults
	base.Answer = "Hello world!"
	pirate := writeAdapter(t, dir, "pirate.gguf", base, "Ahoy matey.")
	moon := writeAdapter(t, dir, "moon.gguf", base, "Goodbye moon.")
	hub := hubserver.Start(t, hubserver.Options{})
	if _, err := hub.AddFiles("llmgw/pirate-lora", "main", map[string]string{"pirate.gguf": pirate}); err != nil {
		t.Fatal(err)
	}
	moonCommit, err := hub.AddFiles("llmgw/moon-lora", "main", map[string]string{"moon.gguf": moon})
	if err != nil {
		t.Fatal(err)
	}
	moonURL := hub.URL() + "/llmgw/moon-lora/resolve/" + moonCommit + "/moon.gguf"
	wrong := fileSHA256(t, pirate)

	c, stores, engine := weightsClients(t, 1, hub, in.Binary)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary),
		fmt.Sprintf(storeAdapterCatalog, in.Model, moonURL, wrong), "headroom = 0\n")
	_, ctlURL, _ := runController(t, cfg, "ctl")
	waitServing(t, ctlURL, 4*time.Minute, "chat-0")

	rep := waitPirateAndBad(t, ctlURL, "moon")

	// The driver's task events: pirate fetched before the engine started,
	// moon not loaded, named with its cause.
	allocs, _, err := c.API.Jobs().Allocations(rep.JobID, false, nil)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations of %s: %d, %v", rep.JobID, len(allocs), err)
	}
	a, _, err := c.API.Allocations().Info(allocs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := a.TaskStates[render.TaskName]
	if ts == nil {
		t.Fatalf("no %s task state", render.TaskName)
	}
	notLoaded := `LoRA adapter "moon" not loaded: weights ` + moonURL + `: moon.gguf: moon.gguf: sha256 ` + fileSHA256(t, moon) + `, want ` + wrong
	fetched, started := eventIndex(ts, `LoRA adapter "pirate": Fetch finished: llmgw/pirate-lora@main (pirate.gguf)`), eventIndex(ts, "Started llamacpp")
	if eventIndex(ts, notLoaded) < 0 || eventIndex(ts, "LoRA adapters loaded: pirate (id 0)") < 0 || fetched < 0 || started < fetched {
		t.Errorf("task events %s: want pirate fetched, then %q and pirate loaded as id 0, then the engine started", taskEvents(ts), notLoaded)
	}
	for _, e := range ts.Events {
		if strings.Contains(e.DisplayMessage, "moon") || strings.Contains(e.DisplayMessage, "Started llamacpp") {
			t.Logf("task event: %s", e.DisplayMessage)
		}
	}
	// The engine loaded pirate from the store's verified file.
	var link string
	for _, e := range ts.Events {
		if cmd := e.Details["command"]; cmd != "" {
			_, rest, _ := strings.Cut(cmd, "--lora ")
			link, _, _ = strings.Cut(rest, " ")
		}
	}
	target, err := filepath.EvalSymlinks(link)
	if err != nil || !strings.HasSuffix(link, "/llmgw-adapters/pirate") || !strings.HasPrefix(target, stores["gpu-1"]+"/") || fileSHA256(t, target) != fileSHA256(t, pirate) {
		t.Errorf("the engine's --lora %q leads to %q (%v): want the driver's link to pirate's bytes in gpu-1's store %s", link, target, err, stores["gpu-1"])
	}

	// Through the gateway: pirate answers with its adapter, the base model
	// with its own, and moon with neither.
	bin := plugintest.Build(t, llmgwPkg)
	gw := startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s").url
	type listed struct {
		ID     string `json:"id"`
		Parent string `json:"parent"`
	}
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		var models struct {
			Data []listed `json:"data"`
		}
		getJSON(t, gw+"/v1/models", &models)
		return gwDemand(t, gw, "chat").Replicas == 1 && slices.Contains(models.Data, listed{"pirate", "chat"}),
			fmt.Sprintf("%s: models %+v", gw, models.Data)
	})
	answer := func(model string) (int, string, []byte) {
		r := gwPost(t, gw, fmt.Sprintf(`{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`, model))
		var out struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		_ = json.Unmarshal(r.body, &out)
		if len(out.Choices) != 1 {
			return r.status, "", r.body
		}
		return r.status, out.Choices[0].Message.Content, r.body
	}
	for _, w := range []struct{ model, want string }{{"pirate", "Ahoy matey."}, {"chat:pirate", "Ahoy matey."}, {"chat", "Hello world!"}} {
		if code, got, body := answer(w.model); code != http.StatusOK || got != w.want {
			t.Errorf("%s through the gateway: %d %q (%s), want %q", w.model, code, got, body, w.want)
		}
	}
	code, got, body := answer("moon")
	if code == http.StatusOK || got != "" {
		t.Errorf("moon through the gateway: %d %q (%s), want no answer: no replica loaded it", code, got, body)
	}
	t.Logf("moon through the gateway: %d %s", code, body)

	if st := hub.Stats("llmgw/pirate-lora", "pirate.gguf"); st.Gets != 1 {
		t.Errorf("pirate.gguf: %d GETs, want 1", st.Gets)
	}
	if st := hub.Stats("llmgw/moon-lora", "moon.gguf"); st.Gets != 4 {
		t.Errorf("moon.gguf: %d GETs, want the store's 4 tries", st.Gets)
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

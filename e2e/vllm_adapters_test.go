package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
)

// vllmAdapterCatalog: a model on vLLM (fake-engine, strict to vLLM's
// parser) with one API server, four adapter slots and the adapters given
// as name=path.
func vllmAdapterCatalog(adapters ...string) string {
	var b strings.Builder
	b.WriteString(`
model "assist" {
  source       = "org/chat"
  replicas     = 1
  max_adapters = 4
`)
	for _, a := range adapters {
		name, path, _ := strings.Cut(a, "=")
		fmt.Fprintf(&b, "  adapter %q {\n    path = %q\n  }\n", name, path)
	}
	b.WriteString(`  profile "x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }
  }
}
`)
	return b.String()
}

// TestVLLMRuntimeAdaptersOverRealNomad runs a vLLM model with LoRA
// adapters through the controller on a real Nomad, the engine fake-engine
// refusing as vLLM v0.28.0 does: the job starts vLLM with its adapter
// slots and VLLM_ALLOW_RUNTIME_LORA_UPDATING, no adapter named; the
// controller loads the catalog's into the running engine and shows them
// loaded (from the engine's GET /v1/models), one that is not there as a
// "load failed" event with vLLM's answer; a request naming an adapter is
// served. Then the catalog drops one adapter and adds another: the same
// job and allocation, the engine not restarted, the dropped one unloaded
// and the new one loaded. The controller's reading carries
// vllm:lora_requests_info (four slots).
func TestVLLMRuntimeAdaptersOverRealNomad(t *testing.T) {
	// The engine runs as nobody: the adapters in a world-readable folder.
	dir, err := os.MkdirTemp("", "llmgw-vllm-lora-") //nolint:usetesting // t.TempDir's parents are root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, name := range []string{"sql", "chat", "extra"} {
		paths[name] = filepath.Join(dir, name)
		if err := fakeengine.WritePEFTAdapter(paths[name], 8); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")

	c, engine := sameRackClients(t, 1)
	cfg := controllerFiles(t, c.Server.Addr(), engine,
		vllmAdapterCatalog("sql="+paths["sql"], "chat="+paths["chat"], "bad="+missing), "headroom = 0\n")
	ctl, ctlURL, _ := runController(t, cfg, "ctl")
	waitServing(t, ctlURL, 4*time.Minute, "assist-0")

	replica := func() controllerapi.ReplicaView {
		var reps []controllerapi.ReplicaView
		getJSON(t, ctlURL+"/v1/replicas", &reps)
		for _, r := range reps {
			if r.ID == "assist-0" {
				return r
			}
		}
		return controllerapi.ReplicaView{}
	}
	event := func(evs []controllerapi.AdapterEvent, adapter, ev, detail string) bool {
		return slices.ContainsFunc(evs, func(x controllerapi.AdapterEvent) bool {
			return x.Adapter == adapter && x.Event == ev && strings.Contains(x.Detail, detail)
		})
	}
	states := func(r controllerapi.ReplicaView) string {
		if r.Engine == nil {
			return "no engine reading"
		}
		return fmt.Sprintf("adapters %+v, events %+v, error %q", r.Engine.Adapters, r.Engine.AdapterEvents, r.Engine.AdaptersError)
	}
	var rep controllerapi.ReplicaView
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		rep = replica()
		if rep.Engine == nil || len(rep.Engine.Adapters) != 3 {
			return false, states(rep)
		}
		a, ev := rep.Engine.Adapters, rep.Engine.AdapterEvents
		return a[0] == controllerapi.AdapterState{Name: "sql", Loaded: true} && a[1] == controllerapi.AdapterState{Name: "chat", Loaded: true} &&
			!a[2].Loaded && strings.HasPrefix(a[2].Note, "load failed: POST /v1/load_lora_adapter: 404 Not Found: Loading lora bad failed: No adapter found for ") &&
			event(ev, "sql", "loaded", "POST /v1/load_lora_adapter") && event(ev, "bad", "load failed", "No adapter found"), states(rep)
	})
	t.Logf("assist-0: %s", states(rep))

	// The job as the controller wrote it: no adapter named, the slots and
	// the runtime API's switch.
	job, _, err := c.API.Jobs().Info(rep.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := job.TaskGroups[0].Tasks[0]
	env, _ := task.Config["env"].(map[string]any)
	if job.Meta[render.MetaAdapters] != render.AdaptersRuntime || task.Config["adapter"] != nil || env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] != "True" ||
		!strings.Contains(fmt.Sprint(task.Config["args"]), "--enable-lora --max-loras 4") {
		t.Errorf("job %s: meta %v, task config %v", rep.JobID, job.Meta, task.Config)
	}
	allocs, _, err := c.API.Jobs().Allocations(rep.JobID, false, nil)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations of %s: %d, %v", rep.JobID, len(allocs), err)
	}
	allocID := allocs[0].ID

	// A request for an adapter, straight to the replica.
	url := strings.TrimSuffix(rep.Engine.URL, "/metrics")
	post := func(model string) (int, string) {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"`+model+`","prompt":"Hi","max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("sql"); code != http.StatusOK {
		t.Errorf("a request for sql: %d %s", code, body)
	}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		r := replica()
		if r.Engine == nil || r.Engine.Reading == nil || r.Engine.Reading.Adapters == nil {
			return false, "no vllm:lora_requests_info in the reading"
		}
		return r.Engine.Reading.Adapters.Slots == 4, fmt.Sprintf("%+v", *r.Engine.Reading.Adapters)
	})

	// The catalog drops chat and adds extra: loaded and unloaded on the
	// running engine.
	if err := os.WriteFile(cfg.Catalog, []byte(vllmAdapterCatalog("sql="+paths["sql"], "extra="+paths["extra"], "bad="+missing)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Reload(); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		rep = replica()
		if rep.Engine == nil || len(rep.Engine.Adapters) != 3 {
			return false, states(rep)
		}
		a, ev := rep.Engine.Adapters, rep.Engine.AdapterEvents
		return a[0].Name == "sql" && a[0].Loaded && a[1].Name == "extra" && a[1].Loaded &&
			event(ev, "chat", "unloaded", "not in the catalog") && event(ev, "extra", "loaded", "POST"), states(rep)
	})
	t.Logf("assist-0 after the catalog's change: %s", states(rep))
	if code, body := post("extra"); code != http.StatusOK {
		t.Errorf("a request for extra: %d %s", code, body)
	}
	if code, body := post("chat"); code != http.StatusNotFound || !strings.Contains(body, "The model `chat` does not exist.") {
		t.Errorf("a request for the unloaded chat: %d %s", code, body)
	}
	// Nothing restarted: the same job, allocation and engine process.
	if rep.JobID != *job.ID {
		t.Errorf("the replica's job is %s, was %s", rep.JobID, *job.ID)
	}
	a, _, err := c.API.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := a.TaskStates[render.TaskName]
	if a.ClientStatus != "running" || ts == nil || ts.Restarts != 0 {
		t.Errorf("allocation %s: %s, task state %+v", allocID, a.ClientStatus, ts)
	}
	if jobs := llmgwJobs(t, c.API); len(jobs) != 1 {
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		t.Errorf("llmgw jobs %v, want %s alone", ids, *job.ID)
	}
}

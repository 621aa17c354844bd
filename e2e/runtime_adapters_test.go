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
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
)

// runtimeAdapterEngine is what TestRuntimeAdaptersOverRealNomad expects of
// one engine that loads LoRA adapters while it runs: how fake-engine is
// made to be it, what its job looks like, and what it answers.
type runtimeAdapterEngine struct {
	// name is the catalog's engine; env the profile's (fake-engine strict
	// to the engine's pinned parser, and its own flags); strict the
	// parser the engine's startup line names.
	name   string
	env    string
	strict string
	// startArgs is in the task's args; env the task's environment holds.
	startArgs string
	taskEnv   map[string]string
	// load and unload are the engine's routes, as the controller's
	// events name them; moved is the "loaded" event's detail for an
	// adapter the catalog moved from path old.
	load, unload string
	moved        func(old string) string
	// badNote starts the state's note of an adapter whose directory bad
	// holds nothing; refusal is in its "load failed" event.
	badNote func(bad string) string
	refusal string
	// model is how a request names adapter; gone checks the answer to a
	// request for an adapter the engine unloaded.
	model func(adapter string) string
	gone  func(code int, body string) bool
	// reading checks the controller's reading of the engine's /metrics
	// after a request for an adapter.
	reading func(r *enginemetrics.Reading) (bool, string)
}

var runtimeAdapterEngines = []runtimeAdapterEngine{
	{
		// fake-engine as vLLM v0.28.0, the driver block's strict mode.
		name:      "vllm",
		env:       `{ FAKE_ENGINE_FLAGS = "--load-seconds 1" }`,
		strict:    strictVLLM,
		startArgs: "--enable-lora --max-loras 4",
		taskEnv:   map[string]string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
		load:      "/v1/load_lora_adapter",
		unload:    "/v1/unload_lora_adapter",
		moved:     func(old string) string { return "POST /v1/load_lora_adapter, in place of " + old },
		// vLLM hides paths under /tmp in its messages: the note's start.
		badNote: func(string) string {
			return "load failed: POST /v1/load_lora_adapter: 404 Not Found: Loading lora bad failed: No adapter found for "
		},
		refusal: "No adapter found",
		model:   func(adapter string) string { return adapter },
		gone: func(code int, body string) bool {
			return code == http.StatusNotFound && strings.Contains(body, "The model `chat` does not exist.")
		},
		// vllm:lora_requests_info: max_lora, the four slots.
		reading: func(r *enginemetrics.Reading) (bool, string) {
			if r.Adapters == nil {
				return false, "no vllm:lora_requests_info in the reading"
			}
			return r.Adapters.Slots == 4, fmt.Sprintf("%+v", *r.Adapters)
		},
	},
	{
		// fake-engine as SGLang v0.5.18: strict to SGLang's parser (which
		// makes it SGLang, with its --model-path and metric names) in the
		// profile's env, over the driver block's vLLM.
		name:      "sglang",
		env:       fmt.Sprintf(`{ FAKE_ENGINE_STRICT = %q, FAKE_ENGINE_FLAGS = "--load-seconds 1" }`, pinnedSpec("sglang")),
		strict:    pinnedSpec("sglang"),
		startArgs: "--enable-lora --max-loras-per-batch 4 --max-lora-rank 8 --lora-target-modules all",
		load:      "/load_lora_adapter",
		unload:    "/unload_lora_adapter",
		// No load in place: unloaded, then loaded.
		moved: func(old string) string { return "POST /unload_lora_adapter and /load_lora_adapter, in place of " + old },
		badNote: func(bad string) string {
			return "load failed: POST /load_lora_adapter: 400 Bad Request: [Errno 2] No such file or directory: '" +
				filepath.Join(bad, "adapter_config.json") + "'"
		},
		refusal: "No such file or directory",
		// SGLang's requests name an adapter as served-name:adapter.
		model: func(adapter string) string { return "assist:" + adapter },
		// Not served; SGLang's text for it is not pinned here.
		gone: func(code int, _ string) bool { return code != http.StatusOK },
		// SGLang exports no adapter gauge; the reading's quantities are
		// all read from its sglang:* series.
		reading: func(r *enginemetrics.Reading) (bool, string) {
			return r.Adapters == nil && len(r.Absent) == 0 && len(r.Missing) == 0 && r.RequestsRunning.Known,
				fmt.Sprintf("adapters %v, absent %q, missing %q, running %+v", r.Adapters, r.Absent, r.Missing, r.RequestsRunning)
		},
	},
}

// runtimeAdapterCatalog: a model on e's engine (fake-engine) with one API
// server, four adapter slots and the adapters given as name=path, each of
// rank 8.
func runtimeAdapterCatalog(e runtimeAdapterEngine, adapters ...string) string {
	var b strings.Builder
	b.WriteString(`
model "assist" {
  source       = "org/chat"
  replicas     = 1
  max_adapters = 4
`)
	for _, a := range adapters {
		name, path, _ := strings.Cut(a, "=")
		fmt.Fprintf(&b, "  adapter %q {\n    path = %q\n    rank = 8\n  }\n", name, path)
	}
	fmt.Fprintf(&b, `  profile "x1" {
    engine = %q
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    env    = %s
  }
}
`, e.name, e.env)
	return b.String()
}

// TestRuntimeAdaptersOverRealNomad runs a model with LoRA adapters through
// the controller on a real Nomad, once on each engine that loads them
// while it runs (fake-engine refusing as vLLM v0.28.0 and SGLang v0.5.18
// do): the job starts the engine with its adapter slots, no adapter
// named; the controller loads the catalog's into the running engine and
// shows them loaded (from the engine's GET /v1/models), one whose
// directory holds nothing as a "load failed" event with the engine's
// answer; a request naming an adapter is served. Then the catalog drops
// one adapter, adds another and moves a third: the same job and
// allocation, the engine not restarted, the dropped one unloaded, the new
// one loaded, the moved one loaded from its new path (in place on vLLM,
// unloaded and loaded on SGLang). The controller's reading is the
// engine's (vLLM's vllm:lora_requests_info, four slots; SGLang's sglang:*
// series).
func TestRuntimeAdaptersOverRealNomad(t *testing.T) {
	for _, e := range runtimeAdapterEngines {
		t.Run(e.name, func(t *testing.T) { runtimeAdaptersOverRealNomad(t, e) })
	}
}

func runtimeAdaptersOverRealNomad(t *testing.T, e runtimeAdapterEngine) {
	// The engine runs as nobody: the adapters in a world-readable folder.
	dir, err := os.MkdirTemp("", "llmgw-runtime-lora-") //nolint:usetesting // t.TempDir's parents are root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, name := range []string{"sql", "sql-v2", "chat", "extra"} {
		paths[name] = filepath.Join(dir, name)
		if err := fakeengine.WritePEFTAdapter(paths[name], 8); err != nil {
			t.Fatal(err)
		}
	}
	bad := filepath.Join(dir, "bad")
	if err := os.Mkdir(bad, 0o755); err != nil {
		t.Fatal(err)
	}

	c, engine := sameRackClients(t, 1)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ %s = %q }", e.name, engine),
		runtimeAdapterCatalog(e, "sql="+paths["sql"], "chat="+paths["chat"], "bad="+bad), "headroom = 0\n")
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
			!a[2].Loaded && strings.HasPrefix(a[2].Note, e.badNote(bad)) &&
			event(ev, "sql", "loaded", "POST "+e.load) && event(ev, "bad", "load failed", e.refusal), states(rep)
	})
	t.Logf("assist-0: %s", states(rep))

	// The job as the controller wrote it: no adapter named, the slots
	// (and the runtime API's switch, where the engine has one).
	job, _, err := c.API.Jobs().Info(rep.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := job.TaskGroups[0].Tasks[0]
	env, _ := task.Config["env"].(map[string]any)
	args := fmt.Sprint(task.Config["args"])
	if job.Meta[render.MetaAdapters] != render.AdaptersRuntime || task.Config["adapter"] != nil ||
		!strings.Contains(args, e.startArgs) || strings.Contains(args, "--lora-paths") || strings.Contains(args, "--lora-modules") {
		t.Errorf("job %s: meta %v, task config %v", rep.JobID, job.Meta, task.Config)
	}
	for k, v := range e.taskEnv {
		if env[k] != v {
			t.Errorf("job %s: env %s = %v, want %q", rep.JobID, k, env[k], v)
		}
	}
	allocs, _, err := c.API.Jobs().Allocations(rep.JobID, false, nil)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations of %s: %d, %v", rep.JobID, len(allocs), err)
	}
	allocID := allocs[0].ID

	// Requests for an adapter, straight to the replica.
	url := strings.TrimSuffix(rep.Engine.URL, "/metrics")
	post := func(adapter string) (int, string) {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"`+e.model(adapter)+`","prompt":"Hi","max_tokens":2}`))
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
		if r.Engine == nil || r.Engine.Reading == nil {
			return false, "no reading"
		}
		return e.reading(r.Engine.Reading)
	})

	// The catalog drops chat, adds extra and moves sql: on the running
	// engine.
	if err := os.WriteFile(cfg.Catalog, []byte(runtimeAdapterCatalog(e, "sql="+paths["sql-v2"], "extra="+paths["extra"], "bad="+bad)), 0o644); err != nil {
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
			event(ev, "chat", "unloaded", "not in the catalog (POST "+e.unload+")") && event(ev, "extra", "loaded", "POST "+e.load) &&
			event(ev, "sql", "loaded", e.moved(paths["sql"])), states(rep)
	})
	t.Logf("assist-0 after the catalog's change: %s", states(rep))
	// The engine's own list: sql from its new path, extra, no chat.
	var models struct {
		Data []struct {
			ID   string `json:"id"`
			Root string `json:"root"`
		} `json:"data"`
	}
	getJSON(t, url+"/v1/models", &models)
	var cards []string
	for _, m := range models.Data {
		if m.ID != "assist" {
			cards = append(cards, m.ID+"="+m.Root)
		}
	}
	if want := []string{"sql=" + paths["sql-v2"], "extra=" + paths["extra"]}; !slices.Equal(cards, want) {
		t.Errorf("the engine's adapters %q, want %q", cards, want)
	}
	for _, a := range []string{"sql", "extra"} {
		if code, body := post(a); code != http.StatusOK {
			t.Errorf("a request for %s: %d %s", a, code, body)
		}
	}
	if code, body := post("chat"); !e.gone(code, body) {
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
	if out, _ := c.Logs(a, render.TaskName, "stdout"); !strings.Contains(out, " strict="+e.strict+"\n") {
		t.Errorf("the engine's startup line lacks strict=%s:\n%s", e.strict, out)
	}
	if jobs := llmgwJobs(t, c.API); len(jobs) != 1 {
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		t.Errorf("llmgw jobs %v, want %s alone", ids, *job.ID)
	}
}

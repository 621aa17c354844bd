package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// runtimeCatalog is model alpha on vLLM with one API server (its adapters
// loaded at runtime), four adapter slots and the adapters given as
// name=path.
func runtimeCatalog(adapters ...string) string { return adapterCatalogOn("vllm", 4, 0, adapters) }

// adapterCatalogOn is model alpha on engine with slots adapter slots and
// the adapters given as name=path, each of rank (none when 0).
func adapterCatalogOn(engine string, slots, rank int, adapters []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model \"alpha\" {\n  source = \"org/alpha\"\n  replicas = 1\n  max_adapters = %d\n", slots)
	for _, a := range adapters {
		name, path, _ := strings.Cut(a, "=")
		fmt.Fprintf(&b, "  adapter %q {\n    path = %q\n", name, path)
		if rank > 0 {
			fmt.Fprintf(&b, "    rank = %d\n", rank)
		}
		b.WriteString("  }\n")
	}
	fmt.Fprintf(&b, "  profile \"h1\" {\n    engine = %q\n    gpu = \"NVIDIA H200\"\n    gpus = 1\n    watts = 500\n  }\n}\n", engine)
	return b.String()
}

// loadCounter counts the engine's loads by adapter name.
type loadCounter struct {
	mu    sync.Mutex
	loads map[string]int
	next  http.Handler
}

func (l *loadCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/load_lora_adapter") { // vLLM's /v1/…, SGLang's /…
		b, _ := io.ReadAll(r.Body)
		var req struct {
			Name string `json:"lora_name"`
		}
		_ = json.Unmarshal(b, &req)
		l.mu.Lock()
		l.loads[req.Name]++
		l.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	l.next.ServeHTTP(w, r)
}

func (l *loadCounter) count(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loads[name]
}

// A vLLM replica rendered to get its adapters at runtime starts with none
// (fake-engine started from the job's own task config: its args and
// environment): the controller loads the catalog's, each a "loaded" event,
// and the engine's list says so; one the engine refuses is a "load failed"
// event with vLLM's answer, never loaded, and not asked again before its
// back-off (at once when its path changes). A catalog that adds and drops
// adapters changes no job: the controller loads and unloads on the running
// engine. An adapter the engine holds that the catalog does not list is
// unloaded.
// startRuntimeAdapters starts the controller of e with eng as every
// replica's engine and makes its first pass: one job, rendered to get its
// adapters at runtime (no adapter blocks in its task config), whose task
// and ID it returns.
func startRuntimeAdapters(t *testing.T, e *env, eng *switchEngine) (*ctl, string, *api.Task) {
	t.Helper()
	e.HoldLock()
	c := e.start("ctl", func(o *Options) { o.EngineMetricsInterval, o.EngineClient = 100*time.Millisecond, eng.client(t) })
	e.Pass(c)
	jobs := e.LiveJobs()
	if len(jobs) != 1 || jobs[0].Meta[render.MetaAdapters] != render.AdaptersRuntime {
		t.Fatalf("jobs %+v, want one with %s = %s", jobs, render.MetaAdapters, render.AdaptersRuntime)
	}
	job, _, err := e.API.Jobs().Info(jobs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := job.TaskGroups[0].Tasks[0]
	if _, ok := task.Config["adapter"]; ok {
		t.Fatalf("adapter blocks in the task config: %v", task.Config)
	}
	return c, jobs[0].ID, task
}

// serveEngine makes fake-engine, started as cfg says, eng's engine, counts
// its loads, and has c make a pass with every replica serving.
func serveEngine(t *testing.T, e *env, c *ctl, eng *switchEngine, cfg fakeengine.Config) (*fakeengine.Server, *loadCounter) {
	t.Helper()
	srv := fakeengine.NewServer(cfg, io.Discard, io.Discard)
	srv.Load(t.Context())
	counter := &loadCounter{loads: map[string]int{}, next: srv.Handler()}
	eng.mu.Lock()
	eng.srv = counter
	eng.mu.Unlock()
	e.ServeAll()
	e.Pass(c)
	return srv, counter
}

// hasAdapterEvent reports whether evs has adapter's event ev with detail
// in its text.
func hasAdapterEvent(evs []controllerapi.AdapterEvent, adapter, ev, detail string) bool {
	return slices.ContainsFunc(evs, func(x controllerapi.AdapterEvent) bool {
		return x.Adapter == adapter && x.Event == ev && strings.Contains(x.Detail, detail)
	})
}

func TestRuntimeAdaptersOnVLLM(t *testing.T) {
	sql, chat, extra := peftDir(t), peftDir(t), peftDir(t)
	missing := filepath.Join(t.TempDir(), "gone")
	eng := &switchEngine{}
	e := newEnv(t, sixNodes, runtimeCatalog("sql="+sql, "chat="+chat, "bad="+missing), `headroom = 0`)
	c, jobID, task := startRuntimeAdapters(t, e, eng)
	// The engine as the driver would start it from the task's config.
	args := []string{"serve", "org/alpha", "--served-model-name", "alpha"}
	for _, a := range task.Config["args"].([]any) {
		args = append(args, a.(string))
	}
	env := map[string]string{}
	for k, v := range task.Config["env"].(map[string]any) {
		env[k] = v.(string)
	}
	cfg, err := fakeengine.Parse(args, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.RuntimeLoRA || !cfg.EnableLoRA || len(cfg.LoRAModules) != 0 || cfg.MaxLoRAs != 4 {
		t.Fatalf("the engine from the task config: runtime %v, enable %v, modules %v, max loras %d", cfg.RuntimeLoRA, cfg.EnableLoRA, cfg.LoRAModules, cfg.MaxLoRAs)
	}
	srv, counter := serveEngine(t, e, c, eng, cfg)
	event := hasAdapterEvent
	badNote := "load failed: POST /v1/load_lora_adapter: 404 Not Found: Loading lora bad failed: No adapter found for " + strings.TrimSuffix(sanitized(missing), "\n")
	wait.For(t, "sql and chat loaded, bad refused", func() (bool, string) {
		r := alpha0(t, c)
		if r.Engine == nil || len(r.Engine.Adapters) != 3 {
			return false, adaptersOf(r)
		}
		a, ev := r.Engine.Adapters, r.Engine.AdapterEvents
		return a[0] == controllerapi.AdapterState{Name: "sql", Loaded: true} && a[1] == controllerapi.AdapterState{Name: "chat", Loaded: true} &&
			a[2] == controllerapi.AdapterState{Name: "bad", Note: badNote} &&
			event(ev, "sql", "loaded", "POST /v1/load_lora_adapter") && event(ev, "chat", "loaded", "POST /v1/load_lora_adapter") &&
			event(ev, "bad", "load failed", "No adapter found"), adaptersOf(r)
	})
	// Rounds go on (readings five rounds later): bad is not asked again
	// within its back-off, and its event is not repeated.
	first := alpha0(t, c).Engine.Reading.At
	wait.For(t, "five more rounds", func() (bool, string) {
		r := alpha0(t, c)
		return r.Engine.Reading.At.After(first.Add(500 * time.Millisecond)), adaptersOf(r)
	})
	if n := counter.count("bad"); n != 1 {
		t.Errorf("bad asked %d times within its back-off, want 1", n)
	}
	if n := counter.count("sql"); n != 1 {
		t.Errorf("sql loaded %d times, want 1", n)
	}
	failures := 0
	for _, ev := range alpha0(t, c).Engine.AdapterEvents {
		if ev.Adapter == "bad" {
			failures++
		}
	}
	if failures != 1 {
		t.Errorf("%d events of bad, want 1: %+v", failures, alpha0(t, c).Engine.AdapterEvents)
	}

	// The catalog drops chat, adds extra and gives bad a path that holds
	// an adapter: the same job, chat unloaded, extra and bad loaded (bad
	// at once: its path changed).
	e.WriteCatalog(runtimeCatalog("sql="+sql, "extra="+extra, "bad="+chat))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.Pass(c)
	wait.For(t, "the new catalog's adapters on the running engine", func() (bool, string) {
		r := alpha0(t, c)
		if r.Engine == nil || len(r.Engine.Adapters) != 3 {
			return false, adaptersOf(r)
		}
		a, ev := r.Engine.Adapters, r.Engine.AdapterEvents
		return a[0].Name == "sql" && a[0].Loaded && a[1].Name == "extra" && a[1].Loaded && a[2].Name == "bad" && a[2].Loaded &&
			event(ev, "chat", "unloaded", "not in the catalog") && event(ev, "extra", "loaded", "POST") && event(ev, "bad", "loaded", "POST"), adaptersOf(r)
	})
	if after := e.LiveJobs(); len(after) != 1 || after[0].ID != jobID {
		t.Errorf("jobs after the catalog's change %+v, want %s alone", after, jobID)
	}
	if models := cardsOf(t, srv); !slices.Equal(models, []string{"sql=" + sql, "extra=" + extra, "bad=" + chat}) {
		t.Errorf("the engine's adapters %q", models)
	}

	// An adapter loaded behind the controller's back is unloaded.
	w := postJSON(srv, "/v1/load_lora_adapter", `{"lora_name":"stray","lora_path":"`+chat+`"}`)
	if w.code != http.StatusOK {
		t.Fatalf("load stray: %d %s", w.code, w.body)
	}
	wait.For(t, "stray unloaded", func() (bool, string) {
		r := alpha0(t, c)
		return event(r.Engine.AdapterEvents, "stray", "unloaded", "not in the catalog") && !slices.Contains(cardsOf(t, srv), "stray="+chat), adaptersOf(r)
	})
}

// sglangCatalog is model alpha on SGLang (its adapters loaded at
// runtime), three adapter slots, the adapters given as name=path, each
// of rank 8.
func sglangCatalog(adapters ...string) string { return adapterCatalogOn("sglang", 3, 8, adapters) }

// An SGLang replica gets its adapters at runtime as vLLM's does
// (fake-engine started from the job's own task config, refusing as
// SGLang does): the controller loads the catalog's, one SGLang refuses is
// a "load failed" event with SGLang's message; a catalog that drops one
// and moves another changes no job: the dropped one is unloaded, and the
// moved one, SGLang having no load in place, unloaded and loaded again
// from its new path.
func TestRuntimeAdaptersOnSGLang(t *testing.T) {
	sql, chat, moved := peftDir(t), peftDir(t), peftDir(t)
	empty := t.TempDir()
	eng := &switchEngine{}
	e := newEnv(t, sixNodes, sglangCatalog("sql="+sql, "chat="+chat, "bad="+empty), `headroom = 0`)
	c, jobID, task := startRuntimeAdapters(t, e, eng)
	args := []string{"--model-path", "org/alpha", "--served-model-name", "alpha"}
	for _, a := range task.Config["args"].([]any) {
		args = append(args, a.(string))
	}
	cfg, err := fakeengine.Parse(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := fakeengine.LoadAdapters(cfg); err != nil {
		t.Fatalf("the engine from the task config %q does not start: %v", args, err)
	}
	if cfg.Engine != fakeengine.EngineSGLang || !cfg.EnableLoRA || len(cfg.LoRAPaths) != 0 || cfg.MaxLoRAs != 3 || cfg.MaxLoRARank != 8 {
		t.Fatalf("the engine from the task config %q: %+v", args, cfg)
	}
	srv, counter := serveEngine(t, e, c, eng, cfg)
	event := hasAdapterEvent
	badNote := "load failed: POST /load_lora_adapter: 400 Bad Request: [Errno 2] No such file or directory: '" + filepath.Join(empty, "adapter_config.json") + "'"
	wait.For(t, "sql and chat loaded, bad refused", func() (bool, string) {
		r := alpha0(t, c)
		if r.Engine == nil || len(r.Engine.Adapters) != 3 {
			return false, adaptersOf(r)
		}
		a, ev := r.Engine.Adapters, r.Engine.AdapterEvents
		return a[0] == controllerapi.AdapterState{Name: "sql", Loaded: true} && a[1] == controllerapi.AdapterState{Name: "chat", Loaded: true} &&
			a[2] == controllerapi.AdapterState{Name: "bad", Note: badNote} &&
			event(ev, "sql", "loaded", "POST /load_lora_adapter") && event(ev, "bad", "load failed", "No such file"), adaptersOf(r)
	})
	if n := counter.count("sql"); n != 1 {
		t.Errorf("sql loaded %d times, want 1", n)
	}

	// The catalog drops chat and bad and moves sql.
	e.WriteCatalog(sglangCatalog("sql=" + moved))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.Pass(c)
	wait.For(t, "sql from its new path, chat unloaded", func() (bool, string) {
		r := alpha0(t, c)
		if r.Engine == nil || len(r.Engine.Adapters) != 1 {
			return false, adaptersOf(r)
		}
		ev := r.Engine.AdapterEvents
		return r.Engine.Adapters[0] == controllerapi.AdapterState{Name: "sql", Loaded: true} &&
			event(ev, "chat", "unloaded", "not in the catalog (POST /unload_lora_adapter)") &&
			event(ev, "sql", "loaded", "POST /unload_lora_adapter and /load_lora_adapter, in place of "+sql), adaptersOf(r)
	})
	if after := e.LiveJobs(); len(after) != 1 || after[0].ID != jobID {
		t.Errorf("jobs after the catalog's change %+v, want %s alone", after, jobID)
	}
	if models := cardsOf(t, srv); !slices.Equal(models, []string{"sql=" + moved}) {
		t.Errorf("the engine's adapters %q", models)
	}
}

// sanitized is what vLLM's sanitize_message makes of a path in a message,
// as fake-engine answers it.
func sanitized(p string) string {
	for _, dir := range []string{"/home/", "/usr/", "/opt/", "/var/", "/tmp/", "/root/", "/lib/", "/mnt/", "/srv/"} {
		if strings.HasPrefix(p, dir) {
			return "<path>"
		}
	}
	return p
}

type answer struct {
	code int
	body string
}

func postJSON(srv *fakeengine.Server, path, body string) answer {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, r)
	return answer{w.Code, w.Body.String()}
}

// cardsOf lists the adapters srv's GET /v1/models holds, name=path.
func cardsOf(t *testing.T, srv *fakeengine.Server) []string {
	t.Helper()
	w := httptest.NewRecorder()
	srv.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Root   string  `json:"root"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
		t.Fatalf("GET /v1/models: %v: %s", err, w.Body.String())
	}
	var out []string
	for _, c := range list.Data {
		if c.Parent != nil {
			out = append(out, c.ID+"="+c.Root)
		}
	}
	return out
}

package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/weights"
	"github.com/llmgw/llmgw/weightsapi"
)

// An adapter block may name what the node's store fetches, as a task's
// weights block does a model's: a hub repository (source) with its
// revision and files, or urls with their sha256. What is wrong is refused
// naming the adapter and the field.
func TestDecodeTaskConfigFetchedAdapters(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	base := "engine = \"%s\"\nmodel = \"m\"\nport = \"http\"\n"
	got, err := DecodeTaskConfig(encode(t, TaskConfigSpec(), fmt.Sprintf(base, "llamacpp")+`
adapter {
  name   = "sql"
  source = "org/sql-lora"
  weights {
    revision = "v1"
    files    = ["sql.gguf"]
  }
}
adapter {
  name = "chat"
  weights {
    urls   = ["https://h/lora/chat.gguf"]
    sha256 = { "chat.gguf" = "`+sum+`" }
  }
}
adapter {
  name = "kept"
  path = "/srv/lora/kept.gguf"
}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []AdapterConfig{
		{Name: "sql", Source: "org/sql-lora", Weights: &WeightsConfig{Revision: "v1", Files: []string{"sql.gguf"}}},
		{Name: "chat", Weights: &WeightsConfig{URLs: []string{"https://h/lora/chat.gguf"}, SHA256: map[string]string{"chat.gguf": sum}}},
		{Name: "kept", Path: "/srv/lora/kept.gguf"},
	}
	if diff := cmp.Diff(want, got.Adapters); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	src, err := got.Adapters[0].source()
	if err != nil || src.Hub == nil || src.Hub.Repo != "org/sql-lora" || src.Hub.Rev() != "v1" {
		t.Errorf("sql's source: %+v, %v", src, err)
	}
	src, err = got.Adapters[1].source()
	if err != nil || len(src.URLs) != 1 || src.URLs[0].SHA256 != sum {
		t.Errorf("chat's source: %+v, %v", src, err)
	}
	for _, c := range []struct{ body, want string }{
		{"adapter {\n  name = \"a\"\n}\n", `adapter "a": give path, or a weights block the node's store fetches`},
		{"adapter {\n  name = \"a\"\n  path = \"/a\"\n  weights {\n    urls = [\"https://h/a.gguf\"]\n  }\n}\n", `adapter "a": path and weights are both given`},
		{"adapter {\n  name = \"a\"\n  source = \"org/a\"\n  path = \"/a\"\n}\n", `adapter "a": source is a weights block's hub repository`},
		{"adapter {\n  name = \"a\"\n  source = \"org/a\"\n  weights {\n    urls = [\"https://h/a.gguf\"]\n  }\n}\n", `adapter "a": source is for a hub repository; with weights.urls, leave it out`},
		{"adapter {\n  name = \"a\"\n  weights {\n    files = [\"a.gguf\"]\n  }\n}\n", `adapter "a": weights.hub.repo: "" is not a repository id (org/name) (source names the repository)`},
		{"adapter {\n  name = \"a\"\n  source = \"org/a\"\n  weights {\n    revision = \"v1\"\n  }\n}\n", `adapter "a": weights.hub.files: name at least one file`},
		{"adapter {\n  name = \"a\"\n  weights {\n    urls = [\"https://h/a.gguf\"]\n    sha256 = { \"b.gguf\" = \"" + sum + "\" }\n  }\n}\n", `adapter "a": weights.sha256: "b.gguf" names no file of urls`},
		{"adapter {\n  name = \"../a\"\n  weights {\n    urls = [\"https://h/a.gguf\"]\n  }\n}\n", `adapter "../a": name: "../a" cannot name the adapter's link in the task directory`},
	} {
		_, err := DecodeTaskConfig(encode(t, TaskConfigSpec(), fmt.Sprintf(base, "llamacpp")+c.body))
		if !errors.Is(err, ErrBadTaskConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.body, err, c.want)
		}
	}
}

// fetchTask is a task config whose alloc dir is a new directory.
func fetchTask(t *testing.T) *driverpb.TaskConfig {
	t.Helper()
	return &driverpb.TaskConfig{Id: "a/engine/1", Name: "engine", AllocDir: t.TempDir()}
}

// The store fetches each adapter with a weights block before the engine
// starts, as it does a model's weights, and the driver links it in the
// task's directory under the adapter's name (llama.cpp: its GGUF file); an
// adapter that cannot be fetched is left out with the cause, the others
// keep their order, each step is a task event naming the adapter, and a
// second task on the node fetches nothing.
func TestFetchAdaptersLlamaCpp(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add("llmgw/sql-lora", "main", map[string][]byte{"sql.gguf": []byte("sql adapter"), "README.md": []byte("the sql adapter")})
	store := t.TempDir()
	conf := Config{ModelCache: store, HubURL: hub.URL()}
	tc := TaskConfig{Engine: engine.LlamaCpp, Adapters: []AdapterConfig{
		{Name: "sql", Source: "llmgw/sql-lora", Weights: &WeightsConfig{Files: []string{"*"}}},
		{Name: "kept", Path: "/srv/lora/kept.gguf"},
		{Name: "gone", Source: "llmgw/gone-lora", Weights: &WeightsConfig{Files: []string{"gone.gguf"}}},
	}}
	task := fetchTask(t)
	var events []string
	emit := func(_ time.Time, msg string, ann map[string]string) {
		events = append(events, msg+" ["+ann["adapter"]+"]")
	}
	bad, keys := fetchAdapters(t.Context(), conf, task, &tc, emit)

	link := filepath.Join(task.GetAllocDir(), "engine", "llmgw-adapters", "sql")
	if diff := cmp.Diff([]AdapterConfig{
		{Name: "sql", Path: link, Source: "llmgw/sql-lora", Weights: &WeightsConfig{Files: []string{"*"}}},
		{Name: "kept", Path: "/srv/lora/kept.gguf"},
	}, tc.Adapters); diff != "" {
		t.Errorf("adapters kept (-want +got):\n%s", diff)
	}
	if len(bad) != 1 || bad[0].Name != "gone" || !strings.Contains(bad[0].err.Error(), "RepoNotFound") {
		t.Errorf("left out %+v, want gone, its repository not found", bad)
	}
	sqlSrc := weightsapi.Source{Hub: &weightsapi.Hub{Repo: "llmgw/sql-lora", Files: []string{"*"}}}
	if len(keys) != 1 || keys[0] != sqlSrc.Key() {
		t.Errorf("keys %q, want sql's %q", keys, sqlSrc.Key())
	}
	// The link leads to the store's verified GGUF file, not the README.
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "sql adapter" || !strings.HasPrefix(target, store+"/") {
		t.Errorf("the link leads to %s (%q, %v): want sql.gguf in the store %s", target, b, err, store)
	}
	wantEvents := []string{`LoRA adapter "sql": Fetch started: llmgw/sql-lora@main (*)`, `LoRA adapter "sql": Fetch finished`}
	for _, w := range wantEvents {
		found := false
		for _, e := range events {
			found = found || strings.HasPrefix(e, w) && strings.HasSuffix(e, "["+strings.Split(w, `"`)[1]+"]")
		}
		if !found {
			t.Errorf("events %q: want one starting %q, annotated with its adapter", events, w)
		}
	}

	// A second task on the node: nothing fetched, the same store file.
	tc2 := TaskConfig{Engine: engine.LlamaCpp, Adapters: []AdapterConfig{{Name: "sql", Source: "llmgw/sql-lora", Weights: &WeightsConfig{Files: []string{"*"}}}}}
	bad, _ = fetchAdapters(t.Context(), conf, fetchTask(t), &tc2, func(time.Time, string, map[string]string) {})
	if len(bad) != 0 || len(tc2.Adapters) != 1 {
		t.Errorf("second task: left out %+v, kept %+v", bad, tc2.Adapters)
	}
	if st := hub.Stats("llmgw/sql-lora", "sql.gguf"); st.Gets != 1 {
		t.Errorf("sql.gguf fetched %d times onto the node, want once", st.Gets)
	}

	// Two GGUF files: llama.cpp loads one; the adapter is left out, named.
	hub.Add("llmgw/two-lora", "main", map[string][]byte{"a.gguf": []byte("a"), "b.gguf": []byte("b")})
	tc3 := TaskConfig{Engine: engine.LlamaCpp, Adapters: []AdapterConfig{{Name: "two", Source: "llmgw/two-lora", Weights: &WeightsConfig{Files: []string{"*.gguf"}}}}}
	bad, _ = fetchAdapters(t.Context(), conf, fetchTask(t), &tc3, func(time.Time, string, map[string]string) {})
	if len(bad) != 1 || len(tc3.Adapters) != 0 || !strings.Contains(bad[0].err.Error(), "2 GGUF files of 2 (a.gguf, b.gguf): llama.cpp loads an adapter from one GGUF file") {
		t.Errorf("two GGUF files: left out %+v, kept %+v", bad, tc3.Adapters)
	}

	// No store on the node: the adapter is left out, naming the option.
	tc4 := TaskConfig{Engine: engine.LlamaCpp, Adapters: []AdapterConfig{{Name: "sql", Source: "llmgw/sql-lora", Weights: &WeightsConfig{Files: []string{"*"}}}}}
	bad, _ = fetchAdapters(t.Context(), Config{}, fetchTask(t), &tc4, func(time.Time, string, map[string]string) {})
	if len(bad) != 1 || !strings.Contains(bad[0].err.Error(), "the plugin config sets no model_cache") {
		t.Errorf("no store: left out %+v", bad)
	}
}

// For vLLM and SGLang the link is the PEFT directory: that of the
// source's adapter_config.json, a subdirectory of the repository
// included; two adapters' configs in one source are refused, named.
func TestFetchAdaptersPEFT(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add("llmgw/loras", "main", map[string][]byte{
		"sql/adapter_config.json": []byte(`{"r": 8}`), "sql/adapter_model.safetensors": []byte("w"),
		"chat/adapter_config.json": []byte(`{"r": 8}`), "chat/adapter_model.safetensors": []byte("w"),
	})
	conf := Config{ModelCache: t.TempDir(), HubURL: hub.URL()}
	tc := TaskConfig{Engine: engine.VLLM, Adapters: []AdapterConfig{
		{Name: "sql", Source: "llmgw/loras", Weights: &WeightsConfig{Files: []string{"sql/*"}}},
		{Name: "both", Source: "llmgw/loras", Weights: &WeightsConfig{Files: []string{"*/*"}}},
	}}
	task := fetchTask(t)
	bad, _ := fetchAdapters(t.Context(), conf, task, &tc, func(time.Time, string, map[string]string) {})
	if len(bad) != 1 || bad[0].Name != "both" || !strings.Contains(bad[0].err.Error(), "2 adapter_config.json files") {
		t.Errorf("left out %+v (%v), want both, with two configs", bad, bad[0].err)
	}
	if len(tc.Adapters) != 1 {
		t.Fatalf("kept %+v", tc.Adapters)
	}
	ok, notOK := checkPEFTAdapters(tc.Adapters, func(string) error { return nil })
	if len(ok) != 1 || len(notOK) != 0 {
		t.Errorf("the PEFT check of the link: ok %+v, not %+v", ok, notOK)
	}
	if b, err := os.ReadFile(filepath.Join(tc.Adapters[0].Path, "adapter_config.json")); err != nil || string(b) != `{"r": 8}` {
		t.Errorf("the link's adapter_config.json: %q, %v", b, err)
	}
	s, err := weights.Open(weights.Config{Dir: conf.ModelCache})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := s.Models()
	if err != nil || len(ms) != 2 {
		t.Errorf("the store holds %d models (%v), want sql's and both's", len(ms), err)
	}
}

// The catalog's adapters that the stores fetch reach the driver as the
// same sources: render's adapter blocks decode (as this test maps Nomad's
// conversion) into sources with the catalog's keys, and the driver takes
// the task config.
func TestRenderedFetchedAdaptersAreTheCatalogs(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	cat, err := facility.ParseCatalog("c.hcl", []byte(`model "m" {
  source = "/models/m.gguf"
  adapter "sql" {
    source = "org/sql-lora"
    weights {
      revision = "v1"
      files    = ["sql.gguf"]
    }
  }
  adapter "chat" {
    weights {
      urls   = ["https://h/lora/chat.gguf"]
      sha256 = { "chat.gguf" = "`+sum+`" }
    }
  }
  profile "p" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
  }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	p := m.Profiles[0]
	job, err := render.Job(render.Input{
		Model: m, Profile: p,
		Decision: facility.Decision{Replica: facility.ReplicaID(m.Name, 0), Model: m.Name, Profile: p.Name, Placed: true,
			Shards: []facility.Shard{{Node: "n-0", GPU: p.GPU, GPUs: p.GPUs}}},
		Nodes: map[string]render.NodeInfo{"n-0": {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := taskConfig(job.TaskGroups[0].Tasks[0].Config, nomadVars)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.validate(); err != nil {
		t.Fatalf("the driver refuses the rendered config: %v", err)
	}
	if len(tc.Adapters) != 2 {
		t.Fatalf("adapters %+v", tc.Adapters)
	}
	for i, a := range tc.Adapters {
		src, err := a.source()
		if err != nil || a.Path != "" || src.Key() != m.Adapters[i].Weights.Key() {
			t.Errorf("%s: %+v (%v), key %q; want the catalog's %q", a.Name, src, err, src.Key(), m.Adapters[i].Weights.Key())
		}
	}
}

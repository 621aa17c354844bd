package render

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/weightsapi"
)

func adapterModel(engine string, args ...string) facility.Model {
	return facility.Model{Name: "base", Source: "/models/base.gguf", Replicas: 1,
		Adapters: []facility.Adapter{
			{Name: "sql", Weights: weightsapi.Source{Path: "/srv/lora/sql.gguf"}, Scale: 1},
			{Name: "chat", Weights: weightsapi.Source{Path: "/srv/lora/chat.gguf"}, Scale: 0.5, Rank: 16},
		},
		Profiles: []facility.Profile{{Name: "p", Engine: engine, GPU: "NVIDIA H200", GPUs: 1, Nodes: 1, Args: args}}}
}

// A model's adapters the engine loads at start travel as the task's
// adapter blocks, in the catalog's order, with max_adapters where set; the
// driver renders them onto the engine's command line after it checked
// them (driver's TestRenderedAdaptersReachTheCommandLine), so the
// profile's args hold none of their flags. (vLLM with several API
// servers, here data_parallel 2, is one such engine; with one it gets
// them at runtime: TestJobRendersRuntimeAdapters.)
func TestJobRendersAdapters(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"llamacpp", "vllm"} {
		m := adapterModel(engine, "-c", "4096")
		if engine == "vllm" {
			m.MaxAdapters = 1
			m.Profiles[0].GPUs, m.Profiles[0].DataParallel = 2, 2
		}
		job, err := Job(input(m, 0, nil, nil, "n1"))
		if err != nil {
			t.Fatalf("%s: %v", engine, err)
		}
		if _, ok := job.Meta[MetaAdapters]; ok {
			t.Errorf("%s: job meta %s", engine, MetaAdapters)
		}
		cfg := job.TaskGroups[0].Tasks[0].Config
		if diff := cmp.Diff([]string{"-c", "4096"}, cfg["args"]); diff != "" {
			t.Errorf("%s args (-want +got):\n%s", engine, diff)
		}
		want := []map[string]any{{"name": "sql", "path": "/srv/lora/sql.gguf"}, {"name": "chat", "path": "/srv/lora/chat.gguf", "rank": 16}}
		if diff := cmp.Diff(want, cfg["adapter"]); diff != "" {
			t.Errorf("%s adapter blocks (-want +got):\n%s", engine, diff)
		}
		if got, ok := cfg["max_adapters"]; engine == "vllm" && got != 1 || engine == "llamacpp" && ok {
			t.Errorf("%s max_adapters %v", engine, got)
		}
	}
	// Without adapters, nothing of them.
	m := adapterModel("llamacpp", "-c", "4096")
	m.Adapters = nil
	job, err := Job(input(m, 0, nil, nil, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := job.TaskGroups[0].Tasks[0].Config["adapter"]; ok {
		t.Error("adapter blocks without adapters")
	}
}

// An adapter the nodes' stores fetch travels as its source and weights
// block, as the model's weights do; the driver's store fetches it before
// the engine starts (driver's TestRealLlamaCppAdaptersFromTheStore).
func TestJobRendersFetchedAdapters(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	m := adapterModel("llamacpp")
	m.Adapters = []facility.Adapter{
		{Name: "sql", Weights: weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/sql-lora", Revision: "v1", Files: []string{"sql.gguf"}}}, Scale: 1, Rank: 8},
		{Name: "chat", Weights: weightsapi.Source{URLs: []weightsapi.URL{{URL: "https://h/lora/chat.gguf", SHA256: sum}}}, Scale: 1},
		{Name: "kept", Weights: weightsapi.Source{Path: "/srv/lora/kept.gguf"}, Scale: 1},
	}
	job, err := Job(input(m, 0, nil, nil, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"name": "sql", "source": "org/sql-lora", "weights": []map[string]any{{"revision": "v1", "files": []string{"sql.gguf"}}}, "rank": 8},
		{"name": "chat", "weights": []map[string]any{{"urls": []string{"https://h/lora/chat.gguf"}, "sha256": map[string]string{"chat.gguf": sum}}}},
		{"name": "kept", "path": "/srv/lora/kept.gguf"},
	}
	if diff := cmp.Diff(want, job.TaskGroups[0].Tasks[0].Config["adapter"]); diff != "" {
		t.Errorf("adapter blocks (-want +got):\n%s", diff)
	}
}

// vLLM with one API server gets its adapters from the controller while it
// runs: no adapter blocks, the slots and rank bound after the profile's
// args on every rank, the environment that turns the API on (over the
// profile's own setting of it), and job meta saying so.
func TestJobRendersRuntimeAdapters(t *testing.T) {
	t.Parallel()
	m := adapterModel("vllm", "-c", "4096")
	m.MaxAdapters = 4
	m.Profiles[0].Env = map[string]string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0", "HF_HOME": "/hf"}
	job, err := Job(input(m, 0, nil, nil, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := job.Meta[MetaAdapters]; got != AdaptersRuntime {
		t.Errorf("job meta %s = %q", MetaAdapters, got)
	}
	cfg := job.TaskGroups[0].Tasks[0].Config
	if diff := cmp.Diff([]string{"-c", "4096", "--enable-lora", "--max-loras", "4", "--max-cpu-loras", "4", "--max-lora-rank", "16"}, cfg["args"]); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	for _, k := range []string{"adapter", "max_adapters"} {
		if v, ok := cfg[k]; ok {
			t.Errorf("task config %s = %v", k, v)
		}
	}
	if diff := cmp.Diff(map[string]string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "HF_HOME": "/hf"}, cfg["env"]); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	// Another adapter: the same job (its ID holds the fingerprint), task
	// config and all.
	more := m
	more.Adapters = append(append([]facility.Adapter(nil), m.Adapters...), facility.Adapter{Name: "new", Weights: weightsapi.Source{Path: "/srv/lora/new"}, Scale: 1, Rank: 8})
	again, err := Job(input(more, 0, nil, nil, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if *again.ID != *job.ID || !cmp.Equal(again.TaskGroups[0].Tasks[0].Config, cfg) {
		t.Errorf("one more adapter: job %s -> %s, config %v -> %v", *job.ID, *again.ID, cfg, again.TaskGroups[0].Tasks[0].Config)
	}
}

// adapter_loading = "start": the same vLLM model's adapters go on the
// command line (the task config's adapter blocks), and the job turns no
// runtime API on.
func TestJobRendersAdaptersAtStartWhenAsked(t *testing.T) {
	t.Parallel()
	m := adapterModel("vllm", "-c", "4096")
	m.MaxAdapters = 4
	m.AdapterLoading = facility.AdapterLoadingStart
	m.Profiles[0].Env = map[string]string{"HF_HOME": "/hf"}
	job, err := Job(input(m, 0, nil, nil, "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := job.Meta[MetaAdapters]; got == AdaptersRuntime {
		t.Errorf("job meta %s = %q", MetaAdapters, got)
	}
	cfg := job.TaskGroups[0].Tasks[0].Config
	if _, ok := cfg["adapter"]; !ok {
		t.Errorf("task config has no adapter blocks: %v", cfg)
	}
	if diff := cmp.Diff(map[string]string{"HF_HOME": "/hf"}, cfg["env"]); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

// What the catalog refuses of adapters, render refuses too.
func TestJobRefusesBadAdapters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    facility.Model
		want string
	}{
		{"tgi", adapterModel("tgi"), `engine "tgi" serves no LoRA adapters`},
		{"args set --lora", adapterModel("llamacpp", "--lora", "/x.gguf"), "--lora is llmgw's to set"},
		{"too few slots", func() facility.Model { m := adapterModel("llamacpp"); m.MaxAdapters = 1; return m }(), "loads all 2 adapters at start"},
	} {
		_, err := Job(input(tc.m, 0, nil, nil, "n1"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

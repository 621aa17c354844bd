package engine

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanAdapters(t *testing.T) {
	t.Parallel()
	spec := AdapterSpec{Adapters: twoAdapters, Slots: 1}
	p, err := PlanAdapters(VLLM, spec, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "2", "--max-lora-rank", "32"}
	if !p.Runtime || p.Rule == nil || !cmp.Equal(want, p.Args) || p.Key != "max_loras=1 max_lora_rank=32" ||
		!cmp.Equal(map[string]string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, p.Env) {
		t.Errorf("vLLM, one API server: %+v", p)
	}
	// The start flags pass vLLM's parser at the pinned contract.
	in := Input{Engine: VLLM, Executable: "vllm", Model: "/models/base", Host: "127.0.0.1", Port: 8000,
		Layout: Layout{Tensor: 1}, GPUs: 1, ServedName: "base", Args: p.Args}
	if err := CheckContract(in); err != nil {
		t.Errorf("start flags: %v", err)
	}
	// No rank known: vLLM's default bound, no flag; the slots default to
	// the count.
	p, _ = PlanAdapters(VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a"}}}, 0, nil)
	if !cmp.Equal([]string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "1"}, p.Args) || p.Key != "max_loras=1" {
		t.Errorf("no rank: %+v", p)
	}
	// More than one API server: at start, saying why.
	for _, c := range []struct {
		data int
		args []string
		rt   bool
	}{
		{2, nil, false},
		{2, []string{"--api-server-count", "1"}, true},
		{2, []string{"-asc=1"}, true},
		{1, []string{"--api-server-count", "2"}, false},
		{1, []string{"--api_server_count=3"}, false},
		{1, []string{"--api-server-count", "2", "--api-server-count", "1"}, true},
	} {
		p, err := PlanAdapters(VLLM, spec, c.data, c.args)
		if err != nil || p.Runtime != c.rt || (!c.rt && (p.Args != nil || !strings.Contains(p.Static, "API servers"))) {
			t.Errorf("data %d, args %q: %+v (%v), want runtime %v", c.data, c.args, p, err, c.rt)
		}
	}
	// An engine without a runtime API, and no adapters: an empty plan.
	if p, err := PlanAdapters(LlamaCpp, AdapterSpec{Adapters: twoAdapters}, 1, nil); err != nil || p.Runtime || p.Static != "" {
		t.Errorf("llama.cpp: %+v (%v)", p, err)
	}
	if p, err := PlanAdapters(VLLM, AdapterSpec{}, 1, nil); err != nil || p.Runtime {
		t.Errorf("no adapters: %+v (%v)", p, err)
	}
	// The spec's own errors, as AdapterArgs gives them.
	if _, err := PlanAdapters(VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "rel"}}}, 1, nil); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("a relative path: %v", err)
	}
	if _, err := PlanAdapters(VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a", Rank: 1024}}}, 1, nil); err == nil || !strings.Contains(err.Error(), "rank 1024") {
		t.Errorf("a rank past vLLM's largest: %v", err)
	}
}

// SGLang starts with its slots, the catalog's largest rank and every
// target module, no adapter named and no --max-loaded-loras; at start
// instead where the catalog gives no rank, with several HTTP workers, and
// with plain data parallelism.
func TestPlanAdaptersSGLang(t *testing.T) {
	t.Parallel()
	spec := AdapterSpec{Adapters: twoAdapters, Slots: 4}
	p, err := PlanAdapters(SGLang, spec, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--enable-lora", "--max-loras-per-batch", "4", "--max-lora-rank", "24", "--lora-target-modules", "all"}
	if !p.Runtime || p.Rule == nil || !cmp.Equal(want, p.Args) || p.Key != "max_loras_per_batch=4 max_lora_rank=24" || len(p.Env) != 0 ||
		p.Rule.LoadPath != "/load_lora_adapter" || p.Rule.UnloadPath != "/unload_lora_adapter" || p.Rule.Inplace {
		t.Errorf("SGLang: %+v", p)
	}
	// The start flags pass SGLang's parser at the pinned contract.
	in := Input{Engine: SGLang, Executable: SGLang, Model: "/models/base", Host: "127.0.0.1", Port: 8000,
		Layout: Layout{Tensor: 1}, GPUs: 1, ServedName: "base", Args: p.Args}
	if err := CheckContract(in); err != nil {
		t.Errorf("start flags: %v", err)
	}
	// No max_adapters: the slots are the count.
	p, _ = PlanAdapters(SGLang, AdapterSpec{Adapters: twoAdapters}, 1, nil)
	if p.Key != "max_loras_per_batch=2 max_lora_rank=24" {
		t.Errorf("no max_adapters: %+v", p)
	}
	for _, c := range []struct {
		name string
		spec AdapterSpec
		data int
		args []string
		why  string // "" runtime
	}{
		{"no rank", AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a"}}}, 1, nil, "needs --max-lora-rank"},
		{"one rank of two", AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a"}, {Name: "b", Path: "/b", Rank: 8}}}, 1, nil, ""},
		{"two HTTP workers", spec, 1, []string{"--tokenizer-worker-num", "2"}, "2 HTTP workers"},
		{"the = spelling", spec, 1, []string{"--tokenizer-worker-num=3"}, "3 HTTP workers"},
		{"the last of two", spec, 1, []string{"--tokenizer-worker-num", "2", "--tokenizer-worker-num", "1"}, ""},
		{"plain data parallelism", spec, 2, nil, "--dp-size 2 and no --enable-dp-attention"},
		{"data-parallel attention", spec, 2, []string{"--enable-dp-attention"}, ""},
	} {
		p, err := PlanAdapters(SGLang, c.spec, c.data, c.args)
		switch {
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.why == "" && !p.Runtime:
			t.Errorf("%s: %+v, want runtime", c.name, p)
		case c.why != "" && (p.Runtime || p.Args != nil || !strings.Contains(p.Static, c.why) || !strings.Contains(p.Static, "at v0.5.18")):
			t.Errorf("%s: %+v, want at start saying %q", c.name, p, c.why)
		}
	}
	// The profile's args may not set the flag the runtime start renders.
	if err := CheckAdapterArgs(SGLang, []string{"--lora-target-modules", "q_proj"}); err == nil {
		t.Error("--lora-target-modules in the profile's args alongside adapters: no error")
	}
}

func TestAdapterRuntimeBodies(t *testing.T) {
	t.Parallel()
	d, _ := Lookup(VLLM)
	rt := d.Adapters.Runtime
	if got := string(rt.LoadBody("sql", `/srv/"q"`, false)); got != `{"lora_name":"sql","lora_path":"/srv/\"q\""}` {
		t.Errorf("load body %s", got)
	}
	if got := string(rt.LoadBody("sql", "/srv/sql", true)); got != `{"lora_name":"sql","lora_path":"/srv/sql","load_inplace":true}` {
		t.Errorf("load body in place %s", got)
	}
	if got := string(rt.UnloadBody("sql")); got != `{"lora_name":"sql"}` {
		t.Errorf("unload body %s", got)
	}
	for body, want := range map[string]string{
		`{"error":{"message":"The lora adapter 'x' cannot be found.","type":"NotFoundError","param":null,"code":404}}`: "The lora adapter 'x' cannot be found.",
		`{"detail":"Not Found"}`:                    "Not Found",
		`{"detail":[{"loc":["body"],"msg":"bad"}]}`: `[{"loc":["body"],"msg":"bad"}]`,
		"Internal Server Error":                     "Internal Server Error",
		"":                                          "",
	} {
		if got := rt.Refusal([]byte(body)); got != want {
			t.Errorf("Refusal(%s) = %q, want %q", body, got, want)
		}
	}
	if got := rt.Refusal([]byte(strings.Repeat("x", 400))); len(got) > 310 || !strings.HasSuffix(got, "…") {
		t.Errorf("a long body: %q", got)
	}
	// SGLang's: the same fields, no load in place (an unload and a load
	// instead); its LoRAUpdateOutput and ErrorResponse refusals.
	sg, _ := Lookup(SGLang)
	rt = sg.Adapters.Runtime
	if got := string(rt.LoadBody("sql", "/srv/sql", true)); got != `{"lora_name":"sql","lora_path":"/srv/sql"}` {
		t.Errorf("SGLang load body %s", got)
	}
	if got := string(rt.UnloadBody("sql")); got != `{"lora_name":"sql"}` {
		t.Errorf("SGLang unload body %s", got)
	}
	for body, want := range map[string]string{
		`{"rid":null,"http_worker_ipc":null,"success":false,"error_message":"LoRA with name x does not exist. Loaded LoRAs: odict_keys([])","loaded_adapters":null}`: "LoRA with name x does not exist. Loaded LoRAs: odict_keys([])",
		`{"object":"error","message":"1 validation error","type":"Bad Request","param":null,"code":400}`:                                                             "1 validation error",
		"Internal Server Error": "Internal Server Error",
	} {
		if got := rt.Refusal([]byte(body)); got != want {
			t.Errorf("SGLang Refusal(%s) = %q, want %q", body, got, want)
		}
	}
}

// vLLM's and SGLang's /v1/models: the adapters' cards after the base.
func TestParseModelCards(t *testing.T) {
	t.Parallel()
	for _, e := range []string{VLLM, SGLang} {
		d, _ := Lookup(e)
		l := d.Adapters.Listed
		got, err := l.ParseLoadedAdapters([]byte(`{"object":"list","data":[{"id":"base","root":"org/m","parent":null},` +
			`{"id":"sql","root":"/srv/lora/sql","parent":"base","max_model_len":null}]}`))
		if err != nil || !cmp.Equal([]LoadedAdapter{{Name: "sql", Path: "/srv/lora/sql", ID: -1}}, got) || l.Path != "/v1/models" {
			t.Errorf("%s: %+v (%v)", e, got, err)
		}
		if _, err := l.ParseLoadedAdapters([]byte(`{"object":"list"}`)); err == nil {
			t.Errorf("%s: no data list, no error", e)
		}
	}
}

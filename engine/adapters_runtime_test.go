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
	// Engines without a runtime API, and no adapters: an empty plan.
	for _, e := range []string{LlamaCpp, SGLang} {
		if p, err := PlanAdapters(e, AdapterSpec{Adapters: twoAdapters}, 1, nil); err != nil || p.Runtime || p.Static != "" {
			t.Errorf("%s: %+v (%v)", e, p, err)
		}
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

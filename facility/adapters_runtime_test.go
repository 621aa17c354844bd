package facility

import (
	"strings"
	"testing"
)

// A vLLM profile whose replicas run one API server gets its adapters at
// runtime: its fingerprint holds the slots and the rank bound the engine
// starts with, not the adapters, so adding, removing or moving an adapter
// changes no job; a rank past the bound, or other slots, does. With
// several API servers (data_parallel 2) the adapters are given at start
// and every change is another fingerprint.
func TestRuntimeAdaptersFingerprint(t *testing.T) {
	t.Parallel()
	lines := "  max_adapters = 2\n  adapter \"sql\" {\n    path = \"/srv/lora/sql\"\n    rank = 24\n  }\n  adapter \"chat\" {\n    path = \"/srv/lora/chat\"\n  }\n"
	cat, err := ParseCatalog("c.hcl", []byte(adapterCatalog("vllm", lines)))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	p := m.Profiles[0]
	plan, err := m.AdapterPlan(p)
	if err != nil || !plan.Runtime || plan.Key != "max_loras=2 max_lora_rank=32" {
		t.Fatalf("plan %+v (%v), want runtime with key max_loras=2 max_lora_rank=32", plan, err)
	}
	fp := ProfileFingerprint(m, p)
	for name, c := range map[string]struct {
		mod  func(*Model)
		same bool
	}{
		"path":      {func(m *Model) { m.Adapters[0].Weights.Path = "/srv/lora/sql2" }, true},
		"one fewer": {func(m *Model) { m.Adapters = m.Adapters[:1] }, true},
		"one more": {func(m *Model) {
			m.Adapters = append(m.Adapters, Adapter{Name: "new", Weights: m.Adapters[0].Weights, Rank: 8})
		}, true},
		"rank in the bound": {func(m *Model) { m.Adapters[0].Rank = 32 }, true},
		"rank past it":      {func(m *Model) { m.Adapters[0].Rank = 33 }, false},
		"max_adapters":      {func(m *Model) { m.MaxAdapters = 1 }, false},
	} {
		x := m
		x.Adapters = append([]Adapter(nil), m.Adapters...)
		c.mod(&x)
		if got := ProfileFingerprint(x, p) == fp; got != c.same {
			t.Errorf("%s: the same fingerprint %v, want %v", name, got, c.same)
		}
	}
	// Without max_adapters the slots are the adapters' count, so the
	// count is part of the key.
	x := m
	x.MaxAdapters = 0
	y := x
	y.Adapters = x.Adapters[:1]
	if ProfileFingerprint(x, p) == ProfileFingerprint(y, p) {
		t.Error("no max_adapters: one fewer adapter kept the fingerprint")
	}

	dp := p
	dp.DataParallel, dp.GPUs = 2, 2
	plan, err = m.AdapterPlan(dp)
	if err != nil || plan.Runtime || plan.Static == "" {
		t.Fatalf("data_parallel 2: plan %+v (%v), want adapters at start, saying why", plan, err)
	}
	x = m
	x.Adapters = m.Adapters[:1]
	if ProfileFingerprint(x, dp) == ProfileFingerprint(m, dp) {
		t.Error("data_parallel 2: one fewer adapter kept the fingerprint")
	}
}

// adapter_loading = "start" gives the adapters on the engine's command
// line even where the engine could load them while it runs (vLLM, SGLang
// with one HTTP worker): no runtime API turned on (vLLM's environment
// switch), the adapters in the fingerprint; "runtime" is the default's.
func TestAdapterLoadingStart(t *testing.T) {
	t.Parallel()
	// max_adapters, so that the slots do not move with the adapters' count.
	lines := "  max_adapters = 4\n  adapter \"sql\" {\n    path = \"/srv/lora/sql\"\n    rank = 8\n  }\n"
	for _, eng := range []string{"vllm", "sglang"} {
		for _, loading := range []string{"", "runtime", "start"} {
			l := lines
			if loading != "" {
				l = "  adapter_loading = \"" + loading + "\"\n" + lines
			}
			cat, err := ParseCatalog("c.hcl", []byte(adapterCatalog(eng, l)))
			if err != nil {
				t.Fatalf("%s, adapter_loading %q: %v", eng, loading, err)
			}
			m := cat.Models[0]
			plan, err := m.AdapterPlan(m.Profiles[0])
			if err != nil {
				t.Fatalf("%s, adapter_loading %q: %v", eng, loading, err)
			}
			if start := loading == "start"; plan.Runtime == start || (start && (plan.Static == "" || len(plan.Env) > 0)) {
				t.Errorf("%s, adapter_loading %q: plan %+v; want at start %v (saying why, no runtime environment)", eng, loading, plan, start)
			}
			x := m
			x.Adapters = append(x.Adapters, Adapter{Name: "new", Weights: m.Adapters[0].Weights, Rank: 8})
			if same := ProfileFingerprint(x, m.Profiles[0]) == ProfileFingerprint(m, m.Profiles[0]); same == (loading == "start") {
				t.Errorf("%s, adapter_loading %q: an adapter more kept the fingerprint %v", eng, loading, same)
			}
		}
	}
}

// A vLLM model with an adapter the nodes' stores fetch gets every adapter
// at start: the driver fetches from the task's adapter blocks before the
// engine starts, and a runtime load could only name a path on the node.
func TestFetchedAdapterKeepsVLLMOnStartLoading(t *testing.T) {
	t.Parallel()
	lines := "  adapter \"sql\" {\n    path = \"/srv/lora/sql\"\n  }\n  adapter \"chat\" {\n    source = \"org/chat-lora\"\n    weights {\n      files = [\"chat/*\"]\n    }\n  }\n"
	cat, err := ParseCatalog("c.hcl", []byte(adapterCatalog("vllm", lines)))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	plan, err := m.AdapterPlan(m.Profiles[0])
	if err != nil || plan.Runtime || !strings.Contains(plan.Static, `adapter "chat" is fetched`) {
		t.Fatalf("plan %+v (%v), want adapters at start, naming the fetched adapter", plan, err)
	}
	x := m
	x.Adapters = m.Adapters[:1]
	if ProfileFingerprint(x, m.Profiles[0]) == ProfileFingerprint(m, m.Profiles[0]) {
		t.Error("one fewer adapter kept the fingerprint: a change of a start-loaded model's adapters must make new jobs")
	}
}

// An SGLang profile gets its adapters at runtime as vLLM's does: its
// fingerprint holds the slots and the largest rank, not the adapters. A
// catalog that gives no rank keeps its adapters at start.
func TestRuntimeAdaptersFingerprintSGLang(t *testing.T) {
	t.Parallel()
	lines := "  max_adapters = 2\n  adapter \"sql\" {\n    path = \"/srv/lora/sql\"\n    rank = 24\n  }\n  adapter \"chat\" {\n    path = \"/srv/lora/chat\"\n  }\n"
	cat, err := ParseCatalog("c.hcl", []byte(adapterCatalog("sglang", lines)))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	p := m.Profiles[0]
	plan, err := m.AdapterPlan(p)
	if err != nil || !plan.Runtime || plan.Key != "max_loras_per_batch=2 max_lora_rank=24" {
		t.Fatalf("plan %+v (%v), want runtime with key max_loras_per_batch=2 max_lora_rank=24", plan, err)
	}
	fp := ProfileFingerprint(m, p)
	x := m
	x.Adapters = m.Adapters[:1]
	if ProfileFingerprint(x, p) != fp {
		t.Error("one fewer adapter: another fingerprint")
	}
	x.Adapters = []Adapter{m.Adapters[0], m.Adapters[1]}
	x.Adapters[1].Rank = 32
	if ProfileFingerprint(x, p) == fp {
		t.Error("a rank past the bound kept the fingerprint")
	}
	x.Adapters = []Adapter{m.Adapters[1]}
	if plan, err := x.AdapterPlan(p); err != nil || plan.Runtime || !strings.Contains(plan.Static, "no adapter's rank") {
		t.Errorf("no rank: plan %+v (%v), want adapters at start, saying why", plan, err)
	}
}

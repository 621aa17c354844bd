package engine_test

import (
	"slices"
	"testing"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/engine/contract"
)

func TestMetricsOf(t *testing.T) {
	t.Parallel()
	for _, e := range engine.Engines() {
		m, ok := engine.MetricsOf(e)
		if !ok {
			t.Errorf("%s: no metrics entry", e)
			continue
		}
		if e == engine.Command {
			if m.Known() {
				t.Errorf("command engine: metrics %+v, want none", m)
			}
			continue
		}
		if m.Path != "/metrics" {
			t.Errorf("%s: path %q", e, m.Path)
		}
		// Every engine llmgw runs reports load and tokens, and all but
		// llama.cpp (whose server has no such gauge at 0.4.0) KV-cache
		// use; only TGI and llama.cpp lack time to first token.
		want := map[string]engine.Metric{"waiting": m.RequestsWaiting, "running": m.RequestsRunning, "tokens": m.GeneratedTokens}
		if e != engine.LlamaCpp {
			want["kv"] = m.KVCacheUsage
		} else if m.KVCacheUsage.Name != "" {
			t.Errorf("llamacpp: KV-cache gauge %q, but llama-server 0.4.0 exports none", m.KVCacheUsage.Name)
		}
		for name, x := range want {
			if x.Name == "" || x.Type == "" {
				t.Errorf("%s: %s has no name or type: %+v", e, name, x)
			}
		}
		if hasTTFT := m.TimeToFirstToken.Name != ""; hasTTFT != (e == engine.VLLM || e == engine.SGLang) {
			t.Errorf("%s: time to first token %q", e, m.TimeToFirstToken.Name)
		}
		if m.TimeToFirstToken.Name != "" && m.TimeToFirstToken.Type != engine.Histogram {
			t.Errorf("%s: time to first token is a %s, want a histogram", e, m.TimeToFirstToken.Type)
		}
	}
	if _, ok := engine.MetricsOf("triton"); ok {
		t.Error("an unknown engine has metrics")
	}
	// The caller's copy of Enable is its own.
	m, _ := engine.MetricsOf(engine.SGLang)
	m.Enable[0] = "changed"
	if again, _ := engine.MetricsOf(engine.SGLang); again.Enable[0] != "--enable-metrics" {
		t.Errorf("MetricsOf shares Enable: %v", again.Enable)
	}
}

// TestMetricsEnableFlagsInContract checks that each flag turning an
// engine's /metrics on is a switch of that engine's parser at the pinned
// version (engine/contract lists every flag with its arity), and that the
// recipe passes it.
func TestMetricsEnableFlagsInContract(t *testing.T) {
	t.Parallel()
	for _, e := range engine.Engines() {
		m, _ := engine.MetricsOf(e)
		if len(m.Enable) == 0 {
			continue
		}
		c, err := contract.Load(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range m.Enable {
			f := c.Flag(flag)
			if f == nil {
				t.Errorf("%s: %s is not a flag of the pinned version (engine/contract/%s)", e, flag, c.File)
			} else if f.Arity != "0" {
				t.Errorf("%s: %s takes %s values, want a switch", e, flag, f.Arity)
			}
		}
		cmd, err := engine.Build(engine.Input{Engine: e, Executable: "/bin/" + e, Model: "m", Host: "127.0.0.1", Port: 8000, Layout: engine.Layout{Tensor: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for _, flag := range m.Enable {
			if !slices.Contains(cmd.Args, flag) {
				t.Errorf("%s: recipe %v lacks %s", e, cmd.Args, flag)
			}
		}
	}
}

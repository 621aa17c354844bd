package engine_test

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/engine"
)

func TestMetricsOf(t *testing.T) {
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
		// Every engine llmgw runs reports load, KV-cache use and tokens;
		// only TGI and llama.cpp lack time to first token.
		for name, x := range map[string]engine.Metric{"waiting": m.RequestsWaiting, "running": m.RequestsRunning,
			"kv": m.KVCacheUsage, "tokens": m.GeneratedTokens} {
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
// version (the contract files in testdata/contract list every flag with
// its arity), and that the recipe passes it.
func TestMetricsEnableFlagsInContract(t *testing.T) {
	for _, e := range engine.Engines() {
		m, _ := engine.MetricsOf(e)
		if len(m.Enable) == 0 {
			continue
		}
		arity := contractArity(t, e)
		for _, flag := range m.Enable {
			a, ok := arity[flag]
			if !ok {
				t.Errorf("%s: %s is not a flag of the pinned version (testdata/contract/%s.txt)", e, flag, e)
			} else if a != "0" {
				t.Errorf("%s: %s takes %s values, want a switch", e, flag, a)
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

// contractArity reads flag -> arity from testdata/contract/<engine>.txt
// (tab-separated: flag, arity, …; # comments).
func contractArity(t *testing.T, e string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "contract", e+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) >= 2 {
			out[fields[0]] = fields[1]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

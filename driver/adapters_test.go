package driver

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// The driver's check of llama.cpp adapters against the model refuses what
// llama-server refuses at start (realengine's TestLoraBadAdapters), each
// with its cause, and keeps the good ones in their order.
func TestCheckGGUFAdapters(t *testing.T) {
	model := realengine.TinyModel(t)
	good := realengine.Adapter(t, tinymodel.Defaults, "Ahoy matey.", 0)
	good2 := realengine.Adapter(t, tinymodel.Defaults, "Goodbye moon.", 1)
	wide := tinymodel.Defaults
	wide.Embed = 128
	other := realengine.Adapter(t, wide, "Ahoy matey.", 0)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.gguf")
	truncated := filepath.Join(dir, "truncated.gguf")
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truncated, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	notGGUF := filepath.Join(dir, "adapter_config.json")
	if err := os.WriteFile(notGGUF, []byte(`{"r": 8}`), 0o600); err != nil {
		t.Fatal(err)
	}
	as := []AdapterConfig{
		{Name: "a", Path: good}, {Name: "other", Path: other}, {Name: "missing", Path: missing},
		{Name: "model", Path: model}, {Name: "truncated", Path: truncated}, {Name: "json", Path: notGGUF},
		{Name: "dir", Path: dir}, {Name: "b", Path: good2},
	}
	ok, bad := checkGGUFAdapters(model, as, func(string) error { return nil })
	if len(ok) != 2 || ok[0].Name != "a" || ok[1].Name != "b" {
		t.Errorf("kept %+v, want a then b", ok)
	}
	want := map[string]string{
		"other":     other + `: tensor "blk.0.attn_output.weight" does not fit the model's shape (model [64 64], lora_a [128 `,
		"missing":   "stat " + missing + ": no such file or directory",
		"model":     model + `: general.type is "", not "adapter" (a model file, not a LoRA adapter?)`,
		"truncated": truncated + ": not a readable GGUF file: tensor data needs ",
		"json":      notGGUF + ": not a readable GGUF file: ",
		"dir":       dir + " is not a regular file",
	}
	if len(bad) != len(want) {
		t.Errorf("left out %d adapters, want %d: %+v", len(bad), len(want), bad)
	}
	for _, b := range bad {
		w, found := want[b.Name]
		if !found || !strings.HasPrefix(b.err.Error(), w) {
			t.Errorf("%s: %v, want it to start %q", b.Name, b.err, w)
		}
	}
	// The engine's user must be able to read the file.
	ok, bad = checkGGUFAdapters(model, as[:1], func(p string) error { return errors.New("permission denied: " + p) })
	if len(ok) != 0 || len(bad) != 1 || bad[0].err.Error() != "permission denied: "+good {
		t.Errorf("unreadable: kept %+v, left out %+v", ok, bad)
	}
	// A model the check cannot read: every adapter is left out, naming it.
	_, bad = checkGGUFAdapters(missing, as[:1], func(string) error { return nil })
	if len(bad) != 1 || !strings.HasPrefix(bad[0].err.Error(), "the model file: stat "+missing) {
		t.Errorf("unreadable model: %+v", bad)
	}
}

// peftDir makes a directory with an adapter_config.json, as a PEFT
// adapter has.
func peftDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"r": 8}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// vLLM's and SGLang's adapters must be PEFT directories the engine's
// user may read.
func TestCheckPEFTAdapters(t *testing.T) {
	good := peftDir(t)
	empty := t.TempDir()
	file := filepath.Join(empty, "a.safetensors")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(cfgDir, "adapter_config.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(empty, "gone")
	as := []AdapterConfig{{Name: "good", Path: good}, {Name: "empty", Path: empty}, {Name: "file", Path: file},
		{Name: "missing", Path: missing}, {Name: "cfgdir", Path: cfgDir}}
	ok, bad := checkPEFTAdapters(as, func(string) error { return nil })
	if len(ok) != 1 || ok[0].Name != "good" {
		t.Errorf("kept %+v", ok)
	}
	want := map[string]string{
		"empty":   empty + " holds no adapter_config.json: not a PEFT adapter",
		"file":    file + " is not a directory (a PEFT adapter is a directory with adapter_config.json and the weights)",
		"missing": "stat " + missing + ": no such file or directory",
		"cfgdir":  filepath.Join(cfgDir, "adapter_config.json") + " is not a regular file",
	}
	if len(bad) != len(want) {
		t.Errorf("left out %+v", bad)
	}
	for _, b := range bad {
		if b.err.Error() != want[b.Name] {
			t.Errorf("%s: %v, want %q", b.Name, b.err, want[b.Name])
		}
	}
	_, bad = checkPEFTAdapters(as[:1], func(p string) error { return errors.New("permission denied: " + p) })
	if len(bad) != 1 || bad[0].err.Error() != "permission denied: "+filepath.Join(good, "adapter_config.json") {
		t.Errorf("unreadable: %+v", bad)
	}
}

// renderedArgv renders cat's first model on one node through render.Job
// and returns the task config the driver decodes and the argv its plan
// gives the engine (contract_test.go's path).
func renderedArgv(t *testing.T, catalog string) (TaskConfig, plan) {
	t.Helper()
	cat, err := facility.ParseCatalog("c.hcl", []byte(catalog))
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
	h := newContractHost(t)
	task := job.TaskGroups[0].Tasks[0]
	tc, err := taskConfig(task.Config, nomadVars)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.validate(); err != nil {
		t.Fatalf("the driver refuses the rendered config: %v", err)
	}
	env := map[string]string{"PATH": h.exeDir}
	dev := reserved(t, h.topo, h.uuids[:p.GPUs]...)
	maps.Copy(env, dev)
	pl, err := makePlan(h.conf, &driverpb.TaskConfig{
		Name: render.TaskName, AllocDir: t.TempDir(), Env: env, DeviceEnv: dev,
		Resources: &driverpb.Resources{Ports: []*driverpb.PortMapping{{Label: render.PortHTTP, Value: 27000, HostIp: "10.0.0.1"}}},
	}, tc, h.topo)
	if err != nil {
		t.Fatalf("makePlan: %v", err)
	}
	return tc, pl
}

// The catalog's adapters travel as the task's adapter blocks, and the
// driver renders them onto the command line as the recipe says
// (engine.AdapterArgs): for good adapters the same flags as before they
// travelled structured; a llama.cpp adapter that does not fit the model is
// left out, and the others keep their order.
func TestRenderedAdaptersReachTheCommandLine(t *testing.T) {
	sql, chat := peftDir(t), peftDir(t)
	// Two API servers (data_parallel 2): vLLM's adapters at start. (With
	// one, the controller loads them at runtime: below.)
	vllm := func(sql, chat string) string {
		return fmt.Sprintf(`model "m" {
  source = "org/m"
  max_adapters = 1
  adapter "sql" {
    path = %q
    rank = 16
  }
  adapter "chat" {
    path = %q
  }
  profile "p" {
    engine        = "vllm"
    gpu           = "NVIDIA H200"
    gpus          = 2
    data_parallel = 2
  }
}
`, sql, chat)
	}
	tc, pl := renderedArgv(t, vllm(sql, chat))
	if diff := cmp.Diff([]AdapterConfig{{Name: "sql", Path: sql, Rank: 16}, {Name: "chat", Path: chat}}, tc.Adapters); diff != "" || tc.MaxAdapters != 1 {
		t.Errorf("adapter blocks (-want +got):\n%s max_adapters %d", diff, tc.MaxAdapters)
	}
	want := []string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "2", "--max-lora-rank", "16",
		"--lora-modules", `{"name":"sql","path":"` + sql + `"}`, `{"name":"chat","path":"` + chat + `"}`}
	if got := pl.cmd.Args[len(pl.cmd.Args)-len(want):]; !cmp.Equal(want, got) || len(pl.badAdapters) != 0 {
		t.Errorf("vllm argv %q, want it to end %q (left out %v)", pl.cmd.Args, want, pl.badAdapters)
	}
	// A vLLM adapter that is no PEFT directory is left out: vLLM would
	// not start with it.
	_, pl = renderedArgv(t, vllm(filepath.Join(t.TempDir(), "gone"), chat))
	want = []string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "1",
		"--lora-modules", `{"name":"chat","path":"` + chat + `"}`}
	if got := pl.cmd.Args[len(pl.cmd.Args)-len(want):]; !cmp.Equal(want, got) || len(pl.badAdapters) != 1 || pl.badAdapters[0].Name != "sql" {
		t.Errorf("vllm argv %q, want it to end %q, sql left out (left out %v)", pl.cmd.Args, want, pl.badAdapters)
	}
	// One API server: the slots alone, and the runtime API turned on.
	runtime := strings.Replace(strings.Replace(vllm(sql, chat), "gpus          = 2", "gpus = 1", 1), "data_parallel = 2", "", 1)
	tc, pl = renderedArgv(t, runtime)
	want = []string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "2", "--max-lora-rank", "16"}
	if got := pl.cmd.Args[len(pl.cmd.Args)-len(want):]; !cmp.Equal(want, got) || len(tc.Adapters) != 0 || tc.Env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] != "True" {
		t.Errorf("vllm at runtime: argv %q, want it to end %q; adapter blocks %v; env %v", pl.cmd.Args, want, tc.Adapters, tc.Env)
	}

	model := realengine.TinyModel(t)
	good := realengine.Adapter(t, tinymodel.Defaults, "Ahoy matey.", 0)
	good2 := realengine.Adapter(t, tinymodel.Defaults, "Goodbye moon.", 1)
	wide := tinymodel.Defaults
	wide.Embed = 128
	other := realengine.Adapter(t, wide, "Ahoy matey.", 0)
	llama := func(paths ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "model \"m\" {\n  source = %q\n", model)
		for i, p := range paths {
			fmt.Fprintf(&b, "  adapter \"a%d\" {\n    path = %q\n  }\n", i, p)
		}
		b.WriteString("  profile \"p\" {\n    engine = \"llamacpp\"\n    gpu = \"NVIDIA H200\"\n    gpus = 1\n  }\n}\n")
		return b.String()
	}
	_, pl = renderedArgv(t, llama(good, good2))
	want = []string{"--lora", good + "," + good2, "--lora-init-without-apply", "--cache-ram", "0"}
	if got := pl.cmd.Args[len(pl.cmd.Args)-len(want):]; !cmp.Equal(want, got) || len(pl.badAdapters) != 0 {
		t.Errorf("llama.cpp argv %q, want it to end %q (left out %v)", pl.cmd.Args, want, pl.badAdapters)
	}
	_, pl = renderedArgv(t, llama(other, good2))
	want = []string{"--lora", good2, "--lora-init-without-apply", "--cache-ram", "0"}
	if got := pl.cmd.Args[len(pl.cmd.Args)-len(want):]; !cmp.Equal(want, got) || len(pl.badAdapters) != 1 || pl.badAdapters[0].Name != "a0" {
		t.Errorf("llama.cpp argv %q, want it to end %q, a0 left out (left out %v)", pl.cmd.Args, want, pl.badAdapters)
	}
	// Every adapter bad: the base model alone, no adapter flag.
	_, pl = renderedArgv(t, llama(other))
	if slices.Contains(pl.cmd.Args, "--lora") || slices.Contains(pl.cmd.Args, "--cache-ram") || len(pl.badAdapters) != 1 {
		t.Errorf("llama.cpp argv %q with its only adapter bad (left out %v)", pl.cmd.Args, pl.badAdapters)
	}
}

// A task's adapter blocks decode in their order; bad ones are refused
// naming the adapter or the field.
func TestDecodeTaskConfigAdapters(t *testing.T) {
	base := "engine = \"%s\"\nmodel = \"m\"\nport = \"http\"\n"
	got, err := DecodeTaskConfig(encode(t, TaskConfigSpec(), fmt.Sprintf(base, "vllm")+`
max_adapters = 1
adapter {
  name = "sql"
  path = "/srv/lora/sql"
  rank = 8
}
adapter {
  name = "chat"
  path = "/srv/lora/chat"
}
`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]AdapterConfig{{Name: "sql", Path: "/srv/lora/sql", Rank: 8}, {Name: "chat", Path: "/srv/lora/chat"}}, got.Adapters); diff != "" || got.MaxAdapters != 1 {
		t.Errorf("(-want +got):\n%s max_adapters %d", diff, got.MaxAdapters)
	}
	for _, c := range []struct{ engine, body, want string }{
		{"vllm", "max_adapters = 2\n", "max_adapters: 2 without an adapter block"},
		{"vllm", "adapter {\n  name = \"a\"\n  path = \"rel\"\n}\n", `adapter "a": path "rel" is not an absolute path`},
		{"vllm", "adapter {\n  name = \"a b\"\n  path = \"/a\"\n}\n", `adapter "a b": the name must be a plain word`},
		{"vllm", "adapter {\n  name = \"a\"\n  path = \"/a\"\n}\nadapter {\n  name = \"a\"\n  path = \"/b\"\n}\n", `adapter "a": given twice`},
		{"tgi", "adapter {\n  name = \"a\"\n  path = \"/a\"\n}\n", `engine "tgi" serves no LoRA adapters`},
		{"vllm", "args = [\"--enable-lora\"]\nadapter {\n  name = \"a\"\n  path = \"/a\"\n}\n", "args: --enable-lora is llmgw's to set"},
		{"llamacpp", "max_adapters = 1\nadapter {\n  name = \"a\"\n  path = \"/a\"\n}\nadapter {\n  name = \"b\"\n  path = \"/b\"\n}\n", "loads all 2 adapters at start"},
	} {
		_, err := DecodeTaskConfig(encode(t, TaskConfigSpec(), fmt.Sprintf(base, c.engine)+c.body))
		if !errors.Is(err, ErrBadTaskConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %q", c.engine, c.body, err, c.want)
		}
	}
}

package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestResolveModelFile(t *testing.T) {
	cache := t.TempDir()
	repo := filepath.Join(cache, "hub", "models--Qwen--Qwen2.5-0.5B-Instruct-GGUF")
	writeFile(t, filepath.Join(repo, "refs", "main"), "bbb\n")
	writeFile(t, filepath.Join(repo, "snapshots", "aaa", "q4.gguf"), "old")
	writeFile(t, filepath.Join(repo, "snapshots", "bbb", "q4.gguf"), "main")
	writeFile(t, filepath.Join(repo, "snapshots", "aaa", "q8.gguf"), "only in aaa")
	writeFile(t, filepath.Join(cache, "org", "local", "m.gguf"), "local-dir")
	writeFile(t, filepath.Join(cache, "plain.gguf"), "plain")
	abs := filepath.Join(t.TempDir(), "abs.gguf")
	writeFile(t, abs, "abs")

	for _, c := range []struct {
		model, file, cache, want, err string
	}{
		{"Qwen/Qwen2.5-0.5B-Instruct-GGUF", "q4.gguf", cache, filepath.Join(repo, "snapshots", "bbb", "q4.gguf"), ""},
		{"Qwen/Qwen2.5-0.5B-Instruct-GGUF", "q8.gguf", cache, filepath.Join(repo, "snapshots", "aaa", "q8.gguf"), ""},
		{"org/local", "m.gguf", cache, filepath.Join(cache, "org", "local", "m.gguf"), ""},
		{"plain.gguf", "", cache, filepath.Join(cache, "plain.gguf"), ""},
		{abs, "", "", abs, ""},
		{filepath.Dir(abs), "abs.gguf", "", abs, ""},
		{"Qwen/Qwen2.5-0.5B-Instruct-GGUF", "q2.gguf", cache, "",
			`model_file: model file "q2.gguf" of "Qwen/Qwen2.5-0.5B-Instruct-GGUF" not found under model_cache ` + cache +
				` (looked for hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/*/q2.gguf and Qwen/Qwen2.5-0.5B-Instruct-GGUF/q2.gguf)`},
		{"org/m", "m.gguf", "", "", `model_file: model file "m.gguf" of "org/m": no model_cache in the plugin config (nor HF_HOME in the task's env)`},
		{"/nonexistent/m.gguf", "", "", "", "model: model file /nonexistent/m.gguf not found"},
		{filepath.Join(cache, "hub"), "", "", "", "model: model file " + filepath.Join(cache, "hub") + " is not a regular file"},
		{"missing.gguf", "", cache, "", `model: model file "missing.gguf" of "missing.gguf" not found under model_cache ` + cache},
	} {
		got, err := resolveModelFile(c.model, c.file, c.cache)
		switch {
		case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err)):
			t.Errorf("resolveModelFile(%q, %q): %q, %v; want error %q", c.model, c.file, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("resolveModelFile(%q, %q): %q, %v; want %q", c.model, c.file, got, err, c.want)
		}
	}
}

func TestDecodeTaskConfigLayoutErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`engine = "vllm"
model = "m"
port = "http"
args = ["--max-model-len", "8", "--tensor-parallel-size", "2"]`, "args[2]: --tensor-parallel-size is set by llmgw from tensor_parallel: set that instead"},
		{`engine = "tgi"
model = "m"
port = "http"
args = ["--max-total-tokens", "8", "--max-total-tokens", "9"]`, `args[2]: --max-total-tokens repeats args[0] (--max-total-tokens): engine "tgi"`},
		{`engine = "tgi"
model = "m"
port = "http"
nodes = 2
leader_addr = "h:1"`, `nodes: engine "tgi" runs on one node (text-generation-launcher v3.3.7), got 2`},
		{`engine = "vllm"
model = "m"
port = "http"
nodes = 2
node_rank = 1`, "leader_addr: required with nodes = 2"},
		{`engine = "vllm"
model = "m"
port = "http"
nodes = 2
node_rank = 2
leader_addr = "h:1"`, "node_rank: 2 is not a rank of a replica of 2 nodes"},
		{`engine = "vllm"
model = "m"
port = "http"
model_file = "m.gguf"`, `model_file: engine "vllm" loads a model id or path (model), not one file`},
		{`engine = "llamacpp"
model = "org/m"
port = "http"
model_file = "../m.gguf"`, `model_file: "../m.gguf" must be a clean relative path within model`},
		{`engine = "llamacpp"
model = "org/m"
port = "http"
tensor_parallel = 0
pipeline_parallel = 2`, `pipeline_parallel: engine "llamacpp" has no pipeline parallelism`},
		{`engine = "vllm"
model = "m"
port = "http"
data_parallel = -1`, "data_parallel: must be 0 (the default) or more, got -1"},
	} {
		_, err := DecodeTaskConfig(encode(t, TaskConfigSpec(), c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\ngot %v, want an error containing %q", c.body, err, c.want)
		}
	}
}

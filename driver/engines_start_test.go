package driver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
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

// llama.cpp's model is a file from the model cache, and it offloads every
// layer to the GPU it holds; a file that is not there fails the start,
// naming it and the cache, before any engine runs.
func TestStartLlamaCppFromModelCache(t *testing.T) {
	cache := t.TempDir()
	repo := filepath.Join(cache, "hub", "models--org--m-GGUF")
	writeFile(t, filepath.Join(repo, "refs", "main"), "c0ffee")
	file := filepath.Join(repo, "snapshots", "c0ffee", "m-q4.gguf")
	writeFile(t, file, "GGUF")
	p := startPlugin(t, pluginBody+`model_cache = "`+cache+`"`)
	body := `
engine  = "llamacpp"
model   = "org/m-GGUF"
model_file = "%FILE%"
command = "%ENGINE%"
port    = "%PORT%"
served_model_name = "m"
`
	tk := newTask(t, taskOpts{gpus: []string{"GPU-1"}, body: strings.ReplaceAll(body, "%FILE%", "m-q4.gguf")})
	p.start(t, tk)
	ev := p.events.wait(t, tk.cfg.GetId(), "Started llamacpp", 10*time.Second)
	if want := " -m " + file + " --host 127.0.0.1 --port "; !strings.Contains(ev.GetMessage(), want) ||
		!strings.Contains(ev.GetMessage(), "--alias m --metrics -ngl all") {
		t.Errorf("started event %q, want -m %s … --alias m --metrics -ngl all", ev.GetMessage(), file)
	}
	p.events.wait(t, tk.cfg.GetId(), "Ready after", 20*time.Second)

	missing := newTask(t, taskOpts{gpus: []string{"GPU-1"}, noLog: true, body: strings.ReplaceAll(body, "%FILE%", "m-q8.gguf")})
	_, err := p.Driver.StartTask(ctxT(t, 10*time.Second), &driverpb.StartTaskRequest{Task: missing.cfg})
	want := `model_file: model file "m-q8.gguf" of "org/m-GGUF" not found under model_cache ` + cache
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("StartTask with a missing file: %v, want an error containing %q", err, want)
	}
}

// A rank above 0 of a multi-node vLLM replica is started with its rank and
// the leader's address, headless.
func TestStartMultiNodeRank(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{gpus: []string{"GPU-1", "GPU-2"}, body: vllmTask(`
tensor_parallel   = 2
pipeline_parallel = 2
nodes             = 2
node_rank         = 1
leader_addr       = "10.1.2.3:24001"
served_model_name = "big"
ready { skip = true }
`)})
	p.start(t, tk)
	ev := p.events.wait(t, tk.cfg.GetId(), "Started vllm", 10*time.Second)
	want := "--tensor-parallel-size 2 --pipeline-parallel-size 2 --served-model-name big --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --master-port 24001 --headless"
	if !strings.Contains(ev.GetMessage(), want) {
		t.Errorf("started event %q, want it to contain %q", ev.GetMessage(), want)
	}
}

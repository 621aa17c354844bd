package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// TestDemo runs what `make demo` runs, in its non-interactive mode, and
// checks that it brought up three GPU nodes, ran the GPU job, that the
// controller got the demo catalog's five replicas serving, that a chat
// completion went through the gateway to one of them, and that it printed
// the console's URL (which it prints only once the page answered).
func TestDemo(t *testing.T) {
	nomadtest.Bin(t)
	bin := filepath.Dir(plugintest.Build(t, devicePkg))
	for _, pkg := range []string{driverPkg, supervisorPkg, fakeEnginePkg, "github.com/llmgw/llmgw/cmd/llmgw"} {
		if dir := filepath.Dir(plugintest.Build(t, pkg)); dir != bin {
			t.Fatalf("binaries built into %s and %s", bin, dir)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./cmd/llmgw-demo", "-once", "-bin", bin)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	wants := []string{
		"gpu-1  rack=r01-k01",
		"8/8 healthy NVIDIA H200, power_limit 700 W each",
		"printed: CUDA_VISIBLE_DEVICES=",
		" LLMGW_GPU_UUIDS=GPU-",
		"llama-3.1-8b-1",
		"fake-engine standing in for vLLM in strict mode (FAKE_ENGINE_STRICT=" + strictVLLM + ")",
		"llmgw API: http://127.0.0.1:",
		// The demo's controller needs a token, which the demo made.
		"export LLMGW_ADDR=http://127.0.0.1:",
		" LLMGW_TOKEN=",
		"llmgw console: http://127.0.0.1:",
		"/ui/   (open it in a browser",
		"llmgw gateway: http://127.0.0.1:",
		"Tearing down",
	}
	// With the real llama.cpp server built, the demo serves one model more
	// with it and asks that model; without, fake-engine answers and the
	// demo says how to get the real one.
	if ok, _ := llamabuild.Available(); ok {
		t.Log("the real llama.cpp engine is built: the demo must answer with it")
		wants = append(wants,
			"replicas: 7 serving, 0 starting",
			"GET /v1/models: llama-3.1-8b (2 replicas), qwen2.5-0.5b (3 replicas), tiny-llama (2 replicas)",
			`POST /v1/chat/completions {"model":"tiny-llama"}: through the gateway: 200 from replica tiny-llama-`,
			`: "Hello from llama.cpp!"`,
			"answered by llama.cpp's own llama-server 0.4.0 (80fb11a) (system_fingerprint b1-80fb11a), not fake-engine",
			// Issue 35: the weights through the nodes' stores, a model
			// that sleeps and wakes.
			"Local hub: http://127.0.0.1:",
			"tiny-llama: llmgw/tiny-llama@main (tiny.gguf), ",
			"whole in the model store of gpu-",
			"woke it from zero, and was answered by tiny-nap-0 after ",
			"its engine fell asleep",
			"the next request woke it: answered by tiny-nap-0 after ")
	} else {
		wants = append(wants,
			"replicas: 5 serving, 0 starting",
			"GET /v1/models: llama-3.1-8b (2 replicas), qwen2.5-0.5b (3 replicas)",
			`POST /v1/chat/completions {"model":"llama-3.1-8b"}: through the gateway: 200 from replica llama-3.1-8b-`,
			"answered by fake-engine; `make llama-server` builds the real llama.cpp server")
	}
	for _, want := range wants {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

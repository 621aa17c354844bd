package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/nomadplugin/plugintest"
)

// TestDemo runs what `make demo` runs, in its non-interactive mode, and
// checks that it brought up three GPU nodes and ran the GPU job.
func TestDemo(t *testing.T) {
	nomadtest.Bin(t)
	bin := filepath.Dir(plugintest.Build(t, devicePkg))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./internal/demo", "-once", "-bin", bin)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"gpu-1  rack=r01-k01",
		"8/8 healthy NVIDIA H200, power_limit 700 W each",
		"printed: CUDA_VISIBLE_DEVICES=GPU-",
		"Tearing down",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

package fakeengine

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildBinary builds cmd/fake-engine into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build fake-engine with")
	}
	bin := filepath.Join(t.TempDir(), "fake-engine")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/fake-engine")
	cmd.Dir = "../../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fake-engine: %v\n%s", err, out)
	}
	return bin
}

// engineEnv is the test's environment without the variables fake-engine
// reads, plus kv.
func engineEnv(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "CUDA_VISIBLE_DEVICES=") || strings.HasPrefix(e, "LLMGW_") {
			continue
		}
		env = append(env, e)
	}
	return append(env, kv...)
}

var startupPort = regexp.MustCompile(` host=127\.0\.0\.1 port=(\d+) `)

// TestBinary runs the built fake-engine as the driver would: vLLM's command
// shape on a free loopback port, then polls /health until the load is over,
// and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	bin := buildBinary(t)

	t.Run("serve, load, stop", func(t *testing.T) {
		cmd := exec.Command(bin, "serve", "test/model", "--host", "127.0.0.1", "--port", "0",
			"--tensor-parallel-size", "2", "--load-seconds", "1", "--max-model-len", "4096", "--enforce-eager")
		cmd.Env = engineEnv("CUDA_VISIBLE_DEVICES=0,1")
		var stderr syncBuffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		exited := make(chan error, 1)
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				select {
				case lines <- sc.Text():
				default: // the test has stopped reading
				}
			}
			close(lines)
			exited <- cmd.Wait()
		}()
		defer func() {
			_ = cmd.Process.Kill()
		}()

		var port string
		deadline := time.After(30 * time.Second)
		for port == "" {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("fake-engine exited before its startup line; stderr:\n%s", stderr.String())
				}
				if m := startupPort.FindStringSubmatch(line); m != nil {
					port = m[1]
					if !strings.Contains(line, "model=test/model ") || !strings.Contains(line, " gpus=0,1 ") {
						t.Errorf("startup line %q lacks model=test/model or gpus=0,1", line)
					}
				}
			case <-deadline:
				t.Fatalf("no startup line within 30s; stderr:\n%s", stderr.String())
			}
		}

		client := &http.Client{Timeout: 5 * time.Second}
		waitHealthy(t, client, "http://127.0.0.1:"+port+"/health")

		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM: %v", err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("fake-engine after SIGTERM: %v, want exit 0; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("fake-engine still running 10s after SIGTERM")
		}
		for _, want := range []string{
			"Loading safetensors checkpoint shards: 100% Completed | 5/5",
			"WARNING fake-engine: ignoring arguments: --enforce-eager",
			"INFO fake-engine: shutting down (SIGTERM)",
		} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
			}
		}
	})

	t.Run("too few GPUs exits 3", func(t *testing.T) {
		cmd := exec.Command(bin, "serve", "test/model", "--host", "127.0.0.1", "--port", "0", "--tensor-parallel-size", "2")
		cmd.Env = engineEnv("CUDA_VISIBLE_DEVICES=0")
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != ExitGPUs {
			t.Fatalf("fake-engine with one GPU for tensor parallel 2: %v, want exit %d\n%s", err, ExitGPUs, out)
		}
		if want := `tensor parallel size 2 but CUDA_VISIBLE_DEVICES="0" holds 1`; !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	})
}

// Package realengine finds and runs llama.cpp's own llama-server, the real
// engine that llama.cpp's tests run against (not fake-engine), with a tiny
// model from internal/testing/tinymodel.
//
// `make llama-server` (scripts/llama-server.sh) builds the pinned version
// into Dir(); LLAMA_SERVER names another binary. Where neither exists, Require
// skips the test saying how to get it, unless LLMGW_REQUIRE_REAL_ENGINE=1 (set
// by .ci/run, which builds it), where it fails: in CI the real engine is never
// optional.
package realengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// The pinned llama.cpp: the npm package node-llama-cpp@3.21.1 ships this
// commit's source (scripts/llama-server.sh, which must name the same commit;
// a test checks).
const (
	Version = "0.4.0"
	Commit  = "80fb11a"
)

// Dir is where make llama-server keeps the pinned build: bin/llama-server
// and src/, the source tree (its models/ hold the tokenizer vocabularies).
// The same rule as scripts/llama-server.sh: $LLMGW_CACHE, else
// $XDG_CACHE_HOME/llmgw, else ~/.cache/llmgw, then llama.cpp/<commit>.
func Dir() string {
	root := os.Getenv("LLMGW_CACHE")
	if root == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			root = filepath.Join(x, "llmgw")
		} else if home, err := os.UserHomeDir(); err == nil {
			root = filepath.Join(home, ".cache", "llmgw")
		}
	}
	return filepath.Join(root, "llama.cpp", Commit)
}

// Binary is the llama-server to run: $LLAMA_SERVER, else Dir()/bin/llama-server.
func Binary() string {
	if b := os.Getenv("LLAMA_SERVER"); b != "" {
		return b
	}
	return filepath.Join(Dir(), "bin", "llama-server")
}

// Vocab is the SentencePiece vocabulary file tiny models copy their
// tokenizer from.
func Vocab() string {
	if v := os.Getenv("LLAMA_VOCAB"); v != "" {
		return v
	}
	return filepath.Join(Dir(), "src", "models", "ggml-vocab-llama-spm.gguf")
}

// Available reports whether the binary and the vocabulary are there, and if
// not, why, in words that say how to get them.
func Available() (bool, string) {
	var missing []string
	if st, err := os.Stat(Binary()); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		missing = append(missing, "llama-server at "+Binary())
	}
	if _, err := os.Stat(Vocab()); err != nil {
		missing = append(missing, "the tokenizer vocabulary "+Vocab())
	}
	if len(missing) == 0 {
		return true, ""
	}
	return false, "the real llama.cpp engine is not built (missing " + strings.Join(missing, " and ") +
		"): run `make llama-server` (about 13 minutes on 2 cores), or set LLAMA_SERVER and LLAMA_VOCAB"
}

// Require skips t (or fails it, under LLMGW_REQUIRE_REAL_ENGINE=1) when the
// real engine is not built.
func Require(t testing.TB) {
	t.Helper()
	ok, why := Available()
	if ok {
		return
	}
	if os.Getenv("LLMGW_REQUIRE_REAL_ENGINE") == "1" {
		t.Fatalf("LLMGW_REQUIRE_REAL_ENGINE=1 but %s", why)
	}
	t.Skip("skipping: " + why)
}

// modelMu serialises writes of the shared models.
var modelMu sync.Mutex

// Model writes a tiny model with o (Vocab filled in) to a file shared by
// every test of the process with the same options, and returns its path.
// Tests must not change the file; a test that needs a broken one copies it.
func Model(t testing.TB, o tinymodel.Options) string {
	t.Helper()
	Require(t)
	if o.Vocab == "" {
		o.Vocab = Vocab()
	}
	modelMu.Lock()
	defer modelMu.Unlock()
	dir := filepath.Join(os.TempDir(), "llmgw-tinymodels")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("%s-%dx%d-h%d-ff%d-c%d-%v-s%d-%x", o.Name, o.Layers, o.Embed, o.Heads, o.FF, o.Context, o.Type, o.Seed, hashString(o.Answer+"\x00"+o.Vocab))
	path := filepath.Join(dir, key+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := tinymodel.Write(path, o); err != nil {
		t.Fatalf("write tiny model: %v", err)
	}
	return path
}

// TinyModel is Model with tinymodel.Defaults.
func TinyModel(t testing.TB) string { return Model(t, tinymodel.Defaults) }

func hashString(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// Server is a running llama-server.
type Server struct {
	URL  string
	Port int
	Cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// Output is what the server wrote so far (stdout and stderr together).
func (s *Server) Output() string { return s.out.String() }

// Wait waits for the process to exit and returns its error.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether the process has exited.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the server.
func (s *Server) Signal(sig syscall.Signal) error { return s.Cmd.Process.Signal(sig) }

// Start runs llama-server with model on a free loopback port (plus args),
// waits until /health answers 200, and kills it when the test ends.
func Start(t testing.TB, model string, args ...string) *Server {
	t.Helper()
	s := Launch(t, model, args...)
	if err := WaitReady(t.Context(), s.URL, s.done, time.Minute); err != nil {
		t.Fatalf("llama-server not ready: %v\noutput:\n%s", err, s.Output())
	}
	return s
}

// Launch starts llama-server like Start but does not wait for it.
func Launch(t testing.TB, model string, args ...string) *Server {
	t.Helper()
	Require(t)
	port := FreePort(t)
	full := append([]string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--metrics", "-np", "2", "-c", "2048"}, args...)
	cmd := exec.Command(Binary(), full...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", Binary(), err)
	}
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), Port: port, Cmd: cmd, out: out, done: make(chan struct{})}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		if t.Failed() {
			t.Logf("llama-server (port %d) output:\n%s", port, tail(s.Output(), 40))
		}
	})
	return s
}

// WaitReady polls url's /health until it answers 200, exited is closed, or
// limit passes; each probe waits at most a second.
func WaitReady(ctx context.Context, url string, exited <-chan struct{}, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	probe := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return fmt.Errorf("llama-server exited before it was ready")
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
		if resp, err := probe.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("llama-server exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("no 200 from %s/health within %s", url, limit)
		case <-tick.C:
		}
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() //nolint:errcheck // only its port is wanted
	return l.Addr().(*net.TCPAddr).Port
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Installed is a copy of the real engine and a tiny model where an engine
// running as another user (the driver's default, nobody) can read them.
type Installed struct {
	Binary, Model string
}

// Install copies the built llama-server into dir and writes a tiny model
// there with o (Vocab filled in), making dir and both files world-readable
// (the binary executable): the cache that make llama-server fills is under
// the building user's home, which engines run as nobody cannot reach.
func Install(dir string, o tinymodel.Options) (Installed, error) {
	if ok, why := Available(); !ok {
		return Installed{}, errors.New(why)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Installed{}, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return Installed{}, err
	}
	in := Installed{Binary: filepath.Join(dir, "llama-server"), Model: filepath.Join(dir, "model.gguf")}
	b, err := os.ReadFile(Binary())
	if err != nil {
		return Installed{}, err
	}
	if err := os.WriteFile(in.Binary, b, 0o755); err != nil {
		return Installed{}, err
	}
	if o.Vocab == "" {
		o.Vocab = Vocab()
	}
	if err := tinymodel.Write(in.Model, o); err != nil {
		return Installed{}, fmt.Errorf("tiny model: %w", err)
	}
	return in, os.Chmod(in.Model, 0o644)
}

// Describe names the pinned engine, for what the demo prints.
func Describe() string {
	return "llama.cpp's own llama-server " + Version + " (" + Commit + ")"
}

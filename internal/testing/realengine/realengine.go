// Package realengine runs llama.cpp's own llama-server, the real engine
// that llama.cpp's tests run against (not fake-engine), with a tiny model
// from internal/testing/tinymodel, for tests.
//
// `make llama-server` (scripts/llama-server.sh) builds the pinned version
// where internal/testing/llamabuild finds it; LLAMA_SERVER names another
// binary. Where neither exists, Require skips the test saying how to get
// it, unless LLMGW_REQUIRE_REAL_ENGINE=1 (set by .ci/run, which builds it),
// where it fails: in CI the real engine is never optional.
package realengine

import (
	"context"
	"fmt"
	"hash/fnv"
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

	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// Require skips t (or fails it, under LLMGW_REQUIRE_REAL_ENGINE=1) when the
// real engine is not built.
func Require(t testing.TB) {
	t.Helper()
	ok, why := llamabuild.Available()
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
		o.Vocab = llamabuild.Vocab()
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

// Adapter writes a LoRA adapter for the tiny model base describes (Vocab
// filled in) with which it answers answer, marking its cache with
// signature (tinymodel.AdapterOptions), to a file shared like Model's, and
// returns its path.
func Adapter(t testing.TB, base tinymodel.Options, answer string, signature int) string {
	t.Helper()
	Require(t)
	if base.Vocab == "" {
		base.Vocab = llamabuild.Vocab()
	}
	modelMu.Lock()
	defer modelMu.Unlock()
	dir := filepath.Join(os.TempDir(), "llmgw-tinymodels")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("lora-%d-s%d-%x.gguf", base.Embed, signature, hashString(base.Answer+"\x00"+answer+"\x00"+base.Vocab)))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := tinymodel.WriteAdapter(path, tinymodel.AdapterOptions{Base: base, Name: "lora", Answer: answer, Signature: signature}); err != nil {
		t.Fatalf("write tiny adapter: %v", err)
	}
	return path
}

// TinyModel is Model with tinymodel.Defaults.
func TinyModel(t testing.TB) string { return Model(t, tinymodel.Defaults) }

func hashString(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// Server is a running llama-server.
type Server struct {
	URL  string
	Port int
	Cmd  *exec.Cmd
	out  *syncbuf.Buffer
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
	if err := llamabuild.WaitReady(t.Context(), s.URL, s.done, time.Minute); err != nil {
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
	cmd := exec.Command(llamabuild.Binary(), full...)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", llamabuild.Binary(), err)
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

// Client opens a connection for every request. llama-server (pinned
// version) closes the connection after each streamed answer without a
// "Connection: close": its stream provider returns false once it has
// called sink.done() (tools/server/server-http.cpp, process_handler_response),
// which cpp-httplib's write_content_chunked takes as a cancelled write and
// so ends the keep-alive loop (vendor/cpp-httplib/httplib.cpp). A client
// that pooled that connection may send its next POST into the closing
// socket and read EOF, and Go does not resend a POST. The gateway resends
// on such a stale connection itself (gateway/upstream.go); tests that talk
// to the engine directly use Client.
var Client = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// Get fetches url and returns the answer's status and body.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := Client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode, string(readAll(t, resp.Body))
}

// Post sends body as JSON to url and returns the answer's status and body.
func Post(t testing.TB, url, body string) (int, []byte) {
	t.Helper()
	resp, err := Client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode, readAll(t, resp.Body)
}

// readAll reads r to its end, failing t on an error.
func readAll(t testing.TB, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

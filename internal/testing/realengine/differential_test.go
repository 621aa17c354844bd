package realengine_test

import (
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// verdict is what a server did with a command line: served (ready), or
// exited with a status before it was.
type verdict struct {
	served bool
	status int
	first  string // the refusal's first line that names the problem
}

func (v verdict) String() string {
	if v.served {
		return "served"
	}
	return "exit " + strconv.Itoa(v.status) + ": " + v.first
}

// firstError is the line of an engine's output that says what it refused.
func firstError(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "error") {
			return l
		}
	}
	return ""
}

func runReal(t *testing.T, args []string) verdict {
	t.Helper()
	cmd := exec.Command(llamabuild.Binary(), args...)
	var out strings.Builder
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	port := portOf(args)
	if err := llamabuild.WaitReady(t.Context(), "http://127.0.0.1:"+port, done, time.Minute); err == nil {
		return verdict{served: true}
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	return verdict{status: cmd.ProcessState.ExitCode(), first: firstError(out.String())}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func portOf(args []string) string {
	port := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--port" {
			port = args[i+1] // the last one wins, as in llama.cpp
		}
	}
	return port
}

func runFake(t *testing.T, args []string) verdict {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var errOut strings.Builder
	status := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = ln.Close() }() // Run may not have served on it
		status <- fakeengine.Run(ctx, fakeengine.Options{
			Args:   append([]string{"--strict", "llamacpp@" + llamabuild.Version}, args...),
			Stdout: io.Discard, Stderr: &errOut, Listener: ln,
		})
	}()
	if err := llamabuild.WaitReady(ctx, "http://"+ln.Addr().String(), done, time.Minute); err == nil {
		cancel()
		<-done
		return verdict{served: true}
	}
	<-done
	return verdict{status: <-status, first: firstError(errOut.String())}
}

// The real llama-server and fake-engine --strict llamacpp@0.4.0 agree on
// which command lines start and which are refused, with what status and
// first line: every argument shape the recipe renders, and refusals.
func TestFakeEngineRefusesWhatTheRealServerRefuses(t *testing.T) {
	model := realengine.TinyModel(t)
	recipe := func(gpus int, served string, args ...string) []string {
		port := realengine.FreePort(t)
		cmd, err := engine.Build(engine.Input{Engine: engine.LlamaCpp, Executable: "llama-server", Model: model,
			Host: "127.0.0.1", Port: port, Layout: engine.Layout{Tensor: max(gpus, 1)}, GPUs: gpus, ServedName: served, Args: args})
		if err != nil {
			t.Fatalf("render %v: %v", args, err)
		}
		return cmd.Args
	}
	adapterArgs, err := engine.AdapterArgs(engine.LlamaCpp, engine.AdapterSpec{Adapters: []engine.Adapter{
		{Name: "a", Path: realengine.Adapter(t, tinymodel.Defaults, "Ahoy matey.", 0)},
		{Name: "b", Path: realengine.Adapter(t, tinymodel.Defaults, "Goodbye moon.", 1)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string // "served", else the first line's start
	}{
		{"cpu recipe", recipe(0, ""), "served"},
		{"gpu recipe", recipe(1, "tiny"), "served"},
		{"context and slots", recipe(1, "m", "-c", "2048", "-np", "2"), "served"},
		{"underscores", recipe(0, "", "--ctx_size", "1024", "--n_gpu_layers", "0"), "served"},
		{"stoi takes a number's start", recipe(0, "", "-np", "2slots"), "served"},
		{"negated switch and string values", recipe(0, "", "--no-mmap", "-fa", "off", "--jinja"), "served"},
		{"repeats", recipe(0, "", "-c", "1024", "-c", "2048"), "served"},
		{"two values", recipe(0, "", "--control-vector-layer-range", "1", "2"), "served"},
		{"adapters as llmgw renders them", recipe(0, "", adapterArgs...), "served"},
		{"a cache size that is not a number", recipe(0, "", "--cache-ram", "none"), `error while handling argument "--cache-ram": stoi`},
		{"unknown", recipe(0, "", "--foo"), "error: invalid argument: --foo"},
		{"equals form", recipe(0, "", "--ctx-size=512"), "error: invalid argument: --ctx-size=512"},
		{"bare word", recipe(0, "", "WORD"), "error: invalid argument: WORD"},
		{"short not normalised", recipe(0, "", "-n_gpu"), "error: invalid argument: -n_gpu"},
		{"missing value", recipe(0, "", "--ctx-size"), `error while handling argument "--ctx-size": expected value for argument`},
		{"missing second value", recipe(0, "", "--control-vector-layer-range", "1"), `error while handling argument "--control-vector-layer-range": expected value`},
		{"not a number", recipe(0, "", "-np", "two"), `error while handling argument "-np": stoi`},
		{"beyond int", recipe(0, "", "-c", "99999999999"), `error while handling argument "-c": stoi`},
		{"removed", recipe(0, "", "--draft", "4"), `error while handling argument "--draft": the argument has been removed.`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			real := runReal(t, c.args)
			fake := runFake(t, c.args)
			if real.String() != fake.String() {
				t.Errorf("%v:\n real %v\n fake %v", c.args, real, fake)
			}
			if c.want == "served" != real.served || !real.served && !strings.HasPrefix(real.first, c.want) {
				t.Errorf("%v: the real server gave %v, the corpus expects %q", c.args, real, c.want)
			}
		})
	}
}

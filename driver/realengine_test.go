package driver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// llamaTask is a llamacpp task running the real llama-server on model.
func llamaTask(model string, extra string) string {
	return `
engine  = "llamacpp"
model   = "` + model + `"
command = "` + llamabuild.Binary() + `"
port    = "%PORT%"
served_model_name = "tiny"
args    = ["-np", "2", "-c", "2048"` + extra + `]
`
}

func eventMessages(p *plugin, id string) []string {
	var out []string
	for _, ev := range p.events.all() {
		if ev.GetTaskId() == id {
			out = append(out, ev.GetMessage())
		}
	}
	return out
}

func indexOf(msgs []string, substr string) int {
	for i, m := range msgs {
		if strings.Contains(m, substr) {
			return i
		}
	}
	return -1
}

// The driver runs llama.cpp's own server with the tiny model: load events
// from its real log, Ready only after its /health turned 200, its real
// metrics in the task's stats, the same process recovered by a restarted
// plugin, and a stop with a stream in flight that ends the engine at the
// driver's second signal, not at the kill timeout, said as a requested stop.
func TestRealLlamaCppUnderTheDriver(t *testing.T) {
	model := realengine.TinyModel(t)
	p := startPlugin(t, pluginBody)
	// Context shift: a stream with ignore_eos goes on past the slot's
	// context, until its client goes away.
	tk := newTask(t, taskOpts{noGPU: true, body: llamaTask(model, `, "--context-shift"`)})
	h := p.start(t, tk)
	st := decodeState(t, h)
	id := tk.cfg.GetId()
	// The server flips /health to 200 before it logs "model loaded"
	// (tools/server/server.cpp:486-489 at 80fb11a), so Ready may come
	// before the 100 % event; both come, after the 0 % one.
	p.events.wait(t, id, "Ready after", time.Minute)
	p.events.wait(t, id, "Loading the model: 100%", time.Minute)
	msgs := eventMessages(p, id)
	loading, loaded, ready := indexOf(msgs, "Loading the model: 0%"), indexOf(msgs, "Loading the model: 100%"), indexOf(msgs, "Ready after")
	if loading < 0 || loaded < loading || ready < loading {
		t.Errorf("events %q: want Loading the model 0%%, then 100%% and Ready", msgs)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(tk.port)
	if code, _ := realengine.Get(t, url+"/health"); code != 200 {
		t.Fatalf("Ready, but /health answers %d", code)
	}

	// The plugin dies and a new one recovers the same engine process.
	if err := p.Crash(); err != nil {
		t.Fatal(err)
	}
	p2 := startPlugin(t, pluginBody)
	if _, err := p2.Driver.RecoverTask(ctxT(t, 10*time.Second), &driverpb.RecoverTaskRequest{TaskId: id, Handle: h}); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}

	// A stream in flight: the engine's own metrics show it, through the
	// task's stats.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var got strings.Builder
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(
			`{"stream":true,"max_tokens":1000000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on."}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(&got, resp.Body)
	})
	stats, err := p2.Driver.TaskStats(ctxT(t, time.Minute), &driverpb.TaskStatsRequest{TaskId: id, CollectionInterval: durationpb.New(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]string
	// Each look waits for the next stats report (every 200ms).
	wait.For(t, "the task's stats to show the running stream", func() (bool, string) {
		if _, err := stats.Recv(); err != nil {
			t.Fatalf("stats: %v", err)
		}
		insp, err := p2.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: id})
		if err != nil {
			t.Fatal(err)
		}
		attrs = insp.GetDriver().GetAttributes()
		if attrs["engine_pid"] != strconv.Itoa(st.Engine.Pid) {
			t.Fatalf("recovered task runs pid %s, want %d", attrs["engine_pid"], st.Engine.Pid)
		}
		return attrs["engine_requests_running"] == "1", fmt.Sprint(attrs)
	}, wait.Within(time.Minute))
	if attrs["engine_requests_waiting"] != "0" || !strings.Contains(attrs["engine_metrics_absent"], "kv_cache_usage") {
		t.Errorf("engine stats %v: want 0 waiting and the KV cache absent", attrs)
	}

	// Stop with the stream in flight, with a kill timeout far beyond the
	// test: the engine must end at the repeated signal.
	if _, err := p2.Driver.StopTask(ctxT(t, 2*time.Minute), &driverpb.StopTaskRequest{TaskId: id, Timeout: durationpb.New(10 * time.Minute), Signal: "SIGTERM"}); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	w, err := p2.Driver.WaitTask(ctxT(t, 10*time.Second), &driverpb.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	// The real server either waits for the stream (most runs here) and
	// exits 1 at the driver's second signal, or ends the stream itself and
	// exits 0 at the first; never SIGKILL at the timeout.
	r := w.GetResult()
	// Events reach the stream after WaitTask may return; the stop's is
	// the last the driver sends, so everything before it is there then.
	p2.events.wait(t, id, "Engine stopped on request (exit code "+strconv.Itoa(int(r.GetExitCode())), 20*time.Second)
	msgs = eventMessages(p2, id)
	// The second signal comes when the port has closed (the server waits
	// for the stream), or 10 s after the first when the server lost it
	// (its handler deadlocks on its queue's lock, engine/llamacpp.go).
	repeated := indexOf(msgs, "Engine stopped serving but had not exited") >= 0 || indexOf(msgs, "Engine still serving") >= 0
	switch {
	case r.GetSignal() != 0 || w.GetErr() != "":
		t.Errorf("result %v err %q: want an exit at the stop signal, no error", r, w.GetErr())
	case r.GetExitCode() == 1 && !repeated, r.GetExitCode() != 0 && r.GetExitCode() != 1:
		t.Errorf("exit code %d, repeated signal %v (events %q)", r.GetExitCode(), repeated, msgs)
	case indexOf(msgs, "Engine stopped on request (exit code "+strconv.Itoa(int(r.GetExitCode()))+")") < 0:
		t.Errorf("events %q: want the requested stop said as such", msgs)
	}
	t.Logf("the stop ended the engine with exit code %d (second signal sent: %v; events %q)", r.GetExitCode(), repeated, msgs[max(0, len(msgs)-3):])
	cancel()
	wg.Wait()
	if !strings.Contains(got.String(), "Hello") {
		t.Errorf("the stream said nothing before the stop: %q", got.String())
	}
}

// What the real engine refuses reaches the task's events in its own
// words: a truncated model file, a file that is not a GGUF, a flag it does
// not know.
func TestRealLlamaCppFailures(t *testing.T) {
	model := realengine.TinyModel(t)
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated.gguf")
	notGGUF := filepath.Join(dir, "weights.gguf")
	if err := os.WriteFile(truncated, b[:len(b)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notGGUF, []byte("not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startPlugin(t, pluginBody)
	for _, c := range []struct {
		name, body, want string
	}{
		{"truncated", llamaTask(truncated, ""), "failed to load model, '" + truncated + "'"},
		{"not a GGUF", llamaTask(notGGUF, ""), "failed to load model, '" + notGGUF + "'"},
		{"unknown flag", llamaTask(model, `, "--no-such-flag"`), "error: invalid argument: --no-such-flag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// llama-server logs from a thread of its own and does not
			// flush it at exit (llama.cpp 80fb11a, common/log.cpp,
			// common_log_main: "this design may cause logs to be lost if
			// not flushed before the program exits"): on a loaded machine
			// an engine that fails within milliseconds sometimes writes
			// none of its lines, or not the last ones (seen: 2 of 75
			// starts with three busy loops beside the test). What the
			// engine wrote must reach the event; what it did not write
			// cannot. So a start whose output was cut is started again, a
			// bounded number of times.
			const starts = 4
			var ev *driverpb.DriverTaskEvent
			for range starts {
				tk := newTask(t, taskOpts{noGPU: true, body: c.body})
				p.start(t, tk)
				ev = p.events.wait(t, tk.cfg.GetId(), "Engine exited with code 1 before it was ready", time.Minute)
				if strings.Contains(ev.GetMessage()+ev.GetAnnotations()["output_tail"], c.want) {
					return
				}
				t.Logf("event %q (tail %q) without the engine's own line; starting again", ev.GetMessage(), ev.GetAnnotations()["output_tail"])
			}
			t.Errorf("in %d starts, no event had the engine's own line %q; the last: %q (tail %q)", starts, c.want, ev.GetMessage(), ev.GetAnnotations()["output_tail"])
		})
	}
	// Refused before anything runs: a model file or an engine binary that
	// is not there, a binary that is not executable.
	notExec := filepath.Join(dir, "llama-server")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, body, want string }{
		{"missing model", llamaTask(filepath.Join(dir, "missing.gguf"), ""), filepath.Join(dir, "missing.gguf")},
		{"missing binary", strings.Replace(llamaTask(model, ""), llamabuild.Binary(), filepath.Join(dir, "nope"), 1), filepath.Join(dir, "nope")},
		{"binary not executable", strings.Replace(llamaTask(model, ""), llamabuild.Binary(), notExec, 1), notExec},
	} {
		tk := newTask(t, taskOpts{noGPU: true, noLog: true, body: c.body})
		_, err := p.Driver.StartTask(ctxT(t, 10*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: StartTask: %v, want an error naming %s", c.name, err, c.want)
		}
	}

	// The engine dies mid-stream: the exit is said with its signal and the
	// last lines it wrote.
	tk := newTask(t, taskOpts{noGPU: true, body: llamaTask(model, `, "--context-shift"`)})
	st := decodeState(t, p.start(t, tk))
	p.events.wait(t, tk.cfg.GetId(), "Ready after", time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	first := make(chan struct{})
	wg.Go(func() {
		defer close(first)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:"+strconv.Itoa(tk.port)+"/v1/chat/completions",
			strings.NewReader(`{"stream":true,"max_tokens":1000000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on."}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		_, _ = resp.Body.Read(make([]byte, 1))
	})
	<-first
	if err := syscall.Kill(st.Engine.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev := p.events.wait(t, tk.cfg.GetId(), "Engine was killed by signal 9", time.Minute)
	if !strings.Contains(ev.GetAnnotations()["output_tail"], "slot") {
		t.Errorf("exit event %q: want the engine's last lines (its slot log) in output_tail, got %q", ev.GetMessage(), ev.GetAnnotations()["output_tail"])
	}
}

// A llamacpp engine that does not exit at the stop signal is sent it
// again, and ends then, not at the kill timeout: one that closed its port
// but waits for its clients (fake-engine --hang-on-stop, as llama-server
// 0.4.0 does with a request in flight) once it has stopped serving for
// 2 s; one that lost the signal and still serves (--lose-first-stop, as
// llama-server's handler deadlocking does) 10 s after it.
func TestStopRepeatsTheSignalForAnEngineThatHasNotExited(t *testing.T) {
	p := startPlugin(t, pluginBody)
	model := filepath.Join(t.TempDir(), "m.gguf")
	writeFile(t, model, "GGUF")
	for _, c := range []struct {
		name, args     string
		prefix, suffix string // of the repeated signal's event
	}{
		{"waits for its clients", `"--hang-on-stop"`, "Engine stopped serving but had not exited ", " later: sending SIGTERM again"},
		{"lost the signal", `"--hang-on-stop", "--lose-first-stop"`, "Engine still serving ", " after SIGTERM: sending it again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tk := newTask(t, taskOpts{noGPU: true, body: `
engine  = "llamacpp"
model   = "` + model + `"
command = "%ENGINE%"
port    = "%PORT%"
args    = [` + c.args + `, "--tokens-per-second", "1"]
`})
			p.start(t, tk)
			id := tk.cfg.GetId()
			p.events.wait(t, id, "Ready after", 20*time.Second)
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			first := make(chan struct{})
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:"+strconv.Itoa(tk.port)+"/v1/completions",
					strings.NewReader(`{"prompt":"a","max_tokens":1000,"stream":true}`))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					close(first)
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("stream: %s", resp.Status)
				}
				buf := make([]byte, 1)
				_, _ = resp.Body.Read(buf)
				close(first)
				_, _ = io.Copy(io.Discard, resp.Body)
			})
			<-first
			if _, err := p.Driver.StopTask(ctxT(t, 2*time.Minute), &driverpb.StopTaskRequest{TaskId: id, Timeout: durationpb.New(10 * time.Minute), Signal: "SIGTERM"}); err != nil {
				t.Fatalf("StopTask: %v", err)
			}
			w, err := p.Driver.WaitTask(ctxT(t, 10*time.Second), &driverpb.WaitTaskRequest{TaskId: id})
			if err != nil {
				t.Fatal(err)
			}
			if r := w.GetResult(); r.GetSignal() != 0 || r.GetExitCode() != 1 || w.GetErr() != "" {
				t.Errorf("result %v err %q: want exit code 1 at the second signal, no error", r, w.GetErr())
			}
			p.events.wait(t, id, "Engine stopped on request (exit code 1)", 20*time.Second) // the last event; see above
			msgs := eventMessages(p, id)
			if i := indexOf(msgs, c.prefix); i < 0 || !strings.HasSuffix(msgs[i], c.suffix) ||
				indexOf(msgs, "Engine stopped on request (exit code 1)") < 0 {
				t.Errorf("events %q: want %q…%q and the requested stop", msgs, c.prefix, c.suffix)
			}
			repeats := 0
			for _, m := range msgs {
				if strings.Contains(m, " again") {
					repeats++
				}
			}
			if repeats != 1 {
				t.Errorf("events %q: want the signal repeated once", msgs)
			}
		})
	}
}

// A model file the engine's user cannot read is refused before anything
// starts, naming the field, the file, the user and the mode.
func TestRealLlamaCppModelUnreadableByItsUser(t *testing.T) {
	realengine.Require(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: running an engine as nobody needs the driver to run as root")
	}
	dir, err := os.MkdirTemp("", "llmgw-unreadable-") //nolint:usetesting // nobody must reach the engine in it; t.TempDir's parents are root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	in, err := llamabuild.Install(dir, tinymodel.Defaults)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(in.Model, 0o600); err != nil { // root's alone
		t.Fatal(err)
	}
	p := startPlugin(t, pluginBody+`allowed_users = ["nobody"]`+"\n")
	tk := newTask(t, taskOpts{noGPU: true, body: strings.Replace(llamaTask(in.Model, ""), llamabuild.Binary(), in.Binary, 1)})
	tk.cfg.User = "nobody"
	// The test's temporary folders are 0700; the task dir must be
	// reachable by nobody, as a Nomad client's alloc dir is.
	for d := tk.cfg.GetAllocDir(); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, err = p.Driver.StartTask(ctxT(t, 10*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
	for _, want := range []string{"model: nobody", "cannot use " + in.Model, "mode 0600"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("StartTask with a model nobody cannot read: %v, want an error containing %q", err, want)
		}
	}
}

package driver_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goversion "github.com/hashicorp/go-version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The plugin config the life-cycle tests use: no cgroup (not every test
// machine has a writable cgroup v2 hierarchy, so resources are best
// effort), quick readiness probes, and engines that run the test's own
// commands (fake-engine, /bin/sh) as the test's user, root included. The
// default policy (allowed_commands, default_user, env_denylist,
// resource_limits) has tests of its own in policy_test.go.
const pluginBody = `
cgroup_parent     = ""
resource_limits   = "best_effort"
allow_any_command = true
default_user      = "root"
allow_root        = true
ready_interval    = "100ms"
stop_timeout      = "2s"
`

func vllmTask(extra string) string {
	return `
engine  = "vllm"
model   = "Qwen/Qwen2.5-0.5B-Instruct"
command = "%ENGINE%"
port    = "%PORT%"
` + extra
}

func TestPluginInfoAndCapabilities(t *testing.T) {
	inst := plugintest.Start(t, buildDriver(t), plugintest.Options{})
	info := inst.Info
	if info.GetType() != basepb.PluginType_DRIVER || info.GetName() != "llmgw" {
		t.Fatalf("got type %v name %q, want DRIVER llmgw", info.GetType(), info.GetName())
	}
	if diff := cmp.Diff([]string{"v0.1.0"}, info.GetPluginApiVersions()); diff != "" {
		t.Errorf("api versions (-want +got):\n%s", diff)
	}
	if _, err := goversion.NewVersion(info.GetPluginVersion()); err != nil {
		t.Errorf("plugin_version %q does not parse: %v", info.GetPluginVersion(), err)
	}
	caps, err := inst.Driver.Capabilities(ctxT(t, 5*time.Second), &driverpb.CapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c := caps.GetCapabilities()
	if !c.GetSendSignals() || !c.GetExec() || c.GetFsIsolation() != driverpb.DriverCapabilities_NONE {
		t.Errorf("capabilities %v: want send_signals, exec, fs_isolation NONE", c)
	}
	if diff := cmp.Diff([]driverpb.NetworkIsolationSpec_NetworkIsolationMode{driverpb.NetworkIsolationSpec_HOST}, c.GetNetworkIsolationModes()); diff != "" {
		t.Errorf("network isolation modes (-want +got):\n%s", diff)
	}
}

func TestBadPluginConfig(t *testing.T) {
	inst := plugintest.Start(t, buildDriver(t), plugintest.Options{})
	for body, want := range map[string]string{
		`ready_timeout = "soon"`:          "ready_timeout",
		`ready_interval = "1ms"`:          "ready_interval",
		`model_cache = "relative/models"`: "model_cache",
		`engines { triton = "x" }`:        "triton",
	} {
		err := inst.Configure(ctxT(t, 5*time.Second), body)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %s: got %v, want an error naming %s", body, err, want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	engine := plugintest.Build(t, enginePkg)
	p := startPlugin(t, pluginBody+`engines { vllm = "`+engine+`" }`)
	stream, err := p.Driver.Fingerprint(ctxT(t, 10*time.Second), &driverpb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if fp.GetHealth() != driverpb.FingerprintResponse_HEALTHY {
		t.Errorf("health %v %q, want HEALTHY", fp.GetHealth(), fp.GetHealthDescription())
	}
	attrs := fp.GetAttributes()
	if v := attrs["driver.llmgw.version"].GetStringVal(); v == "" {
		t.Errorf("no driver.llmgw.version in %v", attrs)
	}
	if got := attrs["driver.llmgw.engine.vllm"].GetStringVal(); got != engine {
		t.Errorf("driver.llmgw.engine.vllm = %q, want %q", got, engine)
	}
	if got := attrs["driver.llmgw.engines"].GetStringVal(); !strings.Contains(got, "vllm") {
		t.Errorf("driver.llmgw.engines = %q, want it to list vllm", got)
	}
}

// TestLifecycle starts an engine on two GPUs and walks it through
// readiness, logs, inspect, stats, exec, signal, stop and destroy.
func TestLifecycle(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{
		gpus: []string{"GPU-aaaa", "GPU-bbbb"},
		body: vllmTask(`args = ["--load-seconds", "1", "--load-shards", "4", "--expect-gpus", "2"]
env  = { LLMGW_TEST = "yes" }`),
	})
	h := p.start(t, tk)
	st := decodeState(t, h)
	id := tk.cfg.GetId()

	started := p.events.wait(t, id, "Started vllm on GPUs GPU-aaaa,GPU-bbbb (tensor parallel 2) as CUDA_VISIBLE_DEVICES=0,1: ", 10*time.Second)
	if !strings.Contains(started.GetMessage(), "serve Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port "+strconv.Itoa(tk.port)+" --tensor-parallel-size 2") {
		t.Errorf("started event does not show the command line: %q", started.GetMessage())
	}
	if started.GetAllocId() != tk.cfg.GetAllocId() || started.GetTaskName() != tk.cfg.GetName() || started.GetTimestamp() == nil {
		t.Errorf("event routing fields: %v", started)
	}
	p.events.wait(t, id, "Loading safetensors checkpoint shards: ", 10*time.Second)
	p.events.wait(t, id, "Ready after", 30*time.Second)

	insp, err := p.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	attrs := insp.GetDriver().GetAttributes()
	if insp.GetTask().GetState() != driverpb.TaskState_RUNNING || attrs["ready"] != "true" || attrs["gpus"] != "GPU-aaaa,GPU-bbbb" || attrs["cuda_visible_devices"] != "0,1" {
		t.Errorf("inspect: state %v attrs %v", insp.GetTask().GetState(), attrs)
	}

	// Logs reach Nomad's FIFOs.
	tk.stdout.wait(t, "", time.Second)
	waitAny(t, []*fifo{tk.stdout, tk.stderr}, "Loading safetensors checkpoint shards", 10*time.Second)

	// Stats of the engine's process tree.
	stats, err := p.Driver.TaskStats(ctxT(t, 10*time.Second), &driverpb.TaskStatsRequest{TaskId: id, CollectionInterval: durationpb.New(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		s, err := stats.Recv()
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		agg := s.GetStats().GetAggResourceUsage()
		if agg.GetMemory().GetRss() == 0 || len(agg.GetMemory().GetMeasuredFields()) == 0 || len(agg.GetCpu().GetMeasuredFields()) == 0 {
			t.Errorf("stats sample %d: %v", i, agg)
		}
		if _, ok := s.GetStats().GetResourceUsageByPid()[strconv.Itoa(st.Engine.Pid)]; !ok {
			t.Errorf("stats by pid lack the engine pid %d: %v", st.Engine.Pid, s.GetStats().GetResourceUsageByPid())
		}
	}

	// Exec runs in the task dir with the task's environment.
	ex, err := p.Driver.ExecTask(ctxT(t, 10*time.Second), &driverpb.ExecTaskRequest{
		TaskId: id, Command: []string{"/bin/sh", "-c", "echo $LLMGW_TEST $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER $LLMGW_GPU_UUIDS; pwd; echo oops >&2; exit 3"},
		Timeout: durationpb.New(5 * time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	wantOut := "yes 0,1 PCI_BUS_ID GPU-aaaa,GPU-bbbb\n" + filepath.Join(tk.cfg.GetAllocDir(), tk.cfg.GetName()) + "\n"
	if string(ex.GetStdout()) != wantOut || string(ex.GetStderr()) != "oops\n" || ex.GetResult().GetExitCode() != 3 {
		t.Errorf("exec: stdout %q stderr %q result %v; want %q, oops, 3", ex.GetStdout(), ex.GetStderr(), ex.GetResult(), wantOut)
	}
	_, err = p.Driver.ExecTask(ctxT(t, 10*time.Second), &driverpb.ExecTaskRequest{
		TaskId: id, Command: []string{"sleep", "30"}, Timeout: durationpb.New(200 * time.Millisecond),
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("exec past its timeout: got %v, want DeadlineExceeded", err)
	}

	// A signal reaches the engine (SIGCONT is harmless), a bad one is refused.
	if _, err := p.Driver.SignalTask(ctxT(t, 5*time.Second), &driverpb.SignalTaskRequest{TaskId: id, Signal: "SIGCONT"}); err != nil {
		t.Errorf("SignalTask: %v", err)
	}
	if _, err := p.Driver.SignalTask(ctxT(t, 5*time.Second), &driverpb.SignalTaskRequest{TaskId: id, Signal: "SIGBOGUS"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad signal: got %v, want InvalidArgument", err)
	}

	// Destroy without force refuses a running task.
	if _, err := p.Driver.DestroyTask(ctxT(t, 5*time.Second), &driverpb.DestroyTaskRequest{TaskId: id}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("destroy running task without force: got %v, want FailedPrecondition", err)
	}

	if _, err := p.Driver.StopTask(ctxT(t, 20*time.Second), &driverpb.StopTaskRequest{TaskId: id, Timeout: durationpb.New(5 * time.Second), Signal: "SIGTERM"}); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	for i := 0; i < 2; i++ { // WaitTask may be called again after exit
		w, err := p.Driver.WaitTask(ctxT(t, 10*time.Second), &driverpb.WaitTaskRequest{TaskId: id})
		if err != nil {
			t.Fatalf("WaitTask: %v", err)
		}
		if w.GetErr() != "" {
			t.Errorf("WaitTask err %q after a requested stop", w.GetErr())
		}
	}
	if st.Engine.Alive() {
		t.Error("engine still alive after StopTask")
	}
	insp, err = p.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: id})
	if err != nil || insp.GetTask().GetState() != driverpb.TaskState_EXITED || insp.GetTask().GetCompletedAt() == nil {
		t.Errorf("inspect after stop: %v, %v", insp.GetTask(), err)
	}
	if _, err := p.Driver.DestroyTask(ctxT(t, 10*time.Second), &driverpb.DestroyTaskRequest{TaskId: id}); err != nil {
		t.Fatalf("DestroyTask: %v", err)
	}
	if _, err := os.Stat(st.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir %s still there after destroy: %v", st.StateDir, err)
	}
	if _, err := p.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("inspect after destroy: got %v, want NotFound", err)
	}
}

func waitAny(t *testing.T, ffs []*fifo, substr string, timeout time.Duration) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%q in the log FIFOs", substr), func() (bool, string) {
		for _, ff := range ffs {
			if strings.Contains(ff.String(), substr) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("stdout:\n%s\nstderr:\n%s", ffs[0], ffs[1])
	}, wait.Within(timeout), wait.Every(20*time.Millisecond))
}

func TestEngineExitBeforeReady(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: vllmTask(`args = ["--load-seconds", "60", "--crash-after", "0.3", "--exit-code", "7"]`)})
	p.start(t, tk)
	id := tk.cfg.GetId()
	w, err := p.Driver.WaitTask(ctxT(t, 20*time.Second), &driverpb.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetResult().GetExitCode() != 7 {
		t.Errorf("exit code %d, want 7", w.GetResult().GetExitCode())
	}
	ev := p.events.wait(t, id, "Engine exited with code 7 before it was ready", 5*time.Second)
	if !strings.Contains(ev.GetMessage(), "simulated crash") || !strings.Contains(ev.GetAnnotations()["output_tail"], "simulated crash") {
		t.Errorf("exit event lacks the last stderr lines: %q %v", ev.GetMessage(), ev.GetAnnotations())
	}
	tk.stderr.wait(t, "simulated crash", 5*time.Second)
}

func TestReadinessTimeout(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: vllmTask(`args = ["--load-seconds", "600"]
ready {
  timeout  = "1s"
  interval = "200ms"
}`)})
	h := p.start(t, tk)
	st := decodeState(t, h)
	id := tk.cfg.GetId()
	w, err := p.Driver.WaitTask(ctxT(t, 30*time.Second), &driverpb.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.GetErr(), "not ready after 1s") {
		t.Errorf("WaitTask err %q, want the readiness timeout", w.GetErr())
	}
	p.events.wait(t, id, "Not ready after 1s: stopping the engine", 5*time.Second)
	if st.Engine.Alive() {
		t.Error("engine still running after the readiness timeout")
	}
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: vllmTask(`args = ["--ignore-sigterm"]`)})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, "Ready after", 20*time.Second)
	if _, err := p.Driver.StopTask(ctxT(t, 20*time.Second), &driverpb.StopTaskRequest{TaskId: id, Timeout: durationpb.New(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	w, err := p.Driver.WaitTask(ctxT(t, 10*time.Second), &driverpb.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetResult().GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("result %v, want killed by SIGKILL", w.GetResult())
	}
	tk.stderr.wait(t, "ignoring SIGTERM", 5*time.Second)
}

// TestRecoverAfterPluginCrash kills the plugin with SIGKILL while the
// engine runs and recovers the task from its handle in a new plugin
// process: same engine, readiness remembered, and stop still works.
func TestRecoverAfterPluginCrash(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{gpus: []string{"GPU-1"}, body: vllmTask("")})
	h := p.start(t, tk)
	st := decodeState(t, h)
	id := tk.cfg.GetId()
	p.events.wait(t, id, "Ready after", 20*time.Second)
	if err := p.Crash(); err != nil {
		t.Fatal(err)
	}
	if !st.Engine.Alive() || !st.Supervisor.Alive() {
		t.Fatal("engine or supervisor died with the plugin")
	}
	tk.stdout.wait(t, "", time.Second)

	p2 := startPlugin(t, pluginBody)
	for i := 0; i < 2; i++ { // idempotent
		if _, err := p2.Driver.RecoverTask(ctxT(t, 10*time.Second), &driverpb.RecoverTaskRequest{TaskId: id, Handle: h}); err != nil {
			t.Fatalf("RecoverTask #%d: %v", i+1, err)
		}
	}
	insp, err := p2.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	attrs := insp.GetDriver().GetAttributes()
	if insp.GetTask().GetState() != driverpb.TaskState_RUNNING || attrs["ready"] != "true" || attrs["engine_pid"] != strconv.Itoa(st.Engine.Pid) {
		t.Errorf("recovered task: state %v attrs %v", insp.GetTask().GetState(), attrs)
	}
	if _, err := p2.Driver.StopTask(ctxT(t, 20*time.Second), &driverpb.StopTaskRequest{TaskId: id, Timeout: durationpb.New(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	w, err := p2.Driver.WaitTask(ctxT(t, 10*time.Second), &driverpb.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetErr() != "" {
		t.Errorf("WaitTask err %q", w.GetErr())
	}
	if st.Engine.Alive() {
		t.Error("engine alive after stop through the recovered plugin")
	}
}

// TestExitWhilePluginDown: the engine exits while no plugin runs; the
// next plugin still reports its exit code.
func TestExitWhilePluginDown(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: vllmTask(`args = ["--crash-after", "1", "--exit-code", "42"]`)})
	h := p.start(t, tk)
	st := decodeState(t, h)
	if err := p.Crash(); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the engine to exit on its own", func() bool { return !st.Engine.Alive() && !st.Supervisor.Alive() })
	p2 := startPlugin(t, pluginBody)
	if _, err := p2.Driver.RecoverTask(ctxT(t, 10*time.Second), &driverpb.RecoverTaskRequest{TaskId: tk.cfg.GetId(), Handle: h}); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	w, err := p2.Driver.WaitTask(ctxT(t, 10*time.Second), &driverpb.WaitTaskRequest{TaskId: tk.cfg.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetResult().GetExitCode() != 42 {
		t.Errorf("exit code %d, want 42 (recorded while the plugin was down)", w.GetResult().GetExitCode())
	}
}

func TestRecoverBadHandles(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{noLog: true, body: vllmTask("")})
	cases := map[string]*driverpb.TaskHandle{
		"no config":    {Version: 1, DriverState: []byte(`{}`)},
		"version":      {Version: 9, Config: tk.cfg, DriverState: []byte(`{"version":9}`)},
		"garbage":      {Version: 1, Config: tk.cfg, DriverState: []byte(`{not json`)},
		"no state dir": {Version: 1, Config: tk.cfg, DriverState: []byte(`{"version":1,"supervisor":{"pid":1},"engine":{"pid":1}}`)},
	}
	for name, h := range cases {
		if _, err := p.Driver.RecoverTask(ctxT(t, 5*time.Second), &driverpb.RecoverTaskRequest{TaskId: tk.cfg.GetId(), Handle: h}); err == nil {
			t.Errorf("%s: RecoverTask accepted a bad handle", name)
		}
	}
}

func TestBadTaskConfigs(t *testing.T) {
	p := startPlugin(t, pluginBody)
	cases := []struct {
		name string
		body string
		gpus []string
		want string
	}{
		{"unknown engine", `engine = "triton"
model = "m"
port = "http"`, nil, `engine: unknown engine "triton" (want one of command, llamacpp, sglang, tgi, vllm, or fetch)`},
		{"missing port", `engine = "vllm"
model = "m"
command = "%ENGINE%"`, nil, `port: required (the label of a port in the group's network block)`},
		{"missing model", `engine = "vllm"
command = "%ENGINE%"
port = "http"`, nil, `model: required for engine "vllm"`},
		{"tensor parallel above GPUs", vllmTask(`tensor_parallel = 4`), []string{"GPU-1", "GPU-2"},
			"tensor_parallel: 4 is more than the 2 GPUs allocated to the task (GPU-1,GPU-2)"},
		{"tensor parallel without GPUs", vllmTask(`tensor_parallel = 2`), []string{}, "tensor_parallel: 2 needs 2 GPUs but the task was allocated none"},
		{"two MIG instances", vllmTask(""), []string{"MIG-a", "MIG-b"},
			"device: the task's device request allocated 2 MIG instances (MIG-a, MIG-b); an engine process can use exactly one MIG instance"},
		{"port label not in the group", `engine = "vllm"
model = "m"
command = "%ENGINE%"
port = "api"`, nil, `port: no port labelled "api" in the group's network (have: http, metrics)`},
		{"bad duration", vllmTask(`ready { timeout = "30 minutes" }`), nil, `ready.timeout`},
		{"negative tensor parallel", vllmTask(`tensor_parallel = -1`), nil, "tensor_parallel: must be 0"},
		{"fractional tensor parallel", vllmTask(`tensor_parallel = 1.5`), nil, "tensor_parallel"},
		{"ready path", vllmTask(`ready { path = "health" }`), nil, `ready.path: "health" must start with /`},
		{"command engine without command", `engine = "command"
port = "http"`, nil, `command: required for engine "command"`},
		{"executable not found", `engine = "vllm"
model = "m"
command = "/nonexistent/vllm"
port = "http"`, nil, `command: executable "/nonexistent/vllm"`},
		{"engine not on PATH", `engine = "tgi"
model = "m"
port = "http"`, nil, `engines.tgi: executable "text-generation-launcher" not found on PATH`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := newTask(t, taskOpts{noLog: true, gpus: c.gpus, noGPU: c.gpus != nil && len(c.gpus) == 0, body: c.body})
			_, err := p.Driver.StartTask(ctxT(t, 10*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
			if err == nil {
				t.Fatal("StartTask accepted the config")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
			rec, ok := nomadplugin.IsRecoverable(err)
			if !ok || rec {
				t.Errorf("bad config error recoverable=%v (detail present %v), want a non-recoverable error", rec, ok)
			}
		})
	}
}

func TestExecStreaming(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: vllmTask("")})
	p.start(t, tk)
	id := tk.cfg.GetId()
	for _, tty := range []bool{false, true} {
		t.Run("tty="+strconv.FormatBool(tty), func(t *testing.T) {
			stream, err := p.Driver.ExecTaskStreaming(ctxT(t, 20*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			send := func(m *driverpb.ExecTaskStreamingRequest) {
				if err := stream.Send(m); err != nil {
					t.Fatalf("send: %v", err)
				}
			}
			send(&driverpb.ExecTaskStreamingRequest{Setup: &driverpb.ExecTaskStreamingRequest_Setup{
				TaskId: id, Command: []string{"/bin/sh", "-c", "read line; echo got:$line; echo err:$LLMGW_MODEL >&2; exit 5"}, Tty: tty,
			}})
			if tty {
				send(&driverpb.ExecTaskStreamingRequest{TtySize: &driverpb.ExecTaskStreamingRequest_TerminalSize{Height: 40, Width: 120}})
			}
			send(&driverpb.ExecTaskStreamingRequest{Stdin: &driverpb.ExecTaskStreamingIOOperation{Data: []byte("hello\n")}})
			var out, errOut strings.Builder
			var result *driverpb.ExitResult
			for {
				m, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("recv: %v", err)
				}
				out.Write(m.GetStdout().GetData())
				errOut.Write(m.GetStderr().GetData())
				if m.GetExited() {
					result = m.GetResult()
				}
			}
			if result.GetExitCode() != 5 {
				t.Errorf("exit %v, want code 5", result)
			}
			all := out.String() + errOut.String()
			if !strings.Contains(all, "got:hello") {
				t.Errorf("output %q lacks got:hello", all)
			}
			if !tty && errOut.String() != "err:\n" {
				// LLMGW_MODEL is set only for the command engine.
				t.Errorf("stderr %q, want err:", errOut.String())
			}
		})
	}
}

func TestStartTaskTwiceAndUnknownTasks(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: vllmTask("")})
	p.start(t, tk)
	if _, err := p.Driver.StartTask(ctxT(t, 10*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second StartTask: got %v, want AlreadyExists", err)
	}
	for name, call := range map[string]func() error{
		"wait": func() error {
			_, err := p.Driver.WaitTask(ctxT(t, 5*time.Second), &driverpb.WaitTaskRequest{TaskId: "nope"})
			return err
		},
		"stop": func() error {
			_, err := p.Driver.StopTask(ctxT(t, 5*time.Second), &driverpb.StopTaskRequest{TaskId: "nope"})
			return err
		},
		"inspect": func() error {
			_, err := p.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: "nope"})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.NotFound {
			t.Errorf("%s on an unknown task: got %v, want NotFound", name, err)
		}
	}
	if _, err := p.Driver.DestroyTask(ctxT(t, 10*time.Second), &driverpb.DestroyTaskRequest{TaskId: tk.cfg.GetId(), Force: true}); err != nil {
		t.Errorf("destroy with force: %v", err)
	}
}

// TestCommandEngine runs a command verbatim with LLMGW_* in its
// environment.
func TestCommandEngine(t *testing.T) {
	p := startPlugin(t, pluginBody)
	// The task config's CUDA_VISIBLE_DEVICES does not give it a GPU.
	tk := newTask(t, taskOpts{noGPU: true, body: `
engine  = "command"
model   = "my-model"
command = "%ENGINE%"
args    = ["serve"]
port    = "%PORT%"
env     = { CUDA_VISIBLE_DEVICES = "0" }
`})
	h := p.start(t, tk)
	st := decodeState(t, h)
	p.events.wait(t, tk.cfg.GetId(), `Ignored CUDA_VISIBLE_DEVICES="0" from the task config's env: an engine's GPUs come only from its device request; this task has none`, 20*time.Second)
	p.events.wait(t, tk.cfg.GetId(), "Ready after", 20*time.Second)
	env, err := os.ReadFile("/proc/" + strconv.Itoa(st.Engine.Pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	// The task is supervised by the lean llmgw-supervisor installed beside
	// the driver, not by the driver binary.
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(st.Supervisor.Pid) + "/exe"); err != nil || filepath.Base(exe) != "llmgw-supervisor" {
		t.Errorf("supervisor executable %q (%v), want llmgw-supervisor", exe, err)
	}
	for _, want := range []string{"LLMGW_HOST=127.0.0.1", "LLMGW_PORT=" + strconv.Itoa(tk.port), "LLMGW_MODEL=my-model", "CUDA_VISIBLE_DEVICES="} {
		if !strings.Contains("\x00"+string(env)+"\x00", "\x00"+want+"\x00") {
			t.Errorf("engine environment lacks %s", want)
		}
	}
	_ = procfs.Ref{}
}

// TestReadySkip runs a process that serves no HTTP (a multi-node vLLM
// replica's headless rank): with ready.skip it is ready once it runs, and
// is not stopped at the readiness timeout.
func TestReadySkip(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{noGPU: true, body: `
engine  = "command"
model   = "my-model"
command = "/bin/sleep"
args    = ["3600"]
port    = "%PORT%"
ready {
  skip    = true
  timeout = "1s"
}
`})
	h := p.start(t, tk)
	st := decodeState(t, h)
	p.events.wait(t, tk.cfg.GetId(), "Running; readiness probe skipped (ready.skip)", 20*time.Second)
	insp, err := p.Driver.InspectTask(ctxT(t, 10*time.Second), &driverpb.InspectTaskRequest{TaskId: tk.cfg.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := insp.GetDriver().GetAttributes()["ready"]; got != "true" {
		t.Fatalf("ready attribute %q, want true", got)
	}
	// Past ready.timeout it still runs: nothing was waiting for a probe.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !st.Engine.Alive() {
		t.Fatal("engine stopped although readiness probing was skipped")
	}
}

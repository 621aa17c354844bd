package driver_test

import (
	"encoding/json"
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

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/internal/testing/proctest"
	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// openEngine copies the fake engine into a directory every user can
// reach (the build's own is private to the test's user), as an operator
// installs an engine.
func openEngine(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.Open(plugintest.Build(t, enginePkg))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "vllm")
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// nomadDirs gives a test task the permissions Nomad gives a task dir: the
// alloc dir traversable, the task dir and its local and private dirs
// world-writable (Nomad chowns them to nobody).
func nomadDirs(t *testing.T, tk *task) string {
	t.Helper()
	alloc := tk.cfg.GetAllocDir()
	taskDir := filepath.Join(alloc, tk.cfg.GetName())
	for d, mode := range map[string]os.FileMode{
		filepath.Dir(filepath.Dir(alloc)): 0o755, filepath.Dir(alloc): 0o755, alloc: 0o755,
		taskDir: 0o777, filepath.Join(taskDir, "local"): 0o777, filepath.Join(taskDir, "private"): 0o777,
	} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	return taskDir
}

func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

// TestDefaultPolicy runs the driver with its default policy (only the
// engines' own executables, engines as nobody, the default env denylist)
// and checks that a vLLM task runs as nobody with no_new_privs, that exec
// runs as nobody too, and that each thing the policy refuses is refused
// before anything starts, with a task event naming the field and the
// plugin option that would allow it.
func TestDefaultPolicy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the driver drops engines to nobody only when it runs as root")
	}
	engine := openEngine(t)
	p := startPlugin(t, fmt.Sprintf(`
engines { vllm = %q }
cgroup_parent   = ""
resource_limits = "best_effort"
ready_interval  = "100ms"
stop_timeout    = "2s"
`, engine))
	tk := newTask(t, taskOpts{body: `
engine = "vllm"
model  = "Qwen/Qwen2.5-0.5B-Instruct"
port   = "%PORT%"
`})
	taskDir := nomadDirs(t, tk)
	h := p.start(t, tk)
	st := decodeState(t, h)
	id := tk.cfg.GetId()
	started := p.events.wait(t, id, "Started vllm", 10*time.Second)
	if got := started.GetAnnotations()["user"]; got != "nobody (uid 65534)" {
		t.Errorf("Started event user %q, want nobody (uid 65534)", got)
	}
	if got := started.GetAnnotations()["executable"]; got != engine {
		t.Errorf("Started event executable %q, want %s", got, engine)
	}
	p.events.wait(t, id, "Ready after", 30*time.Second)

	status := procStatus(t, st.Engine.Pid)
	if status["Uid"] != "65534 65534 65534 65534" || status["Gid"] != "65534 65534 65534 65534" {
		t.Errorf("engine Uid %q Gid %q, want nobody's", status["Uid"], status["Gid"])
	}
	if status["NoNewPrivs"] != "1" {
		t.Errorf("engine NoNewPrivs %q, want 1", status["NoNewPrivs"])
	}
	if status["CapEff"] != "0000000000000000" {
		t.Errorf("engine CapEff %q, want none", status["CapEff"])
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(st.Engine.Pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HOME=" + filepath.Join(taskDir, "local"), "USER=nobody", "LOGNAME=nobody"} {
		if !strings.Contains("\x00"+string(env)+"\x00", "\x00"+want+"\x00") {
			t.Errorf("engine environment lacks %s", want)
		}
	}
	// The state dir's parent is root's alone now.
	var pst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(taskDir, "private"), &pst); err != nil {
		t.Fatal(err)
	}
	if pst.Uid != 0 || pst.Mode&0o777 != 0o700 {
		t.Errorf("private dir uid %d mode %04o, want root's 0700", pst.Uid, pst.Mode&0o7777)
	}
	ex, err := p.Driver.ExecTask(ctxT(t, 10*time.Second), &driverpb.ExecTaskRequest{TaskId: id, Command: []string{"id", "-u"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(ex.GetStdout())); got != "65534" {
		t.Errorf("exec id -u: %q (%s), want 65534", got, ex.GetStderr())
	}
	insp, err := p.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := insp.GetDriver().GetAttributes()["user"]; got != "nobody" {
		t.Errorf("inspect user %q", got)
	}

	refusals := []struct {
		name string
		body string
		edit func(*driverpb.TaskConfig)
		want string
	}{
		{"a command outside allowed_commands", `
engine  = "command"
command = "/bin/sh"
args    = ["-c", "touch ran"]
port    = "%PORT%"`, nil, `command: "/bin/sh"`},
		{"root", "", func(c *driverpb.TaskConfig) { c.User = "root" },
			`user: "root" is uid 0: engines do not run as root (set allow_root = true in the plugin config)`},
		{"a user not in allowed_users", "", func(c *driverpb.TaskConfig) { c.User = "daemon" },
			`user: "daemon" is not in allowed_users`},
		{"LD_PRELOAD in the task config", `
engine = "vllm"
model  = "m"
port   = "%PORT%"
env    = { LD_PRELOAD = "/alloc/data/x.so" }`, nil,
			`env.LD_PRELOAD: denied by env_denylist (set allowed_env = ["LD_PRELOAD"] in the plugin config to allow it)`},
		{"PYTHONPATH from the job's env block", "", func(c *driverpb.TaskConfig) { c.Env["PYTHONPATH"] = "/alloc/data" },
			`task environment PYTHONPATH: denied by env_denylist`},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			body := r.body
			if body == "" {
				body = "engine = \"vllm\"\nmodel = \"m\"\nport = \"%PORT%\""
			}
			tk := newTask(t, taskOpts{noLog: true, noGPU: true, body: body})
			taskDir := nomadDirs(t, tk)
			if r.edit != nil {
				r.edit(tk.cfg)
			}
			_, err := p.Driver.StartTask(ctxT(t, 10*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
			if err == nil || !strings.Contains(err.Error(), r.want) {
				t.Fatalf("StartTask: %v, want an error containing %q", err, r.want)
			}
			t.Logf("refused: %v", err)
			if rec, ok := nomadplugin.IsRecoverable(err); !ok || rec {
				t.Errorf("refusal recoverable=%v (detail present %v), want a non-recoverable error", rec, ok)
			}
			p.events.wait(t, tk.cfg.GetId(), "Not started: ", 5*time.Second)
			if ev := p.events.wait(t, tk.cfg.GetId(), r.want, time.Second); ev == nil {
				t.Error("no event")
			}
			if _, err := os.Stat(filepath.Join(taskDir, "ran")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("something ran: %v", err)
			}
		})
	}
}

// TestResourceLimitsPolicy: where the engine can get no cgroup v2 (here
// cgroup_parent is not on a cgroup file system), resource_limits =
// "enforce" refuses a task with resources before its engine runs, naming
// each limit and the option; "best_effort" starts it with a task event
// naming what is not enforced.
func TestResourceLimitsPolicy(t *testing.T) {
	notCgroup := filepath.Join(t.TempDir(), "llmgw.slice")
	resources := func(tk *task) {
		tk.cfg.Resources.AllocatedResources = &driverpb.AllocatedTaskResources{
			Cpu:    &driverpb.AllocatedCpuResources{CpuShares: 100},
			Memory: &driverpb.AllocatedMemoryResources{MemoryMb: 128},
		}
		tk.cfg.Resources.LinuxResources = &driverpb.LinuxResources{CpuShares: 100, MemoryLimitBytes: 128 << 20}
	}
	body := `
engine  = "command"
command = "/bin/sh"
args    = ["-c", "touch ran; exec sleep 3600"]
port    = "%PORT%"
ready { skip = true }`
	policy := fmt.Sprintf(`
cgroup_parent    = %q
allowed_commands = ["/bin/sh"]
default_user     = "root"
allow_root       = true
ready_interval   = "100ms"
`, notCgroup)

	enforce := startPlugin(t, policy)
	tk := newTask(t, taskOpts{noLog: true, noGPU: true, body: body})
	resources(tk)
	_, err := enforce.Driver.StartTask(ctxT(t, 20*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
	want := `resources: this host cannot enforce the task's resources: cpu.weight=17: no cgroup for the engine: `
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "memory.max=134217728: ") ||
		!strings.Contains(err.Error(), "not a cgroup v2 hierarchy") || !strings.Contains(err.Error(), `(set resource_limits = "best_effort" in the plugin config`) {
		t.Fatalf("StartTask: %v, want %q… naming memory.max and resource_limits", err, want)
	}
	t.Logf("refused: %v", err)
	if rec, ok := nomadplugin.IsRecoverable(err); !ok || rec {
		t.Errorf("refusal recoverable=%v (detail present %v), want a non-recoverable error", rec, ok)
	}
	enforce.events.wait(t, tk.cfg.GetId(), "Not started: "+want, 5*time.Second)
	if _, err := os.Stat(filepath.Join(tk.cfg.GetAllocDir(), tk.cfg.GetName(), "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused engine ran: %v", err)
	}

	best := startPlugin(t, policy+`resource_limits = "best_effort"`)
	tk = newTask(t, taskOpts{noLog: true, noGPU: true, body: body})
	resources(tk)
	best.start(t, tk)
	best.events.wait(t, tk.cfg.GetId(), `Resources not enforced (resource_limits = "best_effort"): cpu.weight=17: no cgroup for the engine: `, 10*time.Second)
	insp, err := best.Driver.InspectTask(ctxT(t, 5*time.Second), &driverpb.InspectTaskRequest{TaskId: tk.cfg.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := insp.GetDriver().GetAttributes()["resource_limits"]; !strings.HasPrefix(got, "not enforced: cpu.weight=17") {
		t.Errorf("inspect resource_limits %q", got)
	}
}

// TestEngineCgroupInNomadPartition: when Nomad names a cgroup v2 path for
// the task (a cgroup v2 client: nomad.slice/share.slice/<alloc>.<task>.scope),
// the engine's cgroup goes in that partition, named for the invocation,
// not under cgroup_parent; it is removed when the engine exits. Skipped
// where no cgroup v2 hierarchy is writable.
func TestEngineCgroupInNomadPartition(t *testing.T) {
	parent, why := proctest.WritableCgroup(t)
	if parent == "" {
		t.Skipf("no writable cgroup v2 hierarchy here: %s", why)
	}
	share := filepath.Join(parent, "share.slice")
	if err := os.Mkdir(share, 0o755); err != nil {
		t.Fatalf("create a stand-in for Nomad's share partition: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(share) })
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{noGPU: true, body: `
engine  = "command"
command = "/bin/sh"
args    = ["-c", "exec sleep 3600"]
port    = "%PORT%"
ready { skip = true }
`})
	tk.cfg.Resources.LinuxResources = &driverpb.LinuxResources{
		CpusetCgroup: filepath.Join(share, tk.cfg.GetAllocId()+"."+tk.cfg.GetName()+".scope"),
	}
	h := p.start(t, tk)
	var st struct {
		Cgroup string `json:"cgroup"`
	}
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(share, strings.ReplaceAll(tk.cfg.GetId(), "/", ".")+".scope")
	if st.Cgroup != want {
		t.Fatalf("engine cgroup %q, want %q (in Nomad's partition, one per invocation)", st.Cgroup, want)
	}
	if _, err := p.Driver.StopTask(ctxT(t, 30*time.Second), &driverpb.StopTaskRequest{TaskId: tk.cfg.GetId(), Timeout: durationpb.New(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Driver.DestroyTask(ctxT(t, 30*time.Second), &driverpb.DestroyTaskRequest{TaskId: tk.cfg.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(want); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("engine cgroup after destroy: %v", err)
	}
}

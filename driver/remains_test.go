package driver_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/testing/proctest"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// TestSupervisorSIGKILLLeavesNothing: the engine forks a worker (as vLLM
// does) and, with a cgroup, a second worker that leaves the engine's
// session and process group; then its supervisor is SIGKILLed. The
// engine, every worker and the engine's cgroup must go, and the task
// fails saying so. Without a cgroup the session and process group find
// the worker; with one, the cgroup finds the escaped one too (skipped
// where no cgroup v2 hierarchy is writable).
func TestSupervisorSIGKILLLeavesNothing(t *testing.T) {
	t.Run("no cgroup", func(t *testing.T) { supervisorSIGKILL(t, "") })
	t.Run("cgroup", func(t *testing.T) {
		cgParent, why := proctest.WritableCgroup(t)
		if cgParent == "" {
			t.Skipf("no writable cgroup v2 hierarchy here: %s", why)
		}
		supervisorSIGKILL(t, cgParent)
	})
}

func supervisorSIGKILL(t *testing.T, cgParent string) {
	p := startPlugin(t, strings.Replace(pluginBody, `cgroup_parent     = ""`, fmt.Sprintf("cgroup_parent = %q", cgParent), 1))
	script := "sleep 3600 & echo $! > worker.pid; "
	if cgParent != "" {
		script += "setsid sh -c 'echo $$ > escaped.pid; exec sleep 3600' & "
	}
	script += "wait"
	tk := newTask(t, taskOpts{noGPU: true, body: fmt.Sprintf(`
engine  = "command"
command = "/bin/sh"
args    = ["-c", %q]
port    = "%%PORT%%"
ready { skip = true }
`, script)})
	h := p.start(t, tk)
	var st struct {
		Supervisor procfs.Ref `json:"supervisor"`
		Engine     procfs.Ref `json:"engine"`
		Cgroup     string     `json:"cgroup"`
		StateDir   string     `json:"state_dir"`
	}
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		t.Fatal(err)
	}
	taskDir := filepath.Join(tk.cfg.GetAllocDir(), tk.cfg.GetName())
	procs := map[string]procfs.Ref{"engine": st.Engine, "worker": proctest.PidFileRef(t, filepath.Join(taskDir, "worker.pid"))}
	if cgParent != "" {
		if st.Cgroup == "" || !strings.HasPrefix(st.Cgroup, cgParent+"/") {
			t.Fatalf("engine cgroup %q, want one under %s", st.Cgroup, cgParent)
		}
		procs["escaped worker"] = proctest.PidFileRef(t, filepath.Join(taskDir, "escaped.pid"))
		if s, err := procfs.ReadStat(procs["escaped worker"].Pid); err != nil || s.Session == st.Supervisor.Pid {
			t.Fatalf("escaped worker still in the supervisor's session: %+v %v", s, err)
		}
	}
	for name, r := range procs {
		if !r.Alive() {
			t.Fatalf("%s (pid %d) not running before the supervisor is killed", name, r.Pid)
		}
	}

	if err := syscall.Kill(st.Supervisor.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w, err := p.Driver.WaitTask(ctxT(t, 60*time.Second), &driverpb.WaitTaskRequest{TaskId: tk.cfg.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.GetErr(), "ended without recording the engine's exit") || strings.Contains(w.GetErr(), "killing what the engine left") {
		t.Errorf("WaitTask err %q, want the lost supervisor and no cleanup error", w.GetErr())
	}
	for name, r := range procs {
		wait.Until(t, fmt.Sprintf("%s (pid %d) to end after its supervisor was SIGKILLed", name, r.Pid), func() bool { return !r.Alive() })
	}
	if cgParent != "" {
		wait.For(t, fmt.Sprintf("cgroup %s to go after its supervisor was SIGKILLed", st.Cgroup), func() (bool, string) {
			_, err := os.Stat(st.Cgroup)
			return errors.Is(err, os.ErrNotExist), fmt.Sprint(err)
		})
	}
	if _, err := p.Driver.DestroyTask(ctxT(t, 30*time.Second), &driverpb.DestroyTaskRequest{TaskId: tk.cfg.GetId()}); err != nil {
		t.Fatalf("DestroyTask: %v", err)
	}
	if _, err := os.Stat(st.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir after DestroyTask: %v", err)
	}
}

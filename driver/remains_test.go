package driver_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// writableCgroup returns a fresh cgroup v2 directory this process may
// create cgroups in (to be the driver's cgroup_parent), removed at the
// end of the test, or "" and why there is none.
func writableCgroup(t *testing.T) (string, string) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err.Error()
	}
	own := ""
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if p, ok := strings.CutPrefix(l, "0::"); ok {
				own = p
			}
		}
	}
	var why []string
	for _, l := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(l)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		dir := filepath.Join(f[4], own, fmt.Sprintf("llmgw-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			why = append(why, err.Error())
			continue
		}
		t.Cleanup(func() {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.IsDir() {
					_ = os.Remove(filepath.Join(dir, e.Name()))
				}
			}
			_ = os.Remove(dir)
		})
		return dir, ""
	}
	if len(why) == 0 {
		why = append(why, "no cgroup2 file system mounted")
	}
	return "", strings.Join(why, "; ")
}

// pidFileRef waits for a pid file and returns the Ref of the running
// process it names.
func pidFileRef(t *testing.T, path string) procfs.Ref {
	t.Helper()
	var ref procfs.Ref
	wait.Until(t, "a running process named in "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return false
		}
		ref, err = procfs.RefOf(pid)
		return err == nil
	})
	t.Cleanup(func() {
		if ref.Alive() {
			_ = syscall.Kill(ref.Pid, syscall.SIGKILL)
		}
	})
	return ref
}

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
		cgParent, why := writableCgroup(t)
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
	procs := map[string]procfs.Ref{"engine": st.Engine, "worker": pidFileRef(t, filepath.Join(taskDir, "worker.pid"))}
	if cgParent != "" {
		if st.Cgroup == "" || !strings.HasPrefix(st.Cgroup, cgParent+"/") {
			t.Fatalf("engine cgroup %q, want one under %s", st.Cgroup, cgParent)
		}
		procs["escaped worker"] = pidFileRef(t, filepath.Join(taskDir, "escaped.pid"))
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

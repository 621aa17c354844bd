package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/testing/proctest"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// TestMain lets the test binary serve as the supervisor: Launch starts
// `<test binary> supervise <state dir>`.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Mode {
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// launchScript starts a supervisor (this test binary) for a /bin/sh
// script run in stateDir, with the engine's cgroup under cgroupParent
// when that is set.
func launchScript(t *testing.T, stateDir, script, cgroupParent string) *Launched {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: stateDir, TailLines: 5,
		Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}}
	if cgroupParent != "" {
		spec.CgroupParent, spec.CgroupName = cgroupParent, "engine.scope"
	}
	l, err := Launch(exe, stateDir, spec, 20*time.Second)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(func() {
		// Whatever a failed test left running.
		_ = syscall.Kill(l.Started.Supervisor.Pid, syscall.SIGKILL)
		_, _ = Cleanup(Remains{Supervisor: l.Started.Supervisor, Engine: l.Started.Engine, Cgroup: l.Started.Cgroup}, 5*time.Second)
		<-l.Reaped
	})
	return l
}

// TestEngineDiesWithKilledSupervisor: SIGKILL the supervisor and nothing
// else; the engine's parent-death signal ends it.
func TestEngineDiesWithKilledSupervisor(t *testing.T) {
	dir := t.TempDir()
	l := launchScript(t, dir, "exec sleep 3600", "")
	if !l.Started.Engine.Alive() {
		t.Fatal("engine not running after Launch")
	}
	if err := syscall.Kill(l.Started.Supervisor.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-l.Reaped
	wait.Until(t, fmt.Sprintf("the engine (pid %d) to end after its supervisor was SIGKILLed", l.Started.Engine.Pid),
		func() bool { return !l.Started.Engine.Alive() })
}

// TestOrphansKilledBeforeExitRecord: the engine starts a worker that
// leaves its session and process group (setsid) and exits; with no
// cgroup, only the supervisor's being a child subreaper finds that
// worker. It must be dead by the time the exit record exists.
func TestOrphansKilledBeforeExitRecord(t *testing.T) {
	dir := t.TempDir()
	l := launchScript(t, dir, `setsid sh -c 'echo $$ > worker.pid; exec sleep 3600' &
while [ ! -e go ]; do sleep 0.02; done
exit 3`, "")
	worker := proctest.PidFileRef(t, filepath.Join(dir, "worker.pid"))
	st, err := procfs.ReadStat(worker.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.Session != worker.Pid || st.Pgrp == l.Started.Engine.Pid {
		t.Fatalf("worker did not leave the engine's session and group: %+v", st)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var ex Exit
	wait.Until(t, "the exit record", func() bool {
		var ok bool
		ex, ok, _ = ReadExit(dir)
		return ok
	})
	if ex.ExitCode != 3 {
		t.Errorf("exit code %d, want 3", ex.ExitCode)
	}
	// The record comes after the remains are gone: no waiting here.
	if worker.Alive() {
		t.Errorf("worker (pid %d) that left the session still runs when the exit is recorded", worker.Pid)
	}
}

// TestCleanupSessionGroupAndReuse: Cleanup kills the members of the
// supervisor's session and of the engine's process group, but not of a
// session whose leader's pid now names another process.
func TestCleanupSessionGroupAndReuse(t *testing.T) {
	// A stand-in supervisor: the session leader, with one worker; it
	// waits on its stdin, not on the worker.
	leader := exec.Command("/bin/sh", "-c", "sleep 3600 & echo $!; read x")
	leader.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := leader.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = syscall.Kill(-leader.Process.Pid, syscall.SIGKILL)
		_ = leader.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	wpid, _ := strconv.Atoi(strings.TrimSpace(line))
	worker, err := procfs.RefOf(wpid)
	if err != nil {
		t.Fatal(err)
	}
	sup, err := procfs.RefOf(leader.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	// The recorded start time is not the leader's: its pid was reused.
	killed, err := Cleanup(Remains{Supervisor: procfs.Ref{Pid: sup.Pid, StartTime: sup.StartTime + 1}}, 2*time.Second)
	if err != nil || len(killed) != 0 || !worker.Alive() {
		t.Fatalf("Cleanup for a reused session id: killed %v, %v; worker alive %v (want untouched)", killed, err, worker.Alive())
	}
	killed, err = Cleanup(Remains{Supervisor: sup}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if worker.Alive() || fmt.Sprint(killed) != fmt.Sprint([]int{worker.Pid}) {
		t.Errorf("after Cleanup of the session: killed %v, worker alive %v; want only the worker killed", killed, worker.Alive())
	}
	if !sup.Alive() {
		t.Error("Cleanup killed the session's leader, which stands for the supervisor")
	}

	// A process group in the test's own session.
	grp := exec.Command("/bin/sh", "-c", "sleep 3600 & wait")
	grp.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := grp.Start(); err != nil {
		t.Fatal(err)
	}
	engine, err := procfs.RefOf(grp.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- grp.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-engine.Pid, syscall.SIGKILL)
		if err := <-waited; err == nil {
			t.Log("the engine group's leader exited cleanly after SIGKILL")
		}
	})
	if _, err := Cleanup(Remains{Engine: engine}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	all, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Pgrp == engine.Pid && s.State != 'Z' {
			t.Errorf("pid %d of the process group still runs after Cleanup", s.Pid)
		}
	}
}

// writableCgroup is proctest.WritableCgroup, or skips the test saying why
// there is none.
func writableCgroup(t *testing.T) string {
	t.Helper()
	dir, why := proctest.WritableCgroup(t)
	if dir == "" {
		t.Skipf("cgroup part skipped: no writable cgroup v2 hierarchy here (%s)", why)
	}
	return dir
}

// TestCleanupKillsCgroup: processes in the engine's cgroup and in a
// cgroup below it, in a session and group of their own, are killed by
// Cleanup through cgroup.kill and through the one-by-one fallback of
// kernels before 5.14, and the cgroups are removed.
func TestCleanupKillsCgroup(t *testing.T) {
	parent := writableCgroup(t)
	for _, killFile := range []string{"cgroup.kill", "no-such-file (fallback)"} {
		t.Run(strings.Fields(killFile)[0], func(t *testing.T) {
			old := cgroupKillFile
			cgroupKillFile = killFile
			t.Cleanup(func() { cgroupKillFile = old })
			dir := filepath.Join(parent, "engine.scope")
			sub := filepath.Join(dir, "worker")
			for _, d := range []string{dir, sub} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var refs []procfs.Ref
			for _, d := range []string{dir, sub} {
				fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command("/bin/sleep", "3600")
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: fd}
				err = cmd.Start()
				_ = unix.Close(fd)
				if err != nil {
					t.Fatalf("start into %s: %v", d, err)
				}
				go func() { _ = cmd.Wait() }()
				ref, err := procfs.RefOf(cmd.Process.Pid)
				if err != nil {
					t.Fatal(err)
				}
				refs = append(refs, ref)
				t.Cleanup(func() { _ = cmd.Process.Kill() })
			}
			killed, err := Cleanup(Remains{Cgroup: dir}, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(killed) != 2 {
				t.Errorf("killed %v, want both processes", killed)
			}
			for _, r := range refs {
				if r.Alive() {
					t.Errorf("pid %d in the cgroup still runs after Cleanup", r.Pid)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("cgroup %s still there after Cleanup: %v", dir, err)
			}
		})
	}
}

// TestSupervisorKillsItsCgroup: with a cgroup, a worker that left the
// engine's session is found in the cgroup too; the supervisor removes the
// cgroup after the exit. Skipped where no cgroup v2 hierarchy is writable.
func TestSupervisorKillsItsCgroup(t *testing.T) {
	parent := writableCgroup(t)
	dir := t.TempDir()
	l := launchScript(t, dir, `setsid sh -c 'echo $$ > worker.pid; exec sleep 3600' &
while [ ! -e go ]; do sleep 0.02; done
exit 0`, parent)
	if l.Started.Cgroup == "" {
		t.Fatalf("no cgroup under %s: %s", parent, l.Started.CgroupError)
	}
	worker := proctest.PidFileRef(t, filepath.Join(dir, "worker.pid"))
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the exit record", func() bool { _, ok, _ := ReadExit(dir); return ok })
	if worker.Alive() {
		t.Errorf("worker (pid %d) still runs when the exit is recorded", worker.Pid)
	}
	<-l.Reaped
	if _, err := os.Stat(l.Started.Cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s still there after the supervisor exited: %v", l.Started.Cgroup, err)
	}
}

func TestCheckCgroupDirRefusesOtherFiles(t *testing.T) {
	if err := checkCgroupDir(t.TempDir()); !errors.Is(err, errNotCgroup) {
		t.Errorf("a tmp dir: %v, want errNotCgroup", err)
	}
	if _, err := Cleanup(Remains{Cgroup: t.TempDir()}, time.Second); !errors.Is(err, errNotCgroup) {
		t.Errorf("Cleanup of a tmp dir as cgroup: %v, want errNotCgroup", err)
	}
}

// TestLaunchCleansUpAfterSupervisorDied: a supervisor that dies before
// reporting the engine's start leaves nothing running in its session.
// The stand-in supervisor is a script that starts a worker and exits
// without a word on the handshake descriptor.
func TestLaunchCleansUpAfterSupervisorDied(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(t.TempDir(), "dying-supervisor")
	script := "#!/bin/sh\nsleep 3600 3>&- &\necho $! > worker.pid.tmp && mv worker.pid.tmp worker.pid\nexit 1\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Launch(exe, dir, Spec{Path: "/bin/true"}, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited before reporting") {
		t.Fatalf("Launch: %v, want the supervisor's early exit", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "worker.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Launch returns after the clean-up: the worker is gone already.
	if st, err := procfs.ReadStat(pid); err == nil && st.State != 'Z' && st.Comm == "sleep" {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("worker (pid %d) of the supervisor that died still runs after Launch returned", pid)
	}
}

// TestEngineDoesNotInheritHandshake: the engine does not hold the
// handshake pipe (a supervisor dying before its report would otherwise
// leave Launch waiting for the engine to close it).
func TestEngineDoesNotInheritHandshake(t *testing.T) {
	dir := t.TempDir()
	launchScript(t, dir, "if [ -e /proc/$$/fd/3 ]; then readlink /proc/$$/fd/3 >&2; exit 9; fi; exit 0", "")
	var ex Exit
	wait.Until(t, "the exit record", func() bool {
		var ok bool
		ex, ok, _ = ReadExit(dir)
		return ok
	})
	if ex.ExitCode != 0 {
		t.Errorf("engine has descriptor 3 open (exit %d): %v", ex.ExitCode, ex.Tail)
	}
}

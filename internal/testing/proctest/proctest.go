// Package proctest holds what the driver's and the supervisor's tests both
// need to watch processes and cgroups: a process named by a pid file, and
// a fresh cgroup v2 directory to be the engines' cgroup parent.
package proctest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// PidFileRef waits for a pid file (a number and a newline, as the test
// engines write it) and returns the Ref of the running process it names.
// The process is killed at the end of the test if the same one still runs.
func PidFileRef(t *testing.T, path string) procfs.Ref {
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
	t.Cleanup(func() { Kill(ref) })
	return ref
}

// Kill ends what a failed test left running, if ref still names it.
func Kill(ref procfs.Ref) {
	if ref.Alive() {
		_ = syscall.Kill(ref.Pid, syscall.SIGKILL)
	}
}

// WritableCgroup returns a fresh cgroup v2 directory this process may
// create cgroups in and move processes into, removed with every cgroup
// below it at the end of the test; or "" and why there is none.
func WritableCgroup(t *testing.T) (dir, why string) {
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
	var whys []string
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
			whys = append(whys, err.Error())
			continue
		}
		t.Cleanup(func() {
			if err := removeTree(dir); err != nil {
				t.Logf("leaving cgroup %s: %v", dir, err)
			}
		})
		return dir, ""
	}
	if len(whys) == 0 {
		whys = append(whys, "no cgroup2 file system mounted")
	}
	return "", strings.Join(whys, "; ")
}

// removeTree removes a cgroup and every cgroup below it, deepest first,
// trying again for a few seconds while the kernel still counts a process
// that was just killed in one.
func removeTree(dir string) error {
	var err error
	for range 50 {
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, werr error) error {
			if werr == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		err = nil
		for i := len(dirs) - 1; i >= 0; i-- {
			if e := os.Remove(dirs[i]); e != nil && !errors.Is(e, os.ErrNotExist) {
				err = e
			}
		}
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

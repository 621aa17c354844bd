package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/driver/procfs"
)

// Remains names where an engine's processes can be after the engine (or
// its supervisor) is gone. Workers an engine spawns (vLLM's, SGLang's,
// TGI's shards) hold GPU memory until they die, so every one of them has
// to be found:
//
//   - the supervisor's session: the supervisor calls setsid, so every
//     process of the engine's that did not call setsid itself is in the
//     session whose id is the supervisor's pid;
//   - the engine's process group (the engine's pid), the same set unless
//     a worker left the group but not the session;
//   - the engine's cgroup, which no process can leave unless moved by
//     root, and which cgroup.kill empties in one write.
//
// A session or group id is the pid of the process that created it, and
// Linux does not hand that pid to a new process while any member of the
// session or group lives. So a session or group counts as the engine's
// only while its pid either names no process or still names the process
// recorded (same start time, a zombie included); a pid that now names
// another process was reused, and then nothing of the engine's can be in
// a session or group of that id.
type Remains struct {
	Supervisor procfs.Ref
	Engine     procfs.Ref
	// Cgroup is the engine's cgroup directory; empty when it has none.
	Cgroup string

	// descendants: the caller is the supervisor, a child subreaper, so
	// every orphan of the engine's was reparented to it; also kill its
	// descendants and reap its children.
	descendants bool
}

// RemainsTimeout is how long Cleanup and the supervisor wait for what
// SIGKILL hit to exit: a process that holds GPU memory can take seconds
// to die while the GPU driver frees it.
const RemainsTimeout = 20 * time.Second

// Cleanup SIGKILLs every process left of an engine (see Remains), waits
// until they are gone (zombies count as gone), and removes the engine's
// cgroup directory. It returns the pids it signalled; an error says what
// it could not do within timeout.
func Cleanup(r Remains, timeout time.Duration) ([]int, error) {
	deadline := time.Now().Add(timeout)
	killed, err := killRemains(r, deadline)
	if r.Cgroup != "" && !errors.Is(err, errNotCgroup) {
		if rerr := removeCgroupTree(r.Cgroup, deadline); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return killed, err
}

// errNotCgroup: a cgroup path that is not a directory of a cgroup v2
// hierarchy; nothing is written there.
var errNotCgroup = errors.New("not a cgroup v2 directory")

// cgroupKillFile is the cgroup v2 file (Linux 5.14+) whose write SIGKILLs
// every process of a cgroup and its descendants; a variable so that tests
// can take the fallback for older kernels.
var cgroupKillFile = "cgroup.kill"

// remainsPoll is how often killRemains looks again.
const remainsPoll = 20 * time.Millisecond

// killRemains SIGKILLs what is left of the engine until nothing is, or
// until deadline.
func killRemains(r Remains, deadline time.Time) ([]int, error) {
	var cgErr error
	cg := r.Cgroup
	if cg != "" {
		if err := checkCgroupDir(cg); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				cgErr = err
			}
			cg = "" // gone already, or not something to write to
		}
	}
	self := os.Getpid()
	killed := map[int]bool{}
	for {
		if r.descendants {
			reapChildren(0)
		}
		var cgPids []int
		if cg != "" {
			cgPids = cgroupPids(cg)
			if len(cgPids) > 0 {
				killCgroup(cg, cgPids, killed)
			}
		}
		left, err := remainingProcs(r, self)
		if err != nil {
			return sortedKeys(killed), errors.Join(cgErr, err)
		}
		for _, s := range left {
			if killVerified(s) {
				killed[s.Pid] = true
			}
		}
		if len(left) == 0 && len(cgPids) == 0 {
			return sortedKeys(killed), cgErr
		}
		if time.Now().After(deadline) {
			var pids []int
			for _, s := range left {
				pids = append(pids, s.Pid)
			}
			pids = append(pids, cgPids...)
			slices.Sort(pids)
			return sortedKeys(killed), errors.Join(cgErr, fmt.Errorf("processes of the engine still running after SIGKILL: %v", slices.Compact(pids)))
		}
		time.Sleep(remainsPoll)
	}
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// ownedID returns ref's pid when a session or process group of that id
// can only be ref's (see Remains), and 0 when it cannot be.
func ownedID(ref procfs.Ref) int {
	if ref.Pid <= 1 {
		return 0
	}
	st, err := procfs.ReadStat(ref.Pid)
	switch {
	case errors.Is(err, procfs.ErrNoProcess):
		return ref.Pid
	case err != nil:
		return 0
	case st.StartTime == ref.StartTime:
		return ref.Pid
	default:
		return 0 // reused
	}
}

// remainingProcs lists the live processes of the engine's session, its
// process group and, for the supervisor, its descendants; never the
// caller or the supervisor itself.
func remainingProcs(r Remains, self int) ([]procfs.Stat, error) {
	sid, pgid := ownedID(r.Supervisor), ownedID(r.Engine)
	if sid == 0 && pgid == 0 && !r.descendants {
		return nil, nil
	}
	all, err := procfs.All()
	if err != nil {
		return nil, err
	}
	desc := map[int]bool{}
	if r.descendants {
		for _, s := range procfs.Tree(all, self, 0) {
			desc[s.Pid] = true
		}
	}
	var out []procfs.Stat
	for _, s := range all {
		if s.Pid == self || s.Pid == r.Supervisor.Pid || s.Pid <= 1 || s.State == 'Z' || s.State == 'X' {
			continue
		}
		if (sid != 0 && s.Session == sid) || (pgid != 0 && s.Pgrp == pgid) || desc[s.Pid] {
			out = append(out, s)
		}
	}
	return out, nil
}

// killVerified SIGKILLs the process s describes if the pid still names
// it: the pid is pinned with a pidfd first, then its start time checked,
// so that a pid reused in between is never signalled.
func killVerified(s procfs.Stat) bool {
	fd, err := unix.PidfdOpen(s.Pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.3: check, then kill by pid.
		if st, err := procfs.ReadStat(s.Pid); err == nil && st.StartTime == s.StartTime {
			return unix.Kill(s.Pid, unix.SIGKILL) == nil
		}
		return false
	}
	if err != nil {
		return false // gone
	}
	defer unix.Close(fd) //nolint:errcheck // a pidfd
	st, err := procfs.ReadStat(s.Pid)
	if err != nil || st.StartTime != s.StartTime {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}

// checkCgroupDir makes sure dir is a cgroup v2 directory other than a
// hierarchy's root: a file named cgroup.kill elsewhere is not one.
func checkCgroupDir(dir string) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("cgroup %s: %w", dir, os.ErrNotExist)
		}
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s: %w", dir, errNotCgroup)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.type")); err != nil {
		// Only the root of a hierarchy lacks cgroup.type.
		return fmt.Errorf("%s (a hierarchy's root?): %w", dir, errNotCgroup)
	}
	return nil
}

// cgroupPids lists the processes of dir and of the cgroups below it.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil //nolint:nilerr // a cgroup removed while walking
		}
		pids = append(pids, readPids(filepath.Join(path, "cgroup.procs"))...)
		return nil
	})
	return pids
}

func readPids(path string) []int {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close() //nolint:errcheck // read only
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids
}

// killCgroup SIGKILLs every process of dir and the cgroups below it:
// with cgroup.kill where the kernel has it, else one by one, each pid
// pinned with a pidfd and found in the cgroup again after that (so it is
// the process that was listed or a later one forked inside the cgroup).
func killCgroup(dir string, pids []int, killed map[int]bool) {
	if err := os.WriteFile(filepath.Join(dir, cgroupKillFile), []byte("1"), 0o644); err == nil {
		for _, p := range pids {
			killed[p] = true
		}
		return
	}
	for _, p := range pids {
		fd, err := unix.PidfdOpen(p, 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) && unix.Kill(p, unix.SIGKILL) == nil {
				killed[p] = true
			}
			continue
		}
		if slices.Contains(cgroupPids(dir), p) && unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
			killed[p] = true
		}
		_ = unix.Close(fd)
	}
}

// removeCgroupTree removes dir and the cgroups below it (deepest first),
// retrying until deadline while they still hold exiting processes.
func removeCgroupTree(dir string, deadline time.Time) error {
	if err := checkCgroupDir(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for {
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		var err error
		for i := len(dirs) - 1; i >= 0; i-- {
			if e := os.Remove(dirs[i]); e != nil && !errors.Is(e, os.ErrNotExist) {
				err = e
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(remainsPoll)
	}
}

// reapChildren reaps the supervisor's exited children other than keep
// (the engine, which its exec.Cmd waits for): orphans of the engine's
// that were reparented to the supervisor (a child subreaper) and died.
func reapChildren(keep int) {
	self := os.Getpid()
	all, err := procfs.All()
	if err != nil {
		return
	}
	for _, s := range all {
		if s.PPid == self && s.Pid != keep && s.State == 'Z' {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(s.Pid, &ws, unix.WNOHANG, nil)
		}
	}
}

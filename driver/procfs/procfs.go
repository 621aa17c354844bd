// Package procfs is what the driver knows about processes, read from
// Linux's /proc with github.com/prometheus/procfs: identity (pid plus start
// time, which survives PID reuse checks), liveness, process groups and
// trees, and CPU and memory use. The library parses the files; this package
// keeps what it has no counterpart for: Ref and its liveness check, the
// process tree walk, and the mapping of a vanished process (no pid
// directory, or ESRCH while it is reaped) to ErrNoProcess.
package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"time"

	prom "github.com/prometheus/procfs"
)

// TicksPerSecond is USER_HZ, the unit of the CPU times in /proc/<pid>/stat;
// Linux fixes it at 100 on every architecture for this interface.
const TicksPerSecond = 100

// ErrNoProcess is returned when a pid names no process.
var ErrNoProcess = errors.New("no such process")

// Stat is the part of /proc/<pid>/stat the driver uses.
type Stat struct {
	Pid     int
	Comm    string
	State   byte // R, S, D, Z, T, …
	PPid    int
	Pgrp    int
	Session int
	// UTime and STime are CPU time in user and kernel mode, in ticks.
	UTime, STime uint64
	// StartTime is when the process started, in ticks after boot: with the
	// pid it identifies a process for its whole life.
	StartTime uint64
	// RSSPages is the resident set size in pages.
	RSSPages int64
}

// FS is one proc file system.
type FS struct {
	fs   prom.FS
	root string
}

// NewFS opens the proc file system mounted at root.
func NewFS(root string) (FS, error) {
	f, err := prom.NewFS(root)
	if err != nil {
		return FS{}, fmt.Errorf("proc file system at %s: %w", root, err)
	}
	return FS{fs: f, root: root}, nil
}

// system is /proc, opened once.
var system = sync.OnceValues(func() (FS, error) { return NewFS(prom.DefaultMountPoint) })

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	f, err := system()
	if err != nil {
		return Stat{}, err
	}
	return f.ReadStat(pid)
}

// All reads the stat of every process in /proc; see FS.All.
func All() ([]Stat, error) {
	f, err := system()
	if err != nil {
		return nil, err
	}
	return f.All()
}

// BootTime is when the system booted (btime in /proc/stat): process start
// times count from it.
func BootTime() (time.Time, error) {
	f, err := system()
	if err != nil {
		return time.Time{}, err
	}
	st, err := f.fs.Stat()
	if err != nil {
		return time.Time{}, fmt.Errorf("read boot time from %s/stat: %w", f.root, err)
	}
	return time.Unix(int64(st.BootTime), 0), nil
}

// ReadStat reads <root>/<pid>/stat. A pid that names no process, or one
// that is being reaped, is ErrNoProcess.
func (f FS) ReadStat(pid int) (Stat, error) {
	p, err := f.fs.Proc(pid)
	var ps prom.ProcStat
	if err == nil {
		ps, err = p.Stat()
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Stat{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return Stat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	if len(ps.State) != 1 {
		return Stat{}, fmt.Errorf("stat of pid %d: state %q", pid, ps.State)
	}
	return Stat{
		Pid: ps.PID, Comm: ps.Comm, State: ps.State[0],
		PPid: ps.PPID, Pgrp: ps.PGRP, Session: ps.Session,
		UTime: uint64(ps.UTime), STime: uint64(ps.STime),
		StartTime: ps.Starttime, RSSPages: int64(ps.RSS),
	}, nil
}

// All reads the stat of every process. Processes that end while it reads
// are skipped.
func (f FS) All() ([]Stat, error) {
	procs, err := f.fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", f.root, err)
	}
	out := make([]Stat, 0, len(procs))
	for _, p := range procs {
		st, err := f.ReadStat(p.PID)
		if err != nil {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

// StartTime returns the start time of pid (field 22 of its stat file).
func StartTime(pid int) (uint64, error) {
	st, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return st.StartTime, nil
}

// Ref names one process for its whole life: pid plus start time.
type Ref struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// RefOf returns the Ref of a running pid.
func RefOf(pid int) (Ref, error) {
	t, err := StartTime(pid)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Pid: pid, StartTime: t}, nil
}

// Alive reports whether the process r names still runs: the pid exists,
// has the same start time (it was not reused), and is not a zombie.
func (r Ref) Alive() bool {
	if r.Pid <= 0 {
		return false
	}
	st, err := ReadStat(r.Pid)
	if err != nil {
		return false
	}
	return st.StartTime == r.StartTime && st.State != 'Z' && st.State != 'X'
}

// Tree returns the processes of a task: root, every descendant of root,
// and every member of the process group pgid (0: none), which catches
// workers whose parent already exited.
func Tree(all []Stat, root, pgid int) []Stat {
	children := map[int][]int{}
	byPid := map[int]Stat{}
	for _, s := range all {
		children[s.PPid] = append(children[s.PPid], s.Pid)
		byPid[s.Pid] = s
	}
	seen := map[int]bool{}
	var out []Stat
	var walk func(pid int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		s, ok := byPid[pid]
		if !ok {
			return
		}
		seen[pid] = true
		out = append(out, s)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	walk(root)
	if pgid > 0 {
		for _, s := range all {
			if s.Pgrp == pgid {
				walk(s.Pid)
			}
		}
	}
	return out
}

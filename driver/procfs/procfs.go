// Package procfs reads what the driver needs about processes from Linux's
// /proc: identity (pid plus start time, which survives PID reuse checks),
// liveness, process groups and trees, and CPU and memory use.
package procfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// Root is the proc file system's mount point; tests may point it elsewhere.
var Root = "/proc"

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(filepath.Join(Root, strconv.Itoa(pid), "stat"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
			return Stat{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return Stat{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	return ParseStat(string(b))
}

// ParseStat parses the contents of a /proc/<pid>/stat file. The command
// name may hold spaces and parentheses, so fields are counted from the last
// closing parenthesis.
func ParseStat(s string) (Stat, error) {
	open := strings.IndexByte(s, '(')
	closing := strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("parse stat: no command name in %q", truncate(s))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat: pid: %w", err)
	}
	// Fields after the command: 3 state, 4 ppid, 5 pgrp, 6 session, …,
	// 14 utime, 15 stime, …, 22 starttime, 23 vsize, 24 rss.
	f := strings.Fields(s[closing+1:])
	if len(f) < 22 {
		return Stat{}, fmt.Errorf("parse stat: %d fields after the command name, want at least 22", len(f))
	}
	field := func(n int) string { return f[n-3] }
	st := Stat{Pid: pid, Comm: s[open+1 : closing]}
	if len(field(3)) != 1 {
		return Stat{}, fmt.Errorf("parse stat: state %q", field(3))
	}
	st.State = field(3)[0]
	ints := []struct {
		n   int
		dst *int
	}{{4, &st.PPid}, {5, &st.Pgrp}, {6, &st.Session}}
	for _, x := range ints {
		v, err := strconv.Atoi(field(x.n))
		if err != nil {
			return Stat{}, fmt.Errorf("parse stat: field %d: %w", x.n, err)
		}
		*x.dst = v
	}
	uints := []struct {
		n   int
		dst *uint64
	}{{14, &st.UTime}, {15, &st.STime}, {22, &st.StartTime}}
	for _, x := range uints {
		v, err := strconv.ParseUint(field(x.n), 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("parse stat: field %d: %w", x.n, err)
		}
		*x.dst = v
	}
	rss, err := strconv.ParseInt(field(24), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat: field 24: %w", err)
	}
	st.RSSPages = rss
	return st, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
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

// All reads the stat of every process. Processes that end while it reads
// are skipped.
func All() ([]Stat, error) {
	entries, err := os.ReadDir(Root)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", Root, err)
	}
	out := make([]Stat, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := ReadStat(pid)
		if err != nil {
			continue
		}
		out = append(out, st)
	}
	return out, nil
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

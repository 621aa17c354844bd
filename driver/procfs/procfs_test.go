package procfs_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/llmgw/llmgw/driver/procfs"
)

// fakeProc is a proc root holding one stat file per pid.
func fakeProc(t *testing.T, stats map[int]string) procfs.FS {
	t.Helper()
	root := t.TempDir()
	for pid, stat := range stats {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestReadStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process may choose.
	line := "4242 (my (weird) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 987654 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	bad := []string{"", "12 (x", "12 (x) S 1 2", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22"}
	stats := map[int]string{4242: line}
	for i, b := range bad {
		stats[100+i] = b + "\n"
	}
	fs := fakeProc(t, stats)
	st, err := fs.ReadStat(4242)
	if err != nil {
		t.Fatal(err)
	}
	want := procfs.Stat{Pid: 4242, Comm: "my (weird) cmd", State: 'S', PPid: 1, Pgrp: 4242, Session: 4242,
		UTime: 250, STime: 75, StartTime: 987654, RSSPages: 2048}
	if st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
	for i, b := range bad {
		if _, err := fs.ReadStat(100 + i); err == nil || errors.Is(err, procfs.ErrNoProcess) {
			t.Errorf("stat %q: %v, want a parse error", b, err)
		}
	}
	if _, err := fs.ReadStat(7); !errors.Is(err, procfs.ErrNoProcess) {
		t.Errorf("absent pid: %v, want ErrNoProcess", err)
	}
	all, err := fs.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0] != want {
		t.Errorf("All skips the unreadable: got %+v, want only %+v", all, want)
	}
}

func TestBootTime(t *testing.T) {
	boot, err := procfs.BootTime()
	if err != nil {
		t.Fatal(err)
	}
	if boot.IsZero() || boot.After(time.Now()) {
		t.Errorf("boot time %v", boot)
	}
}

func TestSelfAndChildren(t *testing.T) {
	self, err := procfs.RefOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !self.Alive() {
		t.Fatal("own process not alive")
	}
	if (procfs.Ref{Pid: self.Pid, StartTime: self.StartTime + 1}).Alive() {
		t.Error("a different start time must not count as the same process")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child, err := procfs.RefOf(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	all, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range procfs.Tree(all, os.Getpid(), 0) {
		if s.Pid == child.Pid {
			found = true
		}
	}
	if !found {
		t.Error("child not in own process tree")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if child.Alive() {
		t.Error("reaped child still alive")
	}
	if _, err := procfs.ReadStat(child.Pid); !errors.Is(err, procfs.ErrNoProcess) {
		t.Errorf("got %v, want ErrNoProcess", err)
	}
}

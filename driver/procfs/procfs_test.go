package procfs_test

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/llmgw/llmgw/driver/procfs"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process may choose.
	line := "4242 (my (weird) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 987654 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	st, err := procfs.ParseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := procfs.Stat{Pid: 4242, Comm: "my (weird) cmd", State: 'S', PPid: 1, Pgrp: 4242, Session: 4242,
		UTime: 250, STime: 75, StartTime: 987654, RSSPages: 2048}
	if st != want {
		t.Errorf("got %+v, want %+v", st, want)
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1 2", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22"} {
		if _, err := procfs.ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
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

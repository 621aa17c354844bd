package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

func cpuSet(cpus []int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// startOn starts cmd on cpus (any CPU when empty): the child inherits the
// affinity of the thread that forks it, and Go sizes GOMAXPROCS by it.
func startOn(cmd *exec.Cmd, cpus []int) error {
	// A server left behind by a killed gwload would hold its port.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	if err := unix.SchedSetaffinity(0, cpuSet(cpus)); err != nil {
		return fmt.Errorf("pinning to CPUs %v: %w", cpus, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// pinProcess moves every thread of this process onto cpus; threads made
// later inherit it.
func pinProcess(cpus []int) error {
	tasks, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(filepath.Base(t))
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, cpuSet(cpus)); err != nil {
			return fmt.Errorf("pinning thread %d to CPUs %v: %w", tid, cpus, err)
		}
	}
	runtime.GOMAXPROCS(len(cpus))
	return nil
}

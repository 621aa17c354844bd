//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

func startOn(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) > 0 {
		return errors.New("-pin works on Linux only")
	}
	return cmd.Start()
}

func pinProcess([]int) error { return errors.New("-pin works on Linux only") }

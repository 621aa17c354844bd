package localnomad

import (
	"os/exec"
	"runtime"
)

// Agents are started with Pdeathsig (they die with the process that
// started them), and Linux sends it when the *thread* that forked the agent
// ends, not the process. A Go thread can end under a running program (the
// runtime ends a thread whose goroutine exits while locked to it), so every
// agent is forked from one thread that never ends. (A client agent started
// again in the middle of TestChaos was found killed minutes later with its
// plugins, nothing in its log; this removes one way that can happen.)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var spawns = make(chan spawnReq)

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for r := range spawns {
			r.done <- r.cmd.Start()
		}
	}()
}

// startPinned starts cmd from the spawning thread.
func startPinned(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawns <- spawnReq{cmd: cmd, done: done}
	return <-done
}

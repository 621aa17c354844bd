// Command llmgw-supervisor is the per-task supervisor of nomad-driver-llmgw:
// the driver starts one per task, in its own session, to own the engine,
// copy its output into Nomad's log FIFOs and record its exit. It is a
// separate, small binary so that each task costs little memory; install it
// beside nomad-driver-llmgw in the client's plugin_dir. When it is absent
// the driver re-executes itself in supervisor mode instead.
//
// It takes the driver's supervisor command line: `llmgw-supervisor
// supervise <state dir>`.
package main

import (
	"fmt"
	"os"

	"github.com/llmgw/llmgw/driver/supervisor"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != supervisor.Mode {
		fmt.Fprintf(os.Stderr, "usage: %s %s <state dir>\n(started by nomad-driver-llmgw, one per task)\n", os.Args[0], supervisor.Mode)
		os.Exit(2)
	}
	os.Exit(supervisor.Main(os.Args[2:]))
}

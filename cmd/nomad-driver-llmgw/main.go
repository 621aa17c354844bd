// Command nomad-driver-llmgw is a Nomad task driver for LLM inference
// engines (driver = "llmgw"). Put it in the Nomad client's plugin_dir and
// reference it with plugin "nomad-driver-llmgw" { config { ... } }; see
// docs/driver.md.
//
// Each task runs under a supervisor: llmgw-supervisor, a small binary
// installed beside this one, or, when it is absent, this binary re-executed
// as `nomad-driver-llmgw supervise <state dir>`, which is recognised here
// before go-plugin's Serve (which refuses to run without Nomad's magic
// cookie).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/llmgw/llmgw/driver"
	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/internal/version"
	"github.com/llmgw/llmgw/nomadplugin"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case supervisor.Mode:
			os.Exit(supervisor.Main(os.Args[2:]))
		case driver.FetchMode:
			os.Exit(driver.FetchMain(os.Args[2:]))
		case "--version", "version":
			fmt.Println("nomad-driver-llmgw", version.Version)
			return
		}
	}
	log := nomadplugin.NewLogger("nomad-driver-llmgw")
	exe, err := os.Executable()
	if err != nil {
		log.Error("cannot find own executable (needed to start task supervisors)", "error", err)
		os.Exit(1)
	}
	// The lean supervisor beside this binary, when installed.
	if lean, err := driver.LeanSupervisor(exe); err == nil {
		exe = lean
	} else {
		log.Info("llmgw-supervisor not installed beside the driver; tasks are supervised by the driver binary itself", "reason", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := driver.New(ctx, log, version.Version, exe)
	defer p.Close()
	nomadplugin.ServeDriver(p, p, log)
}

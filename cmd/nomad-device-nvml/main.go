// Command nomad-device-nvml is a Nomad device plugin for NVIDIA GPUs over
// NVML. Put it in the Nomad client's plugin_dir and reference it with
// plugin "nomad-device-nvml" { config { ... } }; see docs/device-plugin.md.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/llmgw/llmgw/devices"
	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/internal/version"
	"github.com/llmgw/llmgw/nomadplugin"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "--version" || os.Args[1] == "version") {
		fmt.Println("nomad-device-nvml", version.Version)
		return
	}
	log := nomadplugin.NewLogger("nomad-device-nvml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := devices.NewPlugin(ctx, log, version.Version, nvmlseam.Open)
	nomadplugin.ServeDevice(p, p, log)
}

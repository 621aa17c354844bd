// Command demo is what `make demo` runs: a local Nomad (one server and
// three clients on loopback, each in its own rack and PDU, eight mock H200s
// each through nomad-device-nvml) with a job that takes two GPUs, then waits
// for Ctrl-C and tears everything down. Without a Nomad binary it says what
// is missing and runs the offline planner on the example facility instead.
//
// It lives under internal/ rather than cmd/ because it is a development
// tool, not a shipped binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/localnomad"
)

func main() {
	binDir := flag.String("bin", "bin", "directory holding the built llmgw binaries")
	once := flag.Bool("once", false, "tear down as soon as the demo job has run (for tests)")
	keep := flag.Bool("keep", false, "keep the agents' data and logs after tear-down")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *binDir, *once, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func findNomad() string {
	if b := os.Getenv("NOMAD_BIN"); b != "" {
		return b
	}
	if p, err := exec.LookPath("nomad"); err == nil {
		return p
	}
	return ""
}

func run(ctx context.Context, binDir string, once, keep bool) error {
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	nomad := findNomad()
	if nomad == "" {
		return planInstead(ctx, binDir)
	}
	plugin := filepath.Join(binDir, "nomad-device-nvml")
	if _, err := os.Stat(plugin); err != nil {
		return fmt.Errorf("%s is missing: run make build first", plugin)
	}
	fmt.Printf("Starting a local Nomad from %s: one server, three clients with 8 mock NVIDIA H200 each.\n", nomad)
	c, err := localnomad.New(nomad, "")
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nTearing down (jobs, then agents)...")
		if err := c.Shutdown(keep); err != nil {
			fmt.Fprintln(os.Stderr, "demo: tear-down:", err)
		}
		if keep {
			fmt.Println("Agent data and logs kept in", c.Root)
		}
	}()
	pluginDir := filepath.Join(c.Root, "plugins")
	if err := localnomad.PluginDir(pluginDir, plugin); err != nil {
		return err
	}
	for i, loc := range []struct{ row, rack, pdu string }{
		{"r01", "r01-k01", "p01-k01-a"},
		{"r01", "r01-k02", "p01-k02-a"},
		{"r02", "r02-k01", "p02-k01-a"},
	} {
		name := fmt.Sprintf("gpu-%d", i+1)
		_, err := c.AddClient(localnomad.ClientOptions{
			Name:      name,
			PluginDir: pluginDir,
			Meta: map[string]string{
				"llmgw.site": "demo", "llmgw.room": "a",
				"llmgw.row": loc.row, "llmgw.rack": loc.rack, "llmgw.pdu": loc.pdu,
			},
			Plugins: map[string]string{"nomad-device-nvml": fmt.Sprintf(`
    mock {
      system = "dgxh200"
      seed   = %q
    }`, name)},
		})
		if err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		return fmt.Errorf("waiting for the clients: %w", err)
	}
	if err := showNodes(wctx, c); err != nil {
		return err
	}
	if err := runGPUJob(wctx, c); err != nil {
		return err
	}
	fmt.Printf("\nNomad API: %s   (export NOMAD_ADDR=%s; nomad node status -verbose)\n", c.Server.Addr(), c.Server.Addr())
	fmt.Printf("Agent logs: %s/*/agent.log\n", c.Root)
	if once {
		return nil
	}
	fmt.Println("Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

// showNodes waits for every node's GPUs and prints them with their power.
func showNodes(ctx context.Context, c *localnomad.Cluster) error {
	var lines []string
	err := localnomad.Poll(ctx, func() (bool, string, error) {
		lines = lines[:0]
		nodes, _, err := c.API.Nodes().List(nil)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, n := range nodes {
			full, _, err := c.API.Nodes().Info(n.ID, nil)
			if err != nil {
				return false, err.Error(), nil
			}
			gpus, healthy, limit := 0, 0, int64(0)
			if full.NodeResources != nil {
				for _, d := range full.NodeResources.Devices {
					if d.Vendor != "nvidia" {
						continue
					}
					for _, in := range d.Instances {
						gpus++
						if in.Healthy {
							healthy++
						}
					}
					if a := d.Attributes["power_limit"]; a != nil && a.IntVal != nil {
						limit = *a.IntVal
					}
				}
			}
			if gpus == 0 {
				return false, "waiting for " + n.Name + "'s GPUs", nil
			}
			lines = append(lines, fmt.Sprintf("  %-6s rack=%-8s pdu=%-10s %d/%d healthy NVIDIA H200, power_limit %d W each",
				n.Name, full.Meta["llmgw.rack"], full.Meta["llmgw.pdu"], healthy, gpus, limit))
		}
		return len(lines) == 3, fmt.Sprintf("%d of 3 nodes with GPUs", len(lines)), nil
	})
	if err != nil {
		return err
	}
	sort.Strings(lines)
	fmt.Println("\nNodes as Nomad sees them:")
	fmt.Println(strings.Join(lines, "\n"))
	return nil
}

// runGPUJob runs jobs/gpu-env.nomad.hcl's equivalent and prints what the
// task was given.
func runGPUJob(ctx context.Context, c *localnomad.Cluster) error {
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	count := uint64(2)
	job := &api.Job{
		ID: str("gpu-env"), Name: str("gpu-env"), Type: str("batch"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name:             str("g"),
			RestartPolicy:    &api.RestartPolicy{Attempts: num(0), Mode: str("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: num(0), Unlimited: new(bool)},
			Tasks: []*api.Task{{
				Name: "show", Driver: "raw_exec",
				Config: map[string]any{"command": "/bin/sh", "args": []string{"-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"}},
				Resources: &api.Resources{CPU: num(100), MemoryMB: num(64),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: &count}}},
			}},
		}},
	}
	fmt.Println("\nRunning job gpu-env (raw_exec, device \"nvidia/gpu\" { count = 2 })...")
	if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
		return fmt.Errorf("register gpu-env: %w", err)
	}
	var allocID string
	err := localnomad.Poll(ctx, func() (bool, string, error) {
		allocs, _, err := c.API.Jobs().Allocations("gpu-env", true, nil)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, a := range allocs {
			switch a.ClientStatus {
			case api.AllocClientStatusComplete:
				allocID = a.ID
				return true, "", nil
			case api.AllocClientStatusFailed:
				return false, "", errors.New("gpu-env failed; see the client logs")
			}
		}
		return false, "gpu-env not complete yet", nil
	})
	if err != nil {
		return err
	}
	alloc, _, err := c.API.Allocations().Info(allocID, nil)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := c.Logs(lctx, alloc, "show", "stdout")
	if err != nil {
		return err
	}
	fmt.Printf("  allocation %s on %s printed: %s\n", alloc.ID[:8], alloc.NodeName, strings.TrimSpace(out))
	return nil
}

// planInstead runs the offline planner on the example facility.
func planInstead(ctx context.Context, binDir string) error {
	fmt.Println("make demo: no Nomad agent binary found. Set NOMAD_BIN to one, or put `nomad` on PATH,")
	fmt.Println("to run llmgw's plugins in a local Nomad. Meanwhile, the offline planner on the example")
	fmt.Println("facility (jobs/examples: 256 nodes, PDU and rack budgets, one hold):")
	fmt.Println()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "llmgw"), "plan",
		"--fleet", "jobs/examples/fleet.hcl", "--facility", "jobs/examples/facility.hcl", "--catalog", "jobs/examples/catalog.hcl")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

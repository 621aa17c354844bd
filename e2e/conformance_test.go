package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/nomadfake/conformance"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// TestNomadFakeConformance runs internal/testing/nomadfake/conformance's
// cases, which nomadfake's own test runs against the fake, against a real
// Nomad: one server and two clients, each with 4 mock H200s (the NVML
// device plugin, faults through its events file), raw_exec running
// fake-engine as the task that serves /health.
func TestNomadFakeConformance(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	dir := t.TempDir()
	events := map[string]string{}
	var clients []nomadtest.ClientOptions
	for i := range 2 {
		name := fmt.Sprintf("gpu-%d", i+1)
		events[name] = filepath.Join(dir, name+"-nvml-events")
		if err := os.WriteFile(events[name], nil, 0o644); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, nomadtest.ClientOptions{
			Name:      name,
			PluginDir: plugins,
			Meta:      map[string]string{conformance.StaticMetaKey: conformance.StaticMetaValue},
			Plugins: map[string]string{"nomad-device-nvml": fmt.Sprintf(`
    mock {
      system      = "dgxh200"
      gpus        = 4
      seed        = %q
      power_watts = 200
      events_file = %q
    }`, name, events[name])},
		})
	}
	c := nomadtest.Start(t, clients...)
	tg := &conformance.Target{
		Client:  c.API,
		Nodes:   [2]string{"gpu-1", "gpu-2"},
		GPUName: "NVIDIA H200",
		GPUs:    4,
		Task: func() *api.Task {
			task := api.NewTask("engine", "raw_exec")
			task.Config = map[string]any{
				"command": engine,
				"args":    []string{"serve", "m", "--host", "127.0.0.1", "--port", "${NOMAD_PORT_http}"},
			}
			return task
		},
		Advance: func(_ *testing.T, d time.Duration) { time.Sleep(d) },
	}
	// Wait for both nodes' GPUs to be fingerprinted.
	for _, n := range tg.Nodes {
		id := c.NodeID(n)
		nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
			node, _, err := c.API.Nodes().Info(id, nil)
			if err != nil {
				return false, err.Error()
			}
			g := h200Group(node)
			return g != nil && len(g.Instances) == 4, "waiting for " + n + "'s GPUs"
		})
	}
	appendEvent := func(t *testing.T, node, line string) {
		f, err := os.OpenFile(events[node], os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(line + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitDevice := func(t *testing.T, node, dev string, ok func(healthy bool, desc string) bool) {
		id := c.NodeID(node)
		nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
			n, _, err := c.API.Nodes().Info(id, nil)
			if err != nil || h200Group(n) == nil {
				return false, "node not readable"
			}
			for _, in := range h200Group(n).Instances {
				if in.ID == dev {
					return ok(in.Healthy, in.HealthDescription), fmt.Sprintf("%s healthy=%v %q", dev, in.Healthy, in.HealthDescription)
				}
			}
			return false, dev + " not listed"
		})
	}
	// Unhealthy: a fatal XID (79); healthy again: the GPU seen lost, then
	// reset (see TestDeviceHealthInRealNomad).
	tg.SetDeviceHealth = func(t *testing.T, node, dev string, healthy bool) {
		if !healthy {
			appendEvent(t, node, dev+" xid 79")
			waitDevice(t, node, dev, func(h bool, _ string) bool { return !h })
			return
		}
		appendEvent(t, node, dev+" lost")
		waitDevice(t, node, dev, func(_ bool, desc string) bool { return gpuLost(desc) })
		appendEvent(t, node, dev+" reset")
		waitDevice(t, node, dev, func(h bool, _ string) bool { return h })
	}
	tg.NodeDown = func(t *testing.T, node string) {
		killed := clientNamed(t, c, node).Kill()
		t.Logf("killed %s's client agent and %d processes it started", node, len(killed))
	}
	conformance.Run(t, tg)
}

package e2e

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// TestPluginsEndWithTheirAgent replays, on one client, the two faults after
// which the chaos suite once found plugin processes outliving the cluster:
// the driver plugin killed (Nomad launches a new one), the node killed
// and brought back (the agent launches a new device plugin), and the
// driver plugin of the agent that came back killed. When the
// agent is then stopped as an operator stops it, no plugin process may be
// left behind.
func TestPluginsEndWithTheirAgent(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	t.Cleanup(func() { checkNothingLeft(t, plugins) })

	c := nomadtest.Start(t, gpuClient("gpu-1", "k1", "p1", plugins, engine, ""))
	a := c.Clients[0]
	waitPlugin := func(name string, not []int) int {
		var pid int
		nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
			for _, p := range pidsOf(a, name) {
				if !slices.Contains(not, p) {
					pid = p
					return true, ""
				}
			}
			return false, fmt.Sprintf("no %s process of %s besides %v", name, a.Name, not)
		})
		return pid
	}

	driver := waitPlugin("nomad-driver-llmgw", nil)
	_ = syscall.Kill(driver, syscall.SIGKILL)
	relaunched := waitPlugin("nomad-driver-llmgw", []int{driver})
	t.Logf("driver plugin %d killed; Nomad launched %d", driver, relaunched)

	device := waitPlugin("nomad-device-nvml", nil)
	killed := a.Kill()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReady(90 * time.Second)
	again := waitPlugin("nomad-device-nvml", killed)
	t.Logf("node killed (device plugin %d among %v); back with device plugin %d", device, killed, again)

	// And the driver plugin of the agent that came back.
	driver = waitPlugin("nomad-driver-llmgw", killed)
	_ = syscall.Kill(driver, syscall.SIGKILL)
	relaunched = waitPlugin("nomad-driver-llmgw", append(killed, driver))
	t.Logf("driver plugin %d killed; Nomad launched %d", driver, relaunched)
	// The cluster's cleanup stops the agent; checkNothingLeft runs after it.
}

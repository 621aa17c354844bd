package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// TestDevicePowerCapsInRealNomad: the device plugin under a real Nomad
// client, with power_caps reading the server's variables, caps a mock GPU
// when the node's caps variable says so, and the cap reads back through
// Nomad's client stats (as the controller will read it) while the
// fingerprint's power_limit stays the default; deleting the variable
// restores the default.
func TestDevicePowerCapsInRealNomad(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg))
	c := nomadtest.Start(t)
	c.AddClient(nomadtest.ClientOptions{
		Name:      "gpu-1",
		PluginDir: plugins,
		Plugins: map[string]string{"nomad-device-nvml": fmt.Sprintf(`
    mock {
      system = "dgxh200"
      gpus   = 2
      seed   = "caps-1"
    }
    power_caps {
      nomad_addr = %q
      node_name  = "gpu-1"
      lease      = "1h"
    }`, c.Server.Addr())},
	})
	c.WaitReady(2 * time.Minute)
	nodeID := c.NodeID("gpu-1")

	var uuids []string
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		node, _, err := c.API.Nodes().Info(nodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		g := h200Group(node)
		if g == nil || len(g.Instances) != 2 {
			return false, "no group of 2 H200s yet"
		}
		uuids = nil
		for _, in := range g.Instances {
			uuids = append(uuids, in.ID)
		}
		return true, ""
	})
	sort.Strings(uuids)

	if _, _, err := c.API.Variables().Update(&api.Variable{Path: "llmgw/power-caps/gpu-1", Items: api.VariableItems{"cap." + uuids[0]: "450"}}, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitCapStat(t, c, nodeID, uuids[0], "capped 450 W by controller", 450)
	t.Logf("cap seen in Nomad's client stats %s after the write (includes Nomad's stats collection interval)", time.Since(start).Round(time.Millisecond))
	waitCapStat(t, c, nodeID, uuids[1], "default", 700)

	node, _, err := c.API.Nodes().Info(nodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := h200Group(node).Attributes["power_limit"]; a == nil || a.IntVal == nil || *a.IntVal != 700 {
		t.Errorf("power_limit attribute with a cap in place: %v; want the 700 W default", a)
	}

	if _, err := c.API.Variables().Delete("llmgw/power-caps/gpu-1", nil); err != nil {
		t.Fatal(err)
	}
	waitCapStat(t, c, nodeID, uuids[0], "default", 700)
}

// waitCapStat waits (60s) until a device's power_cap and
// enforced_power_limit stats in /v1/client/stats read want and watts.
func waitCapStat(t *testing.T, c *nomadtest.Cluster, nodeID, uuid, want string, watts float64) {
	t.Helper()
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		st, err := deviceStatAttrs(c, nodeID)
		if err != nil {
			return false, err.Error()
		}
		a := st[uuid]
		state, lim := a["power_cap"], a["enforced_power_limit"]
		if state.StringVal == nil || lim.FloatNumeratorVal == nil {
			return false, fmt.Sprintf("%s: no power_cap or enforced_power_limit stat yet", uuid)
		}
		got := fmt.Sprintf("%q at %g %s", *state.StringVal, *lim.FloatNumeratorVal, lim.Unit)
		return *state.StringVal == want && *lim.FloatNumeratorVal == watts && lim.Unit == "W", uuid + ": " + got
	})
}

// deviceStatAttrs reads the node's client stats through the server (as
// the controller does) and returns each device's stat attributes.
func deviceStatAttrs(c *nomadtest.Cluster, nodeID string) (map[string]map[string]api.StatValue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stats, err := c.API.Nodes().Stats(nodeID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("client stats: %w", err)
	}
	out := map[string]map[string]api.StatValue{}
	for _, g := range stats.DeviceStats {
		for id, s := range g.InstanceStats {
			if s == nil || s.Stats == nil {
				continue
			}
			attrs := map[string]api.StatValue{}
			for k, v := range s.Stats.Attributes {
				if v != nil {
					attrs[k] = *v
				}
			}
			out[id] = attrs
		}
	}
	return out, nil
}

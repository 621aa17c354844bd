package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

const devicePkg = "github.com/llmgw/llmgw/cmd/nomad-device-nvml"

func h200Group(node *api.Node) *api.NodeDeviceResource {
	if node.NodeResources == nil {
		return nil
	}
	for _, d := range node.NodeResources.Devices {
		if d.Vendor == "nvidia" && d.Type == "gpu" && d.Name == "NVIDIA H200" {
			return d
		}
	}
	return nil
}

func TestDevicePluginInRealNomad(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg))
	c := nomadtest.Start(t, nomadtest.ClientOptions{
		Name:      "gpu-1",
		PluginDir: plugins,
		Plugins: map[string]string{"nomad-device-nvml": `
    mock {
      system = "dgxh200"
      seed   = "gpu-1"
    }`},
	})
	nodeID := c.NodeID("gpu-1")

	// 8 healthy nvidia/gpu/NVIDIA H200 with memory and power_limit.
	var group *api.NodeDeviceResource
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		node, _, err := c.API.Nodes().Info(nodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		group = h200Group(node)
		if group == nil {
			return false, "no nvidia/gpu/NVIDIA H200 device group on the node yet"
		}
		healthy := 0
		for _, in := range group.Instances {
			if in.Healthy {
				healthy++
			}
		}
		return healthy == 8, fmt.Sprintf("%d of 8 instances healthy", healthy)
	})
	for _, attr := range []string{"memory", "power_limit"} {
		if group.Attributes[attr] == nil {
			t.Errorf("device attribute %s missing; have %v", attr, group.Attributes)
		}
	}
	if got := group.Attributes["power_limit"]; got == nil || got.IntVal == nil || *got.IntVal != 700 || got.Unit != "W" {
		t.Errorf("power_limit = %+v, want 700 W", got)
	}

	// A raw_exec task asking for 2 GPUs is bound to exactly those 2:
	// CUDA_VISIBLE_DEVICES holds their places in the node's PCI bus order
	// (as Nomad lists the devices' localities), with CUDA_DEVICE_ORDER to
	// match, and the UUIDs ride in NVIDIA_VISIBLE_DEVICES and
	// LLMGW_GPU_UUIDS.
	node, _, err := c.API.Nodes().Info(nodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	pciOrder := gpusByPCIBus(t, h200Group(node))
	job := &api.Job{
		ID:          ptr("gpu-env"),
		Name:        ptr("gpu-env"),
		Type:        ptr("batch"),
		Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name:             ptr("g"),
			RestartPolicy:    &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
			Tasks: []*api.Task{{
				Name:   "t",
				Driver: "raw_exec",
				Config: map[string]any{
					"command": "/bin/sh",
					"args":    []string{"-c", `echo "$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER $NVIDIA_VISIBLE_DEVICES $LLMGW_GPU_UUIDS"`},
				},
				Resources: &api.Resources{
					CPU: ptr(100), MemoryMB: ptr(64),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr[uint64](2)}},
				},
			}},
		}},
	}
	if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register job: %v", err)
	}
	allocs := c.WaitAllocs("gpu-env", 60*time.Second, func(as []*api.AllocationListStub) (bool, string) {
		for _, a := range as {
			if a.ClientStatus == api.AllocClientStatusComplete {
				return true, ""
			}
			if a.ClientStatus == api.AllocClientStatusFailed {
				t.Fatalf("allocation failed: %+v", a.TaskStates)
			}
		}
		return false, fmt.Sprintf("%d allocations, none complete", len(as))
	})
	alloc, _, err := c.API.Allocations().Info(allocs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	var assigned []string
	for _, d := range alloc.AllocatedResources.Tasks["t"].Devices {
		assigned = append(assigned, d.DeviceIDs...)
	}
	if len(assigned) != 2 {
		t.Fatalf("Nomad assigned %d devices, want 2: %v", len(assigned), assigned)
	}
	out, err := c.Logs(alloc, "t", "stdout")
	if err != nil {
		t.Fatalf("task logs: %v", err)
	}
	line := strings.TrimSpace(out)
	checkBinding(t, line, assigned, pciOrder)
	t.Logf("task saw %s", line)

	// Device stats through the client stats API show power in W.
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		watts, err := devicePower(c, nodeID)
		if err != nil {
			return false, err.Error()
		}
		if len(watts) != 8 {
			return false, fmt.Sprintf("power stats for %d devices", len(watts))
		}
		for id, w := range watts {
			if w != "280 W" {
				return false, fmt.Sprintf("%s power_draw %s, want 280 W", id, w)
			}
		}
		return true, ""
	})
}

// gpusByPCIBus lists a device group's GPU UUIDs in PCI bus order, from the
// localities Nomad records: the order CUDA numbers them in under
// CUDA_DEVICE_ORDER=PCI_BUS_ID.
func gpusByPCIBus(t *testing.T, g *api.NodeDeviceResource) []string {
	t.Helper()
	if g == nil {
		t.Fatal("no GPU device group on the node")
	}
	type gpu struct{ id, bus string }
	var gs []gpu
	for _, in := range g.Instances {
		if in.Locality == nil || in.Locality.PciBusID == "" {
			t.Fatalf("device %s has no PCI bus id in Nomad's node record", in.ID)
		}
		gs = append(gs, gpu{in.ID, strings.ToLower(in.Locality.PciBusID)})
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].bus < gs[j].bus })
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.id
	}
	return out
}

// checkBinding checks a task's printed "CUDA_VISIBLE_DEVICES
// CUDA_DEVICE_ORDER NVIDIA_VISIBLE_DEVICES LLMGW_GPU_UUIDS" against what
// Nomad assigned: the UUIDs are exactly the assigned devices, and each
// CUDA index is that UUID's place in pciOrder.
func checkBinding(t *testing.T, line string, assigned, pciOrder []string) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 4 {
		t.Fatalf("task printed %q; want CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, NVIDIA_VISIBLE_DEVICES and LLMGW_GPU_UUIDS", line)
	}
	visible, order, nvidia, uuids := strings.Split(f[0], ","), f[1], f[2], strings.Split(f[3], ",")
	if order != "PCI_BUS_ID" || nvidia != f[3] {
		t.Errorf("CUDA_DEVICE_ORDER=%s NVIDIA_VISIBLE_DEVICES=%s; want PCI_BUS_ID and the UUIDs %s", order, nvidia, f[3])
	}
	got, want := append([]string(nil), uuids...), append([]string(nil), assigned...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("LLMGW_GPU_UUIDS=%s; Nomad assigned %v", f[3], assigned)
	}
	if len(visible) != len(uuids) {
		t.Fatalf("CUDA_VISIBLE_DEVICES=%s has %d entries for %d GPUs", f[0], len(visible), len(uuids))
	}
	for i, u := range uuids {
		if want := strconv.Itoa(slices.Index(pciOrder, u)); visible[i] != want {
			t.Errorf("CUDA_VISIBLE_DEVICES=%s: entry %d is %s, but %s is CUDA device %s in PCI bus order %v", f[0], i, visible[i], u, want, pciOrder)
		}
	}
}

// devicePower reads the node's client stats through the server (as the
// controller does) and returns each device's power_draw as "<value> <unit>".
func devicePower(c *nomadtest.Cluster, nodeID string) (map[string]string, error) {
	st, err := deviceStatAttrs(c, nodeID)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for id, attrs := range st {
		if p, ok := attrs[devicesapi.StatPowerDraw]; ok && p.FloatNumeratorVal != nil {
			out[id] = fmt.Sprintf("%g %s", *p.FloatNumeratorVal, p.Unit)
		}
	}
	return out, nil
}

func TestDevicePluginBadConfigInRealNomad(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg))
	c := nomadtest.Start(t)
	bad := c.AddClient(nomadtest.ClientOptions{
		Name:      "bad-1",
		PluginDir: plugins,
		Plugins:   map[string]string{"nomad-device-nvml": `mock { system = "dgx-nope" }`},
	})
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		return strings.Contains(bad.Log(), `mock.system: unknown mock system \"dgx-nope\"`) ||
			strings.Contains(bad.Log(), `mock.system: unknown mock system "dgx-nope"`), "agent log does not name mock.system yet"
	})
	// The plugin must not serve half-configured: no GPU device on any node.
	nodes, _, err := c.API.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		full, _, err := c.API.Nodes().Info(n.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if g := h200Group(full); g != nil {
			t.Errorf("node %s offers GPUs despite the bad plugin config", n.Name)
		}
	}
	t.Logf("agent exited: %v; log line: %s", bad.Exited(), grepLine(bad.Log(), "mock.system"))
}

func grepLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }

// gpuLost reports a health description that says NVML finds the GPU lost
// (the mock answers ERROR_GPU_IS_LOST, NVML's own text is "GPU is lost").
func gpuLost(desc string) bool {
	d := strings.ToLower(desc)
	return strings.Contains(d, "gpu is lost") || strings.Contains(d, "gpu_is_lost")
}

// TestDeviceHealthInRealNomad breaks one mock GPU with a fatal XID (79) and
// another with a transient one (94) and checks that Nomad marks exactly
// those instances unhealthy with the plugin's reasons; the transient one is
// healthy again after health_recovery while the fatal one is not, until the
// GPU is seen lost and then reset. The Nomad client batches node
// updates for 5-10 s, so the recovery period must be longer than that for
// the unhealthy state to reach the servers at all.
func TestDeviceHealthInRealNomad(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg))
	events := filepath.Join(t.TempDir(), "nvml-events")
	c := nomadtest.Start(t, nomadtest.ClientOptions{
		Name:      "gpu-1",
		PluginDir: plugins,
		Plugins: map[string]string{"nomad-device-nvml": fmt.Sprintf(`
    health_recovery = "20s"
    mock {
      system      = "dgxh200"
      seed        = "gpu-1"
      events_file = %q
    }`, events)},
	})
	nodeID := c.NodeID("gpu-1")
	unhealthy := func() (map[string]string, error) {
		node, _, err := c.API.Nodes().Info(nodeID, nil)
		if err != nil {
			return nil, err
		}
		g := h200Group(node)
		if g == nil {
			return nil, fmt.Errorf("no H200 group yet")
		}
		out := map[string]string{}
		for _, in := range g.Instances {
			if !in.Healthy {
				out[in.ID] = in.HealthDescription
			}
		}
		return out, nil
	}
	var victim, other string
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		node, _, err := c.API.Nodes().Info(nodeID, nil)
		if err != nil || h200Group(node) == nil {
			return false, "waiting for the GPUs"
		}
		victim, other = h200Group(node).Instances[3].ID, h200Group(node).Instances[5].ID
		return true, ""
	})
	appendEvents := func(lines string) {
		f, err := os.OpenFile(events, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(lines); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// A fatal XID (79) on one GPU, a transient one (94) on another.
	appendEvents(victim + " xid 79\n" + other + " xid 94\n")
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		got, err := unhealthy()
		if err != nil {
			return false, err.Error()
		}
		return len(got) == 2 && got[victim] == "XID 79: GPU has fallen off the bus" && got[other] != "", fmt.Sprintf("unhealthy: %v", got)
	})
	t.Logf("Nomad reports %s unhealthy (XID 79) and %s (XID 94)", victim, other)
	// The transient one recovers after health_recovery; the fatal one does
	// not: when the first is healthy again, the second is still unhealthy.
	var after map[string]string
	nomadtest.Eventually(t, 90*time.Second, func() (bool, string) {
		got, err := unhealthy()
		if err != nil {
			return false, err.Error()
		}
		after = got
		_, still := got[other]
		return !still, fmt.Sprintf("unhealthy: %v", got)
	})
	if after[victim] != "XID 79: GPU has fallen off the bus" {
		t.Fatalf("after the transient XID recovered, the fatal one reads %q, want it still unhealthy", after[victim])
	}
	t.Logf("XID 94 recovered after health_recovery; XID 79 did not")
	// Only a reset NVML shows clears it: the GPU answers "GPU is lost",
	// then, reset, answers again.
	appendEvents(victim + " lost\n")
	nomadtest.Eventually(t, 90*time.Second, func() (bool, string) {
		got, err := unhealthy()
		if err != nil {
			return false, err.Error()
		}
		return gpuLost(got[victim]), fmt.Sprintf("unhealthy: %v", got)
	})
	appendEvents(victim + " reset\n")
	nomadtest.Eventually(t, 90*time.Second, func() (bool, string) {
		got, err := unhealthy()
		if err != nil {
			return false, err.Error()
		}
		return len(got) == 0, fmt.Sprintf("unhealthy: %v", got)
	})
	t.Logf("and healthy again after the GPU was seen lost and then reset")
}

package conformance_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/fakeclock"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/nomadfake/conformance"
)

// TestFakeConformance holds nomadfake to the cases e2e's
// TestNomadFakeConformance holds a real Nomad to.
func TestFakeConformance(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := nomadfake.New(nomadfake.WithAutoRun(true), nomadfake.WithClock(clk.Now))
	t.Cleanup(s.Close)
	tg := &conformance.Target{
		Client:  s.Client(t),
		GPUName: "NVIDIA H200",
		GPUs:    4,
		Task:    func() *api.Task { return api.NewTask("engine", "raw_exec") },
		Advance: func(_ *testing.T, d time.Duration) { clk.Advance(d); s.Tick() },
	}
	ids := map[string]string{}
	for i := range tg.Nodes {
		name := fmt.Sprintf("gpu-%d", i+1)
		tg.Nodes[i] = name
		var gpus []string
		for g := range tg.GPUs {
			gpus = append(gpus, fmt.Sprintf("GPU-%d%d", i+1, g))
		}
		ids[name] = s.AddNode(nomadfake.NodeSpec{
			Name:    name,
			Meta:    map[string]string{conformance.StaticMetaKey: conformance.StaticMetaValue},
			Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(tg.GPUName, 700, 143771, gpus...)},
		})
	}
	tg.SetDeviceHealth = func(t *testing.T, node, dev string, healthy bool) {
		if err := s.SetDeviceHealth(ids[node], dev, healthy); err != nil {
			t.Fatal(err)
		}
	}
	tg.NodeDown = func(t *testing.T, node string) {
		if err := s.SetNodeStatus(ids[node], api.NodeStatusDown); err != nil {
			t.Fatal(err)
		}
	}
	conformance.Run(t, tg)
}

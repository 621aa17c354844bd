package nomadfake_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

func TestDynamicNodeMetaWinsOverStatic(t *testing.T) {
	s, c := newFake(t)
	id := gpuNode(s, "n1", 4, map[string]string{"llmgw.rack": "r01", "llmgw.pdu": "p1"})

	resp, err := c.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{
		NodeID: id,
		Meta:   map[string]*string{"llmgw.rack": new("r07"), "llmgw.row": new("2")},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantMeta := map[string]string{"llmgw.rack": "r07", "llmgw.pdu": "p1", "llmgw.row": "2"}
	if diff := cmp.Diff(wantMeta, resp.Meta); diff != "" {
		t.Errorf("applied meta (-want +got):\n%s", diff)
	}
	n, _, err := c.Nodes().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantMeta, n.Meta); diff != "" {
		t.Errorf("node info meta (-want +got):\n%s", diff)
	}

	// nil unsets: a dynamic-only key goes; a static key is masked, and the
	// mask is remembered as a nil dynamic value.
	resp, err = c.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{
		NodeID: id,
		Meta:   map[string]*string{"llmgw.row": nil, "llmgw.pdu": nil},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &api.NodeMetaResponse{
		Meta:    map[string]string{"llmgw.rack": "r07"},
		Dynamic: map[string]*string{"llmgw.rack": new("r07"), "llmgw.pdu": nil},
		Static:  map[string]string{"llmgw.rack": "r01", "llmgw.pdu": "p1"},
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("meta after unsetting (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want.Meta, s.Node(id).Meta); diff != "" {
		t.Errorf("node meta after unsetting (-want +got):\n%s", diff)
	}

	if _, err := c.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: id, Meta: map[string]*string{"bad key": new("x")}}, nil); statusCode(err) != 400 {
		t.Errorf("invalid key: %v, want 400", err)
	}
	if _, err := c.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: "no-such-node", Meta: map[string]*string{"k": new("v")}}, nil); err == nil {
		t.Error("meta of an unknown node: no error")
	}
}

func TestClientStatsPowerDraw(t *testing.T) {
	s, c := newFake(t)
	id := gpuNode(s, "n1", 2, nil)
	if err := s.SetPowerDraw(id, "n1-gpu1", 612.5); err != nil {
		t.Fatal(err)
	}
	hs, err := c.Nodes().Stats(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs.DeviceStats) != 1 {
		t.Fatalf("device stats %+v, want one group", hs.DeviceStats)
	}
	g := hs.DeviceStats[0]
	if g.Vendor != "nvidia" || g.Type != "gpu" || g.Name != h200 || len(g.InstanceStats) != 2 {
		t.Fatalf("group %s/%s/%s with %d instances", g.Vendor, g.Type, g.Name, len(g.InstanceStats))
	}
	p := g.InstanceStats["n1-gpu1"].Stats.Attributes["power_draw"]
	if p == nil || *p.FloatNumeratorVal != 612.5 || *p.FloatDenominatorVal != 700 || p.Unit != "W" {
		t.Errorf("power_draw %+v, want 612.5 / 700 W", p)
	}
	if sum := g.InstanceStats["n1-gpu1"].Summary; sum == nil || *sum.FloatNumeratorVal != 612.5 {
		t.Errorf("summary %+v, want the power draw", sum)
	}
	if p0 := g.InstanceStats["n1-gpu0"].Stats.Attributes["power_draw"]; *p0.FloatNumeratorVal != 0 {
		t.Errorf("unset GPU draws %v W, want 0", *p0.FloatNumeratorVal)
	}

	if err := s.SetNodeStatus(id, "down"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes().Stats(id, nil); statusCode(err) != 404 {
		t.Errorf("stats of a down node: %v, want 404 No path to node", err)
	}
	if _, err := c.Nodes().Stats("nope", nil); statusCode(err) != 404 {
		t.Errorf("stats of an unknown node: %v, want 404", err)
	}
}

func TestNodeInfoAndListShape(t *testing.T) {
	s, c := newFake(t)
	id := s.AddNode(nomadfake.NodeSpec{
		ID: "11111111-2222-3333-4444-555555555555", Name: "gpu-a",
		Meta:    map[string]string{"llmgw.rack": "r01"},
		Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(h200, 700, 143771, "GPU-a", "GPU-b")},
	})
	n, qm, err := c.Nodes().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if qm.LastIndex != n.ModifyIndex {
		t.Errorf("node info index %d, want its ModifyIndex %d", qm.LastIndex, n.ModifyIndex)
	}
	dev := n.NodeResources.Devices[0]
	if dev.ID() != "nvidia/gpu/"+h200 || len(dev.Instances) != 2 || *dev.Attributes["power_limit"].IntVal != 700 || dev.Attributes["power_limit"].Unit != "W" {
		t.Errorf("device group %+v", dev)
	}
	if n.NodePool != "default" || n.Status != "ready" || n.SchedulingEligibility != "eligible" || n.Meta["llmgw.rack"] != "r01" {
		t.Errorf("node %+v", n)
	}
	list, _, err := c.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Address != "127.0.0.1" || list[0].NodeResources != nil || list[0].Version != "2.0.5" || list[0].ModifyIndex != n.ModifyIndex {
		t.Errorf("stub %+v: want address, version, modify index and no resources", list[0])
	}
	if _, err := c.Nodes().ToggleEligibility(id, false, nil); statusCode(err) != 501 {
		t.Errorf("eligibility: %v, want 501 (not faked)", err)
	}
}

// With WithNodeMetaDelay the client's answer has the new metadata at once,
// and the servers' node shows it only after the delay, with a new
// ModifyIndex that wakes a blocking query on the node list.
func TestNodeMetaDelay(t *testing.T) {
	s, c := newFake(t, nomadfake.WithNodeMetaDelay(300*time.Millisecond))
	id := gpuNode(s, "n1", 4, map[string]string{"llmgw.rack": "r01"})
	_, qm, err := c.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: id, Meta: map[string]*string{"llmgw.rack": new("r07")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Meta["llmgw.rack"] != "r07" {
		t.Errorf("answer's meta %v, want rack r07 at once", resp.Meta)
	}
	if got := s.Node(id).Meta["llmgw.rack"]; got != "r01" {
		t.Errorf("servers' node right after the write: rack %q, want still r01", got)
	}
	// A blocking query on the list returns once the node changes.
	_, qm2, err := c.Nodes().List(&api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if qm2.LastIndex <= qm.LastIndex {
		t.Errorf("node list index %d after the delay, want above %d", qm2.LastIndex, qm.LastIndex)
	}
	if got := s.Node(id).Meta["llmgw.rack"]; got != "r07" {
		t.Errorf("servers' node after the delay: rack %q, want r07", got)
	}
}

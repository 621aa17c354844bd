package nomadfake_test

import (
	"testing"

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

	// The new rack is what placement sees.
	mustRegister(t, c, gpuJob("m-0", 1, 1, api.NewConstraint("${meta.llmgw.rack}", "=", "r07")))
	if as := jobAllocs(t, c, "m-0"); len(as) != 1 || as[0].NodeID != id {
		t.Errorf("placement against dynamic meta: %+v", as)
	}

	// nil unsets: a dynamic-only key goes; a static key is masked, and the
	// mask is remembered as a nil dynamic value.
	if _, err := c.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{
		NodeID: id,
		Meta:   map[string]*string{"llmgw.row": nil, "llmgw.pdu": nil},
	}, nil); err != nil {
		t.Fatal(err)
	}
	read, err := c.Nodes().Meta().Read(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &api.NodeMetaResponse{
		Meta:    map[string]string{"llmgw.rack": "r07"},
		Dynamic: map[string]*string{"llmgw.rack": new("r07"), "llmgw.pdu": nil},
		Static:  map[string]string{"llmgw.rack": "r01", "llmgw.pdu": "p1"},
	}
	if diff := cmp.Diff(want, read); diff != "" {
		t.Errorf("meta read (-want +got):\n%s", diff)
	}

	if _, err := c.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: id, Meta: map[string]*string{"bad key": new("x")}}, nil); statusCode(err) != 400 {
		t.Errorf("invalid key: %v, want 400", err)
	}
	if _, err := c.Nodes().Meta().Read("no-such-node", nil); err == nil {
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
		ID: "11111111-2222-3333-4444-555555555555", Name: "gpu-a", Datacenter: "dc1", NodePool: "gpu", NodeClass: "h200",
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
	if n.NodePool != "gpu" || n.NodeClass != "h200" || n.Meta["llmgw.rack"] != "r01" || !n.Drivers["llmgw"].Healthy {
		t.Errorf("node %+v", n)
	}
	list, _, err := c.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Address != "127.0.0.1" || list[0].NodeResources != nil || list[0].Version != "2.0.5" {
		t.Errorf("stub %+v: want address, version and no resources without resources=true", list[0])
	}
	// A job in another pool does not land here; pool "all" does.
	mustRegister(t, c, gpuJob("m-0", 1, 1))
	if len(jobAllocs(t, c, "m-0")) != 0 {
		t.Error("default-pool job placed on a gpu-pool node")
	}
	j := gpuJob("m-1", 1, 1)
	j.NodePool = new("gpu")
	mustRegister(t, c, j)
	if len(jobAllocs(t, c, "m-1")) != 1 {
		t.Error("gpu-pool job not placed")
	}
	allocs, _, err := c.Nodes().Allocations(id, nil)
	if err != nil || len(allocs) != 1 || allocs[0].Job == nil {
		t.Errorf("node allocations %+v err %v", allocs, err)
	}
}

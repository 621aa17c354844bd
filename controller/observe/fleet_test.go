package observe

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/weightsapi"
)

func ptr[T any](v T) *T { return &v }

func gpuNode(id, name, rack string, healthy []bool) *api.Node {
	var ins []*api.NodeDevice
	for i, h := range healthy {
		ins = append(ins, &api.NodeDevice{ID: id + "-gpu" + string(rune('0'+i)), Healthy: h})
	}
	return &api.Node{
		ID: id, Name: name, NodePool: "default", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingEligible,
		Meta: map[string]string{MetaSite: "s", MetaRoom: "a", MetaRow: "r1", MetaRack: rack, MetaPDU: "p-" + rack, MetaFabric: "ib-1"},
		NodeResources: &api.NodeResources{
			Cpu:    api.NodeCpuResources{CpuShares: 64000, TotalCpuCores: 32},
			Memory: api.NodeMemoryResources{MemoryMB: 512 * 1024},
			Devices: []*api.NodeDeviceResource{{
				Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H200", Instances: ins,
				Attributes: map[string]*api.Attribute{"power_limit": {IntVal: ptr(int64(700)), Unit: "W"}, "memory": {IntVal: ptr(int64(144384)), Unit: "MiB"}},
			}},
		},
		ReservedResources: &api.NodeReservedResources{Memory: api.NodeReservedMemoryResources{MemoryMB: 8 * 1024}},
	}
}

func TestFleet(t *testing.T) {
	t.Parallel()
	a := gpuNode("id-a", "a", "k1", []bool{true, true, true, false})
	b := gpuNode("id-b", "b", "k2", []bool{true, true})
	b.DrainStrategy = &api.DrainStrategy{}
	b.Meta[MetaBaseWatts] = "900"
	allocs := []*api.AllocationListStub{
		{NodeID: "id-a", DesiredStatus: "run", ClientStatus: "running", AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Cpu: api.AllocatedCpuResources{ReservedCores: []uint16{0, 1, 2, 3}}, Memory: api.AllocatedMemoryResources{MemoryMB: 64 * 1024},
				Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H200", DeviceIDs: []string{"id-a-gpu0"}}}},
		}}},
		// Finished allocations hold nothing.
		{NodeID: "id-a", DesiredStatus: "run", ClientStatus: "complete", AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"t": {Devices: []*api.AllocatedDeviceResource{{DeviceIDs: []string{"id-a-gpu1"}}}},
		}}},
	}
	power := map[string]Power{"id-a": {GPUWatts: 1400, Devices: 4}}
	idle := gpuNode("id-c", "c", "k2", []bool{true})
	got := Fleet([]*api.Node{b, a, idle}, allocs, power, 1200)
	want := facility.Fleet{Nodes: []facility.Node{
		{
			Name: "a", Pool: "default", Location: facility.Location{Site: "s", Room: "a", Row: "r1", Rack: "k1", PDU: "p-k1"},
			CPUCores: 28, MemoryGB: 440, BaseWatts: 1200, MeasuredWatts: 2600, Fabric: "ib-1",
			GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 4, Free: 2, PowerLimitWatts: 700, MemoryMiB: 144384}},
		},
		{
			// Draining: still counted, nothing free.
			Name: "b", Pool: "default", Location: facility.Location{Site: "s", Room: "a", Row: "r1", Rack: "k2", PDU: "p-k2"},
			BaseWatts: 900, Fabric: "ib-1",
			GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 2, Free: 0, PowerLimitWatts: 700, MemoryMiB: 144384}},
		},
		{
			// No allocations at all.
			Name: "c", Pool: "default", Location: facility.Location{Site: "s", Room: "a", Row: "r1", Rack: "k2", PDU: "p-k2"},
			CPUCores: 32, MemoryGB: 504, BaseWatts: 1200, Fabric: "ib-1",
			GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 1, Free: 1, PowerLimitWatts: 700, MemoryMiB: 144384}},
		},
	}}
	if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Pos" }, cmp.Ignore())); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestNodePowerCountsMIGParentsOnce(t *testing.T) {
	t.Parallel()
	w := func(v float64, parent string) *api.DeviceStats {
		s := &api.DeviceStats{Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"power_draw": {FloatNumeratorVal: &v, Unit: "W"}}}}
		if parent != "" {
			s.Stats.Attributes["parent"] = &api.StatValue{StringVal: &parent}
		}
		return s
	}
	stats := &api.HostStats{DeviceStats: []*api.DeviceGroupStats{
		{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H200", InstanceStats: map[string]*api.DeviceStats{"g0": w(300, ""), "g1": w(250, "")}},
		{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H200 MIG 3g.71gb", InstanceStats: map[string]*api.DeviceStats{"m0": w(400, "GPU-p"), "m1": w(400, "GPU-p")}},
		{Vendor: "other", Type: "fpga", Name: "x", InstanceStats: map[string]*api.DeviceStats{"f": w(99, "")}},
	}}
	if got, want := NodePower(stats), (Power{GPUWatts: 950, Devices: 3}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestGPUReadings(t *testing.T) {
	t.Parallel()
	f := func(v float64, unit string) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v, Unit: unit} }
	str := func(s string) *api.StatValue { return &api.StatValue{StringVal: &s} }
	stats := &api.HostStats{DeviceStats: []*api.DeviceGroupStats{
		{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H200", InstanceStats: map[string]*api.DeviceStats{
			"GPU-b": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{
				"power_draw": f(450000, "mW"), "enforced_power_limit": f(450, "W"), "default_power_limit": f(700, "W"),
				"min_power_limit": f(200, "W"), "max_power_limit": f(700, "W"), "power_cap": str("capped 450 W by controller"),
			}}},
			"GPU-a":     {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"power_draw": f(120, "W")}}},
			"GPU-quiet": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"temperature": f(40, "C")}}},
		}},
		{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H200 MIG 3g.71gb", InstanceStats: map[string]*api.DeviceStats{
			"MIG-1": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"power_draw": f(300, "W"), "parent": str("GPU-p")}}},
			"MIG-2": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"power_draw": f(300, "W"), "parent": str("GPU-p")}}},
		}},
		{Vendor: "other", Type: "fpga", Name: "x", InstanceStats: map[string]*api.DeviceStats{"f": {Stats: &api.StatObject{Attributes: map[string]*api.StatValue{"power_draw": f(9, "W")}}}}},
	}}
	want := []GPUReading{
		{ID: "GPU-a", Model: "NVIDIA H200", Watts: 120},
		{ID: "GPU-b", Model: "NVIDIA H200", Watts: 450, EnforcedW: 450, DefaultW: 700, MinW: 200, MaxW: 700, CapState: "capped 450 W by controller"},
		{ID: "GPU-p", Model: "NVIDIA H200 MIG 3g.71gb", Watts: 300},
	}
	if diff := cmp.Diff(want, GPUReadings(stats)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if GPUReadings(nil) != nil {
		t.Error("no stats: want no readings")
	}
}

// Every label value CheckLabel accepts, Fleet reads as the API wrote it,
// and every location value it accepts is a domain facility.ParseDomain
// takes; what it refuses names the label.
func TestCheckLabel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, value, err string }{
		{"rack", "r01-k01", ""},
		{"site", "ams1.dc_2", ""},
		{"fabric", "ib0", ""},
		{"pdu", strings.Repeat("p", MaxLabelLen), ""},
		{"base_watts", "1200", ""},
		{"base_watts", "0", ""},
		{"base_watts", "1250.5", ""},
		{"hcas", "mlx5_0:1,mlx5_1:1", ""},
		{"hcas", "mlx5_0", ""},
		{"hcas", "^=mlx5_3", ""},
		{"rack", "", "label rack: empty value"},
		{"rack", "r 1", `label rack: value "r 1" has ' '`},
		{"rack", "r1\nx", `has '\n'`},
		{"rack", "r1\x1b[31m", `has '\x1b'`},
		{"rack", "r1\x00", `has '\x00'`},
		{"rack", "r=1", `has '='`},
		{"rack", "r1,r2", `has ','`},
		{"rack", "r1/r2", `has '/'`},
		{"row", "ré", "only letters, digits"},
		{"pdu", strings.Repeat("p", MaxLabelLen+1), "64 bytes long, more than 63"},
		{"base_watts", "abc", `label base_watts: "abc" is not a number of watts from 0 to 100000`},
		{"base_watts", "-1", "label base_watts"},
		{"base_watts", "NaN", "label base_watts"},
		{"base_watts", "Inf", "label base_watts"},
		{"base_watts", "1e9", "label base_watts"},
		{"base_watts", " 300", "label base_watts"},
		{"hcas", "mlx5 0", `label hcas: "mlx5 0" is not a list of HCAs as NCCL_IB_HCA takes it`},
		{"hcas", "mlx5_0\n", "label hcas"},
		{"hcas", "mlx5_0,,mlx5_1", "label hcas"},
		{"hcas", "mlx5_0:", "label hcas"},
		{"hcas", "mlx5_0:a", "label hcas"},
		{"hcas", "", "label hcas"},
		{"hcas", strings.Repeat("m", MaxHCAsLen+1), "label hcas"},
		{"cage", "c1", `unknown label "cage"`},
	} {
		err := CheckLabel(tc.name, tc.value)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("CheckLabel(%q, %q): %v, want nil", tc.name, tc.value, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("CheckLabel(%q, %q): %v, want an error with %q", tc.name, tc.value, err, tc.err)
		case tc.err == "" && tc.name == "base_watts":
			n := gpuNode("id-a", "a", "k1", []bool{true})
			n.Meta[MetaBaseWatts] = tc.value
			want, _ := strconv.ParseFloat(tc.value, 64)
			if got := Fleet([]*api.Node{n}, nil, nil, 1).Nodes[0].BaseWatts; got != want {
				t.Errorf("Fleet read base_watts %q as %v, want %v", tc.value, got, want)
			}
		case tc.err == "" && tc.name != "fabric" && tc.name != "hcas":
			if _, err := facility.ParseDomain(tc.name + "=" + tc.value); err != nil {
				t.Errorf("label %s=%q accepted, but it is no domain: %v", tc.name, tc.value, err)
			}
		}
	}
	if names := LabelNames(); len(names) != len(Labels) {
		t.Errorf("LabelNames %v, Labels %v: one lacks a label", names, Labels)
	} else {
		for _, n := range names {
			if _, ok := Labels[n]; !ok {
				t.Errorf("LabelNames has %q, Labels does not", n)
			}
		}
	}
	// A base_watts Fleet cannot read leaves the configured base draw.
	n := gpuNode("id-a", "a", "k1", []bool{true})
	n.Meta[MetaBaseWatts] = "abc"
	if got := Fleet([]*api.Node{n}, nil, nil, 1200).Nodes[0].BaseWatts; got != 1200 {
		t.Errorf("Fleet with base_watts \"abc\": %v W, want the configured 1200", got)
	}
}

// The driver's attributes say which weights a node's store holds, and at
// what rate it fetches; values that are not numbers are left out.
func TestFleetWeights(t *testing.T) {
	t.Parallel()
	a := gpuNode("id-a", "a", "k1", []bool{true})
	a.Attributes = map[string]string{
		weightsapi.AttrPrefix + "org--m--main-0123456789": "5242880",
		weightsapi.AttrPrefix + "org--n--main-0123456789": "abc",
		weightsapi.AttrPrefix + "org--o--main-0123456789": "", // removed by the driver
		weightsapi.AttrFetchRate:                          "104857600",
		"driver.llmgw.version":                            "1.2.3",
	}
	b := gpuNode("id-b", "b", "k1", []bool{true})
	got := Fleet([]*api.Node{a, b}, nil, nil, 100)
	if diff := cmp.Diff(map[string]int64{"org--m--main-0123456789": 5242880}, got.Nodes[0].Weights); diff != "" {
		t.Errorf("a's weights (-want +got):\n%s", diff)
	}
	if got.Nodes[0].FetchBytesPerSecond != 104857600 {
		t.Errorf("a's fetch rate %v", got.Nodes[0].FetchBytesPerSecond)
	}
	if got.Nodes[1].Weights != nil || got.Nodes[1].FetchBytesPerSecond != 0 {
		t.Errorf("b holds nothing: %+v", got.Nodes[1])
	}
}

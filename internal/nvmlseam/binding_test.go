package nvmlseam_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/nvmlseam"
)

// h200 is a mock DGX H200 whose GPUs report their PCI bus id (go-nvml's
// server mock keeps one but leaves PciInfo.BusId empty). Index i sits on
// bus buses[i] when given, so bus order need not follow NVML's index.
func h200(t *testing.T, buses ...string) (*server.Server, []string) {
	t.Helper()
	s := dgxh200.New()
	var uuids []string
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		if i < len(buses) {
			dev.PciBusID = buses[i]
		}
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for j := 0; j < len(dev.PciBusID) && j < len(p.BusId)-1; j++ {
				p.BusId[j] = int8(dev.PciBusID[j])
			}
			return p, nvml.SUCCESS
		}
		uuids = append(uuids, dev.UUID)
	}
	return s, uuids
}

func TestReadTopologyOrdersByPCIBus(t *testing.T) {
	// Index 0 is on bus 0x9a, between index 4 and 5: CUDA (PCI_BUS_ID)
	// counts it fifth. The domains are written two ways, as NVML's BusId
	// and BusIdLegacy do.
	lib, uuids := h200(t, "00000000:9A:00.0", "0000:18:00.0", "0000:2a:00.0", "00000000:3A:00.0",
		"0000:5d:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")
	topo, err := nvmlseam.ReadTopology(lib)
	if err != nil {
		t.Fatal(err)
	}
	if topo.Unordered() != "" {
		t.Fatalf("unordered: %s", topo.Unordered())
	}
	var order []string
	for _, b := range topo.Boards() {
		order = append(order, b.UUID)
	}
	want := []string{uuids[1], uuids[2], uuids[3], uuids[4], uuids[0], uuids[5], uuids[6], uuids[7]}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Fatalf("CUDA order (-want +got):\n%s", diff)
	}
	if got := topo.IndexMismatch(); !strings.HasPrefix(got, uuids[1]+" (PCI 0000:18:00.0) is NVML device 1 but CUDA device 0") {
		t.Errorf("IndexMismatch = %q", got)
	}
	if straight, _ := nvmlseam.ReadTopology(dgxh200.New()); straight.IndexMismatch() != "" {
		t.Errorf("a host whose NVML order is PCI order: IndexMismatch = %q", straight.IndexMismatch())
	}

	b, err := topo.Bind([]string{uuids[0], uuids[3], uuids[1], uuids[3]})
	if err != nil {
		t.Fatal(err)
	}
	wantB := nvmlseam.Binding{UUIDs: []string{uuids[1], uuids[3], uuids[0]}, Visible: []string{"0", "2", "4"}}
	if diff := cmp.Diff(wantB, b); diff != "" {
		t.Errorf("Bind (-want +got):\n%s", diff)
	}
	wantEnv := map[string]string{
		"CUDA_VISIBLE_DEVICES":   "0,2,4",
		"CUDA_DEVICE_ORDER":      "PCI_BUS_ID",
		"NVIDIA_VISIBLE_DEVICES": uuids[1] + "," + uuids[3] + "," + uuids[0],
		"LLMGW_GPU_UUIDS":        uuids[1] + "," + uuids[3] + "," + uuids[0],
	}
	if diff := cmp.Diff(wantEnv, b.Env()); diff != "" {
		t.Errorf("Env (-want +got):\n%s", diff)
	}

	if _, err := topo.Bind([]string{uuids[2], "GPU-not-here"}); err == nil || !strings.Contains(err.Error(), "GPU-not-here not among this host's GPUs (NVML lists "+uuids[1]) {
		t.Errorf("unknown GPU: %v", err)
	}
}

func TestBindMIG(t *testing.T) {
	topo := nvmlseam.NewTopology([]nvmlseam.Board{{UUID: "GPU-a", BusID: "0000:18:00.0", MIG: true}, {UUID: "GPU-b", BusID: "0000:2a:00.0"}})
	b, err := topo.Bind([]string{"MIG-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := nvmlseam.Binding{UUIDs: []string{"MIG-1"}, Visible: []string{"MIG-1"}, MIG: 1, ByUUID: "CUDA names a MIG instance only by its UUID"}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("one MIG instance (-want +got):\n%s", diff)
	}
	// A whole GPU on a host with a MIG-enabled GPU goes by UUID.
	b, err = topo.Bind([]string{"GPU-b"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"GPU-b"}, b.Visible); diff != "" || !strings.Contains(b.ByUUID, "GPU-a is in MIG mode") {
		t.Errorf("whole GPU beside MIG: visible %v, why %q", b.Visible, b.ByUUID)
	}
	// Several instances are listed (the device plugin's Reserve serves
	// plain processes too); the driver refuses them for one engine.
	b, _ = topo.Bind([]string{"MIG-2", "MIG-1"})
	if b.MIG != 2 || strings.Join(b.Visible, ",") != "MIG-2,MIG-1" {
		t.Errorf("two MIG instances: %+v", b)
	}
}

func TestReadTopologyUnordered(t *testing.T) {
	lib, uuids := h200(t)
	dev := lib.Devices[3].(*server.Device)
	dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST }
	topo, err := nvmlseam.ReadTopology(lib)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(topo.Unordered(), uuids[3]+" PCI info: "+nvml.ERROR_GPU_IS_LOST.Error()) {
		t.Errorf("unordered: %q", topo.Unordered())
	}
	b, err := topo.Bind([]string{uuids[5], uuids[4]})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{uuids[4], uuids[5]}, b.Visible); diff != "" {
		t.Errorf("a GPU that does not answer: whole GPUs go by UUID (-want +got):\n%s", diff)
	}

	// A handle NVML cannot give.
	lib, _ = h200(t)
	lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 6 {
			return nil, nvml.ERROR_UNKNOWN
		}
		return lib.Devices[i], nvml.SUCCESS
	}
	if topo, _ := nvmlseam.ReadTopology(lib); !strings.HasPrefix(topo.Unordered(), "NVML device 6: ") {
		t.Errorf("unordered: %q", topo.Unordered())
	}

	// No device count at all.
	if _, err := nvmlseam.ReadTopology(&mock.Interface{DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_UNINITIALIZED }}); err == nil {
		t.Error("ReadTopology without a device count succeeded")
	}
}

func TestBindNothing(t *testing.T) {
	b, err := nvmlseam.NewTopology(nil).Bind(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"CUDA_VISIBLE_DEVICES": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NVIDIA_VISIBLE_DEVICES": "void", "LLMGW_GPU_UUIDS": ""}
	if diff := cmp.Diff(want, b.Env()); diff != "" {
		t.Errorf("no device (-want +got):\n%s", diff)
	}
}

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{
		"GPU-a, GPU-b,,": {"GPU-a", "GPU-b"}, "0": {"0"}, "": nil, "all": nil, " none ": nil, "void": nil,
	} {
		if diff := cmp.Diff(want, nvmlseam.SplitList(in)); diff != "" {
			t.Errorf("SplitList(%q) (-want +got):\n%s", in, diff)
		}
	}
}

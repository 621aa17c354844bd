package devices_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
)

// The GPU tier: the built plugin against real NVML. Run with `make
// test-gpu` on a machine with an NVIDIA GPU and driver.
func needGPU(t *testing.T) {
	t.Helper()
	if os.Getenv("LLMGW_TEST_GPU") == "" {
		t.Skip("skipping real-NVML test: set LLMGW_TEST_GPU=1 on a machine with an NVIDIA GPU (make test-gpu)")
	}
	lib := nvmlseam.Open()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Skipf("skipping real-NVML test: LLMGW_TEST_GPU is set but NVML does not start on this machine: %s", nvmlseam.Explain(ret))
	}
	defer func() { _ = lib.Shutdown() }()
	if n, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || n == 0 {
		t.Skipf("skipping real-NVML test: LLMGW_TEST_GPU is set but NVML lists no GPU (%d, %s)", n, nvmlseam.Explain(ret))
	}
}

func TestGPUTierFingerprint(t *testing.T) {
	needGPU(t)
	inst := start(t, ``)
	fp, _ := firstFingerprint(t, inst)
	if len(fp.GetDeviceGroup()) == 0 {
		t.Fatalf("real NVML reported no GPUs; plugin log:\n%s", inst.Logs())
	}
	for _, g := range fp.GetDeviceGroup() {
		t.Logf("group %s/%s/%s: %d devices", g.GetVendor(), g.GetDeviceType(), g.GetDeviceName(), len(g.GetDevices()))
		if g.GetVendor() != "nvidia" || g.GetDeviceType() != "gpu" || g.GetDeviceName() == "" {
			t.Errorf("bad group identity %q/%q/%q", g.GetVendor(), g.GetDeviceType(), g.GetDeviceName())
		}
		attrs := g.GetAttributes()
		for _, k := range []string{"memory", "driver_version", "cuda_compute_capability"} {
			if attrs[k] == nil {
				t.Errorf("group %s lacks attribute %s", g.GetDeviceName(), k)
			}
		}
		if !strings.Contains(g.GetDeviceName(), " MIG ") {
			if pl := attrs["power_limit"]; pl == nil || pl.GetIntVal() <= 0 || pl.GetUnit() != "W" {
				t.Errorf("group %s power_limit = %v, want a positive value in W", g.GetDeviceName(), pl)
			}
		}
		for k, a := range attrs {
			t.Logf("  %s = %v %s", k, a.GetValue(), a.GetUnit())
		}
		for _, d := range g.GetDevices() {
			t.Logf("  device %s healthy=%v %q pci=%s", d.GetID(), d.GetHealthy(), d.GetHealthDescription(), d.GetHwLocality().GetPciBusId())
			if !strings.HasPrefix(d.GetID(), "GPU-") && !strings.HasPrefix(d.GetID(), "MIG-") {
				t.Errorf("device ID %q is not an NVML UUID", d.GetID())
			}
		}
	}
}

func TestGPUTierStatsAndReserve(t *testing.T) {
	needGPU(t)
	inst := start(t, ``)
	fp, _ := firstFingerprint(t, inst)
	if len(fp.GetDeviceGroup()) == 0 {
		t.Fatal("real NVML reported no GPUs")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stream, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	// Plausible, not exact: bounds any data centre or workstation GPU
	// meets, so that a unit slip (mW for W, bytes for MiB, a sentinel
	// value) fails.
	for _, g := range resp.GetGroups() {
		for id, s := range g.GetInstanceStats() {
			attrs := s.GetStats().GetAttributes()
			p := attrs["power_draw"]
			draw, limit := p.GetFloatNumeratorVal().GetValue(), p.GetFloatDenominatorVal().GetValue()
			if p == nil || p.GetUnit() != "W" || draw <= 0 || draw > 2000 {
				t.Errorf("%s: power_draw %v, want 0 to 2000 W", id, p)
			}
			if limit != 0 && (limit < 10 || limit > 2000 || draw > 1.5*limit) {
				t.Errorf("%s: power draw %.1f W of a %.0f W limit, want a 10 to 2000 W limit and the draw within 1.5 times it", id, draw, limit)
			}
			temp := attrs["temperature"]
			if c := temp.GetIntNumeratorVal().GetValue(); temp == nil || temp.GetUnit() != "C" || c < 5 || c > 110 {
				t.Errorf("%s: temperature %v, want 5 to 110 C", id, temp)
			}
			mem := attrs["memory"]
			used, total := mem.GetIntNumeratorVal().GetValue(), mem.GetIntDenominatorVal().GetValue()
			if mem == nil || mem.GetUnit() != "MiB" || total < 1024 || total > 1<<20 || used < 0 || used > total {
				t.Errorf("%s: memory %d of %d MiB, want a total of 1 GiB to 1 TiB and use within it", id, used, total)
			}
			t.Logf("%s: power %.1f/%.0f W, temperature %d C, memory %d/%d MiB", id, draw, limit,
				temp.GetIntNumeratorVal().GetValue(), used, total)
		}
	}
	first := fp.GetDeviceGroup()[0].GetDevices()[0].GetID()
	res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{first}})
	if err != nil {
		t.Fatal(err)
	}
	envs := res.GetContainerRes().GetEnvs()
	t.Logf("reserve %s: %v", first, envs)
	if envs["LLMGW_GPU_UUIDS"] != first || envs["NVIDIA_VISIBLE_DEVICES"] != first || envs["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" {
		t.Errorf("reserve %s: %v; want its UUID in LLMGW_GPU_UUIDS and NVIDIA_VISIBLE_DEVICES, and CUDA_DEVICE_ORDER=PCI_BUS_ID", first, envs)
	}
	// A whole GPU is a CUDA index (the driver's GPU test checks with CUDA
	// itself that it is the right one), unless the host has MIG on or a
	// GPU NVML cannot describe; a MIG instance is its UUID.
	cvd := envs["CUDA_VISIBLE_DEVICES"]
	if n, err := strconv.Atoi(cvd); (err != nil || n < 0 || n > 63) && cvd != first {
		t.Errorf("CUDA_VISIBLE_DEVICES = %q, want a CUDA index or %s", cvd, first)
	}
	var paths []string
	for _, d := range res.GetContainerRes().GetDevices() {
		paths = append(paths, d.GetHostPath())
	}
	t.Logf("device nodes: %v", paths)
	if len(paths) == 0 || !contains(paths, "/dev/nvidiactl") {
		t.Errorf("reservation lists %v; want /dev/nvidiaN and /dev/nvidiactl on a GPU host", paths)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

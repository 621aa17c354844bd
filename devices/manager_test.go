package devices

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
	hclog "github.com/hashicorp/go-hclog"

	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
)

func testConfig() Config {
	return Config{
		FingerprintPeriod: time.Minute,
		HealthEvents:      true,
		IgnoredXIDs:       DefaultIgnoredXIDs,
		HealthRecovery:    5 * time.Minute,
	}
}

func newMock(t *testing.T, mc MockConfig) *MockNVML {
	t.Helper()
	m, err := NewMockNVML(mc)
	if err != nil {
		t.Fatalf("NewMockNVML: %v", err)
	}
	return m
}

// startManager runs a manager in the test's bubble and returns it with a
// function that stops it.
func startManager(t *testing.T, lib nvml.Interface, cfg Config) (*Manager, func()) {
	t.Helper()
	mgr := NewManager(lib, cfg, hclog.New(&hclog.LoggerOptions{Output: io.Discard}), true)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	return mgr, func() { cancel(); wg.Wait() }
}

// health flattens a fingerprint to id -> "healthy" or the description.
func health(fp *devicepb.FingerprintResponse) map[string]string {
	out := map[string]string{}
	for _, g := range fp.GetDeviceGroup() {
		for _, d := range g.GetDevices() {
			if d.GetHealthy() {
				out[d.GetID()] = "healthy"
			} else {
				out[d.GetID()] = d.GetHealthDescription()
			}
		}
	}
	return out
}

func allHealthy(m *MockNVML) map[string]string {
	out := map[string]string{}
	for _, g := range m.GPUs() {
		out[g.UUID] = "healthy"
	}
	return out
}

func TestInitFailureReportsNoDevices(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		t.Run(nvml.ErrorString(ret), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
				mgr, stop := startManager(t, lib, testConfig())
				defer stop()
				synctest.Wait()
				fp, _, ready := mgr.Current()
				if !ready {
					t.Fatal("no fingerprint published after init failure")
				}
				if n := len(fp.GetDeviceGroup()); n != 0 {
					t.Fatalf("got %d device groups, want 0", n)
				}
			})
		})
	}
}

func TestDeviceErrorMakesItUnhealthyAndBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		fp, changed, _ := mgr.Current()
		if diff := cmp.Diff(allHealthy(m), health(fp)); diff != "" {
			t.Fatalf("initial health (-want +got):\n%s", diff)
		}
		bad := m.GPUs()[3]
		bad.Update(func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST })
		time.Sleep(time.Minute) // one fingerprint period
		synctest.Wait()
		select {
		case <-changed:
		default:
			t.Fatal("no new fingerprint after a device started failing")
		}
		fp, changed, _ = mgr.Current()
		want := allHealthy(m)
		want[bad.UUID] = "NVML: device 3 uuid: " + nvml.ErrorString(nvml.ERROR_GPU_IS_LOST)
		if diff := cmp.Diff(want, health(fp)); diff != "" {
			t.Fatalf("after failure (-want +got):\n%s", diff)
		}
		bad.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case <-changed:
		default:
			t.Fatal("no new fingerprint after the device answered again")
		}
		fp, _, _ = mgr.Current()
		if diff := cmp.Diff(allHealthy(m), health(fp)); diff != "" {
			t.Fatalf("after recovery (-want +got):\n%s", diff)
		}
	})
}

func TestHealthEvents(t *testing.T) {
	tests := []struct {
		name      string
		ev        func(m *MockNVML) nvml.EventData
		unhealthy int    // index of the device that must turn unhealthy; -1 none
		reason    string // its description
	}{
		{
			name: "critical XID",
			ev: func(m *MockNVML) nvml.EventData {
				return nvml.EventData{Device: m.GPUs()[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs}
			},
			unhealthy: 2, reason: "XID 79: GPU has fallen off the bus",
		},
		{
			name: "ignored application XID",
			ev: func(m *MockNVML) nvml.EventData {
				return nvml.EventData{Device: m.GPUs()[2], EventType: nvml.EventTypeXidCriticalError, EventData: 13, GpuInstanceId: allGIs}
			},
			unhealthy: -1,
		},
		{
			name: "double-bit ECC",
			ev: func(m *MockNVML) nvml.EventData {
				return nvml.EventData{Device: m.GPUs()[5], EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: allGIs}
			},
			unhealthy: 5, reason: "double-bit ECC error",
		},
		{
			name: "unknown XID",
			ev: func(m *MockNVML) nvml.EventData {
				return nvml.EventData{Device: m.GPUs()[0], EventType: nvml.EventTypeXidCriticalError, EventData: 999, GpuInstanceId: allGIs}
			},
			unhealthy: 0, reason: "XID 999",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMock(t, MockConfig{System: "dgxh100"})
				mgr, stop := startManager(t, m, testConfig())
				defer stop()
				synctest.Wait()
				m.InjectEvent(tc.ev(m))
				synctest.Wait()
				fp, _, _ := mgr.Current()
				want := allHealthy(m)
				if tc.unhealthy >= 0 {
					want[m.GPUs()[tc.unhealthy].UUID] = tc.reason
				}
				if diff := cmp.Diff(want, health(fp)); diff != "" {
					t.Fatalf("health (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestRecoveryAfterQuietPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxa100"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		gpu := m.GPUs()[1]
		xid := nvml.EventData{Device: gpu, EventType: nvml.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: allGIs}
		m.InjectEvent(xid)
		synctest.Wait()
		time.Sleep(4 * time.Minute)
		m.InjectEvent(xid) // a new event restarts the quiet period
		synctest.Wait()
		time.Sleep(4 * time.Minute)
		synctest.Wait()
		fp, _, _ := mgr.Current()
		if got := health(fp)[gpu.UUID]; got != "XID 94: contained ECC error" {
			t.Fatalf("8 minutes after the first event and 4 after the second: got %q, want still unhealthy", got)
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		fp, _, _ = mgr.Current()
		if diff := cmp.Diff(allHealthy(m), health(fp)); diff != "" {
			t.Fatalf("after the quiet period (-want +got):\n%s", diff)
		}
	})
}

func TestNoRecoveryWhileDeviceStillFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxb200"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		gpu := m.GPUs()[0]
		m.InjectEvent(nvml.EventData{Device: gpu, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs})
		synctest.Wait()
		gpu.Update(func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST })
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		fp, _, _ := mgr.Current()
		if h := health(fp)[gpu.UUID]; h == "healthy" {
			t.Fatal("a device that does not answer NVML recovered")
		}
	})
}

func TestZeroRecoveryKeepsDeviceUnhealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		cfg := testConfig()
		cfg.HealthRecovery = 0
		mgr, stop := startManager(t, m, cfg)
		defer stop()
		synctest.Wait()
		m.InjectEvent(nvml.EventData{Device: m.GPUs()[7], EventType: nvml.EventTypeXidCriticalError, EventData: 92, GpuInstanceId: allGIs})
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		fp, _, _ := mgr.Current()
		if h := health(fp)[m.GPUs()[7].UUID]; h != "XID 92: high single-bit ECC error rate" {
			t.Fatalf("got %q, want still unhealthy", h)
		}
	})
}

func TestHealthEventsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		cfg := testConfig()
		cfg.HealthEvents = false
		mgr, stop := startManager(t, m, cfg)
		defer stop()
		synctest.Wait()
		// Nobody reads the event set; the event stays queued and changes nothing.
		m.InjectEvent(nvml.EventData{Device: m.GPUs()[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs})
		synctest.Wait()
		fp, _, _ := mgr.Current()
		if diff := cmp.Diff(allHealthy(m), health(fp)); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
}

func TestMIGEventMarksOneInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200", MIG: map[string][]string{"0": {"3g.71gb", "3g.71gb"}}})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		parent := m.GPUs()[0]
		giID, _ := parent.MIG[1].GetGpuInstanceId()
		m.InjectEvent(nvml.EventData{Device: parent, EventType: nvml.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: uint32(giID)})
		synctest.Wait()
		fp, _, _ := mgr.Current()
		h := health(fp)
		u0, _ := parent.MIG[0].GetUUID()
		u1, _ := parent.MIG[1].GetUUID()
		if h[u0] != "healthy" || h[u1] != "XID 94: contained ECC error" {
			t.Fatalf("MIG health: %s=%q %s=%q", u0, h[u0], u1, h[u1])
		}
		if _, ok := h[parent.UUID]; ok {
			t.Fatalf("MIG parent %s is offered as a device", parent.UUID)
		}
	})
}

func TestReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200", Seed: "n1"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		g := m.GPUs()
		res, err := mgr.Reserve([]string{g[5].UUID, g[2].UUID})
		if err != nil {
			t.Fatal(err)
		}
		list := g[2].UUID + "," + g[5].UUID
		want := Reservation{Envs: map[string]string{
			"CUDA_VISIBLE_DEVICES": "2,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
			"NVIDIA_VISIBLE_DEVICES": list, "LLMGW_GPU_UUIDS": list, "LLMGW_GPU_GROUP": "nvidia/gpu/NVIDIA H200",
		}}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
		_, err = mgr.Reserve([]string{g[0].UUID, "GPU-nope"})
		if err == nil || !strings.Contains(err.Error(), "unknown device: GPU-nope") {
			t.Fatalf("got %v, want unknown device error", err)
		}
	})
}

// TestReserveNumbersByPCIBus: CUDA's index (CUDA_DEVICE_ORDER=PCI_BUS_ID)
// is the GPU's rank by PCI bus id among every GPU NVML lists, ignored ones
// included, whatever NVML's own index.
func TestReserveNumbersByPCIBus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200", Seed: "n1"})
		g := m.GPUs()
		// NVML index 0 sits on the highest bus; the others keep theirs.
		g[0].PciBusID = "00000000:F0:00.0"
		cfg := testConfig()
		cfg.IgnoredGPUIDs = []string{g[1].UUID}
		mgr, stop := startManager(t, m, cfg)
		defer stop()
		synctest.Wait()
		res, err := mgr.Reserve([]string{g[0].UUID, g[3].UUID})
		if err != nil {
			t.Fatal(err)
		}
		// Bus order: 1 2 3 4 5 6 7 0, so GPU 3 is CUDA 2 and GPU 0 is CUDA 7.
		if got := res.Envs["CUDA_VISIBLE_DEVICES"]; got != "2,7" {
			t.Errorf("CUDA_VISIBLE_DEVICES = %q, want 2,7", got)
		}
		if got, want := res.Envs["LLMGW_GPU_UUIDS"], g[3].UUID+","+g[0].UUID; got != want {
			t.Errorf("LLMGW_GPU_UUIDS = %q, want %q (CUDA's order)", got, want)
		}
	})
}

// TestReserveMIG: MIG instances go by UUID, all of them (a plain process
// per instance may use them); and on a host with a MIG-enabled GPU the
// whole GPUs go by UUID too.
func TestReserveMIG(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200", MIG: map[string][]string{"0": {"3g.71gb", "3g.71gb"}}})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		mig0, _ := m.GPUs()[0].MIG[0].GetUUID()
		mig1, _ := m.GPUs()[0].MIG[1].GetUUID()
		res, err := mgr.Reserve([]string{mig1, mig0})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"CUDA_VISIBLE_DEVICES": mig0 + "," + mig1, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
			"NVIDIA_VISIBLE_DEVICES": mig0 + "," + mig1, "LLMGW_GPU_UUIDS": mig0 + "," + mig1,
			"LLMGW_GPU_GROUP": "nvidia/gpu/NVIDIA H200 MIG 3g.71gb",
		}
		if diff := cmp.Diff(want, res.Envs); diff != "" {
			t.Errorf("two MIG instances (-want +got):\n%s", diff)
		}
		whole := m.GPUs()[4].UUID
		res, err = mgr.Reserve([]string{whole})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Envs["CUDA_VISIBLE_DEVICES"]; got != whole {
			t.Errorf("whole GPU beside a MIG-enabled one: CUDA_VISIBLE_DEVICES = %q, want its UUID", got)
		}
	})
}

// TestReserveWhileAGPUIsLost: with a GPU not answering NVML, CUDA may not
// count it, so indices past it could name the wrong GPU: whole GPUs go by
// UUID until it answers again.
func TestReserveWhileAGPUIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		g := m.GPUs()
		g[2].Update(func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST })
		time.Sleep(time.Minute) // the next scan
		synctest.Wait()
		res, err := mgr.Reserve([]string{g[5].UUID})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Envs["CUDA_VISIBLE_DEVICES"]; got != g[5].UUID {
			t.Errorf("CUDA_VISIBLE_DEVICES = %q while GPU 2 is lost, want GPU 5's UUID", got)
		}
		g[2].Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
		time.Sleep(time.Minute)
		synctest.Wait()
		if res, _ := mgr.Reserve([]string{g[5].UUID}); res.Envs["CUDA_VISIBLE_DEVICES"] != "5" {
			t.Errorf("CUDA_VISIBLE_DEVICES = %q once GPU 2 is back, want 5", res.Envs["CUDA_VISIBLE_DEVICES"])
		}
	})
}

func TestReserveListsHostDeviceNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		present := map[string]bool{"/dev/nvidia1": true, "/dev/nvidia4": true, "/dev/nvidiactl": true, "/dev/nvidia-uvm": true}
		mgr.devExists = func(p string) bool { return present[p] }
		g := m.GPUs()
		res, err := mgr.Reserve([]string{g[4].UUID, g[1].UUID})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"/dev/nvidia1", "/dev/nvidia4", "/dev/nvidiactl", "/dev/nvidia-uvm"}
		if diff := cmp.Diff(want, res.Devices); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
}

func TestPowerLimitAttributeIgnoresCaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		before, _, _ := mgr.Current()
		for _, g := range m.GPUs() {
			if ret := g.SetPowerManagementLimit(400000); ret != nvml.SUCCESS {
				t.Fatalf("set 400 W on %s: %s", g.UUID, nvml.ErrorString(ret))
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		fp, _, _ := mgr.Current()
		if got := fp.GetDeviceGroup()[0].GetAttributes()["power_limit"].GetIntVal(); got != 700 {
			t.Fatalf("power_limit with every GPU capped at 400 W: got %d, want the default 700", got)
		}
		if fp != before {
			t.Fatalf("a cap changed the fingerprint:\nbefore %v\nafter  %v", before, fp)
		}
	})
}

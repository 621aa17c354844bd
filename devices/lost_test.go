package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// feedFile runs the mock's events-file reader on a fresh file in the
// bubble and returns a function appending text to it.
func feedFile(t *testing.T, m *MockNVML) func(text string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events")
	ctx, cancel := context.WithCancel(t.Context())
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		m.FeedEvents(ctx, path, hclog.NewNullLogger())
	}()
	t.Cleanup(func() { cancel(); <-fed })
	return func(text string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(text); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// The chaos run's sequence on a four-GPU node: "xid 79" and "lost" for one
// GPU land in the events file within one poll, "reset" comes later. The
// reader queues the XID event and makes the GPU lost at once, so the
// manager reads the event of a GPU that no longer answers NVML. The victim
// must come back after its reset, and the other three must never be marked.
func TestXIDThenLostInOnePollLeavesOthersHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		four := 4
		m := newMock(t, MockConfig{System: "dgxh100", GPUs: &four})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		appendText := feedFile(t, m)
		synctest.Wait()
		victim := m.GPUs()[1]
		appendText(victim.UUID + " xid 79\n" + victim.UUID + " lost\n")
		time.Sleep(time.Second) // polled twice a second
		synctest.Wait()
		settle()
		fp, _, _ := mgr.Current()
		want := allHealthy(m)
		want[victim.UUID] = "NVML: device 1 uuid: " + nvml.ErrorString(nvml.ERROR_GPU_IS_LOST)
		if diff := cmp.Diff(want, health(fp)); diff != "" {
			t.Fatalf("after xid 79 and lost (-want +got):\n%s", diff)
		}
		appendText(victim.UUID + " reset\n")
		time.Sleep(time.Second)
		synctest.Wait()
		settle()
		time.Sleep(time.Hour) // health_recovery many times over
		synctest.Wait()
		fp, _, _ = mgr.Current()
		if diff := cmp.Diff(allHealthy(m), health(fp)); diff != "" {
			t.Fatalf("after reset and an hour (-want +got):\n%s", diff)
		}
	})
}

// unknownHandle is an event's device handle that matches none the plugin
// scanned and answers nothing: all NVML gives of a GPU it has lost track
// of.
func unknownHandle() nvml.Device {
	return &mock.Device{
		GetUUIDFunc:    func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST },
		GetIndexFunc:   func() (int, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST },
	}
}

// A fatal event whose GPU does not answer NVML any more (it fell off the
// bus) marks that GPU only, whether the event names it by a handle that
// still matches or not at all, and the mark clears once the GPU is back:
// no GPU is left unhealthy for good.
func TestFatalEventOfGoneGPUMarksOnlyIt(t *testing.T) {
	tests := []struct {
		name   string
		mc     MockConfig
		victim int // index of the GPU that goes
		// gone takes the victim away the way NVML shows it; the returned
		// function brings it back.
		gone func(m *MockNVML, victim *MockGPU) (back func())
		ev   func(victim *MockGPU) nvml.EventData
	}{
		{
			name:   "its own handle",
			mc:     MockConfig{System: "dgxh100"},
			victim: 3,
			gone:   lose(nvml.ERROR_GPU_IS_LOST),
			ev:     func(v *MockGPU) nvml.EventData { return xidEvent(v, 79) },
		},
		{
			name:   "its own handle, reset required",
			mc:     MockConfig{System: "dgxh100"},
			victim: 3,
			gone:   lose(nvml.ERROR_RESET_REQUIRED),
			ev:     func(v *MockGPU) nvml.EventData { return xidEvent(v, 48) },
		},
		{
			name:   "a handle that names nothing",
			mc:     MockConfig{System: "dgxa100"},
			victim: 3,
			gone:   lose(nvml.ERROR_GPU_IS_LOST),
			ev: func(*MockGPU) nvml.EventData {
				return nvml.EventData{Device: unknownHandle(), EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs}
			},
		},
		{
			name:   "no device",
			mc:     MockConfig{System: "dgxb200"},
			victim: 3,
			gone:   lose(nvml.ERROR_GPU_IS_LOST),
			ev: func(*MockGPU) nvml.EventData {
				return nvml.EventData{EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: allGIs}
			},
		},
		{
			name:   "no device, MIG board",
			mc:     MockConfig{System: "dgxh200", MIG: map[string][]string{"3": {"3g.71gb", "3g.71gb"}}},
			victim: 3,
			gone:   lose(nvml.ERROR_GPU_IS_LOST),
			ev: func(*MockGPU) nvml.EventData {
				return nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs}
			},
		},
		{
			name:   "no device, GPU missing from NVML's list",
			mc:     MockConfig{System: "dgxh100"},
			victim: 7,
			gone: func(m *MockNVML, v *MockGPU) func() {
				n := len(m.GPUs())
				if m.GPUs()[n-1] != v {
					panic("the missing GPU must be the last")
				}
				var mu sync.Mutex
				count := n - 1
				m.DeviceGetCountFunc = func() (int, nvml.Return) {
					mu.Lock()
					defer mu.Unlock()
					return count, nvml.SUCCESS
				}
				return func() {
					mu.Lock()
					defer mu.Unlock()
					count = n
				}
			},
			ev: func(*MockGPU) nvml.EventData {
				return nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMock(t, tc.mc)
				victim := m.GPUs()[tc.victim]
				want := healthyDevices(t, m)
				mgr, stop := startManager(t, m, testConfig())
				defer stop()
				synctest.Wait()
				victimDevs := onBoard(m, victim)

				back := tc.gone(m, victim)
				m.InjectEvent(tc.ev(victim))
				synctest.Wait()
				settle()
				got := health(currentFP(mgr))
				for id, h := range want {
					if victimDevs[id] {
						if got[id] == "healthy" {
							t.Errorf("%s on the gone GPU: healthy", id)
						}
						continue
					}
					if got[id] != h {
						t.Errorf("%s (another GPU): %q, want %q", id, got[id], h)
					}
				}
				if t.Failed() {
					t.FailNow()
				}

				back()
				settle()
				time.Sleep(time.Hour) // health_recovery many times over
				synctest.Wait()
				if diff := cmp.Diff(want, health(currentFP(mgr))); diff != "" {
					t.Fatalf("after the GPU came back and an hour (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func lose(ret nvml.Return) func(*MockNVML, *MockGPU) func() {
	return func(_ *MockNVML, v *MockGPU) func() {
		v.Update(func(g *MockGPU) { g.Err = ret })
		return func() { v.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS }) }
	}
}

func currentFP(mgr *Manager) *devicepb.FingerprintResponse {
	fp, _, _ := mgr.Current()
	return fp
}

// healthyDevices is every device the mock offers (MIG instances for a MIG
// board), healthy.
func healthyDevices(t *testing.T, m *MockNVML) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range m.GPUs() {
		if len(g.MIG) == 0 {
			out[g.UUID] = "healthy"
		}
		for _, mig := range g.MIG {
			u, _ := mig.GetUUID()
			out[u] = "healthy"
		}
	}
	return out
}

// onBoard is the set of device IDs offered on the physical GPU g.
func onBoard(m *MockNVML, g *MockGPU) map[string]bool {
	out := map[string]bool{g.UUID: true}
	for _, mig := range g.MIG {
		u, _ := mig.GetUUID()
		out[u] = true
	}
	return out
}

// An event whose handle's UUID query fails for another reason than the GPU
// being gone is still tied to its GPU: by the handle, or by the PCI bus id
// or index the handle still answers. Only that GPU is marked.
func TestEventIdentifiedWithoutUUID(t *testing.T) {
	tests := []struct {
		name string
		ev   func(m *MockNVML, victim *MockGPU) nvml.EventData
	}{
		{"by its handle", func(_ *MockNVML, v *MockGPU) nvml.EventData {
			v.Update(func(g *MockGPU) { g.Err = nvml.ERROR_UNKNOWN })
			return xidEvent(v, 79)
		}},
		{"by PCI bus id", func(_ *MockNVML, v *MockGPU) nvml.EventData {
			bus := v.PciBusID
			dev := unknownHandle().(*mock.Device)
			dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
				var p nvml.PciInfo
				for i := 0; i < len(bus); i++ {
					p.BusId[i] = int8(bus[i])
				}
				return p, nvml.SUCCESS
			}
			return nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs}
		}},
		{"by index", func(_ *MockNVML, v *MockGPU) nvml.EventData {
			dev := unknownHandle().(*mock.Device)
			dev.GetIndexFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
			return nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMock(t, MockConfig{System: "dgxh200"})
				mgr, stop := startManager(t, m, testConfig())
				defer stop()
				synctest.Wait()
				victim := m.GPUs()[5]
				m.InjectEvent(tc.ev(m, victim))
				synctest.Wait()
				victim.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
				settle()
				want := allHealthy(m)
				want[victim.UUID] = "XID 79: GPU has fallen off the bus"
				if diff := cmp.Diff(want, health(currentFP(mgr))); diff != "" {
					t.Fatalf("(-want +got):\n%s", diff)
				}
			})
		})
	}
}

// An event NVML ties to no GPU, while no GPU is gone, marks every GPU, but
// transiently: health_recovery ends it once they answer, even for a fatal
// XID. A GPU that is gone, even an ignored one, is what such an event is
// about, and the offered GPUs stay healthy.
func TestUnidentifiedEvent(t *testing.T) {
	t.Run("nothing gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMock(t, MockConfig{System: "dgxh100"})
			mgr, stop := startManager(t, m, testConfig())
			defer stop()
			synctest.Wait()
			m.InjectEvent(nvml.EventData{Device: unknownHandle(), EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs})
			synctest.Wait()
			want := map[string]string{}
			for _, g := range m.GPUs() {
				want[g.UUID] = "XID 79: GPU has fallen off the bus (unidentified GPU)"
			}
			if diff := cmp.Diff(want, health(currentFP(mgr))); diff != "" {
				t.Fatalf("after the event (-want +got):\n%s", diff)
			}
			time.Sleep(4 * time.Minute)
			synctest.Wait()
			if diff := cmp.Diff(want, health(currentFP(mgr))); diff != "" {
				t.Fatalf("before health_recovery (-want +got):\n%s", diff)
			}
			time.Sleep(time.Minute + time.Second)
			synctest.Wait()
			if diff := cmp.Diff(allHealthy(m), health(currentFP(mgr))); diff != "" {
				t.Fatalf("after health_recovery (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("an ignored GPU gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMock(t, MockConfig{System: "dgxh100"})
			ignored := m.GPUs()[6]
			cfg := testConfig()
			cfg.IgnoredGPUIDs = []string{ignored.UUID}
			mgr, stop := startManager(t, m, cfg)
			defer stop()
			synctest.Wait()
			ignored.Update(func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST })
			m.InjectEvent(nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs})
			synctest.Wait()
			want := allHealthy(m)
			delete(want, ignored.UUID)
			if diff := cmp.Diff(want, health(currentFP(mgr))); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	})
}

// lostWait wraps the mock's event set so that the test can make one Wait
// return GPU_IS_LOST, as NVML's wait does when a GPU has fallen off the bus.
func lostWait(m *MockNVML) chan<- struct{} {
	lost := make(chan struct{}, 1)
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				t := time.NewTimer(time.Duration(ms) * time.Millisecond)
				defer t.Stop()
				select {
				case <-lost:
					return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
				case ev := <-m.events:
					return ev, nvml.SUCCESS
				case <-t.C:
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return lost
}

// The event wait's GPU_IS_LOST marks the GPU NVML shows gone, and that mark
// clears when it is back; with no GPU gone it marks every GPU transiently.
func TestEventWaitGPUIsLost(t *testing.T) {
	t.Run("one GPU gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMock(t, MockConfig{System: "dgxh200"})
			lost := lostWait(m)
			mgr, stop := startManager(t, m, testConfig())
			defer stop()
			synctest.Wait()
			victim := m.GPUs()[2]
			victim.Update(func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST })
			lost <- struct{}{}
			synctest.Wait()
			settle()
			want := allHealthy(m)
			want[victim.UUID] = "NVML: device 2 uuid: " + nvml.ErrorString(nvml.ERROR_GPU_IS_LOST)
			if diff := cmp.Diff(want, health(currentFP(mgr))); diff != "" {
				t.Fatalf("while gone (-want +got):\n%s", diff)
			}
			victim.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
			settle()
			time.Sleep(time.Hour)
			synctest.Wait()
			if diff := cmp.Diff(allHealthy(m), health(currentFP(mgr))); diff != "" {
				t.Fatalf("after it came back and an hour (-want +got):\n%s", diff)
			}
		})
	})
	t.Run("nothing gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newMock(t, MockConfig{System: "dgxa100"})
			lost := lostWait(m)
			mgr, stop := startManager(t, m, testConfig())
			defer stop()
			synctest.Wait()
			lost <- struct{}{}
			synctest.Wait()
			want := map[string]string{}
			for _, g := range m.GPUs() {
				want[g.UUID] = "NVML: GPU is lost (unidentified GPU)"
			}
			if diff := cmp.Diff(want, health(currentFP(mgr))); diff != "" {
				t.Fatalf("after the wait (-want +got):\n%s", diff)
			}
			time.Sleep(5*time.Minute + time.Second)
			synctest.Wait()
			if diff := cmp.Diff(allHealthy(m), health(currentFP(mgr))); diff != "" {
				t.Fatalf("after health_recovery (-want +got):\n%s", diff)
			}
		})
	})
}

// The events-file reader applies each line once, in order, across polls:
// nothing read before is sent again.
func TestEventsFileAppliesEachLineOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh100"})
		appendText := feedFile(t, m)
		synctest.Wait()
		g := m.GPUs()
		appendText(g[0].UUID + " xid 79\n" + g[0].UUID + " lost\n")
		time.Sleep(time.Second)
		synctest.Wait()
		appendText(g[1].UUID + " xid 94\n" + g[0].UUID + " reset\n" + g[2].UUID + " ecc")
		time.Sleep(time.Second)
		synctest.Wait()
		appendText("\n")
		time.Sleep(5 * time.Second) // ten more polls
		synctest.Wait()
		var got []string
		for len(m.events) > 0 {
			ev := <-m.events
			got = append(got, fmt.Sprintf("%s %d/%d", ev.Device.(*MockGPU).UUID, ev.EventType, ev.EventData))
		}
		want := []string{
			fmt.Sprintf("%s %d/79", g[0].UUID, nvml.EventTypeXidCriticalError),
			fmt.Sprintf("%s %d/94", g[1].UUID, nvml.EventTypeXidCriticalError),
			fmt.Sprintf("%s %d/0", g[2].UUID, nvml.EventTypeDoubleBitEccError),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("events sent (-want +got):\n%s", diff)
		}
		if _, ret := g[0].GetUUID(); ret != nvml.SUCCESS {
			t.Fatalf("after lost then reset: %s, want it answering", nvml.ErrorString(ret))
		}
	})
}

// The read that found a GPU gone for an event that named none is the
// "gone" half of the reset: a GPU back and clean at the next scan clears,
// even when no scan saw it gone.
func TestGoneReadCountsAsResetSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh100"})
		victim := m.GPUs()[4]
		// Once armed, the next UUID query of the victim, the plugin's read
		// after the event, finds it gone; it answers again right after.
		var mu sync.Mutex
		armed := false
		orig := victim.GetUUIDFunc
		victim.GetUUIDFunc = func() (string, nvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if armed {
				armed = false
				return "", nvml.ERROR_GPU_IS_LOST
			}
			return orig()
		}
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		mu.Lock()
		armed = true
		mu.Unlock()
		m.InjectEvent(nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: allGIs})
		synctest.Wait()
		mu.Lock()
		read := !armed
		mu.Unlock()
		if !read {
			t.Fatal("the event did not make the plugin ask NVML about the GPUs")
		}
		settle()
		if diff := cmp.Diff(allHealthy(m), health(currentFP(mgr))); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
}

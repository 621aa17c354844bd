package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	hclog "github.com/hashicorp/go-hclog"

	"github.com/llmgw/llmgw/nomadplugin/hclspec"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
)

// These tests run in synctest bubbles: time.Sleep advances the bubble's fake
// clock at once, and synctest.Wait returns when every goroutine of the
// manager is blocked, so each assertion sees a settled state. Nothing here
// waits on the wall clock.

func xidEvent(g *MockGPU, xid uint64) nvml.EventData {
	return nvml.EventData{Device: g, EventType: nvml.EventTypeXidCriticalError, EventData: xid, GpuInstanceId: allGIs}
}

// settle lets one fingerprint period pass, so the manager rescans NVML.
func settle() {
	time.Sleep(time.Minute)
	synctest.Wait()
}

func healthOf(mgr *Manager, uuid string) string {
	fp, _, _ := mgr.Current()
	return health(fp)[uuid]
}

func TestClassifyXID(t *testing.T) {
	for xid, want := range map[uint64]XIDClass{
		13: XIDApplication, 31: XIDApplication, 43: XIDApplication, 45: XIDApplication,
		48: XIDFatal, 63: XIDFatal, 64: XIDFatal, 74: XIDFatal, 79: XIDFatal, 95: XIDFatal,
		119: XIDFatal, 120: XIDFatal, 140: XIDFatal, 154: XIDFatal,
		92: XIDTransient, 94: XIDTransient, 121: XIDTransient, 999: XIDTransient,
	} {
		if got := ClassifyXID(xid); got != want {
			t.Errorf("XID %d: class %s, want %s", xid, got, want)
		}
	}
	// The default ignored_xids are exactly the application class.
	var app []uint64
	for xid, i := range xids {
		if i.class == XIDApplication {
			app = append(app, xid)
		}
	}
	def := append([]uint64(nil), DefaultIgnoredXIDs...)
	slices.Sort(def)
	slices.Sort(app)
	if diff := cmp.Diff(def, app); diff != "" {
		t.Errorf("DefaultIgnoredXIDs vs application XIDs (-default +application):\n%s", diff)
	}
}

// A fatal XID outlives health_recovery many times over while the GPU keeps
// answering NVML; a transient one recovers once health_recovery has passed.
func TestFatalXIDDoesNotRecoverByTimer(t *testing.T) {
	tests := []struct {
		name    string
		ev      func(g *MockGPU) nvml.EventData
		reason  string
		recover bool
	}{
		{"XID 79", func(g *MockGPU) nvml.EventData { return xidEvent(g, 79) }, "XID 79: GPU has fallen off the bus", false},
		{"XID 48", func(g *MockGPU) nvml.EventData { return xidEvent(g, 48) }, "XID 48: double-bit ECC error", false},
		{"XID 95", func(g *MockGPU) nvml.EventData { return xidEvent(g, 95) }, "XID 95: uncontained ECC error", false},
		{"XID 119", func(g *MockGPU) nvml.EventData { return xidEvent(g, 119) }, "XID 119: GSP RPC timeout", false},
		{"XID 74", func(g *MockGPU) nvml.EventData { return xidEvent(g, 74) }, "XID 74: NVLink error", false},
		{"double-bit ECC event", func(g *MockGPU) nvml.EventData {
			return nvml.EventData{Device: g, EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: allGIs}
		}, "double-bit ECC error", false},
		{"XID 94 (transient)", func(g *MockGPU) nvml.EventData { return xidEvent(g, 94) }, "XID 94: contained ECC error", true},
		{"unknown XID (transient)", func(g *MockGPU) nvml.EventData { return xidEvent(g, 999) }, "XID 999", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMock(t, MockConfig{System: "dgxh100"})
				mgr, stop := startManager(t, m, testConfig())
				defer stop()
				synctest.Wait()
				gpu := m.GPUs()[3]
				m.InjectEvent(tc.ev(gpu))
				synctest.Wait()
				if got := healthOf(mgr, gpu.UUID); got != tc.reason {
					t.Fatalf("after the event: %q, want %q", got, tc.reason)
				}
				// health_recovery is 5m: an hour is twelve of them, with a
				// rescan every minute, and the GPU answers NVML throughout.
				time.Sleep(time.Hour)
				synctest.Wait()
				got := healthOf(mgr, gpu.UUID)
				if tc.recover && got != "healthy" {
					t.Fatalf("transient event: %q an hour later, want healthy", got)
				}
				if !tc.recover && got != tc.reason {
					t.Fatalf("fatal event: %q an hour later, want still %q", got, tc.reason)
				}
			})
		})
	}
}

// A fatal XID clears only when a scan has seen the GPU gone (GPU_IS_LOST or
// RESET_REQUIRED) and a later scan finds it answering with nothing pending:
// the reset, as NVML shows it.
func TestFatalXIDClearsAfterResetSeen(t *testing.T) {
	for _, lost := range []nvml.Return{nvml.ERROR_GPU_IS_LOST, nvml.ERROR_RESET_REQUIRED} {
		t.Run(nvml.ErrorString(lost), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMock(t, MockConfig{System: "dgxh200"})
				mgr, stop := startManager(t, m, testConfig())
				defer stop()
				synctest.Wait()
				gpu := m.GPUs()[2]
				m.InjectEvent(xidEvent(gpu, 79))
				synctest.Wait()

				// An NVML failure that is not "gone" is no reset.
				gpu.Update(func(g *MockGPU) { g.Err = nvml.ERROR_UNKNOWN })
				settle()
				gpu.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
				settle()
				if got := healthOf(mgr, gpu.UUID); got != "XID 79: GPU has fallen off the bus" {
					t.Fatalf("after an UNKNOWN error and back: %q, want still XID 79", got)
				}

				gpu.Update(func(g *MockGPU) { g.Err = lost })
				settle()
				if got := healthOf(mgr, gpu.UUID); got == "healthy" {
					t.Fatal("healthy while NVML says the GPU is gone")
				}
				gpu.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
				settle()
				fp, _, _ := mgr.Current()
				if diff := cmp.Diff(allHealthy(m), health(fp)); diff != "" {
					t.Fatalf("after the GPU came back (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// The same, with the reset shown by NVML's pending row remapping: XID 95
// leaves a remapping pending, which only a GPU reset applies.
func TestFatalXIDClearsWhenPendingRemapIsApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxa100"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		gpu := m.GPUs()[5]
		gpu.Update(func(g *MockGPU) { g.RemapPending = true })
		m.InjectEvent(xidEvent(gpu, 95))
		synctest.Wait()
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := healthOf(mgr, gpu.UUID); got != "XID 95: uncontained ECC error" {
			t.Fatalf("an hour later, remap still pending: %q, want XID 95", got)
		}
		gpu.Update(func(g *MockGPU) { g.RemapPending = false }) // the reset
		settle()
		if got := healthOf(mgr, gpu.UUID); got != "healthy" {
			t.Fatalf("after the reset applied the remap: %q, want healthy", got)
		}
	})
}

// A reset seen before a new fatal XID does not clear the new one.
func TestNewFatalXIDStartsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh100"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		gpu := m.GPUs()[0]
		m.InjectEvent(xidEvent(gpu, 79))
		synctest.Wait()
		gpu.Update(func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST })
		settle()
		gpu.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
		m.InjectEvent(xidEvent(gpu, 120)) // before any scan saw it back
		synctest.Wait()
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := healthOf(mgr, gpu.UUID); got != "XID 120: GSP error" {
			t.Fatalf("got %q, want XID 120 kept: no reset was seen after it", got)
		}
	})
}

// A scan that read NVML before a fatal XID arrived says nothing about the
// GPU after it: its "awaiting reset" state does not count as the reset.
func TestScanBeforeFatalXIDIsNoEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh100"})
		victim, last := m.GPUs()[0], m.GPUs()[7]
		// Hold a scan inside NVML at the last GPU, after it has read the
		// victim.
		var armed sync.Mutex
		hold := false
		entered, proceed := make(chan struct{}), make(chan struct{})
		orig := last.GetUUIDFunc
		last.GetUUIDFunc = func() (string, nvml.Return) {
			armed.Lock()
			h := hold
			hold = false
			armed.Unlock()
			if h {
				entered <- struct{}{}
				<-proceed
			}
			return orig()
		}
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()

		victim.Update(func(g *MockGPU) { g.RemapPending = true })
		armed.Lock()
		hold = true
		armed.Unlock()
		time.Sleep(time.Minute) // the next scan starts, reads the victim pending, and holds
		<-entered
		m.InjectEvent(xidEvent(victim, 95))
		synctest.Wait()
		victim.Update(func(g *MockGPU) { g.RemapPending = false })
		close(proceed)
		synctest.Wait()
		settle()
		if got := healthOf(mgr, victim.UUID); got != "XID 95: uncontained ECC error" {
			t.Fatalf("got %q, want XID 95 kept: no scan after it saw the GPU awaiting reset", got)
		}
	})
}

// A transient event does not soften a fatal mark into one a timer clears.
func TestTransientEventKeepsFatalMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh100"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		gpu := m.GPUs()[6]
		m.InjectEvent(xidEvent(gpu, 79))
		synctest.Wait()
		m.InjectEvent(xidEvent(gpu, 94))
		synctest.Wait()
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := healthOf(mgr, gpu.UUID); got != "XID 79: GPU has fallen off the bus" {
			t.Fatalf("got %q, want the fatal XID 79 kept", got)
		}
	})
}

// A fatal XID on one MIG instance clears when its parent board is seen
// gone and back.
func TestFatalXIDOnMIGInstanceClearsAfterParentReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200", MIG: map[string][]string{"1": {"3g.71gb", "3g.71gb"}}})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		parent := m.GPUs()[1]
		giID, _ := parent.MIG[0].GetGpuInstanceId()
		u0, _ := parent.MIG[0].GetUUID()
		m.InjectEvent(nvml.EventData{Device: parent, EventType: nvml.EventTypeXidCriticalError, EventData: 95, GpuInstanceId: uint32(giID)})
		synctest.Wait()
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := healthOf(mgr, u0); got != "XID 95: uncontained ECC error" {
			t.Fatalf("an hour later: %q, want XID 95", got)
		}
		parent.Update(func(g *MockGPU) { g.Err = nvml.ERROR_GPU_IS_LOST })
		settle()
		parent.Update(func(g *MockGPU) { g.Err = nvml.SUCCESS })
		settle()
		if got := healthOf(mgr, u0); got != "healthy" {
			t.Fatalf("after the parent was gone and back: %q, want healthy", got)
		}
	})
}

// A new manager (a restarted plugin) has no memory of XIDs; what it keeps
// unhealthy is what NVML itself still shows.
func TestRestartSeesOnlyNVMLTraces(t *testing.T) {
	tests := []struct {
		name    string
		set     func(g *MockGPU)
		ignored []uint64
		want    string
	}{
		{"nothing pending", func(*MockGPU) {}, nil, "healthy"},
		{"remap pending", func(g *MockGPU) { g.RemapPending = true }, nil, "NVML: row remapping pending until GPU reset (XID 63)"},
		{"remap pending, 63 ignored", func(g *MockGPU) { g.RemapPending = true }, []uint64{63}, "healthy"},
		{"retirement pending", func(g *MockGPU) { g.RetirePending = true }, nil, "NVML: page retirement pending until driver reload (XID 63)"},
		{"remap failed", func(g *MockGPU) { g.RemapFailed = true }, nil, "NVML: a row remapping failed on this GPU (XID 64)"},
		{"recovery action", func(g *MockGPU) { g.Recovery = nvml.GPU_RECOVERY_ACTION_GPU_RESET }, nil, "NVML: recovery action required: GPU reset (XID 154)"},
		{"recovery action, 154 ignored", func(g *MockGPU) { g.Recovery = nvml.GPU_RECOVERY_ACTION_NODE_REBOOT }, []uint64{154}, "healthy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newMock(t, MockConfig{System: "dgxh200"})
				gpu := m.GPUs()[4]
				// The first plugin process marks the GPU with a fatal XID.
				first, stop := startManager(t, m, testConfig())
				synctest.Wait()
				m.InjectEvent(xidEvent(gpu, 119))
				synctest.Wait()
				if got := healthOf(first, gpu.UUID); got != "XID 119: GSP RPC timeout" {
					t.Fatalf("first process: %q", got)
				}
				stop()
				gpu.Update(tc.set)
				cfg := testConfig()
				cfg.IgnoredXIDs = append(append([]uint64(nil), cfg.IgnoredXIDs...), tc.ignored...)
				second, stop := startManager(t, m, cfg)
				defer stop()
				synctest.Wait()
				if got := healthOf(second, gpu.UUID); got != tc.want {
					t.Fatalf("restarted: %q, want %q", got, tc.want)
				}
			})
		})
	}
}

func TestTraceAppearsAndClears(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxb200"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		synctest.Wait()
		gpu := m.GPUs()[1]
		gpu.Update(func(g *MockGPU) { g.Recovery = nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET })
		settle()
		if got := healthOf(mgr, gpu.UUID); got != "NVML: recovery action required: drain and GPU reset (XID 154)" {
			t.Fatalf("got %q", got)
		}
		gpu.Update(func(g *MockGPU) { g.Recovery = nvml.GPU_RECOVERY_ACTION_NONE })
		settle()
		if got := healthOf(mgr, gpu.UUID); got != "healthy" {
			t.Fatalf("after the recovery action was done: %q, want healthy", got)
		}
	})
}

// SetConfig again in the same process keeps a fatal mark: only a new
// process starts clean.
func TestReconfigureKeepsFatalMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		events := filepath.Join(t.TempDir(), "events")
		body := fmt.Sprintf(`
mock {
  system      = "dgxh100"
  seed        = "r"
  events_file = %q
}`, events)
		data, err := hclspec.EncodeHCL(ConfigSpec(), "config.hcl", []byte(body), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		p := NewPlugin(ctx, hclog.NewNullLogger(), "test", nil)
		defer func() {
			cancel()
			p.mu.Lock()
			done := p.done
			p.mu.Unlock()
			if done != nil {
				<-done
			}
		}()
		configure := func() *Manager {
			t.Helper()
			if _, err := p.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: data}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			mgr, err := p.manager()
			if err != nil {
				t.Fatal(err)
			}
			return mgr
		}
		mgr := configure()
		fp, _, _ := mgr.Current()
		victim := fp.GetDeviceGroup()[0].GetDevices()[2].GetID()
		if err := os.WriteFile(events, []byte(victim+" xid 79\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the events file is polled twice a second
		synctest.Wait()
		if got := healthOf(mgr, victim); got != "XID 79: GPU has fallen off the bus" {
			t.Fatalf("after the event: %q", got)
		}
		mgr = configure()
		if got := healthOf(mgr, victim); got != "XID 79: GPU has fallen off the bus" {
			t.Fatalf("after SetConfig again: %q, want XID 79 kept", got)
		}
	})
}

// The mock's events file can take a GPU through a fatal XID, its loss and
// its reset, so demos and end-to-end tests can show the whole path.
func TestEventsFileLostAndReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		mgr, stop := startManager(t, m, testConfig())
		defer stop()
		path := filepath.Join(t.TempDir(), "events")
		ctx, cancel := context.WithCancel(t.Context())
		fed := make(chan struct{})
		go func() {
			defer close(fed)
			m.FeedEvents(ctx, path, hclog.NewNullLogger())
		}()
		defer func() { cancel(); <-fed }()
		synctest.Wait()
		gpu := m.GPUs()[3]
		appendLine := func(line string) {
			t.Helper()
			f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(line + "\n"); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // polled twice a second
			synctest.Wait()
		}
		appendLine(gpu.UUID + " xid 79")
		if got := healthOf(mgr, gpu.UUID); got != "XID 79: GPU has fallen off the bus" {
			t.Fatalf("after xid 79: %q", got)
		}
		appendLine(gpu.UUID + " lost")
		settle()
		if got := healthOf(mgr, gpu.UUID); got != "NVML: device 3 uuid: "+nvml.ErrorString(nvml.ERROR_GPU_IS_LOST) {
			t.Fatalf("after lost: %q", got)
		}
		appendLine(gpu.UUID + " reset")
		settle()
		if got := healthOf(mgr, gpu.UUID); got != "healthy" {
			t.Fatalf("after reset: %q, want healthy", got)
		}
	})
}

package devices

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	hclog "github.com/hashicorp/go-hclog"

	"github.com/llmgw/llmgw/internal/testing/syncbuf"
)

// These tests run in synctest bubbles: the retry waits are either the
// test's own (a channel handshake) or on the bubble's fake clock; nothing
// waits on the wall clock.

// syncBuffer is a log sink the manager's goroutines and the test share.
type syncBuffer struct{ syncbuf.Buffer }

func (s *syncBuffer) count(substr string) int { return strings.Count(s.String(), substr) }

// runManager runs an already built manager until the returned stop.
func runManager(t *testing.T, mgr *Manager) (stop func(), done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		if err := mgr.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	return func() { cancel(); <-ch }, ch
}

// NVML's Init fails while the driver is not loaded; once it loads, the GPUs
// appear on the fingerprint without a restart. The retry waits double from
// 1s up to 1m, and each distinct error is logged once.
func TestInitRetriesUntilDriverLoads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newMock(t, MockConfig{System: "dgxh200"})
		var logs syncBuffer
		mgr := NewManager(m, testConfig(), hclog.New(&hclog.LoggerOptions{Output: &logs}), true)
		fails := []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_LIBRARY_NOT_FOUND}
		for range 8 {
			fails = append(fails, nvml.ERROR_DRIVER_NOT_LOADED)
		}
		tries := 0
		mgr.initNVML = func() nvml.Return {
			tries++
			if tries <= len(fails) {
				return fails[tries-1]
			}
			return m.Init()
		}
		waits := make(chan time.Duration)
		release := make(chan struct{})
		mgr.sleep = func(ctx context.Context, d time.Duration) bool {
			waits <- d
			select {
			case <-release:
				return true
			case <-ctx.Done():
				return false
			}
		}
		stop, _ := runManager(t, mgr)
		defer stop()
		var got []time.Duration
		for range fails {
			got = append(got, <-waits)
			fp, _, ready := mgr.Current()
			if !ready || len(fp.GetDeviceGroup()) != 0 {
				t.Fatalf("while Init fails (try %d): ready=%v groups=%d, want ready with none", tries, ready, len(fp.GetDeviceGroup()))
			}
			release <- struct{}{}
		}
		synctest.Wait()
		want := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
			32 * time.Second, time.Minute, time.Minute, time.Minute, time.Minute}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("waits between tries (-want +got):\n%s", diff)
		}
		fp, _, _ := mgr.Current()
		if diff := cmp.Diff(allHealthy(m), health(fp)); diff != "" {
			t.Fatalf("after Init succeeded (-want +got):\n%s", diff)
		}
		if n := logs.count("NVML library not found"); n != 1 {
			t.Errorf("logged the missing library %d times, want once:\n%s", n, logs.String())
		}
		if n := logs.count("NVML init failed"); n != 1 {
			t.Errorf("logged the init failure %d times, want once:\n%s", n, logs.String())
		}
		if n := logs.count("NVML initialised"); n != 1 {
			t.Errorf("logged the success %d times, want once:\n%s", n, logs.String())
		}
	})
}

// Shutting the manager down while it waits to retry Init ends Run and the
// retries.
func TestShutdownStopsInitRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		tries := 0
		mgr := NewManager(newMock(t, MockConfig{System: "dgxh200"}), testConfig(), hclog.NewNullLogger(), true)
		mgr.initNVML = func() nvml.Return {
			mu.Lock()
			defer mu.Unlock()
			tries++
			return nvml.ERROR_DRIVER_NOT_LOADED
		}
		stop, done := runManager(t, mgr)
		// Tries at 0, 1, 3, 7, 15, 31, 63 s, then every minute: 123 ... 543 s.
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		mu.Lock()
		before := tries
		mu.Unlock()
		if before != 15 {
			t.Errorf("%d tries in 10 minutes, want 15", before)
		}
		stop()
		select {
		case <-done:
		default:
			t.Fatal("Run did not return after shutdown")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if tries != before {
			t.Fatalf("Init tried %d more times after shutdown", tries-before)
		}
	})
}

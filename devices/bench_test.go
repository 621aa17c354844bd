package devices

import (
	"io"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
)

func benchManager(b *testing.B, system string) *Manager {
	b.Helper()
	m, err := NewMockNVML(MockConfig{System: system})
	if err != nil {
		b.Fatal(err)
	}
	mgr := NewManager(m, Config{FingerprintPeriod: time.Minute, HealthRecovery: 5 * time.Minute}, hclog.New(&hclog.LoggerOptions{Output: io.Discard}), true)
	mgr.refresh()
	return mgr
}

// BenchmarkStats is one stats pass over the 8 GPUs of a mock DGX H200: what
// the plugin does every collection interval.
func BenchmarkStats(b *testing.B) {
	mgr := benchManager(b, "dgxh200")
	b.ReportAllocs()
	for b.Loop() {
		if n := len(mgr.Stats()[0].GetInstanceStats()); n != 8 {
			b.Fatalf("%d instances", n)
		}
	}
}

// BenchmarkFingerprint is one full scan of the 8 GPUs and the build of the
// fingerprint message from it.
func BenchmarkFingerprint(b *testing.B) {
	mgr := benchManager(b, "dgxh200")
	b.ReportAllocs()
	for b.Loop() {
		mgr.refresh()
	}
	fp, _, _ := mgr.Current()
	if n := len(fp.GetDeviceGroup()[0].GetDevices()); n != 8 {
		b.Fatalf("%d devices", n)
	}
}

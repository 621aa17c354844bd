package devices_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// BenchmarkPluginRSS runs the real plugin binary on a mock DGX H200 with
// the fingerprint stream open and a stats stream at 10 ms (far faster than
// Nomad's 1 s), reads b.N stats messages, and reports the process's peak
// resident memory (VmHWM) as peak-RSS-MiB.
func BenchmarkPluginRSS(b *testing.B) {
	inst := plugintest.Start(b, plugintest.Build(b, pkg), plugintest.Options{})
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	if err := inst.Configure(ctx, `mock { system = "dgxh200" }`); err != nil {
		b.Fatal(err)
	}
	fp, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fp.Recv(); err != nil {
		b.Fatal(err)
	}
	st, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(10 * time.Millisecond)})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := st.Recv(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	kib := vmField(b, inst.Pid(), "VmHWM:")
	b.ReportMetric(float64(kib)/1024, "peak-RSS-MiB")
	b.ReportMetric(float64(vmField(b, inst.Pid(), "VmRSS:"))/1024, "RSS-MiB")
}

func vmField(b *testing.B, pid int, field string) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, field) {
			f := strings.Fields(line)
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

package driver

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
	hclog "github.com/hashicorp/go-hclog"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/nvmlseam"
)

const gib = 1 << 30

// mockGPUs is a mock DGX H200 whose GPUs run the given compute processes
// (by GPU index); GPU 7 cannot list its processes.
func mockGPUs(t *testing.T, procs map[int][]nvml.ProcessInfo) (*server.Server, []string) {
	t.Helper()
	s := dgxh200.New()
	var uuids []string
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		uuids = append(uuids, dev.UUID)
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			if i == 7 {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			return procs[i], nvml.SUCCESS
		}
	}
	return s, uuids
}

func TestMeasureGPUs(t *testing.T) {
	lib, uuids := mockGPUs(t, map[int][]nvml.ProcessInfo{
		0: {{Pid: 100, UsedGpuMemory: 10 * gib}, {Pid: 999, UsedGpuMemory: 2 * gib}},
		1: {{Pid: 101, UsedGpuMemory: 12 * gib}, {Pid: 100, UsedGpuMemory: gib / 2}},
		2: {{Pid: 102, UsedGpuMemory: notAvailable}},
		3: {{Pid: 103, UsedGpuMemory: 5 * gib}}, // not the task's GPU
	})
	pids := map[int]bool{100: true, 101: true, 102: true, 103: true}
	// UUIDs, an index (CUDA_VISIBLE_DEVICES=2), an unknown UUID and a GPU
	// that cannot list its processes.
	gpus := []string{uuids[0], uuids[1], "2", "GPU-00000000-0000-0000-0000-000000000000", uuids[7]}
	got := measureGPUs(lib, gpus, pids)
	want := gpuUsage{
		GPUs: []gpuMem{
			{ID: uuids[0], Used: 10 * gib, Others: 2 * gib},
			{ID: uuids[1], Used: 12*gib + gib/2},
			{ID: "2"},
			{ID: "GPU-00000000-0000-0000-0000-000000000000", Err: "find device: " + nvml.ERROR_INVALID_ARGUMENT.Error()},
			{ID: uuids[7], Err: "list compute processes: " + nvml.ERROR_NOT_SUPPORTED.Error()},
		},
		Procs: []gpuProc{
			{Pid: 100, GPU: uuids[0], Used: 10 * gib},
			{Pid: 100, GPU: uuids[1], Used: gib / 2},
			{Pid: 101, GPU: uuids[1], Used: 12 * gib},
			{Pid: 102, GPU: "2"},
		},
		Used:   22*gib + gib/2,
		Others: 2 * gib,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("measureGPUs (-want +got):\n%s", diff)
	}

	wantAttrs := map[string]string{
		"gpu_memory_used":       "22.5 GiB",
		"gpu_memory_used_bytes": strconv.FormatUint(22*gib+gib/2, 10),
		"gpu_memory_by_gpu":     uuids[0] + " 10.0 GiB, " + uuids[1] + " 12.5 GiB, 2 0 B",
		"gpu_memory_by_pid":     "100 10.5 GiB, 101 12.0 GiB, 102 0 B",
		"gpu_memory_others":     "2.0 GiB",
		"gpu_memory_errors": "GPU-00000000-0000-0000-0000-000000000000: find device: " + nvml.ERROR_INVALID_ARGUMENT.Error() +
			"; " + uuids[7] + ": list compute processes: " + nvml.ERROR_NOT_SUPPORTED.Error(),
	}
	if diff := cmp.Diff(wantAttrs, got.attributes()); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if got, want := got.summary(), "22.5 GiB of GPU memory on 3 GPUs"; got != want {
		t.Errorf("summary: got %q, want %q", got, want)
	}
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1536, "1.5 KiB"}, {300 << 20, "300.0 MiB"}, {80 * gib, "80.0 GiB"},
	} {
		if got := formatBytes(tc.in); got != tc.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestGPUMeterWithoutNVML: a host without the NVIDIA library gets no GPU
// figures, one log line, and no second attempt.
func TestGPUMeterWithoutNVML(t *testing.T) {
	var inits atomic.Int32
	var logBuf bytes.Buffer
	lib, uuids := mockGPUs(t, nil)
	lib.InitFunc = func() nvml.Return {
		inits.Add(1)
		return nvml.ERROR_LIBRARY_NOT_FOUND
	}
	g := newGPUMeter(hclog.New(&hclog.LoggerOptions{Output: &logBuf}), func() nvmlseam.Lib { return lib })
	for range 3 {
		_, ok, why := g.measure(uuids[:1], map[int]bool{1: true})
		if ok || !strings.Contains(why, "libnvidia-ml.so.1) not found") {
			t.Fatalf("measure without NVML: ok %v, why %q", ok, why)
		}
	}
	if n := inits.Load(); n != 1 {
		t.Errorf("NVML Init called %d times, want 1", n)
	}
	if n := strings.Count(logBuf.String(), "NVML is unavailable"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logBuf.String())
	}
}

// TestGPUMeterRealLibrary runs go-nvml's real loader: where no NVIDIA
// driver is installed Init must fail cleanly, not panic.
func TestGPUMeterRealLibrary(t *testing.T) {
	g := newGPUMeter(hclog.NewNullLogger(), nvmlseam.Open)
	defer g.close()
	_, ok, why := g.measure([]string{"GPU-00000000-0000-0000-0000-000000000000"}, map[int]bool{})
	if !ok && !strings.HasPrefix(why, "unavailable: ") {
		t.Errorf("without NVML: why %q, want it to start with unavailable:", why)
	}
	t.Logf("NVML available: %v %s", ok, why)
}

func TestGPUMeterClose(t *testing.T) {
	var shutdowns atomic.Int32
	lib, uuids := mockGPUs(t, nil)
	lib.ShutdownFunc = func() nvml.Return {
		shutdowns.Add(1)
		return nvml.SUCCESS
	}
	g := newGPUMeter(hclog.NewNullLogger(), func() nvmlseam.Lib { return lib })
	if _, ok, why := g.measure(uuids[:1], nil); !ok {
		t.Fatalf("measure: %s", why)
	}
	g.close()
	if _, ok, _ := g.measure(uuids[:1], nil); ok {
		t.Error("measure after close succeeded")
	}
	if n := shutdowns.Load(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

func TestGPUReport(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	use := func(b uint64) gpuUsage { return gpuUsage{Used: b, GPUs: []gpuMem{{ID: "GPU-a"}, {ID: "GPU-b"}}} }
	var r gpuReport
	steps := []struct {
		at   time.Duration
		used uint64
		want string
	}{
		{0, 70 * gib, ""},               // primes
		{time.Minute, 71 * gib, ""},     // small change
		{2 * time.Minute, 80 * gib, ""}, // big, but too soon after the last report
		{10 * time.Minute, 80 * gib, "Now holding 80.0 GiB of GPU memory on 2 GPUs (was 70.0 GiB)"},
		{11 * time.Minute, 40 * gib, ""},       // too soon
		{25 * time.Minute, 79 * gib, ""},       // back within 10%
		{30 * time.Minute, 80*gib + gib/2, ""}, // 0.5 GiB: under the minimum
		{40 * time.Minute, 100 * gib, "Now holding 100.0 GiB of GPU memory on 2 GPUs (was 80.0 GiB)"},
	}
	for _, s := range steps {
		msg, due := r.observe(t0.Add(s.at), use(s.used))
		if msg != s.want || due != (s.want != "") {
			t.Errorf("at %s with %s: got %q (%v), want %q", s.at, formatBytes(s.used), msg, due, s.want)
		}
	}
}

// TestHandleGPUMemory runs the handle's GPU reporting against a mock whose
// GPUs hold this test process: InspectTask's attributes and the Ready
// event.
func TestHandleGPUMemory(t *testing.T) {
	self, err := procfs.RefOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	lib, uuids := mockGPUs(t, map[int][]nvml.ProcessInfo{
		0: {{Pid: uint32(self.Pid), UsedGpuMemory: 30 * gib}, {Pid: 1, UsedGpuMemory: gib}},
		1: {{Pid: uint32(self.Pid), UsedGpuMemory: 31 * gib}},
	})
	var events []string
	h := newHandle("t1", nil, driverState{
		StateDir: t.TempDir(), Engine: self, GPUs: uuids[:2],
		Host: "127.0.0.1", Port: 1, StartedAt: time.Now().Add(-93 * time.Second),
	}, hclog.NewNullLogger(), func(_ time.Time, msg string, _ map[string]string) { events = append(events, msg) }, nil)
	h.gpu = newGPUMeter(hclog.NewNullLogger(), func() nvmlseam.Lib { return lib })

	a := h.gpuAttributes()
	want := map[string]string{
		"gpu_stats":             "nvml",
		"gpu_memory_used":       "61.0 GiB",
		"gpu_memory_used_bytes": strconv.FormatUint(61*gib, 10),
		"gpu_memory_by_gpu":     uuids[0] + " 30.0 GiB, " + uuids[1] + " 31.0 GiB",
		"gpu_memory_by_pid":     strconv.Itoa(self.Pid) + " 61.0 GiB",
		"gpu_memory_others":     "1.0 GiB",
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("gpuAttributes (-want +got):\n%s", diff)
	}

	h.markReady(time.Now())
	if len(events) != 1 || !strings.HasPrefix(events[0], "Ready after 1m33s, holding 61.0 GiB of GPU memory on 2 GPUs") {
		t.Errorf("events: %q, want a Ready event with the GPU memory", events)
	}

	// No GPU allocated; NVML missing.
	h.st.GPUs = nil
	if diff := cmp.Diff(map[string]string{"gpu_stats": "no GPU allocated"}, h.gpuAttributes()); diff != "" {
		t.Errorf("no GPU (-want +got):\n%s", diff)
	}
	lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	h.st.GPUs = uuids[:1]
	h.gpu = newGPUMeter(hclog.NewNullLogger(), func() nvmlseam.Lib { return lib })
	if got := h.gpuAttributes()["gpu_stats"]; !strings.HasPrefix(got, "unavailable: NVML library") {
		t.Errorf("without NVML: gpu_stats %q", got)
	}
}

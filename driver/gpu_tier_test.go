package driver_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The GPU tier (make test-gpu): the device plugin on real NVML reserves
// GPUs, the driver starts a CUDA probe as the engine under the environment
// it computes, and the probe reports what CUDA shows it.

const (
	devicePluginPkg = "github.com/llmgw/llmgw/cmd/nomad-device-nvml"
	cudaProbePkg    = "github.com/llmgw/llmgw/internal/testing/cudaprobe"
)

// needGPU skips unless LLMGW_TEST_GPU is set and NVML answers with at
// least one GPU, saying which is missing.
func needGPU(t *testing.T) {
	t.Helper()
	if os.Getenv("LLMGW_TEST_GPU") == "" {
		t.Skip("skipping GPU-tier test: set LLMGW_TEST_GPU=1 on a machine with an NVIDIA GPU (make test-gpu)")
	}
	lib := nvmlseam.Open()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Skipf("skipping GPU-tier test: LLMGW_TEST_GPU is set but NVML does not start on this machine: %s", nvmlseam.Explain(ret))
	}
	defer func() { _ = lib.Shutdown() }()
	if n, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || n == 0 {
		t.Skipf("skipping GPU-tier test: LLMGW_TEST_GPU is set but NVML lists no GPU (%d, %s)", n, nvmlseam.Explain(ret))
	}
}

var probeLine = regexp.MustCompile(`(?m)^cuda (\d+) uuid=([0-9a-f-]+) pci=(\S+)$`)

func TestGPUTierEngineSeesExactlyItsGPUs(t *testing.T) {
	needGPU(t)
	// The device plugin on real NVML: what a Nomad client would reserve.
	dp := plugintest.Start(t, plugintest.Build(t, devicePluginPkg), plugintest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := dp.Configure(ctx, ``); err != nil {
		t.Fatalf("device plugin SetConfig: %v", err)
	}
	stream, err := dp.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ids := pickDevices(t, fp)
	res, err := dp.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: ids})
	if err != nil {
		t.Fatalf("Reserve %v: %v", ids, err)
	}
	devEnv := res.GetContainerRes().GetEnvs()
	t.Logf("reserved %v: %v", ids, devEnv)
	uuids := strings.Split(devEnv["LLMGW_GPU_UUIDS"], ",")

	// The driver runs the probe as its engine, holding a context on each
	// GPU so that its GPU memory shows.
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{deviceEnv: devEnv, body: `
engine  = "command"
model   = "cuda-probe"
command = "` + plugintest.Build(t, cudaProbePkg) + `"
args    = ["-hold", "2m"]
port    = "%PORT%"
ready { skip = true }
`})
	h := p.start(t, tk)
	_ = decodeState(t, h)
	wait.For(t, "the CUDA probe's report", func() (bool, string) {
		if strings.Contains(tk.stdout.String(), "cuda holding") {
			return true, ""
		}
		if e := tk.stderr.String(); strings.Contains(e, "cudaprobe: libcuda.so.1") {
			t.Skipf("skipping: NVML works here but the CUDA driver library does not load, so no CUDA program can run: %s", strings.TrimSpace(e))
		}
		return false, fmt.Sprintf("stdout:\n%s\nstderr:\n%s", tk.stdout.String(), tk.stderr.String())
	}, wait.Within(time.Minute), wait.Every(50*time.Millisecond))
	out := tk.stdout.String()
	t.Logf("probe:\n%s", out)

	var seen []string
	for _, m := range probeLine.FindAllStringSubmatch(out, -1) {
		seen = append(seen, m[2])
	}
	want := make([]string, len(uuids))
	for i, u := range uuids {
		want[i] = strings.TrimPrefix(strings.TrimPrefix(u, "GPU-"), "MIG-")
	}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("CUDA showed the engine %v; it was allocated %v (CUDA_VISIBLE_DEVICES=%s)", seen, want, devEnv["CUDA_VISIBLE_DEVICES"])
	}

	// The driver's NVML view of the same task: its GPUs, and memory in a
	// plausible range (the probe holds a context and 64 MiB on each).
	insp, err := p.Driver.InspectTask(ctxT(t, 10*time.Second), &driverpb.InspectTaskRequest{TaskId: tk.cfg.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	a := insp.GetDriver().GetAttributes()
	t.Logf("inspect: %v", a)
	if a["gpu_stats"] != "nvml" {
		t.Fatalf("gpu_stats = %q, want nvml", a["gpu_stats"])
	}
	for _, u := range uuids {
		if !strings.Contains(a["gpu_memory_by_gpu"], u+" ") {
			t.Errorf("gpu_memory_by_gpu %q lacks %s", a["gpu_memory_by_gpu"], u)
		}
	}
	if n := strings.Count(a["gpu_memory_by_gpu"], ","); n != len(uuids)-1 {
		t.Errorf("gpu_memory_by_gpu %q lists %d GPUs, want %d", a["gpu_memory_by_gpu"], n+1, len(uuids))
	}
	used, _ := strconv.ParseUint(a["gpu_memory_used_bytes"], 10, 64)
	switch {
	case used >= 64<<20 && used < 1<<40:
	case used == 0 && a["gpu_memory_others"] != "":
		// NVML reports pids of the host's namespace: inside a container
		// the probe's memory shows as another process's.
		t.Logf("the probe's GPU memory is counted as others' (%s): NVML and this process see different pid namespaces", a["gpu_memory_others"])
	default:
		t.Errorf("gpu_memory_used_bytes = %d, want 64 MiB to 1 TiB for a probe holding 64 MiB on each GPU", used)
	}
	if _, err := p.Driver.StopTask(ctxT(t, 30*time.Second), &driverpb.StopTaskRequest{TaskId: tk.cfg.GetId(), Timeout: durationpb.New(10 * time.Second), Signal: "SIGTERM"}); err != nil {
		t.Errorf("StopTask: %v", err)
	}
}

// pickDevices chooses what to reserve: the last and the first whole GPU
// (so that a CUDA index differs from its position in the request), or the
// only one, or else one MIG instance.
func pickDevices(t *testing.T, fp *devicepb.FingerprintResponse) []string {
	t.Helper()
	var whole, mig []string
	for _, g := range fp.GetDeviceGroup() {
		for _, d := range g.GetDevices() {
			if !d.GetHealthy() {
				continue
			}
			if strings.HasPrefix(d.GetID(), "MIG-") {
				mig = append(mig, d.GetID())
			} else {
				whole = append(whole, d.GetID())
			}
		}
	}
	switch {
	case len(whole) >= 2:
		return []string{whole[len(whole)-1], whole[0]}
	case len(whole) == 1:
		return whole
	case len(mig) > 0:
		return mig[:1]
	}
	t.Fatalf("the device plugin offers no healthy GPU: %v", fp)
	return nil
}

package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// nvmlHost is a mock DGX H200, as the driver's NVML would see it; topo
// reads it through the seam. Its GPUs report the PCI bus id the mock keeps
// (go-nvml's server mock leaves PciInfo.BusId empty), 0000:0i:00.0 for
// index i unless a test moves one.
func nvmlHost(t *testing.T) (topo func() (nvmlseam.Topology, error), uuids []string) {
	topo, uuids, _ = nvmlServer(t)
	return topo, uuids
}

func nvmlServer(t *testing.T) (topo func() (nvmlseam.Topology, error), uuids []string, s *server.Server) {
	t.Helper()
	s = dgxh200.New()
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for j := 0; j < len(dev.PciBusID) && j < len(p.BusId)-1; j++ {
				p.BusId[j] = int8(dev.PciBusID[j])
			}
			return p, nvml.SUCCESS
		}
		uuids = append(uuids, dev.UUID)
	}
	return func() (nvmlseam.Topology, error) { return nvmlseam.ReadTopology(s) }, uuids, s
}

func noNVML() (nvmlseam.Topology, error) {
	return nvmlseam.Topology{}, errors.New("NVML unavailable: NVML library (libnvidia-ml.so.1) not found")
}

// reserved is the device environment nomad-device-nvml's Reserve returns
// on a host numbered as topo.
func reserved(t *testing.T, topo func() (nvmlseam.Topology, error), uuids ...string) map[string]string {
	t.Helper()
	tp, err := topo()
	if err != nil {
		t.Fatal(err)
	}
	b, err := tp.Bind(uuids)
	if err != nil {
		t.Fatal(err)
	}
	env := b.Env()
	env["LLMGW_GPU_GROUP"] = "nvidia/gpu/NVIDIA H200"
	return env
}

func TestPlanGPUsWholeGPUs(t *testing.T) {
	topo, uuids, host := nvmlServer(t)
	dev := reserved(t, topo, uuids[5], uuids[2])
	want := nvmlseam.Binding{UUIDs: []string{uuids[2], uuids[5]}, Visible: []string{"2", "5"}}

	// The driver's NVML agrees with the device plugin.
	p, err := planGPUs(dev, "vllm", topo)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, p.bind); diff != "" || p.source != "nvml" || len(p.notes) != 0 {
		t.Errorf("with NVML: source %q notes %q (-want +got):\n%s", p.source, p.notes, diff)
	}

	// Without NVML in the driver (a mock device plugin, or no library),
	// the device plugin's numbering stands.
	p, err = planGPUs(dev, "vllm", noNVML)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, p.bind); diff != "" || p.source != "device plugin" || len(p.notes) != 0 {
		t.Errorf("without NVML: source %q notes %q (-want +got):\n%s", p.source, p.notes, diff)
	}

	// The host's numbering moved since Reserve (a GPU went away, the bus
	// order differs): NVML's numbering wins, and an event says so.
	host.Devices[0].(*server.Device).PciBusID = "0000:f0:00.0" // GPU 0 now sorts last: GPU 2 is CUDA 1
	p, err = planGPUs(dev, "vllm", topo)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.bind.Visible, ","); got != "1,4" || len(p.notes) != 1 ||
		!strings.Contains(p.notes[0], "the device plugin set CUDA_VISIBLE_DEVICES=2,5; NVML on this host numbers GPUs") {
		t.Errorf("moved numbering: visible %s, notes %q", got, p.notes)
	}

	// Nomad's own NVIDIA plugin sets only NVIDIA_VISIBLE_DEVICES (UUIDs):
	// the driver numbers them from NVML, or passes UUIDs without it.
	nv := map[string]string{"NVIDIA_VISIBLE_DEVICES": uuids[7] + "," + uuids[1]}
	p, _ = planGPUs(nv, "vllm", topo)
	if got := strings.Join(p.bind.Visible, ","); got != "0,6" || p.source != "nvml" {
		t.Errorf("NVIDIA plugin with NVML: visible %s source %s", got, p.source)
	}
	p, _ = planGPUs(nv, "vllm", noNVML)
	if got := strings.Join(p.bind.Visible, ","); got != uuids[7]+","+uuids[1] || len(p.notes) != 1 || !strings.Contains(p.notes[0], "refuse GPU UUIDs in CUDA_VISIBLE_DEVICES") {
		t.Errorf("NVIDIA plugin without NVML: visible %s notes %q", got, p.notes)
	}

	// A GPU the driver's NVML does not know (a mock device plugin on a
	// GPU host): the device plugin's numbering, with an event.
	mockDev := map[string]string{"CUDA_VISIBLE_DEVICES": "0", "LLMGW_GPU_UUIDS": "GPU-mock", "NVIDIA_VISIBLE_DEVICES": "GPU-mock"}
	p, _ = planGPUs(mockDev, "vllm", topo)
	if got := strings.Join(p.bind.Visible, ","); got != "0" || len(p.notes) != 1 || !strings.Contains(p.notes[0], "GPU-mock not among this host's GPUs") {
		t.Errorf("unknown GPU: visible %s notes %q", got, p.notes)
	}
}

func TestPlanGPUsMIG(t *testing.T) {
	one := map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-a", "LLMGW_GPU_UUIDS": "MIG-a", "LLMGW_GPU_GROUP": "nvidia/gpu/NVIDIA H200 MIG 3g.71gb"}
	p, err := planGPUs(one, "sglang", noNVML)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(nvmlseam.Binding{UUIDs: []string{"MIG-a"}, Visible: []string{"MIG-a"}, MIG: 1}, p.bind); diff != "" || len(p.notes) != 0 {
		t.Errorf("one MIG instance: notes %q (-want +got):\n%s", p.notes, diff)
	}
	// vLLM is warned about: its releases crash on a MIG UUID.
	if p, _ := planGPUs(one, "vllm", noNVML); len(p.notes) != 1 || !strings.Contains(p.notes[0], "vllm-project/vllm#41848") {
		t.Errorf("vLLM on MIG: notes %q", p.notes)
	}

	two := map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-a,MIG-b", "LLMGW_GPU_UUIDS": "MIG-a,MIG-b", "LLMGW_GPU_GROUP": "nvidia/gpu/NVIDIA H200 MIG 3g.71gb"}
	_, err = planGPUs(two, "vllm", noNVML)
	want := `device: device "nvidia/gpu/NVIDIA H200 MIG 3g.71gb" allocated 2 MIG instances (MIG-a, MIG-b); an engine process can use exactly one MIG instance, as CUDA shows a process only one: set count = 1 in the task's device block (and run one task per instance)`
	if err == nil || err.Error() != want {
		t.Errorf("two MIG instances:\n got %v\nwant %s", err, want)
	}
	// Nomad's NVIDIA plugin names no group; a MIG instance beside a whole
	// GPU is refused the same way.
	_, err = planGPUs(map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-x,MIG-a"}, "tgi", noNVML)
	if err == nil || !strings.HasPrefix(err.Error(), "device: the task's device request allocated 2 devices, 1 of them MIG instances (GPU-x, MIG-a)") {
		t.Errorf("MIG and a whole GPU: %v", err)
	}
}

func TestPlanGPUsNone(t *testing.T) {
	p, err := planGPUs(nil, "vllm", noNVML)
	if err != nil || len(p.bind.UUIDs) != 0 || p.source != "" {
		t.Fatalf("no device: %+v %v", p, err)
	}
	// A plugin that passes CUDA indices alone is taken as given.
	p, _ = planGPUs(map[string]string{"CUDA_VISIBLE_DEVICES": "3"}, "vllm", noNVML)
	if got := strings.Join(p.bind.Visible, ","); got != "3" || p.source != "as given" {
		t.Errorf("indices alone: visible %s source %s", got, p.source)
	}
}

// TestTaskGPUVariablesIgnored: CUDA_VISIBLE_DEVICES (and the other GPU
// variables) set by the job's env, the host, the task config or the
// plugin's extra_env never stand in for an allocation. A task without a
// device request gets no GPU; one with a request gets its allocation.
// Each ignored value is an event.
func TestTaskGPUVariablesIgnored(t *testing.T) {
	conf := DefaultConfig()
	conf.AllowAnyCommand = true
	conf.ExtraEnv = map[string]string{"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
	tc := TaskConfig{Engine: "command", Command: "/bin/sh", Port: "http", Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0,1,2,3"}}
	task := &driverpb.TaskConfig{
		Env:       map[string]string{"PATH": "/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": "all"},
		Resources: &driverpb.Resources{Ports: []*driverpb.PortMapping{{Label: "http", Value: 23000}}},
	}
	pl, err := makePlan(conf, task, tc, noNVML)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.gpus) != 0 {
		t.Fatalf("a task with no device request was given GPUs %v", pl.gpus)
	}
	env := envMap(pl.env)
	for k, want := range map[string]string{"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void", "LLMGW_GPU_UUIDS": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	wantNotes := []string{
		`Ignored CUDA_VISIBLE_DEVICES="0,1,2,3" from the task config's env: an engine's GPUs come only from its device request; this task has none (ask for them with device "nvidia/gpu" { count = N })`,
		`Ignored CUDA_DEVICE_ORDER="FASTEST_FIRST" from the plugin's extra_env: an engine's GPUs come only from its device request; this task has none (ask for them with device "nvidia/gpu" { count = N })`,
		`Ignored NVIDIA_VISIBLE_DEVICES="all" from the task environment (the job's env block or the client's host environment): an engine's GPUs come only from its device request; this task has none (ask for them with device "nvidia/gpu" { count = N })`,
	}
	if diff := cmp.Diff(wantNotes, pl.notes); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// With an allocation, the device plugin's values (copied into the
	// task environment by Nomad) are not the task's own; a task config
	// value is still ignored.
	topo, uuids := nvmlHost(t)
	task.DeviceEnv = reserved(t, topo, uuids[3])
	task.Env = map[string]string{"PATH": "/usr/bin:/bin"}
	for k, v := range task.DeviceEnv {
		task.Env[k] = v
	}
	conf.ExtraEnv = nil
	pl, err = makePlan(conf, task, tc, topo)
	if err != nil {
		t.Fatal(err)
	}
	env = envMap(pl.env)
	if env["CUDA_VISIBLE_DEVICES"] != "3" || env["LLMGW_GPU_UUIDS"] != uuids[3] || env["NVIDIA_VISIBLE_DEVICES"] != uuids[3] {
		t.Errorf("allocated GPU 3: env %v", env)
	}
	if len(pl.notes) != 1 || !strings.HasPrefix(pl.notes[0], `Ignored CUDA_VISIBLE_DEVICES="0,1,2,3" from the task config's env: an engine's GPUs come only from its device request; this task's are `+uuids[3]+" (CUDA_VISIBLE_DEVICES=3)") {
		t.Errorf("events: %q", pl.notes)
	}
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

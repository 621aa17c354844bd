package driver

import (
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/internal/nvmlseam"
)

// GPU binding. The device plugin's Reserve (devices/) writes a plain
// process's GPU environment from NVML's topology; the driver trusts only
// that device environment for what was allocated, recomputes CUDA's
// numbering from its own NVML when it has one, refuses what one engine
// process cannot use (more than one MIG instance), and then owns the GPU
// variables of the engine's environment: whatever the task, its config or
// the plugin's extra_env set there is ignored, with an event. See
// docs/driver.md ("GPUs").

// gpuVars are the variables the driver owns in an engine's environment.
var gpuVars = []string{nvmlseam.EnvCUDAVisible, nvmlseam.EnvCUDAOrder, nvmlseam.EnvNVIDIAVisible, nvmlseam.EnvUUIDs}

// gpuPlan is the GPUs Nomad allocated to a task and how its engine is
// bound to them.
type gpuPlan struct {
	bind nvmlseam.Binding
	// source is where CUDA's numbering came from: "nvml" (the driver's own
	// NVML), "device plugin" (the device environment), "as given" (a
	// device plugin that passes only CUDA_VISIBLE_DEVICES), or "" with no
	// GPU.
	source string
	// group is the device group the device plugin allocated from
	// (LLMGW_GPU_GROUP), when it said.
	group string
	// notes are task events: a numbering the driver changed, a caveat.
	notes []string
}

// allocatedGPUs returns the devices Nomad allocated to the task, from the
// device environment only (what the device plugin's Reserve returned):
// LLMGW_GPU_UUIDS (nomad-device-nvml), else NVIDIA_VISIBLE_DEVICES (also
// what Nomad's own NVIDIA plugin sets), else CUDA_VISIBLE_DEVICES. "all",
// "none" and "void" name no specific GPU. The task's own environment never
// counts: a job cannot allocate itself GPUs by setting a variable.
func allocatedGPUs(deviceEnv map[string]string) (ids []string, from string) {
	for _, k := range []string{nvmlseam.EnvUUIDs, nvmlseam.EnvNVIDIAVisible, nvmlseam.EnvCUDAVisible} {
		if ids := nvmlseam.SplitList(deviceEnv[k]); len(ids) > 0 {
			return ids, k
		}
	}
	return nil, ""
}

// planGPUs works out the engine's GPU binding. topo reads the host's
// topology from the driver's NVML (an error when NVML is unavailable).
func planGPUs(deviceEnv map[string]string, engineName string, topo func() (nvmlseam.Topology, error)) (gpuPlan, error) {
	var p gpuPlan
	ids, from := allocatedGPUs(deviceEnv)
	p.group = deviceEnv[nvmlseam.EnvGroup]
	if len(ids) == 0 {
		return p, nil
	}
	if err := checkMIG(ids, p.group); err != nil {
		return gpuPlan{}, err
	}
	if from == nvmlseam.EnvCUDAVisible && !allUUIDs(ids) {
		// A device plugin that passes CUDA indices alone: nothing names
		// the GPUs, so nothing can be checked.
		p.bind = nvmlseam.Binding{UUIDs: ids, Visible: ids}
		p.source = "as given"
		return p, nil
	}
	var given []string // the device plugin's CUDA_VISIBLE_DEVICES, paired with ids
	if from != nvmlseam.EnvCUDAVisible {
		given = nvmlseam.SplitList(deviceEnv[nvmlseam.EnvCUDAVisible])
	}
	if topo != nil {
		t, err := topo()
		if err == nil {
			var b nvmlseam.Binding
			if b, err = t.Bind(ids); err == nil {
				p.bind, p.source = b, "nvml"
				if len(given) > 0 && strings.Join(given, ",") != strings.Join(b.Visible, ",") {
					p.notes = append(p.notes, fmt.Sprintf("GPU numbering: the device plugin set CUDA_VISIBLE_DEVICES=%s; NVML on this host numbers GPUs %s as %s, which the engine gets",
						strings.Join(given, ","), strings.Join(b.UUIDs, ","), strings.Join(b.Visible, ",")))
				}
			} else {
				p.notes = append(p.notes, "GPU numbering: "+err.Error()+"; using the device plugin's")
			}
		}
	}
	if p.source == "" {
		mig := 0
		for _, id := range ids {
			if nvmlseam.IsMIG(id) {
				mig++
			}
		}
		if len(given) == len(ids) {
			p.bind = nvmlseam.Binding{UUIDs: ids, Visible: given, MIG: mig}
			if strings.Join(given, ",") == strings.Join(ids, ",") && mig == 0 {
				p.bind.ByUUID = "the device plugin named the GPUs by UUID"
			}
			p.source = "device plugin"
		} else {
			p.bind = nvmlseam.UUIDBinding(ids, "the driver has no NVML and the device plugin gave no CUDA index")
			p.source = "device plugin"
			if mig == 0 {
				p.notes = append(p.notes, "GPU numbering: passing GPUs by UUID ("+p.bind.ByUUID+"); vLLM releases before vllm-project/vllm#45026, and SGLang with tensor parallelism, refuse GPU UUIDs in CUDA_VISIBLE_DEVICES")
			}
		}
	}
	if d, ok := engine.Lookup(engineName); ok && p.bind.MIG > 0 && d.MIGWarning != "" {
		p.notes = append(p.notes, "MIG: "+d.MIGWarning+"; see docs/driver.md for the engines known to run on MIG")
	}
	return p, nil
}

// checkMIG refuses what one engine process cannot use: CUDA shows a
// process a single MIG instance, so a task given two (or a MIG instance
// and a whole GPU) would run on one and hold the rest idle.
func checkMIG(ids []string, group string) error {
	var mig []string
	for _, id := range ids {
		if nvmlseam.IsMIG(id) {
			mig = append(mig, id)
		}
	}
	if len(mig) == 0 || len(ids) == 1 {
		return nil
	}
	req := "the task's device request"
	if group != "" {
		req = fmt.Sprintf("device %q", group)
	}
	what := fmt.Sprintf("%d MIG instances (%s)", len(mig), strings.Join(mig, ", "))
	if len(mig) < len(ids) {
		what = fmt.Sprintf("%d devices, %d of them MIG instances (%s)", len(ids), len(mig), strings.Join(ids, ", "))
	}
	return fmt.Errorf("device: %s allocated %s; an engine process can use exactly one MIG instance, as CUDA shows a process only one: set count = 1 in the task's device block (and run one task per instance)", req, what)
}

func allUUIDs(ids []string) bool {
	for _, id := range ids {
		if !strings.HasPrefix(id, "GPU-") && !nvmlseam.IsMIG(id) {
			return false
		}
	}
	return true
}

// gpuEnv sets the variables the driver owns in env (the layered engine
// environment) from the plan, and returns an event for each value some
// other layer had put there: the plugin's extra_env, the task environment
// beyond what the device plugin set (the job's env block, the client's
// host environment), the task config's env.
func gpuEnv(env map[string]string, p gpuPlan, layers []envLayer) []string {
	want := p.bind.Env()
	var notes []string
	for _, k := range gpuVars {
		for _, l := range layers {
			if v, ok := l.vars[k]; ok && v != want[k] {
				notes = append(notes, fmt.Sprintf("Ignored %s=%q from %s: an engine's GPUs come only from its device request; %s", k, v, l.name, p.describe()))
			}
		}
		env[k] = want[k]
	}
	return notes
}

// envLayer is one source of an engine's environment, named for events.
type envLayer struct {
	name string
	vars map[string]string
}

// describe names the plan's GPUs for an event.
func (p gpuPlan) describe() string {
	if len(p.bind.UUIDs) == 0 {
		return `this task has none (ask for them with device "nvidia/gpu" { count = N })`
	}
	s := "this task's are " + strings.Join(p.bind.UUIDs, ",")
	if v := strings.Join(p.bind.Visible, ","); v != strings.Join(p.bind.UUIDs, ",") {
		s += " (CUDA_VISIBLE_DEVICES=" + v + ")"
	}
	return s
}

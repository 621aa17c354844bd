package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/engine/contract"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

const (
	supervisorPkg = "github.com/llmgw/llmgw/cmd/llmgw-supervisor"
	driverPkg     = "github.com/llmgw/llmgw/cmd/nomad-driver-llmgw"
	fakeEnginePkg = "github.com/llmgw/llmgw/cmd/fake-engine"
)

// strictVLLM is fake-engine's strict mode when it stands in for vLLM: the
// contract llmgw pins (engine/contract/vllm.txt), so that every command line
// the driver builds in these tests must pass vLLM's parser.
var strictVLLM = pinnedSpec("vllm")

func pinnedSpec(engine string) string {
	c, err := contract.Load(engine)
	if err != nil {
		panic(err)
	}
	return c.Spec()
}

// TestDriverInRealNomad runs a vLLM-shaped task (the fake engine) on two
// mock GPUs through the llmgw driver in a real Nomad: it becomes running
// and ready, its logs and exec work, it survives a restart of the Nomad
// client with the same engine process, and job stop ends it.
func TestDriverInRealNomad(t *testing.T) {
	nomad := nomadtest.Bin(t)
	engine := plugintest.Build(t, fakeEnginePkg)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	c := nomadtest.Start(t, nomadtest.ClientOptions{
		Name:      "gpu-1",
		PluginDir: plugins,
		Plugins: map[string]string{
			"nomad-device-nvml": `
    mock {
      system = "dgxh200"
      seed   = "gpu-1"
    }`,
			"nomad-driver-llmgw": `
    ready_interval = "250ms"` + driverPolicy(engine),
		},
	})
	client := c.Clients[0]

	// The node's GPUs in PCI bus order: the fake engine resolves
	// CUDA_VISIBLE_DEVICES against them as CUDA would, so what it reports
	// seeing is checked against the allocation below.
	var pciOrder []string
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		node, _, err := c.API.Nodes().Info(c.NodeID("gpu-1"), nil)
		if err != nil {
			return false, err.Error()
		}
		if g := h200Group(node); g == nil || len(g.Instances) != 8 {
			return false, "the node's 8 GPUs are not fingerprinted yet"
		}
		pciOrder = gpusByPCIBus(t, h200Group(node))
		return true, ""
	})

	const killTimeout = 10 * time.Second
	job := &api.Job{
		ID:          ptr("llm"),
		Name:        ptr("llm"),
		Type:        ptr("service"),
		Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name:          ptr("g"),
			Networks:      []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}},
			RestartPolicy: &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			Tasks: []*api.Task{{
				Name:        "engine",
				Driver:      "llmgw",
				KillTimeout: ptr(killTimeout),
				Config: map[string]any{
					"engine":  "vllm",
					"model":   "Qwen/Qwen2.5-0.5B-Instruct",
					"command": engine,
					"args":    []string{"--max-model-len", "4096"},
					"env": map[string]string{
						"FAKE_ENGINE_STRICT": strictVLLM,
						"FAKE_ENGINE_FLAGS":  "--load-seconds 2 --load-shards 4 --expect-gpus 2 --host-gpus " + strings.Join(pciOrder, ","),
					},
					"port":  "http",
					"ready": []map[string]any{{"timeout": "2m"}},
				},
				Resources: &api.Resources{
					CPU: ptr(100), MemoryMB: ptr(128),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr[uint64](2)}},
				},
			}},
		}},
	}
	if _, _, err := c.API.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register job: %v", err)
	}
	var alloc *api.Allocation
	nomadtest.Eventually(t, 90*time.Second, func() (bool, string) {
		stubs, _, err := c.API.Jobs().Allocations("llm", true, nil)
		if err != nil || len(stubs) == 0 {
			return false, fmt.Sprintf("no allocation yet (%v)", err)
		}
		if stubs[0].ClientStatus == api.AllocClientStatusFailed {
			t.Fatalf("allocation failed: %s", taskEvents(stubs[0].TaskStates["engine"]))
		}
		a, _, err := c.API.Allocations().Info(stubs[0].ID, nil)
		if err != nil {
			return false, err.Error()
		}
		alloc = a
		ts := a.TaskStates["engine"]
		if a.ClientStatus != api.AllocClientStatusRunning || ts == nil {
			return false, "allocation " + a.ClientStatus
		}
		return hasEvent(ts, "Ready after"), "no Ready event yet: " + taskEvents(ts)
	})
	ts := alloc.TaskStates["engine"]
	t.Logf("task events: %s", taskEvents(ts))
	if !hasEvent(ts, "Started vllm on GPUs ") || !hasEvent(ts, "(tensor parallel 2)") {
		t.Errorf("no Started event naming the GPUs: %s", taskEvents(ts))
	}
	if !hasEvent(ts, "Loading safetensors checkpoint shards") {
		t.Errorf("no load progress event: %s", taskEvents(ts))
	}

	// Logs through the logs API.
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		out, _ := c.Logs(alloc, "engine", "stdout")
		errOut, _ := c.Logs(alloc, "engine", "stderr")
		return strings.Contains(out+errOut, "Loading safetensors checkpoint shards"), "engine output not in the logs yet"
	})
	// fake-engine ran in strict mode: vLLM's parser would take the command
	// line the driver built.
	if out, _ := c.Logs(alloc, "engine", "stdout"); !strings.Contains(out, " strict="+strictVLLM+"\n") {
		t.Errorf("engine startup line lacks strict=%s:\n%s", strictVLLM, out)
	}

	// The engine saw exactly its two allocated GPUs: it resolved its
	// CUDA_VISIBLE_DEVICES (indices, under CUDA_DEVICE_ORDER=PCI_BUS_ID)
	// against the node's GPUs and printed the UUIDs it got.
	var assigned []string
	for _, d := range alloc.AllocatedResources.Tasks["engine"].Devices {
		assigned = append(assigned, d.DeviceIDs...)
	}
	if len(assigned) != 2 {
		t.Fatalf("Nomad assigned %d devices, want 2: %v", len(assigned), assigned)
	}
	inOrder := slices.Clone(assigned)
	slices.SortFunc(inOrder, func(a, b string) int { return slices.Index(pciOrder, a) - slices.Index(pciOrder, b) })
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		out, _ := c.Logs(alloc, "engine", "stdout")
		return strings.Contains(out, " gpus="+strings.Join(inOrder, ",")+" "),
			fmt.Sprintf("the engine's startup line does not show gpus=%s yet: %q", strings.Join(inOrder, ","), firstLine(out))
	})

	// nomad alloc exec, with the task's GPUs in its environment.
	execOut := allocExec(t, nomad, client, alloc.ID, "sh", "-c", `echo "$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER $NVIDIA_VISIBLE_DEVICES $LLMGW_GPU_UUIDS"`)
	checkBinding(t, strings.TrimSpace(execOut), assigned, pciOrder)

	engineRef := enginePid(t, client, alloc)
	t.Logf("engine pid %d", engineRef.Pid)
	// The default policy: the engine runs as nobody, with no_new_privs.
	if uid, nnp := procStatusField(t, engineRef.Pid, "Uid"), procStatusField(t, engineRef.Pid, "NoNewPrivs"); !strings.HasPrefix(uid, "65534 ") || nnp != "1" {
		t.Errorf("engine Uid %q NoNewPrivs %q, want nobody (65534) and 1", uid, nnp)
	}
	if out := allocExec(t, nomad, client, alloc.ID, "id", "-u"); strings.TrimSpace(out) != "65534" {
		t.Errorf("alloc exec id -u printed %q, want 65534 (the engine's user)", out)
	}

	// Restart the client agent on the same data dir: the engine keeps
	// running and the task is recovered, not restarted.
	if err := client.Stop(); err != nil {
		t.Fatal(err)
	}
	if !engineRef.Alive() {
		t.Fatal("engine died with the Nomad client")
	}
	if err := client.Start(); err != nil {
		t.Fatalf("restart client: %v", err)
	}
	c.WaitReady(90 * time.Second)
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		a, _, err := c.API.Allocations().Info(alloc.ID, nil)
		if err != nil {
			return false, err.Error()
		}
		ts := a.TaskStates["engine"]
		if a.ClientStatus != api.AllocClientStatusRunning || ts == nil || ts.State != "running" {
			return false, "allocation " + a.ClientStatus
		}
		if ts.Restarts != 0 {
			t.Fatalf("task restarted %d times across the client restart: %s", ts.Restarts, taskEvents(ts))
		}
		return true, ""
	})
	// The new plugin process recovered the task from its handle, and exec
	// goes through it.
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		return strings.Contains(client.Log(), "recovered task"), "no RecoverTask in the client log yet"
	})
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		out, err := tryAllocExec(nomad, client, alloc.ID, "sh", "-c", "echo after-restart")
		return err == nil && strings.Contains(out, "after-restart"), fmt.Sprintf("alloc exec after the client restart: %v: %s", err, out)
	})
	if again := enginePid(t, client, alloc); again != engineRef || !engineRef.Alive() {
		t.Fatalf("engine after the restart: %+v (alive %v), want %+v", again, engineRef.Alive(), engineRef)
	}
	// Output written after the restart still reaches Nomad's logs (the
	// supervisor re-opens the log FIFOs when their reader changes).
	addr := engineAddr(t, alloc)
	nomadtest.Eventually(t, 60*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + addr + "/v1/models?after=client-restart")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		out, _ := c.Logs(alloc, "engine", "stdout")
		return strings.Contains(out, "after=client-restart"), "request after the restart not in the stdout log yet"
	})

	// Job stop ends the engine within the kill timeout.
	stopAt := time.Now()
	if _, _, err := c.API.Jobs().Deregister("llm", false, nil); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, killTimeout+20*time.Second, func() (bool, string) {
		return !engineRef.Alive(), "engine still running"
	})
	t.Logf("engine ended %s after job stop (kill timeout %s)", time.Since(stopAt).Round(time.Millisecond), killTimeout)
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		a, _, err := c.API.Allocations().Info(alloc.ID, nil)
		if err != nil {
			return false, err.Error()
		}
		return a.ClientStatus == api.AllocClientStatusComplete, "allocation " + a.ClientStatus
	})

	// A command outside allowed_commands is refused before anything
	// starts: the allocation fails, with the driver's event and the start
	// error naming the plugin options that would allow it.
	refused := &api.Job{
		ID: ptr("refused"), Name: ptr("refused"), Type: ptr("service"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name:             ptr("g"),
			Networks:         []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}},
			RestartPolicy:    &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
			Tasks: []*api.Task{{
				Name: "engine", Driver: "llmgw",
				Config: map[string]any{
					"engine": "command", "command": "/bin/sh", "args": []string{"-c", "sleep 600"}, "port": "http",
				},
				Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(64)},
			}},
		}},
	}
	if _, _, err := c.API.Jobs().Register(refused, nil); err != nil {
		t.Fatalf("register job: %v", err)
	}
	const want = `command: "/bin/sh"`
	nomadtest.Eventually(t, 90*time.Second, func() (bool, string) {
		stubs, _, err := c.API.Jobs().Allocations("refused", true, nil)
		if err != nil || len(stubs) == 0 {
			return false, fmt.Sprintf("no allocation yet (%v)", err)
		}
		ts := stubs[0].TaskStates["engine"]
		if stubs[0].ClientStatus != api.AllocClientStatusFailed || ts == nil {
			return false, "allocation " + stubs[0].ClientStatus + ": " + taskEvents(ts)
		}
		for _, e := range []string{"Not started: bad llmgw task config: " + want, "allow_any_command = true"} {
			if !hasEvent(ts, e) {
				t.Fatalf("refused allocation has no event %q: %s", e, taskEvents(ts))
			}
		}
		t.Logf("refused: %s", taskEvents(ts))
		return true, ""
	})
}

// engineAddr is the host:port of the group's http port.
func engineAddr(t *testing.T, alloc *api.Allocation) string {
	t.Helper()
	for _, p := range alloc.AllocatedResources.Shared.Ports {
		if p.Label == "http" {
			return net.JoinHostPort(p.HostIP, strconv.Itoa(p.Value))
		}
	}
	t.Fatalf("allocation has no http port: %+v", alloc.AllocatedResources.Shared.Ports)
	return ""
}

func hasEvent(ts *api.TaskState, substr string) bool {
	for _, e := range ts.Events {
		if strings.Contains(e.DriverMessage, substr) || strings.Contains(e.DisplayMessage, substr) {
			return true
		}
	}
	return false
}

func taskEvents(ts *api.TaskState) string {
	if ts == nil {
		return "(no task state)"
	}
	var b strings.Builder
	for _, e := range ts.Events {
		fmt.Fprintf(&b, "\n  %s: %s", e.Type, e.DisplayMessage)
	}
	return b.String()
}

// allocExec runs `nomad alloc exec` against the client's agent.
func allocExec(t *testing.T, nomad string, client *nomadtest.Agent, allocID string, cmd ...string) string {
	t.Helper()
	out, err := tryAllocExec(nomad, client, allocID, cmd...)
	if err != nil {
		t.Fatalf("nomad alloc exec: %v\n%s", err, out)
	}
	return out
}

func tryAllocExec(nomad string, client *nomadtest.Agent, allocID string, cmd ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"alloc", "exec", "-address", client.Addr(), "-i=false", "-t=false", "-task", "engine", allocID}, cmd...)
	out, err := exec.CommandContext(ctx, nomad, args...).CombinedOutput()
	return string(out), err
}

// enginePid reads the engine's pid and start time from the state the
// supervisor keeps in the task's private dir.
func enginePid(t *testing.T, client *nomadtest.Agent, alloc *api.Allocation) procfs.Ref {
	t.Helper()
	pattern := filepath.Join(client.Dir, "data", "alloc", alloc.ID, "engine", "private", "llmgw", "*", "started.json")
	matches, err := filepath.Glob(pattern)
	if err != nil || len(matches) != 1 {
		t.Fatalf("started.json: %v %v (pattern %s)", matches, err, pattern)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Engine procfs.Ref `json:"engine"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.Engine
}

// driverPolicy is what the e2e adds to the llmgw driver's client config,
// as an operator would (see localnomad.DriverPolicy).
func driverPolicy(engine string) string { return localnomad.DriverPolicy(engine) }

// procStatusField is one field of /proc/<pid>/status, blanks squeezed.
func procStatusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == field {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

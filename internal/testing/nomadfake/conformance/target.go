package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/wait"
)

// StaticMetaKey is a static meta key (the client's meta {} block) every
// node of a Target carries, with the value StaticMetaValue.
const (
	StaticMetaKey   = "conformance.static"
	StaticMetaValue = "yes"
)

// Deadline bounds every wait for the target to reach a state: generous,
// as a real Nomad on a loaded machine takes seconds to start a task or to
// mark a node down.
const Deadline = 90 * time.Second

// Target is a Nomad to hold to the cases.
type Target struct {
	// Client is the API client; ACLs off, namespace default.
	Client *api.Client
	// Nodes names two ready, eligible, not draining client nodes in node
	// pool default, each with GPUs healthy instances of the device group
	// vendor "nvidia", type "gpu", name GPUName, which carries the
	// power_limit attribute (W), and the static meta
	// StaticMetaKey = StaticMetaValue.
	Nodes   [2]string
	GPUName string
	GPUs    int
	// Task returns a new task that runs until it is stopped and answers
	// HTTP 200 on /health at its group's port "http"
	// (NOMAD_PORT_http).
	Task func() *api.Task
	// Advance lets d pass on the target's clock (the fake's WithClock
	// clock, moved and then Ticked; a real agent's wall clock, slept).
	Advance func(t *testing.T, d time.Duration)
	// SetDeviceHealth makes the device plugin of node report instance
	// deviceID healthy or not, and returns once the node (GET
	// /v1/node/<id>) shows it so.
	SetDeviceHealth func(t *testing.T, node, deviceID string, healthy bool)
	// NodeDown ends node's client for good, so that the servers see its
	// heartbeats stop.
	NodeDown func(t *testing.T, node string)
}

// Case is one behaviour, by name.
type Case struct {
	Name string
	Run  func(t *testing.T, tg *Target)
}

// Cases are every behaviour nomadfake claims, in the order Run runs them;
// NodeDownLosesAllocations is last, as it ends a node for good.
var Cases = []Case{
	{"IndexesAndHeaders", IndexesAndHeaders},
	{"BlockingQueryWakesOnWrite", BlockingQueryWakesOnWrite},
	{"BlockingQueryWaitBounds", BlockingQueryWaitBounds},
	{"BlockingQueryOnMissingObject", BlockingQueryOnMissingObject},
	{"RegisterCreatesVersionZero", RegisterCreatesVersionZero},
	{"RegisterEnforceIndex", RegisterEnforceIndex},
	{"RegisterCreateOnlyRace", RegisterCreateOnlyRace},
	{"RegisterUnchangedSpec", RegisterUnchangedSpec},
	{"RegisterValidationErrors", RegisterValidationErrors},
	{"JobListPrefixAndMeta", JobListPrefixAndMeta},
	{"PlacementOnPinnedNode", PlacementOnPinnedNode},
	{"HeldDevicesNotGiven", HeldDevicesNotGiven},
	{"UnhealthyDeviceNotGiven", UnhealthyDeviceNotGiven},
	{"NewVersionReplacesAllocations", NewVersionReplacesAllocations},
	{"StopByRegistration", StopByRegistration},
	{"AllocationChecks", AllocationChecks},
	{"ServiceCatalog", ServiceCatalog},
	{"NodeListAndInfo", NodeListAndInfo},
	{"DynamicNodeMeta", DynamicNodeMeta},
	{"ClientStatsDevices", ClientStatsDevices},
	{"VariablesCheckAndSet", VariablesCheckAndSet},
	{"VariablesValidation", VariablesValidation},
	{"VariableLocks", VariableLocks},
	{"VariableLockExpiry", VariableLockExpiry},
	{"VariableBlockingRead", VariableBlockingRead},
	{"EventStreamFollowsChanges", EventStreamFollowsChanges},
	{"EventStreamLostIndex", EventStreamLostIndex},
	{"NodeDownLosesAllocations", NodeDownLosesAllocations},
}

// Run runs every case against tg, in order, each as a subtest.
func Run(t *testing.T, tg *Target) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, tg) })
	}
}

// ---- helpers ----

// eventually is wait.For at the suite's pace: cond polled every 100 ms
// (a real agent answers it) until Deadline.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	wait.For(t, what, cond, wait.Within(Deadline), wait.Every(100*time.Millisecond))
}

// job is a service job shaped like the controller's: one group "engine"
// of count allocations pinned to node by a ${node.unique.name} constraint,
// each with gpus GPUs of the target's group, a dynamic port "http", and a
// nomad-provider service named id with an HTTP check.
func (tg *Target) job(id, node string, count int, gpus uint64) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.SetMeta("conformance.job", id)
	g := api.NewTaskGroup("engine", count)
	g.Networks = []*api.NetworkResource{{Mode: "host", DynamicPorts: []api.Port{{Label: "http"}}}}
	g.Constrain(api.NewConstraint("${node.unique.name}", "=", node))
	g.Services = []*api.Service{{
		Name: id, Provider: "nomad", PortLabel: "http", Tags: []string{"conformance", "case=" + id},
		Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/health", Interval: time.Second, Timeout: time.Second}},
	}}
	task := tg.Task()
	task.Name = "engine"
	task.Resources = &api.Resources{CPU: new(100), MemoryMB: new(64)}
	if gpus > 0 {
		task.Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpu/" + tg.GPUName, Count: new(gpus)}}
	}
	g.AddTask(task)
	j.AddTaskGroup(g)
	return j
}

// register registers j and, when the test ends, stops it by registering
// it with Stop set and waits for its allocations to end.
func (tg *Target) register(t *testing.T, j *api.Job) *api.JobRegisterResponse {
	t.Helper()
	resp, _, err := tg.Client.Jobs().Register(j, nil)
	if err != nil {
		t.Fatalf("register %s: %v", *j.ID, err)
	}
	tg.cleanup(t, *j.ID)
	return resp
}

func (tg *Target) cleanup(t *testing.T, id string) {
	t.Cleanup(func() { tg.stop(t, id) })
}

// stop stops job id by registration, as the controller does, and waits
// until none of its allocations is live.
func (tg *Target) stop(t *testing.T, id string) {
	t.Helper()
	j, _, err := tg.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Errorf("stop %s: read: %v", id, err)
		return
	}
	if !*j.Stop {
		j.Stop = new(true)
		if _, _, err := tg.Client.Jobs().Register(j, nil); err != nil {
			t.Errorf("stop %s: %v", id, err)
			return
		}
	}
	eventually(t, id+"'s allocations ended", func() (bool, string) {
		as := tg.allocs(t, id)
		n := len(liveOf(as))
		return n == 0, fmt.Sprintf("%d live", n)
	})
}

// allocs lists job id's allocations (with their AllocatedResources),
// oldest first.
func (tg *Target) allocs(t *testing.T, id string) []*api.AllocationListStub {
	t.Helper()
	var out []*api.AllocationListStub
	all, _, err := tg.Client.Allocations().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		t.Fatalf("list allocations: %v", err)
	}
	for _, a := range all {
		if a.JobID == id {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *api.AllocationListStub) int { return int(a.CreateIndex) - int(b.CreateIndex) })
	return out
}

// live: the scheduler wants it running and its client has not ended it.
func live(a *api.AllocationListStub) bool {
	return a.DesiredStatus == api.AllocDesiredStatusRun &&
		(a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning)
}

func liveOf(as []*api.AllocationListStub) []*api.AllocationListStub {
	var out []*api.AllocationListStub
	for _, a := range as {
		if live(a) {
			out = append(out, a)
		}
	}
	return out
}

// waitRunning waits until job id has n allocations running (client
// running, desired run) and returns them.
func (tg *Target) waitRunning(t *testing.T, id string, n int) []*api.AllocationListStub {
	t.Helper()
	var out []*api.AllocationListStub
	eventually(t, fmt.Sprintf("%d allocations of %s running", n, id), func() (bool, string) {
		out = out[:0]
		var seen []string
		for _, a := range tg.allocs(t, id) {
			seen = append(seen, a.Name+":"+a.DesiredStatus+"/"+a.ClientStatus)
			if a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusRunning {
				out = append(out, a)
			}
		}
		return len(out) == n, strings.Join(seen, " ")
	})
	return out
}

func (tg *Target) nodeID(t *testing.T, name string) string {
	t.Helper()
	ns, _, err := tg.Client.Nodes().List(nil)
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	for _, n := range ns {
		if n.Name == name {
			return n.ID
		}
	}
	t.Fatalf("no node named %s", name)
	return ""
}

// gpuGroup is node's device group of the target's GPUs.
func (tg *Target) gpuGroup(t *testing.T, nodeID string) *api.NodeDeviceResource {
	t.Helper()
	n, _, err := tg.Client.Nodes().Info(nodeID, nil)
	if err != nil {
		t.Fatalf("read node %s: %v", nodeID, err)
	}
	if n.NodeResources != nil {
		for _, g := range n.NodeResources.Devices {
			if g.Vendor == "nvidia" && g.Type == "gpu" && g.Name == tg.GPUName {
				return g
			}
		}
	}
	t.Fatalf("node %s has no nvidia/gpu/%s group", nodeID, tg.GPUName)
	return nil
}

func devicesOf(a *api.AllocationListStub) []string {
	var out []string
	if a.AllocatedResources == nil {
		return nil
	}
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			out = append(out, d.DeviceIDs...)
		}
	}
	slices.Sort(out)
	return out
}

// rawResponse is an answer read without the API client, for what it
// hides: status codes and headers of errors.
type rawResponse struct {
	code   int
	header http.Header
	body   string
}

func (tg *Target) raw(t *testing.T, method, path, body string) rawResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Deadline)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, tg.Client.Address()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return rawResponse{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

// statusOf is an API error's HTTP status, 0 for other errors.
func statusOf(err error) int {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode()
	}
	return 0
}

// wantErr fails unless err is an HTTP error with status code whose text
// holds every one of texts.
func wantErr(t *testing.T, what string, err error, code int, texts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want HTTP %d %q", what, code, texts)
	}
	if got := statusOf(err); got != code {
		t.Fatalf("%s: %v (HTTP %d), want HTTP %d", what, err, got, code)
	}
	for _, s := range texts {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: %q, want it to say %q", what, err.Error(), s)
		}
	}
}

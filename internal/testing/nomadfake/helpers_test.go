package nomadfake_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

const h200 = "NVIDIA H200"

func newFake(t *testing.T, opts ...nomadfake.Option) (*nomadfake.Server, *api.Client) {
	t.Helper()
	s := nomadfake.New(opts...)
	t.Cleanup(s.Close)
	return s, s.Client(t)
}

// gpuJob is gpuJobOn node n1.
func gpuJob(id string, count int, gpus uint64) *api.Job { return gpuJobOn(id, "n1", count, gpus) }

// gpuJobOn is a service job shaped like the controller's: one group of
// count allocations pinned to node, each with gpus H200s, driver llmgw,
// managed meta, a nomad service with a check.
func gpuJobOn(id, node string, count int, gpus uint64) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.SetMeta("llmgw.managed", "true")
	j.SetMeta("llmgw.replica", id)
	tg := api.NewTaskGroup("engine", count)
	tg.Networks = []*api.NetworkResource{{Mode: "host", DynamicPorts: []api.Port{{Label: "http"}}}}
	tg.Constrain(api.NewConstraint("${node.unique.name}", "=", node))
	tg.Services = []*api.Service{{Name: id, Provider: "nomad", PortLabel: "http",
		Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/health"}}}}
	task := api.NewTask("engine", "llmgw")
	task.Config = map[string]any{"engine": "vllm", "model": "m"}
	if gpus > 0 {
		task.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu/" + h200, Count: new(gpus)}}}
	}
	tg.AddTask(task)
	j.AddTaskGroup(tg)
	return j
}

// gpuNode adds a ready node with n H200s named <name>-gpu<i>.
func gpuNode(s *nomadfake.Server, name string, n int, meta map[string]string) string {
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("%s-gpu%d", name, i))
	}
	return s.AddNode(nomadfake.NodeSpec{
		Name:    name,
		Meta:    meta,
		Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(h200, 700, 143771, ids...)},
	})
}

func statusCode(err error) int {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode()
	}
	return 0
}

func mustRegister(t *testing.T, c *api.Client, j *api.Job) *api.JobRegisterResponse {
	t.Helper()
	resp, _, err := c.Jobs().Register(j, nil)
	if err != nil {
		t.Fatalf("register %s: %v", *j.ID, err)
	}
	return resp
}

// live lists the allocations the scheduler wants running that the client
// has not ended.
func live(as []*api.Allocation) []*api.Allocation {
	var out []*api.Allocation
	for _, a := range as {
		if a.DesiredStatus == api.AllocDesiredStatusRun &&
			(a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning) {
			out = append(out, a)
		}
	}
	return out
}

// devicesOf lists the device IDs an allocation holds.
func devicesOf(a *api.Allocation) []string {
	var out []string
	for _, tr := range a.AllocatedResources.Tasks {
		for _, d := range tr.Devices {
			out = append(out, d.DeviceIDs...)
		}
	}
	return out
}

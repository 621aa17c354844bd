package observe

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/facility"
)

func TestShardDraws(t *testing.T) {
	t.Parallel()
	managed := func(id, model, profile string) *api.JobListStub {
		return &api.JobListStub{ID: id, Meta: map[string]string{render.MetaManaged: "true", render.MetaModel: model, render.MetaProfile: profile}}
	}
	alloc := func(id, job, node, status string, gpus ...string) *api.AllocationListStub {
		return &api.AllocationListStub{ID: id, JobID: job, NodeID: node, ClientStatus: status, DesiredStatus: api.AllocDesiredStatusRun,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
				"engine": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA H200", DeviceIDs: gpus}}},
			}}}
	}
	stubs := []*api.JobListStub{managed("j1", "llama", "tp2"), managed("j2", "qwen", "one"), {ID: "other", Meta: map[string]string{}}}
	allocs := []*api.AllocationListStub{
		alloc("a1", "j1", "n1", api.AllocClientStatusRunning, "GPU-1", "GPU-2"),
		alloc("a2", "j2", "n1", api.AllocClientStatusRunning, "GPU-3"),
		alloc("a3", "j2", "n1", api.AllocClientStatusPending, "GPU-4"),          // not running
		alloc("a4", "j2", "n2", api.AllocClientStatusRunning, "GPU-9"),          // node not read
		alloc("a5", "other", "n1", api.AllocClientStatusRunning, "GPU-4"),       // not llmgw's
		alloc("a6", "j1", "n1", api.AllocClientStatusRunning, "GPU-4", "GPU-X"), // a GPU without a reading
	}
	gpus := map[string][]GPUReading{"n1": {
		{ID: "GPU-1", Model: "NVIDIA H200", Watts: 300}, {ID: "GPU-2", Model: "NVIDIA H200", Watts: 250},
		{ID: "GPU-3", Model: "NVIDIA H200", Watts: 180}, {ID: "GPU-4", Model: "NVIDIA H200", Watts: 90},
	}}
	want := []ShardDraw{
		{Key: facility.LearnedKey{Model: "llama", Profile: "tp2", GPU: "NVIDIA H200"}, Alloc: "a1", Watts: 550},
		{Key: facility.LearnedKey{Model: "qwen", Profile: "one", GPU: "NVIDIA H200"}, Alloc: "a2", Watts: 180},
	}
	if diff := cmp.Diff(want, ShardDraws(stubs, allocs, gpus)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

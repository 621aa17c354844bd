package observe

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/facility"
)

func managedStub(id, replica string, nodes ...string) *api.JobListStub {
	var watts []string
	for range nodes {
		watts = append(watts, "2600")
	}
	return &api.JobListStub{
		ID: id, Status: "running", CreateIndex: 10, JobModifyIndex: 12, SubmitTime: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).UnixNano(),
		Meta: map[string]string{
			render.MetaManaged: "true", render.MetaModel: "m", render.MetaProfile: "p", render.MetaReplica: replica,
			render.MetaProfileFP: "fp", render.MetaGen: "1", render.MetaDomain: "rack=k1", render.MetaShards: strconvI(len(nodes)),
			render.MetaNodes: strings.Join(nodes, ","), render.MetaRender: "1", render.MetaWatts: strings.Join(watts, ","),
			render.MetaGPU: "NVIDIA H200", render.MetaGPUs: "4",
		},
	}
}

func strconvI(n int) string { return string(rune('0' + n)) }

func alloc(job, group, client string, healthy *bool, create uint64) *api.AllocationListStub {
	a := &api.AllocationListStub{ID: job + group + client, JobID: job, TaskGroup: group, DesiredStatus: "run", ClientStatus: client, CreateIndex: create}
	if healthy != nil {
		a.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: healthy}
	}
	return a
}

func TestJobs(t *testing.T) {
	yes, no := true, false
	stubs := []*api.JobListStub{
		managedStub("j-serving", "m-0", "a", "b"),
		managedStub("j-starting", "m-1", "a", "b"),
		managedStub("j-partial", "m-2", "a", "b"),
		managedStub("j-pending", "m-3", "a"),
		managedStub("j-failed", "m-4", "a", "b"),
		{ID: "not-ours", Status: "running", Meta: map[string]string{"team": "x"}},
		{ID: "stopped", Status: "running", Stop: true, Meta: managedStub("", "m-5", "a").Meta},
		{ID: "broken", Status: "running", Meta: map[string]string{render.MetaManaged: "true", render.MetaModel: "m"}},
	}
	// Listed in any order, shards of one job interleaved with others.
	allocs := []*api.AllocationListStub{
		alloc("j-serving", "shard-1", "running", &yes, 5),
		alloc("j-failed", "shard-0", "running", &yes, 5),
		alloc("j-serving", "shard-0", "running", &yes, 4),
		alloc("j-starting", "shard-0", "running", &yes, 4),
		alloc("j-starting", "shard-1", "running", &no, 6),
		alloc("j-partial", "shard-1", "pending", nil, 7),
		alloc("j-failed", "shard-1", "lost", nil, 8),
		// An older failed allocation replaced by a newer running one does
		// not make the replica fail.
		alloc("j-serving", "shard-1", "failed", nil, 1),
	}
	jobs, orphans := Jobs(stubs, allocs)
	got := map[string]reconcile.State{}
	for _, j := range jobs {
		got[j.ID] = j.State
	}
	want := map[string]reconcile.State{
		"j-serving": reconcile.Serving, "j-starting": reconcile.Starting, "j-partial": reconcile.Partial,
		"j-pending": reconcile.Pending, "j-failed": reconcile.Failed,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("states (-want +got):\n%s", diff)
	}
	if len(orphans) != 1 || orphans[0].JobID != "broken" {
		t.Fatalf("orphans: %+v", orphans)
	}
	for _, j := range jobs {
		if j.ID == "j-serving" {
			wantShards := []facility.Shard{{Node: "a", Watts: 2600, GPU: "NVIDIA H200", GPUs: 4}, {Node: "b", Watts: 2600, GPU: "NVIDIA H200", GPUs: 4}}
			if diff := cmp.Diff(wantShards, j.Shards); diff != "" {
				t.Errorf("shards (-want +got):\n%s", diff)
			}
			if j.ModifyIndex != 12 || j.Gen != 1 || j.Replica != "m-0" {
				t.Errorf("job fields: %+v", j)
			}
		}
	}
}

func TestReservePending(t *testing.T) {
	fleet := facility.Fleet{Nodes: []facility.Node{
		{Name: "a", GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 8, Free: 8}}},
		{Name: "b", GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 8, Free: 4}}},
	}}
	jobs := []reconcile.Job{
		{ID: "j1", Shards: []facility.Shard{{Node: "a", GPU: "NVIDIA H200", GPUs: 4}, {Node: "b", GPU: "NVIDIA H200", GPUs: 4}}},
	}
	// shard-1 on b runs and already holds its devices (b's Free excludes
	// them); shard-0 on a is pending.
	allocs := []*api.AllocationListStub{
		{JobID: "j1", TaskGroup: "shard-0", DesiredStatus: "run", ClientStatus: "pending"},
		{JobID: "j1", TaskGroup: "shard-1", DesiredStatus: "run", ClientStatus: "running"},
	}
	got := ReservePending(fleet, jobs, allocs)
	if a, b := got.Nodes[0].GPUs[0].Free, got.Nodes[1].GPUs[0].Free; a != 4 || b != 4 {
		t.Fatalf("free after reservation: a=%d b=%d, want 4 and 4", a, b)
	}
	if fleet.Nodes[0].GPUs[0].Free != 8 {
		t.Fatal("input fleet was modified")
	}
}

func TestGenerations(t *testing.T) {
	gen := func(s *api.JobListStub, g string, stop bool, status string) *api.JobListStub {
		s.Meta[render.MetaGen], s.Stop, s.Status = g, stop, status
		return s
	}
	stubs := []*api.JobListStub{
		gen(managedStub("a0", "m-0", "a"), "0", false, "running"),
		gen(managedStub("a3", "m-0", "a"), "3", true, "dead"), // stopped: its ID is still taken
		gen(managedStub("b2", "m-1", "a"), "2", false, "dead"),
		{ID: "not-ours", Meta: map[string]string{"team": "x"}},
		{ID: "broken", Meta: map[string]string{render.MetaManaged: "true", render.MetaReplica: "m-2", render.MetaGen: "9"}},
		{ID: "no-gen", Meta: map[string]string{render.MetaManaged: "true", render.MetaReplica: "m-3", render.MetaGen: "x"}},
	}
	want := map[string]int{"m-0": 3, "m-1": 2, "m-2": 9}
	if diff := cmp.Diff(want, Generations(stubs)); diff != "" {
		t.Errorf("Generations (-want +got):\n%s", diff)
	}
}

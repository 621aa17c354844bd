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
	a := &api.AllocationListStub{ID: job + group + client, JobID: job, TaskGroup: group, DesiredStatus: "run", ClientStatus: client, CreateIndex: create, NodeID: "id-a"}
	if healthy != nil {
		a.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: healthy}
	}
	return a
}

// on puts an allocation on a node; stopped marks it as Nomad marks a lost
// or stopped one (desired stop).
func on(a *api.AllocationListStub, node string) *api.AllocationListStub {
	a.NodeID = "id-" + node
	return a
}

func stopped(a *api.AllocationListStub) *api.AllocationListStub {
	a.DesiredStatus = "stop"
	return a
}

func TestJobs(t *testing.T) {
	t.Parallel()
	yes := true
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	node := func(name, status string, since time.Duration) *api.Node {
		return &api.Node{ID: "id-" + name, Name: name, Status: status, SchedulingEligibility: api.NodeSchedulingEligible,
			StatusUpdatedAt: now.Add(-since).Unix()}
	}
	nodes := map[string]*api.Node{}
	for _, n := range []*api.Node{node("a", "ready", time.Hour), node("b", "ready", time.Hour), node("down", "down", 40*time.Second),
		node("fresh-down", "down", 5*time.Second), node("disc", "disconnected", 90*time.Second)} {
		nodes[n.ID] = n
	}
	drain := node("drain", "ready", time.Hour)
	drain.DrainStrategy = &api.DrainStrategy{}
	nodes[drain.ID] = drain
	pass := Check{Read: true, Passing: true}
	stubs := []*api.JobListStub{
		managedStub("j-serving", "m-0", "a", "b"),
		managedStub("j-starting", "m-1", "a", "b"),
		managedStub("j-partial", "m-2", "a", "b"),
		managedStub("j-pending", "m-3", "a"),
		managedStub("j-failed", "m-4", "a", "b"),
		managedStub("j-replaced", "m-5", "a"),
		managedStub("j-node-down", "m-6", "a", "down"),
		managedStub("j-node-fresh-down", "m-7", "fresh-down"),
		managedStub("j-unreadable", "m-8", "a"),
		managedStub("j-deploy-only", "m-9", "a"),
		managedStub("j-drained", "m-10", "drain"),
		managedStub("j-disc", "m-11", "disc"),
		managedStub("j-gone", "m-12", "a"),
		{ID: "not-ours", Status: "running", Meta: map[string]string{"team": "x"}},
		{ID: "stopped", Status: "running", Stop: true, Meta: managedStub("", "m-5", "a").Meta},
		{ID: "broken", Status: "running", Meta: map[string]string{render.MetaManaged: "true", render.MetaModel: "m"}},
	}
	// Every job was last registered at index 12: allocations of its current
	// version have higher create indexes. Listed in any order, shards of
	// one job interleaved with others.
	allocs := []*api.AllocationListStub{
		alloc("j-serving", "shard-1", "running", nil, 15),
		alloc("j-failed", "shard-0", "running", nil, 15),
		alloc("j-serving", "shard-0", "running", nil, 14),
		alloc("j-starting", "shard-0", "running", nil, 14),
		alloc("j-starting", "shard-1", "running", nil, 16),
		alloc("j-partial", "shard-1", "pending", nil, 17),
		stopped(on(alloc("j-failed", "shard-1", "lost", nil, 18), "b")),
		// An older failed allocation replaced by a newer running one does
		// not make the replica fail.
		alloc("j-serving", "shard-1", "failed", nil, 13),
		// Lost before the job's re-registration at 12: the version that
		// replaced it has no allocation yet.
		stopped(alloc("j-replaced", "shard-0", "lost", nil, 9)),
		alloc("j-node-down", "shard-0", "running", nil, 14),
		on(alloc("j-node-down", "shard-1", "running", nil, 14), "down"),
		on(alloc("j-node-fresh-down", "shard-0", "running", nil, 14), "fresh-down"),
		alloc("j-unreadable", "shard-0", "running", nil, 14),
		// Deployment health says healthy, the check does not pass.
		alloc("j-deploy-only", "shard-0", "running", &yes, 14),
		stopped(on(alloc("j-drained", "shard-0", "complete", nil, 14), "drain")),
		on(alloc("j-disc", "shard-0", "unknown", nil, 14), "disc"),
		on(alloc("j-gone", "shard-0", "running", nil, 14), "gc-ed"),
	}
	checks := map[string]Check{
		"j-servingshard-0running":         pass,
		"j-failedshard-0running":          pass,
		"j-startingshard-0running":        {Read: true, Detail: "check ready: failure (HTTP 503)"},
		"j-node-downshard-0running":       pass,
		"j-node-fresh-downshard-0running": pass,
		"j-unreadableshard-0running":      {Detail: "context deadline exceeded"},
		"j-deploy-onlyshard-0running":     {Read: true, Detail: "no check result yet"},
	}
	jobs, orphans := Jobs(stubs, allocs, Health{Now: now, LostAfter: 30 * time.Second, Nodes: nodes, Checks: checks})
	type view struct {
		State reconcile.State
		Note  string
	}
	got := map[string]view{}
	for _, j := range jobs {
		got[j.ID] = view{j.State, j.Note}
	}
	want := map[string]view{
		"j-serving":         {reconcile.Serving, ""},
		"j-starting":        {reconcile.Starting, "shard-0: check ready: failure (HTTP 503)"},
		"j-partial":         {reconcile.Partial, ""},
		"j-pending":         {reconcile.Pending, ""},
		"j-failed":          {reconcile.Failed, "shard-1: allocation j-failed lost on node b"},
		"j-replaced":        {reconcile.Pending, ""},
		"j-node-down":       {reconcile.Failed, "shard-1: node down down for 40s (lost_after 30s)"},
		"j-node-fresh-down": {reconcile.Starting, "shard-0: node fresh-down down for 5s; failed after lost_after 30s"},
		"j-unreadable":      {reconcile.Starting, "shard-0: health unreadable: context deadline exceeded"},
		"j-deploy-only":     {reconcile.Starting, "shard-0: no check result yet"},
		"j-drained":         {reconcile.Failed, "shard-0: allocation j-draine stopped on node drain, which takes no work"},
		"j-disc":            {reconcile.Failed, "shard-0: node disc disconnected for 1m30s (lost_after 30s)"},
		"j-gone":            {reconcile.Failed, "shard-0: allocation j-gonesh is on node id-gc-ed, which Nomad no longer lists"},
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

func TestNextLost(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	nodes := map[string]*api.Node{
		"1": {Status: "down", StatusUpdatedAt: 990},         // lost at 1020
		"2": {Status: "disconnected", StatusUpdatedAt: 995}, // lost at 1025
		"3": {Status: "down", StatusUpdatedAt: 900},         // already lost
		"4": {Status: "ready", StatusUpdatedAt: 999},
	}
	if got := NextLost(nodes, 30*time.Second, now); !got.Equal(time.Unix(1020, 0)) {
		t.Errorf("NextLost = %v, want 1020", got.Unix())
	}
	if got := NextLost(nodes, 0, now); !got.IsZero() {
		t.Errorf("NextLost with lost_after 0 = %v, want none", got)
	}
}

func TestReservePending(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

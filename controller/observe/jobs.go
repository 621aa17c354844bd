package observe

import (
	"errors"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/facility"
)

// Orphan is a managed job the controller cannot read (broken meta): it
// stops it, since it cannot tell which replica it is.
type Orphan struct {
	JobID string
	Err   error
}

// Jobs rebuilds the managed jobs from Nomad's job list (with meta) and
// every allocation, whatever order Nomad lists them in: a multi-node
// replica from all its shards' allocations. Jobs that are stopped or dead
// are left out; jobs that are not llmgw's are ignored.
func Jobs(stubs []*api.JobListStub, allocs []*api.AllocationListStub) ([]reconcile.Job, []Orphan) {
	byJob := map[string][]*api.AllocationListStub{}
	for _, a := range allocs {
		byJob[a.JobID] = append(byJob[a.JobID], a)
	}
	var out []reconcile.Job
	var orphans []Orphan
	for _, s := range stubs {
		if s.Stop || s.Status == "dead" {
			continue
		}
		m, err := render.ParseMeta(s.Meta)
		if errors.Is(err, render.ErrNotManaged) {
			continue
		}
		if err != nil {
			orphans = append(orphans, Orphan{JobID: s.ID, Err: err})
			continue
		}
		j := reconcile.Job{
			ID: s.ID, Replica: m.Replica, Model: m.Model, Profile: m.Profile, FP: m.ProfileFP, Gen: m.Gen, Domain: m.Domain,
			CreateIndex: s.CreateIndex, ModifyIndex: s.JobModifyIndex,
			Since: time.Unix(0, s.SubmitTime),
		}
		for i, n := range m.Nodes {
			j.Shards = append(j.Shards, facility.Shard{Node: n, Watts: m.Watts[i], GPU: m.GPU, GPUs: m.GPUs})
		}
		j.State = jobState(m.Shards, byJob[s.ID], s.JobModifyIndex)
		out = append(out, j)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, orphans
}

// Generations returns, per replica, the highest generation (meta
// llmgw.gen) of every managed job in Nomad's job list, stopped and dead
// jobs included: their IDs stay taken until Nomad garbage-collects them,
// so a new job of the replica must take a higher one.
// Only llmgw.replica and llmgw.gen are read: a job whose other meta is
// broken still holds its ID.
func Generations(stubs []*api.JobListStub) map[string]int {
	out := map[string]int{}
	for _, s := range stubs {
		if s.Meta[render.MetaManaged] != "true" {
			continue
		}
		replica := s.Meta[render.MetaReplica]
		gen, err := strconv.Atoi(s.Meta[render.MetaGen])
		if replica == "" || err != nil || gen < 0 {
			continue
		}
		if g, ok := out[replica]; !ok || gen > g {
			out[replica] = gen
		}
	}
	return out
}

type shardState int

const (
	shardUnplaced shardState = iota
	shardPlaced              // an allocation is pending or running, not ready
	shardReady               // running and healthy
	shardFailed              // its last allocation failed, was lost or exited
)

// jobState folds the shards' states into the job's.
func jobState(shards int, allocs []*api.AllocationListStub, jobModifyIndex uint64) reconcile.State {
	latest := map[string]*api.AllocationListStub{}
	for _, a := range allocs {
		if a.DesiredStatus != api.AllocDesiredStatusRun {
			continue // being stopped: an older version, or a node drain
		}
		cur := latest[a.TaskGroup]
		if cur == nil || better(a, cur) {
			latest[a.TaskGroup] = a
		}
	}
	counts := map[shardState]int{}
	for i := 0; i < shards; i++ {
		a := latest[render.GroupName(i)]
		counts[stateOf(a)]++
	}
	switch {
	case counts[shardReady] == shards:
		return reconcile.Serving
	case counts[shardFailed] > 0:
		return reconcile.Failed
	case counts[shardUnplaced] == shards:
		return reconcile.Pending
	case counts[shardUnplaced] > 0:
		return reconcile.Partial
	default:
		return reconcile.Starting
	}
}

// better prefers a live allocation, then the newest.
func better(a, b *api.AllocationListStub) bool {
	if Live(a) != Live(b) {
		return Live(a)
	}
	return a.CreateIndex > b.CreateIndex
}

func stateOf(a *api.AllocationListStub) shardState {
	if a == nil {
		return shardUnplaced
	}
	switch a.ClientStatus {
	case api.AllocClientStatusRunning:
		if a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil && *a.DeploymentStatus.Healthy {
			return shardReady
		}
		return shardPlaced
	case api.AllocClientStatusPending:
		return shardPlaced
	default:
		// Failed or lost after the restart policy gave up (the job pins each
		// shard to its node, so Nomad's rescheduling retries the same node),
		// or complete (a service that exited is not serving). The reconciler
		// places it again only where the facility now finds a different place.
		return shardFailed
	}
}

// ReservePending takes from the fleet's free GPUs what registered jobs are
// promised but do not hold yet (a shard whose allocation is not placed or
// is still pending has no device IDs yet, so the fleet counts its GPUs as
// free). Without it, a pass right after a registration would hand the same
// GPUs out twice.
func ReservePending(fleet facility.Fleet, jobs []reconcile.Job, allocs []*api.AllocationListStub) facility.Fleet {
	holding := map[string]bool{} // job/group that holds its devices
	for _, a := range allocs {
		if Live(a) && a.ClientStatus == api.AllocClientStatusRunning {
			holding[a.JobID+"/"+a.TaskGroup] = true
		}
	}
	want := map[string]map[string]int{} // node -> GPU model -> GPUs
	for _, j := range jobs {
		for i, s := range j.Shards {
			if holding[j.ID+"/"+render.GroupName(i)] || s.GPUs == 0 {
				continue
			}
			if want[s.Node] == nil {
				want[s.Node] = map[string]int{}
			}
			want[s.Node][s.GPU] += s.GPUs
		}
	}
	if len(want) == 0 {
		return fleet
	}
	out := facility.Fleet{Nodes: make([]facility.Node, len(fleet.Nodes))}
	for i, n := range fleet.Nodes {
		if w := want[n.Name]; w != nil {
			n.GPUs = append([]facility.GPU(nil), n.GPUs...)
			for k := range n.GPUs {
				n.GPUs[k].Free = max(0, n.GPUs[k].Free-w[n.GPUs[k].Model])
			}
		}
		out.Nodes[i] = n
	}
	return out
}

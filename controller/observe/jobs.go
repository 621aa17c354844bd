package observe

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
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
	// ModifyIndex is its JobModifyIndex, the check-and-set index of its stop.
	ModifyIndex uint64
	Err         error
}

// Jobs rebuilds the managed jobs from Nomad's job list (with meta) and
// every allocation, whatever order Nomad lists them in: a multi-node
// replica from all its shards' allocations. Stopped jobs are left out;
// jobs that are not llmgw's are ignored. A dead job that was not stopped
// (every allocation lost or failed, nothing left to evaluate) is kept: it
// still holds its slot, and its state says what to do about it.
func Jobs(stubs []*api.JobListStub, allocs []*api.AllocationListStub, h Health) ([]reconcile.Job, []Orphan) {
	byJob := map[string][]*api.AllocationListStub{}
	for _, a := range allocs {
		byJob[a.JobID] = append(byJob[a.JobID], a)
	}
	var out []reconcile.Job
	var orphans []Orphan
	for _, s := range stubs {
		if s.Stop {
			continue
		}
		m, err := render.ParseMeta(s.Meta)
		if errors.Is(err, render.ErrNotManaged) {
			continue
		}
		if err != nil {
			orphans = append(orphans, Orphan{JobID: s.ID, ModifyIndex: s.JobModifyIndex, Err: err})
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
		j.State, j.Note = jobState(s, m.Shards, byJob[s.ID], h)
		j.Unhealthy = unhealthyGPUs(byJob[s.ID], h.Nodes)
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
	shardReady               // running and serving
	shardFailed              // lost, failed, exited, or on a node down past lost_after: needs a new place
)

// Health is what tells a shard's health beyond the allocation list: the
// nodes (a node down or disconnected fails its shards once LostAfter has
// passed) and the service check results of the groups that declare checks.
type Health struct {
	Now time.Time
	// LostAfter is how long a shard's node may be down or disconnected
	// before the shard counts as failed; 0 fails it as soon as Nomad
	// reports the node down.
	LostAfter time.Duration
	// Nodes by node ID. A shard whose node is not in it (a node Nomad has
	// garbage-collected) is failed.
	Nodes map[string]*api.Node
	// Checks by allocation ID: the results of the replica's service checks
	// (shard 0, the group render gives the service and its check to).
	Checks map[string]Check
}

// Check is what the controller read of one allocation's service checks.
type Check struct {
	// Read is false when the results could not be read (an unreachable
	// client, an error, a timeout): the allocation is then not healthy.
	Read bool
	// Passing: every check of the replica's service reported success (and
	// there was at least one result).
	Passing bool
	// Detail says why not, for the API: "check ready: failure (HTTP 503)",
	// "no check result yet", "health unreadable: …".
	Detail string
}

// CheckedGroup is the group whose allocation's service checks decide
// whether a replica serves: shard 0 carries the replica's service and its
// ready check (render); the other shards of a multi-node replica serve
// through it.
var CheckedGroup = render.GroupName(0)

// jobState folds the shards' states into the job's, with a note that says
// why a job that is not serving is not.
func jobState(s *api.JobListStub, shards int, allocs []*api.AllocationListStub, h Health) (reconcile.State, string) {
	byGroup := map[string][]*api.AllocationListStub{}
	for _, a := range allocs {
		byGroup[a.TaskGroup] = append(byGroup[a.TaskGroup], a)
	}
	counts := map[shardState]int{}
	var notes []string
	for i := 0; i < shards; i++ {
		g := render.GroupName(i)
		st, note := shardOf(g, byGroup[g], s.JobModifyIndex, h)
		counts[st]++
		if note != "" {
			notes = append(notes, g+": "+note)
		}
	}
	note := strings.Join(notes, "; ")
	switch {
	case counts[shardReady] == shards:
		return reconcile.Serving, ""
	case counts[shardFailed] > 0:
		return reconcile.Failed, note
	case counts[shardUnplaced] == shards:
		return reconcile.Pending, note
	case counts[shardUnplaced] > 0:
		return reconcile.Partial, note
	default:
		return reconcile.Starting, note
	}
}

// shardOf tells one group's state from its allocations.
//
// The group's live allocation (the scheduler wants it running and the
// client has not finished it) decides, the newest if several. Without one,
// the newest allocation of the job's current version does: a lost or
// failed one (Nomad marks a lost allocation desired-stop; since every
// shard is pinned to its node, Nomad cannot replace it anywhere else) or
// one Nomad stopped on a node that takes no work (a drain) fails the
// shard. Allocations created before the job's last registration (its
// JobModifyIndex; Nomad's job list carries no version) belong to a version
// a re-registration replaced, and say nothing about the current one.
func shardOf(group string, allocs []*api.AllocationListStub, jobModifyIndex uint64, h Health) (shardState, string) {
	var live, last *api.AllocationListStub
	for _, a := range allocs {
		if liveOrUnknown(a) {
			if live == nil || a.CreateIndex > live.CreateIndex {
				live = a
			}
			continue
		}
		if a.CreateIndex >= jobModifyIndex && (last == nil || a.CreateIndex > last.CreateIndex) {
			last = a
		}
	}
	if live == nil {
		if last == nil {
			return shardUnplaced, ""
		}
		n := h.Nodes[last.NodeID]
		switch {
		case last.ClientStatus == api.AllocClientStatusLost:
			return shardFailed, fmt.Sprintf("allocation %s lost on %s", short(last.ID), nodeName(last, n))
		case last.ClientStatus == api.AllocClientStatusFailed:
			return shardFailed, fmt.Sprintf("allocation %s failed on %s", short(last.ID), nodeName(last, n))
		case n == nil || !Schedulable(n):
			return shardFailed, fmt.Sprintf("allocation %s stopped on %s, which takes no work", short(last.ID), nodeName(last, n))
		}
		return shardUnplaced, ""
	}
	a := live
	n := h.Nodes[a.NodeID]
	if n == nil && a.NodeID != "" {
		return shardFailed, fmt.Sprintf("allocation %s is on node %s, which Nomad no longer lists", short(a.ID), a.NodeID)
	}
	if n != nil && (n.Status == api.NodeStatusDown || n.Status == api.NodeStatusDisconnected) {
		since := time.Unix(n.StatusUpdatedAt, 0)
		gone := h.Now.Sub(since)
		if gone >= h.LostAfter {
			return shardFailed, fmt.Sprintf("node %s %s for %s (lost_after %s)", n.Name, n.Status, gone.Round(time.Second), h.LostAfter)
		}
		return shardPlaced, fmt.Sprintf("node %s %s for %s; failed after lost_after %s", n.Name, n.Status, gone.Round(time.Second), h.LostAfter)
	}
	switch a.ClientStatus {
	case api.AllocClientStatusRunning:
		if group != CheckedGroup {
			return shardReady, "" // serves through shard 0's check
		}
		c, ok := h.Checks[a.ID]
		switch {
		case !ok:
			return shardPlaced, "health not read yet"
		case !c.Read:
			return shardPlaced, "health unreadable: " + c.Detail
		case !c.Passing:
			return shardPlaced, c.Detail
		}
		return shardReady, ""
	case api.AllocClientStatusUnknown:
		return shardPlaced, fmt.Sprintf("allocation %s unknown (its node is disconnected)", short(a.ID))
	default:
		return shardPlaced, ""
	}
}

// unhealthyGPUs names the devices the job's live allocations hold that
// their node's device plugin reports unhealthy ("" when none).
func unhealthyGPUs(allocs []*api.AllocationListStub, nodes map[string]*api.Node) string {
	var out []string
	for _, a := range allocs {
		n := nodes[a.NodeID]
		if !Live(a) || a.AllocatedResources == nil || n == nil || n.NodeResources == nil {
			continue
		}
		health := map[string]*api.NodeDevice{}
		for _, d := range n.NodeResources.Devices {
			for _, in := range d.Instances {
				health[in.ID] = in
			}
		}
		names := make([]string, 0, len(a.AllocatedResources.Tasks))
		for name := range a.AllocatedResources.Tasks {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			t := a.AllocatedResources.Tasks[name]
			if t == nil {
				continue
			}
			for _, d := range t.Devices {
				for _, id := range d.DeviceIDs {
					if in := health[id]; in != nil && !in.Healthy {
						msg := fmt.Sprintf("%s on node %s unhealthy", id, n.Name)
						if in.HealthDescription != "" {
							msg += ": " + in.HealthDescription
						}
						out = append(out, msg)
					}
				}
			}
		}
	}
	return strings.Join(out, "; ")
}

// NextLost is the first moment after now at which a node that is down or
// disconnected passes lostAfter, when its shards turn failed; zero if none.
func NextLost(nodes map[string]*api.Node, lostAfter time.Duration, now time.Time) time.Time {
	var next time.Time
	if lostAfter <= 0 {
		return next
	}
	for _, n := range nodes {
		if n.Status != api.NodeStatusDown && n.Status != api.NodeStatusDisconnected {
			continue
		}
		at := time.Unix(n.StatusUpdatedAt, 0).Add(lostAfter)
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// liveOrUnknown is Live, plus an allocation on a disconnected node (client
// status unknown), which may still run.
func liveOrUnknown(a *api.AllocationListStub) bool {
	return Live(a) || (a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusUnknown)
}

func nodeName(a *api.AllocationListStub, n *api.Node) string {
	if n != nil {
		return "node " + n.Name
	}
	if a.NodeName != "" {
		return "node " + a.NodeName
	}
	return "node " + a.NodeID
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
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

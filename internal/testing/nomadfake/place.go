package nomadfake

import (
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// nodeNameTarget is the constraint target render pins each group with.
const nodeNameTarget = "${node.unique.name}"

// pinnedNode is the node a group's ${node.unique.name} = <name> constraint
// names, "" without one.
func pinnedNode(tg *api.TaskGroup) string {
	for _, c := range tg.Constraints {
		if c.LTarget == nodeNameTarget && (c.Operand == "=" || c.Operand == "==" || c.Operand == "is") {
			return c.RTarget
		}
	}
	return ""
}

type slot struct {
	group string
	index int
}

// allocIndex is the <i> of an allocation named <job>.<group>[<i>].
func allocIndex(name string) int {
	i := strings.LastIndexByte(name, '[')
	if i < 0 || !strings.HasSuffix(name, "]") {
		return -1
	}
	n, err := strconv.Atoi(name[i+1 : len(name)-1])
	if err != nil {
		return -1
	}
	return n
}

// evaluateLocked records an evaluation of rec and runs it at once: the
// fake's stand-in for Nomad's scheduler, reduced to what the controller's
// jobs need. A stopped job's live allocations are stopped. So are those of
// an older version: every new version replaces them, as Nomad does for
// every update the controller writes (it changes the job's meta, which
// Nomad's tasksUpdated treats as destructive). Then each slot
// <job>.<group>[i] without a live allocation gets one on the node its group
// is pinned to, if that node is ready, eligible and not draining and has
// free healthy instances for every device request; a group that cannot be
// placed gets the SetPlacementFailureMetric metric in the evaluation's
// FailedTGAllocs and waits for the next evaluation (the fake keeps no
// blocked evaluations).
func (s *Server) evaluateLocked(rec *jobRecord, trigger string, idx uint64) *api.Evaluation {
	eval := s.newEvalLocked(rec, trigger, idx)
	job := rec.job
	filled := map[slot]bool{}
	for _, a := range s.allocsByJob[rec.key()] {
		if !a.live() {
			continue
		}
		if *job.Stop || *a.Job.Version != *job.Version {
			s.stopAllocLocked(a, idx)
			continue
		}
		filled[slot{a.TaskGroup, allocIndex(a.Name)}] = true
	}
	failed := map[string]*api.AllocationMetric{}
	for _, tg := range job.TaskGroups {
		for i := 0; i < *tg.Count && !*job.Stop; i++ {
			if filled[slot{*tg.Name, i}] || failed[*tg.Name] != nil {
				continue
			}
			if !s.placeLocked(rec, eval, tg, i, idx) {
				m := s.failMetric
				failed[*tg.Name] = &m
			}
		}
	}
	if len(failed) > 0 {
		eval.FailedTGAllocs = failed
	}
	rec.unplaced = len(failed) > 0
	s.refreshJobStatusLocked(rec.key(), idx)
	return eval
}

// stopAllocLocked marks a stopped by the server and, as the fake has no
// client to wait for, complete at once; with WithShutdownDelay a running
// allocation whose group has a shutdown_delay completes once it has passed
// (services.go), deregistered meanwhile.
func (s *Server) stopAllocLocked(a *allocRecord, idx uint64) {
	if d := shutdownDelayOf(a); s.shutdownDelay && d > 0 && a.live() && a.ClientStatus == api.AllocClientStatusRunning {
		a.stopAt = s.now().Add(d)
		s.stopping[a.ID] = a
	} else if a.live() {
		a.ClientStatus = api.AllocClientStatusComplete
	}
	a.DesiredStatus = api.AllocDesiredStatusStop
	a.AllocModifyIndex = idx
	s.modifyAllocLocked(a, idx)
}

func schedulable(n *api.Node) bool {
	return n.Status == api.NodeStatusReady && n.SchedulingEligibility == api.NodeSchedulingEligible && n.DrainStrategy == nil
}

// placeLocked places slot i of group tg on the group's pinned node, or
// reports that it cannot.
func (s *Server) placeLocked(rec *jobRecord, eval *api.Evaluation, tg *api.TaskGroup, i int, idx uint64) bool {
	nr := s.byName[pinnedNode(tg)]
	if nr == nil || !schedulable(nr.node) {
		return false
	}
	devs, ok := s.assignDevicesLocked(nr, tg)
	if !ok {
		return false
	}
	s.createAllocLocked(rec, eval, tg, i, nr, devs, idx)
	return true
}

// deviceMatches reports whether group g answers a device request name:
// "<type>", "<vendor>/<type>" or "<vendor>/<type>/<name>".
func deviceMatches(req string, g *api.NodeDeviceResource) bool {
	parts := strings.SplitN(req, "/", 3)
	switch len(parts) {
	case 1:
		return parts[0] == g.Type
	case 2:
		return parts[0] == g.Vendor && parts[1] == g.Type
	default:
		return parts[0] == g.Vendor && parts[1] == g.Type && parts[2] == g.Name
	}
}

// assignDevicesLocked picks, for each task's device requests, healthy
// instances no live allocation on the node holds, in the node's group and
// instance order, or returns false.
func (s *Server) assignDevicesLocked(nr *nodeRecord, tg *api.TaskGroup) (map[string][]*api.AllocatedDeviceResource, bool) {
	taken := map[string]bool{}
	for _, a := range s.allocsByNode[nr.node.ID] {
		if !a.live() {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				for _, id := range d.DeviceIDs {
					taken[id] = true
				}
			}
		}
	}
	out := map[string][]*api.AllocatedDeviceResource{}
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, r := range t.Resources.Devices {
			var got *api.AllocatedDeviceResource
			for _, g := range nr.node.NodeResources.Devices {
				if !deviceMatches(r.Name, g) {
					continue
				}
				var ids []string
				for _, in := range g.Instances {
					if in.Healthy && !taken[in.ID] && uint64(len(ids)) < *r.Count {
						ids = append(ids, in.ID)
					}
				}
				if uint64(len(ids)) == *r.Count {
					got = &api.AllocatedDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name, DeviceIDs: ids}
					break
				}
			}
			if got == nil {
				return nil, false
			}
			for _, id := range got.DeviceIDs {
				taken[id] = true
			}
			out[t.Name] = append(out[t.Name], got)
		}
	}
	return out, true
}

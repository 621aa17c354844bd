package nomadfake

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"
)

// allocRecord is an allocation as the API shows it, and whether its
// service checks pass while it runs (SetAllocStatus's healthy).
type allocRecord struct {
	*api.Allocation
	checksPass bool
	// stopAt is when a stopping allocation completes (WithShutdownDelay);
	// zero otherwise.
	stopAt time.Time
}

// live: the scheduler wants it running and the client has not ended it.
func (a *allocRecord) live() bool {
	return a.DesiredStatus == api.AllocDesiredStatusRun &&
		(a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning)
}

func (s *Server) handleAllocList(w http.ResponseWriter, r *http.Request) {
	ns := namespace(r)
	resources, _ := strconv.ParseBool(r.URL.Query().Get("resources"))
	s.query(w, r, func() (any, uint64, *httpError) {
		as := s.sortedAllocsLocked(func(a *allocRecord) bool { return nsMatches(ns, a.Namespace) })
		out := make([]*api.AllocationListStub, 0, len(as))
		for _, a := range as {
			st := a.Stub()
			if resources {
				st.AllocatedResources = a.AllocatedResources
			}
			out = append(out, st)
		}
		return out, s.tableIndexLocked(tableAlloc), nil
	})
}

// sortedAllocsLocked lists the allocations keep accepts, oldest first.
func (s *Server) sortedAllocsLocked(keep func(*allocRecord) bool) []*allocRecord {
	var as []*allocRecord
	for _, a := range s.allocs {
		if keep(a) {
			as = append(as, a)
		}
	}
	sort.Slice(as, func(i, j int) bool {
		if as[i].CreateIndex != as[j].CreateIndex {
			return as[i].CreateIndex < as[j].CreateIndex
		}
		return as[i].Name < as[j].Name
	})
	return as
}

func (s *Server) createAllocLocked(rec *jobRecord, eval *api.Evaluation, tg *api.TaskGroup, index int,
	nr *nodeRecord, devs map[string][]*api.AllocatedDeviceResource, idx uint64) {
	job, n := rec.snap, nr.node
	ar := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{}}
	for _, t := range tg.Tasks {
		tr := &api.AllocatedTaskResources{Devices: devs[t.Name]}
		if res := t.Resources; res != nil {
			if res.CPU != nil {
				tr.Cpu.CpuShares = int64(*res.CPU)
			}
			if res.MemoryMB != nil {
				tr.Memory.MemoryMB = int64(*res.MemoryMB)
			}
		}
		ar.Tasks[t.Name] = tr
	}
	// The group's ports, on loopback: reserved ones as asked, dynamic ones
	// numbered from 20000 across the fake (so that a test can dial an
	// allocation's address, as the controller reads engine metrics).
	for _, nw := range tg.Networks {
		for _, p := range nw.ReservedPorts {
			ar.Shared.Ports = append(ar.Shared.Ports, api.PortMapping{Label: p.Label, Value: p.Value, To: p.To, HostIP: "127.0.0.1"})
		}
		for _, p := range nw.DynamicPorts {
			v := 20000 + s.ports
			s.ports++
			to := p.To
			if to <= 0 {
				to = v
			}
			ar.Shared.Ports = append(ar.Shared.Ports, api.PortMapping{Label: p.Label, Value: v, To: to, HostIP: "127.0.0.1"})
		}
	}
	now := s.nowNano()
	a := &allocRecord{Allocation: &api.Allocation{
		ID:                 newID(),
		Namespace:          *job.Namespace,
		EvalID:             eval.ID,
		Name:               fmt.Sprintf("%s.%s[%d]", *job.ID, *tg.Name, index),
		NodeID:             n.ID,
		NodeName:           n.Name,
		JobID:              *job.ID,
		Job:                job,
		TaskGroup:          *tg.Name,
		AllocatedResources: ar,
		DesiredStatus:      api.AllocDesiredStatusRun,
		ClientStatus:       api.AllocClientStatusPending,
		CreateIndex:        idx,
		ModifyIndex:        idx,
		AllocModifyIndex:   idx,
		CreateTime:         now,
		ModifyTime:         now,
	}}
	if s.autoRun {
		a.ClientStatus, a.checksPass = api.AllocClientStatusRunning, true
	}
	s.allocs[a.ID] = a
	k := rec.key()
	s.allocsByJob[k] = append(s.allocsByJob[k], a)
	s.allocsByNode[n.ID] = append(s.allocsByNode[n.ID], a)
	s.touchLocked(idx, tableAlloc)
	s.markLocked(string(api.TopicAllocation), "PlanResult", a.ID, a)
}

func (s *Server) modifyAllocLocked(a *allocRecord, idx uint64) {
	a.ModifyIndex = idx
	a.ModifyTime = s.nowNano()
	s.touchLocked(idx, tableAlloc)
	s.markLocked(string(api.TopicAllocation), "AllocationUpdated", a.ID, a)
}

// SetAllocStatus reports a client status for an allocation as its client
// would: "pending", "running" (its service checks then pass when healthy,
// fail when not), "complete", "failed" or "lost" (which also marks it
// stopped, as Nomad's node-update evaluation does). Nothing replaces an
// allocation that ends: see Reschedule.
func (s *Server) SetAllocStatus(allocID, status string, healthy bool) error {
	switch status {
	case api.AllocClientStatusPending, api.AllocClientStatusRunning, api.AllocClientStatusComplete,
		api.AllocClientStatusFailed, api.AllocClientStatusLost:
	default:
		return fmt.Errorf("nomadfake: unknown client status %q", status)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[allocID]
	if a == nil {
		return fmt.Errorf("nomadfake: unknown allocation %q", allocID)
	}
	idx := s.nextIndexLocked()
	s.setClientStatusLocked(a, status, healthy, idx)
	s.refreshJobStatusLocked(nsKey{a.Namespace, a.JobID}, idx)
	s.notifyLocked()
	return nil
}

func (s *Server) setClientStatusLocked(a *allocRecord, status string, healthy bool, idx uint64) {
	a.ClientStatus, a.checksPass = status, healthy
	if status == api.AllocClientStatusLost {
		a.DesiredStatus = api.AllocDesiredStatusStop
	}
	s.modifyAllocLocked(a, idx)
}

// Reschedule stands in for Nomad's rescheduler, which the fake does not
// run: it stops an allocation that failed, was lost or completed, and
// runs an evaluation of its job, which places its slot again on the
// group's pinned node. It returns the new allocation's ID.
func (s *Server) Reschedule(allocID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[allocID]
	if a == nil {
		return "", fmt.Errorf("nomadfake: unknown allocation %q", allocID)
	}
	if a.live() {
		return "", fmt.Errorf("nomadfake: allocation %s is %s, not ended", allocID, a.ClientStatus)
	}
	rec := s.jobs[nsKey{a.Namespace, a.JobID}]
	if rec == nil {
		return "", fmt.Errorf("nomadfake: allocation %s's job %s is gone", allocID, a.JobID)
	}
	idx := s.nextIndexLocked()
	a.DesiredStatus = api.AllocDesiredStatusStop
	s.modifyAllocLocked(a, idx)
	eval := s.evaluateLocked(rec, "alloc-failure", idx)
	s.notifyLocked()
	for _, b := range s.allocsByJob[rec.key()] {
		if b.EvalID == eval.ID && b.TaskGroup == a.TaskGroup && allocIndex(b.Name) == allocIndex(a.Name) {
			return b.ID, nil
		}
	}
	return "", fmt.Errorf("nomadfake: %s could not be placed again on node %s", a.Name, a.NodeName)
}

// Allocations returns copies of the allocations of jobID (every job's when
// jobID is ""), in creation order.
func (s *Server) Allocations(jobID string) []*api.Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var as []*api.Allocation
	for _, a := range s.sortedAllocsLocked(func(a *allocRecord) bool { return jobID == "" || a.JobID == jobID }) {
		as = append(as, a.Allocation)
	}
	b, err := json.Marshal(as)
	if err != nil {
		panic("nomadfake: copy allocations: " + err.Error())
	}
	var out []*api.Allocation
	if err := json.Unmarshal(b, &out); err != nil {
		panic("nomadfake: copy allocations: " + err.Error())
	}
	return out
}

// handleAllocChecks answers GET /v1/client/allocation/<id>/checks as a
// Nomad client does for its nomad-provider service checks: one result per
// check of the allocation's group services, keyed by check ID. The fake's
// checks follow SetAllocStatus: "success" while it runs healthy,
// "failure" while it runs unhealthy, no result before it runs or after it
// ends. Unknown allocation: 404 "Unknown allocation"; its node down: 404
// "No path to node".
func (s *Server) handleAllocChecks(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[id]
	if a == nil {
		writeError(w, errorf(http.StatusNotFound, "Unknown allocation %q", id))
		return
	}
	if _, err := s.clientNodeLocked(a.NodeID, http.StatusNotFound); err != nil {
		writeError(w, err)
		return
	}
	out := api.AllocCheckStatuses{}
	if a.ClientStatus == api.AllocClientStatusRunning {
		status, code := "failure", 503
		if a.checksPass {
			status, code = "success", 200
		}
		tg := a.Job.LookupTaskGroup(a.TaskGroup)
		for _, svc := range tg.Services {
			if svc.Provider != "nomad" && svc.Provider != "" {
				continue
			}
			for _, c := range svc.Checks {
				// IDs are 64 hex digits and Group is the allocation's
				// name, as Nomad 2.0.5 answers them.
				cid := fmt.Sprintf("%x", sha256.Sum256([]byte(a.ID+"/"+svc.Name+"/"+c.Name)))
				out[cid] = api.AllocCheckStatus{
					ID: cid, Check: c.Name, Group: a.Name, Mode: "healthiness",
					Service: svc.Name, Task: c.TaskName, Status: status, StatusCode: code, Timestamp: s.now().Unix(),
				}
			}
		}
	}
	writeClientJSON(w, out)
}

package nomadfake

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

func (s *Server) handleAllocList(w http.ResponseWriter, r *http.Request) {
	ns := namespace(r)
	q := r.URL.Query()
	prefix := q.Get("prefix")
	resources, _ := strconv.ParseBool(q.Get("resources"))
	taskStates := true
	if v := q.Get("task_states"); v != "" {
		taskStates, _ = strconv.ParseBool(v)
	}
	s.query(w, r, func() (any, uint64, *httpError) {
		var as []*api.Allocation
		for _, a := range s.allocs {
			if nsMatches(ns, a.Namespace) && strings.HasPrefix(a.ID, prefix) {
				as = append(as, a)
			}
		}
		sortAllocs(as)
		out := make([]*api.AllocationListStub, 0, len(as))
		for _, a := range as {
			st := allocStub(a, resources)
			if !taskStates {
				st.TaskStates = nil
			}
			out = append(out, st)
		}
		return out, s.tableIndexLocked(tableAlloc), nil
	})
}

func (s *Server) handleAlloc(w http.ResponseWriter, r *http.Request, rest string) {
	if strings.Contains(rest, "/") {
		notFaked(w, r)
		return
	}
	s.query(w, r, func() (any, uint64, *httpError) {
		a := s.allocs[rest]
		if a == nil {
			return nil, s.tableIndexLocked(tableAlloc), errorf(http.StatusNotFound, "alloc not found")
		}
		return a, a.ModifyIndex, nil
	})
}

func (s *Server) nodeAllocations(w http.ResponseWriter, r *http.Request, nodeID string) {
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.Allocation{}
		out = append(out, s.allocsByNode[nodeID]...)
		return out, s.tableIndexLocked(tableAlloc), nil
	})
}

func allocStub(a *api.Allocation, resources bool) *api.AllocationListStub {
	st := a.Stub()
	if resources {
		st.AllocatedResources = a.AllocatedResources
	}
	return st
}

func (s *Server) createAllocLocked(rec *jobRecord, eval *api.Evaluation, tg *api.TaskGroup, index int,
	nr *nodeRecord, m *api.AllocationMetric, devs map[string][]*api.AllocatedDeviceResource, idx uint64) *api.Allocation {
	job := rec.snap
	n := nr.node
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
			if res.MemoryMaxMB != nil {
				tr.Memory.MemoryMaxMB = int64(*res.MemoryMaxMB)
			}
		}
		ar.Tasks[t.Name] = tr
	}
	if tg.EphemeralDisk != nil && tg.EphemeralDisk.SizeMB != nil {
		ar.Shared.DiskMB = int64(*tg.EphemeralDisk.SizeMB)
	}
	ip := n.Attributes["unique.network.ip-address"]
	for _, nw := range tg.Networks {
		for _, p := range nw.ReservedPorts {
			ar.Shared.Ports = append(ar.Shared.Ports, api.PortMapping{Label: p.Label, Value: p.Value, To: p.To, HostIP: ip})
		}
		for _, p := range nw.DynamicPorts {
			v := nr.nextPort
			nr.nextPort++
			to := p.To
			if to == -1 {
				to = v
			}
			ar.Shared.Ports = append(ar.Shared.Ports, api.PortMapping{Label: p.Label, Value: v, To: to, HostIP: ip})
		}
	}
	now := s.nowNano()
	a := &api.Allocation{
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
		Metrics:            m,
		DesiredStatus:      api.AllocDesiredStatusRun,
		ClientStatus:       api.AllocClientStatusPending,
		CreateIndex:        idx,
		ModifyIndex:        idx,
		AllocModifyIndex:   idx,
		CreateTime:         now,
		ModifyTime:         now,
	}
	s.allocs[a.ID] = a
	k := rec.key()
	s.allocsByJob[k] = append(s.allocsByJob[k], a)
	s.allocsByNode[n.ID] = append(s.allocsByNode[n.ID], a)
	nr.usedDirty = true
	if s.autoRun {
		s.setClientStatusLocked(a, api.AllocClientStatusRunning, true)
	}
	s.touchLocked(idx, tableAlloc)
	return a
}

func taskEvent(typ, display string, at time.Time) *api.TaskEvent {
	return &api.TaskEvent{Type: typ, Time: at.UnixNano(), DisplayMessage: display, Details: map[string]string{}}
}

// setClientStatusLocked moves a to a client status the way a Nomad client
// would report it: task states and events follow, and so does the
// deployment health.
func (s *Server) setClientStatusLocked(a *api.Allocation, status string, healthy bool) {
	now := s.now()
	a.ClientStatus = status
	if a.TaskStates == nil {
		a.TaskStates = map[string]*api.TaskState{}
	}
	for name := range a.AllocatedResources.Tasks {
		ts := a.TaskStates[name]
		if ts == nil {
			ts = &api.TaskState{State: "pending"}
			ts.Events = append(ts.Events, taskEvent(api.TaskReceived, "Task received by client", now))
			a.TaskStates[name] = ts
		}
		switch status {
		case api.AllocClientStatusPending:
			ts.State = "pending"
		case api.AllocClientStatusRunning:
			if ts.State != "running" {
				ts.Events = append(ts.Events,
					taskEvent(api.TaskSetup, "Building Task Directory", now),
					taskEvent(api.TaskStarted, "Task started by client", now))
				ts.State, ts.Failed, ts.StartedAt = "running", false, now
			}
		case api.AllocClientStatusComplete:
			if ts.State != "dead" {
				if a.DesiredStatus == api.AllocDesiredStatusStop {
					ts.Events = append(ts.Events, taskEvent(api.TaskKilled, "Task successfully killed", now))
				} else {
					ev := taskEvent(api.TaskTerminated, "Exit Code: 0", now)
					ev.Details["exit_code"] = "0"
					ts.Events = append(ts.Events, ev)
				}
				ts.State, ts.FinishedAt = "dead", now
			}
		case api.AllocClientStatusFailed:
			if ts.State != "dead" {
				ev := taskEvent(api.TaskTerminated, "Exit Code: 1", now)
				ev.ExitCode = 1
				ev.Details["exit_code"] = "1"
				nr := taskEvent(api.TaskNotRestarting, "Error was unrecoverable", now)
				nr.FailsTask = true
				ts.Events = append(ts.Events, ev, nr)
				ts.State, ts.Failed, ts.FinishedAt = "dead", true, now
			}
		}
	}
	switch status {
	case api.AllocClientStatusPending:
		a.ClientDescription = "No tasks have started"
	case api.AllocClientStatusRunning:
		a.ClientDescription = "Tasks are running"
		a.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: new(healthy), Timestamp: now}
	case api.AllocClientStatusComplete:
		a.ClientDescription = "All tasks have completed"
	case api.AllocClientStatusFailed:
		a.ClientDescription = "Failed tasks"
		a.DeploymentStatus = &api.AllocDeploymentStatus{Healthy: new(false), Timestamp: now}
	case api.AllocClientStatusLost:
		a.ClientDescription = ""
		a.DesiredStatus = api.AllocDesiredStatusStop
		a.DesiredDescription = descLost
	}
}

// SetAllocStatus reports status for an allocation as its client would:
// "pending", "running" (with deployment health healthy), "complete",
// "failed" or "lost" (which also marks it stopped, as Nomad's node-update
// evaluation does). Allocations that end free their devices for blocked
// evaluations; with AutoReschedule a failed or lost one is replaced at once.
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
	wasTerminal := allocTerminal(a)
	s.setClientStatusLocked(a, status, healthy)
	if !wasTerminal && allocTerminal(a) {
		s.capacityChanged = true
	}
	s.modifyAllocLocked(a, idx)
	s.afterAllocChangeLocked([]*api.Allocation{a}, idx)
	s.notifyLocked()
	return nil
}

// afterAllocChangeLocked updates job statuses, reschedules failed and lost
// allocations when asked to, and lets blocked evaluations use what was
// freed.
func (s *Server) afterAllocChangeLocked(as []*api.Allocation, idx uint64) {
	seen := map[nsKey]bool{}
	for _, a := range as {
		k := nsKey{a.Namespace, a.JobID}
		if seen[k] {
			continue
		}
		seen[k] = true
		rec := s.jobs[k]
		if rec == nil {
			continue
		}
		if s.reschedule && (a.ClientStatus == api.AllocClientStatusFailed || a.ClientStatus == api.AllocClientStatusLost) {
			trigger := evalTriggerAllocFailure
			if a.ClientStatus == api.AllocClientStatusLost {
				trigger = evalTriggerNodeUpdate
			}
			s.evaluateLocked(rec, s.newEvalLocked(rec.job, trigger, idx), idx)
		}
		s.refreshJobStatusLocked(k, idx)
	}
	s.unblockLocked(idx)
}

// AddTaskEvent appends an event to a task's state in an allocation, as a
// driver reporting progress would (Time defaults to the clock's now).
func (s *Server) AddTaskEvent(allocID, task string, ev api.TaskEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[allocID]
	if a == nil {
		return fmt.Errorf("nomadfake: unknown allocation %q", allocID)
	}
	if _, ok := a.AllocatedResources.Tasks[task]; !ok {
		return fmt.Errorf("nomadfake: allocation %q has no task %q", allocID, task)
	}
	if ev.Time == 0 {
		ev.Time = s.nowNano()
	}
	if a.TaskStates == nil {
		a.TaskStates = map[string]*api.TaskState{}
	}
	ts := a.TaskStates[task]
	if ts == nil {
		ts = &api.TaskState{State: "pending"}
		a.TaskStates[task] = ts
	}
	ts.Events = append(ts.Events, &ev)
	idx := s.nextIndexLocked()
	s.modifyAllocLocked(a, idx)
	s.notifyLocked()
	return nil
}

// Allocations returns copies of the allocations of jobID (every job's when
// jobID is ""), in creation order.
func (s *Server) Allocations(jobID string) []*api.Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var as []*api.Allocation
	for _, a := range s.allocs {
		if jobID == "" || a.JobID == jobID {
			as = append(as, a)
		}
	}
	sortAllocs(as)
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
// checks follow the allocation: "success" while it runs healthy (AutoRun,
// SetAllocStatus running with healthy), "failure" while it runs unhealthy,
// no result before it runs or after it ends. Unknown allocation: 404
// "Unknown allocation"; its node down: 404 "No path to node".
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
	if a.ClientStatus == api.AllocClientStatusRunning && a.Job != nil {
		status := "failure"
		if a.DeploymentStatus != nil && a.DeploymentStatus.Healthy != nil && *a.DeploymentStatus.Healthy {
			status = "success"
		}
		for _, tg := range a.Job.TaskGroups {
			if tg.Name == nil || *tg.Name != a.TaskGroup {
				continue
			}
			for _, svc := range tg.Services {
				if svc.Provider != "nomad" && svc.Provider != "" {
					continue
				}
				for _, c := range svc.Checks {
					cid := fmt.Sprintf("%x", sha256.Sum256([]byte(a.ID+"/"+svc.Name+"/"+c.Name)))[:32]
					code := 200
					if status != "success" {
						code = 503
					}
					out[cid] = api.AllocCheckStatus{
						ID: cid, Check: c.Name, Group: a.JobID + "." + a.TaskGroup, Mode: "healthiness",
						Service: svc.Name, Task: c.TaskName, Status: status, StatusCode: code, Timestamp: s.now().Unix(),
					}
				}
			}
		}
	}
	writeClientJSON(w, out)
}

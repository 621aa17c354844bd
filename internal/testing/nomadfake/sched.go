package nomadfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Texts Nomad's scheduler writes, copied so the controller can match them.
const (
	descNotNeeded   = "alloc not needed due to job update"
	descUpdating    = "alloc is being updated due to job update"
	descLost        = "alloc is lost since its node is down"
	descRescheduled = "alloc was rescheduled because it failed"
	descBlocked     = "created to place remaining allocations"
	descSuperseded  = "canceled after more recent eval was processed"

	filterDrivers     = "missing drivers"
	filterDevices     = "missing devices"
	filterDistinct    = "distinct_hosts"
	exhaustedDevices  = "devices: no devices match request"
	constraintDistinc = "distinct_hosts"
)

// Evaluation triggers, as Nomad names them (nomad/structs/eval.go).
const (
	evalTriggerJobRegister   = "job-register"
	evalTriggerJobDeregister = "job-deregister"
	evalTriggerNodeUpdate    = "node-update"
	evalTriggerAllocFailure  = "alloc-failure"
	evalTriggerQueuedAllocs  = "queued-allocs"
)

// Constraint operands the fake evaluates; any other is refused at
// registration with 501, so a gap in the fake is loud.
var supportedOperands = map[string]bool{
	"": true, "=": true, "==": true, "is": true, "!=": true, "not": true,
	"<": true, "<=": true, ">": true, ">=": true,
	"regexp": true, "set_contains": true, "set_contains_all": true, "set_contains_any": true,
	"is_set": true, "is_not_set": true, constraintDistinc: true,
}

func validateJob(j *api.Job) *httpError {
	var errs []string
	if *j.ID == "" {
		errs = append(errs, "Missing job ID")
	} else if strings.Contains(*j.ID, " ") {
		errs = append(errs, "Job ID contains a space")
	}
	switch *j.Type {
	case api.JobTypeService, api.JobTypeBatch:
	default:
		return errorf(http.StatusNotImplemented, "nomadfake: job type %q is not faked", *j.Type)
	}
	if j.IsPeriodic() || j.ParameterizedJob != nil {
		return errorf(http.StatusNotImplemented, "nomadfake: periodic and parameterized jobs are not faked")
	}
	if len(j.TaskGroups) == 0 {
		errs = append(errs, "Missing job task groups")
	}
	if err := checkConstraints(j.Constraints); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, tg := range j.TaskGroups {
		name := *tg.Name
		if seen[name] {
			errs = append(errs, fmt.Sprintf("Job task group %q redefined", name))
		}
		seen[name] = true
		if *tg.Count < 0 {
			errs = append(errs, fmt.Sprintf("Task group %q count can't be negative", name))
		}
		if len(tg.Tasks) == 0 {
			errs = append(errs, fmt.Sprintf("Missing tasks for task group %q", name))
		}
		if err := checkConstraints(tg.Constraints); err != nil {
			return err
		}
		for _, t := range tg.Tasks {
			if t.Driver == "" {
				errs = append(errs, fmt.Sprintf("Task %q: Missing task driver", t.Name))
			}
			if err := checkConstraints(t.Constraints); err != nil {
				return err
			}
			if t.Resources != nil {
				for _, d := range t.Resources.Devices {
					if len(d.Constraints) > 0 {
						return errorf(http.StatusNotImplemented, "nomadfake: device constraints are not faked")
					}
				}
			}
		}
	}
	if len(errs) > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "%d error(s) occurred:\n", len(errs))
		for _, e := range errs {
			fmt.Fprintf(&b, "\t* %s\n", e)
		}
		b.WriteString("\n")
		return errorf(http.StatusInternalServerError, "%s", b.String())
	}
	return nil
}

func checkConstraints(cs []*api.Constraint) *httpError {
	for _, c := range cs {
		if !supportedOperands[c.Operand] {
			return errorf(http.StatusNotImplemented, "nomadfake: constraint operator %q is not faked", c.Operand)
		}
	}
	return nil
}

func constraintString(c *api.Constraint) string {
	return fmt.Sprintf("%s %s %s", c.LTarget, c.Operand, c.RTarget)
}

// resolveTarget is Nomad's feasible.resolveTarget.
func resolveTarget(target string, n *api.Node) (string, bool) {
	if !strings.HasPrefix(target, "${") {
		return target, true
	}
	switch {
	case target == "${node.unique.id}":
		return n.ID, true
	case target == "${node.datacenter}":
		return n.Datacenter, true
	case target == "${node.unique.name}":
		return n.Name, true
	case target == "${node.class}":
		return n.NodeClass, true
	case target == "${node.pool}":
		return n.NodePool, true
	case strings.HasPrefix(target, "${attr."):
		v, ok := n.Attributes[strings.TrimSuffix(strings.TrimPrefix(target, "${attr."), "}")]
		return v, ok
	case strings.HasPrefix(target, "${meta."):
		v, ok := n.Meta[strings.TrimSuffix(strings.TrimPrefix(target, "${meta."), "}")]
		return v, ok
	default:
		return "", false
	}
}

// meets is Nomad's checkConstraint for string targets.
func (s *Server) meets(c *api.Constraint, n *api.Node) bool {
	l, lok := resolveTarget(c.LTarget, n)
	r, rok := resolveTarget(c.RTarget, n)
	switch c.Operand {
	case constraintDistinc:
		return true
	case "", "=", "==", "is":
		return lok && rok && l == r
	case "!=", "not":
		return l != r
	case "<", "<=", ">", ">=":
		return lok && rok && checkOrder(c.Operand, l, r)
	case "is_set":
		return lok
	case "is_not_set":
		return !lok
	case "regexp":
		if !lok || !rok {
			return false
		}
		re, ok := s.regexps[r]
		if !ok {
			var err error
			if re, err = regexp.Compile(r); err != nil {
				re = nil
			}
			s.regexps[r] = re
		}
		return re != nil && re.MatchString(l)
	case "set_contains", "set_contains_all":
		return lok && rok && setContains(l, r, true)
	case "set_contains_any":
		return lok && rok && setContains(l, r, false)
	default:
		return false
	}
}

func checkOrder(op, l, r string) bool {
	cmp := strings.Compare(l, r)
	if li, err := strconv.ParseInt(l, 10, 64); err == nil {
		if ri, err := strconv.ParseInt(r, 10, 64); err == nil {
			cmp = compare(li, ri)
		}
	} else if lf, err := strconv.ParseFloat(l, 64); err == nil {
		if rf, err := strconv.ParseFloat(r, 64); err == nil {
			cmp = compare(lf, rf)
		}
	}
	switch op {
	case "<":
		return cmp < 0
	case "<=":
		return cmp <= 0
	case ">":
		return cmp > 0
	default:
		return cmp >= 0
	}
}

func compare[T int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func setContains(l, r string, all bool) bool {
	have := map[string]bool{}
	for _, v := range strings.Split(l, ",") {
		have[strings.TrimSpace(v)] = true
	}
	for _, v := range strings.Split(r, ",") {
		ok := have[strings.TrimSpace(v)]
		if all && !ok {
			return false
		}
		if !all && ok {
			return true
		}
	}
	return all
}

// globMatch matches Nomad's datacenter globs: '*' is any run of characters.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

func allocClientTerminal(a *api.Allocation) bool {
	switch a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// allocTerminal is Nomad's (*structs.Allocation).TerminalStatus.
func allocTerminal(a *api.Allocation) bool {
	return a.DesiredStatus == api.AllocDesiredStatusStop || a.DesiredStatus == api.AllocDesiredStatusEvict || allocClientTerminal(a)
}

func allocNameIndex(name string) int {
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

func (s *Server) newEvalLocked(job *api.Job, trigger string, idx uint64) *api.Evaluation {
	now := s.nowNano()
	return &api.Evaluation{
		ID:             newID(),
		Priority:       *job.Priority,
		Type:           *job.Type,
		TriggeredBy:    trigger,
		Namespace:      *job.Namespace,
		JobID:          *job.ID,
		JobModifyIndex: *job.JobModifyIndex,
		Status:         api.EvalStatusPending,
		CreateIndex:    idx,
		ModifyIndex:    idx,
		CreateTime:     now,
		ModifyTime:     now,
	}
}

func (s *Server) putEvalLocked(e *api.Evaluation, idx uint64) {
	e.ModifyIndex = idx
	e.ModifyTime = s.nowNano()
	if _, ok := s.evals[e.ID]; !ok {
		s.evals[e.ID] = e
		k := nsKey{e.Namespace, e.JobID}
		s.evalsByJob[k] = append(s.evalsByJob[k], e)
	}
	if e.Status == api.EvalStatusBlocked {
		s.blocked[e.ID] = e
	} else {
		delete(s.blocked, e.ID)
	}
	s.touchLocked(idx, tableEvals)
}

func sortEvals(es []*api.Evaluation) {
	sort.Slice(es, func(i, j int) bool {
		if es[i].CreateIndex != es[j].CreateIndex {
			return es[i].CreateIndex < es[j].CreateIndex
		}
		return es[i].ID < es[j].ID
	})
}

// stopAllocLocked marks a as stopped by the server and, as the fake has no
// client to wait for, complete at once.
func (s *Server) stopAllocLocked(a *api.Allocation, desc string, idx uint64) {
	if !allocTerminal(a) {
		s.capacityChanged = true
	}
	a.DesiredStatus = api.AllocDesiredStatusStop
	a.DesiredDescription = desc
	if !allocClientTerminal(a) {
		s.setClientStatusLocked(a, api.AllocClientStatusComplete, false)
	}
	s.modifyAllocLocked(a, idx)
	a.AllocModifyIndex = idx
}

func (s *Server) modifyAllocLocked(a *api.Allocation, idx uint64) {
	if nr := s.nodes[a.NodeID]; nr != nil {
		nr.usedDirty = true
	}
	a.ModifyIndex = idx
	a.ModifyTime = s.nowNano()
	s.touchLocked(idx, tableAlloc)
}

// destructive reports whether moving an allocation of group tg from job
// version old to cur needs a new allocation. Like Nomad, a change of count
// alone (or of the update, scaling or reschedule blocks) is applied in
// place; any other change to the group, or to the job's meta, constraints,
// datacenters or node pool, replaces the allocation.
func destructive(old, cur *api.Job, tg string) bool {
	if *old.CreateIndex != *cur.CreateIndex {
		return true
	}
	if !reflect.DeepEqual(old.Meta, cur.Meta) || !reflect.DeepEqual(old.Constraints, cur.Constraints) ||
		!slices.Equal(old.Datacenters, cur.Datacenters) || *old.NodePool != *cur.NodePool {
		return true
	}
	o, c := old.LookupTaskGroup(tg), cur.LookupTaskGroup(tg)
	if o == nil || c == nil {
		return true
	}
	norm := func(g *api.TaskGroup) []byte {
		cp := *g
		cp.Count, cp.Update, cp.Scaling, cp.ReschedulePolicy, cp.Migrate = nil, nil, nil, nil, nil
		b, _ := json.Marshal(cp)
		return b
	}
	return string(norm(o)) != string(norm(c))
}

type slot struct {
	tg  string
	idx int
}

// evaluateLocked runs eval for rec synchronously: Nomad's reconciler and
// generic scheduler, reduced to what the controller relies on. Every
// evaluation fills every empty slot of the job (no reschedule delays), stops
// what the job no longer wants, and records placement failures on the eval
// with a blocked eval for them, as Nomad does.
func (s *Server) evaluateLocked(rec *jobRecord, eval *api.Evaluation, idx uint64) {
	key := rec.key()
	job := rec.job
	wasBlocked := eval.Status == api.EvalStatusBlocked
	for _, e := range s.evalsByJob[key] {
		if e.ID != eval.ID && e.Status == api.EvalStatusBlocked {
			e.Status = api.EvalStatusCancelled
			e.StatusDescription = descSuperseded
			s.putEvalLocked(e, idx)
		}
	}
	allocs := s.jobAllocsLocked(rec, false)
	placedAny := false

	if s.jobs[key] != rec || *job.Stop {
		for _, a := range allocs {
			if !allocTerminal(a) {
				s.stopAllocLocked(a, descNotNeeded, idx)
			}
		}
		eval.Status = api.EvalStatusComplete
		s.putEvalLocked(eval, idx)
		s.refreshJobStatusLocked(key, idx)
		return
	}

	filled := map[slot]bool{}
	previous := map[slot]*api.Allocation{}
	for _, a := range allocs {
		sl := slot{a.TaskGroup, allocNameIndex(a.Name)}
		if a.ClientStatus == api.AllocClientStatusLost && a.NextAllocation == "" {
			previous[sl] = a
			continue
		}
		if a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		tg := job.LookupTaskGroup(a.TaskGroup)
		if allocClientTerminal(a) {
			if *job.Type == api.JobTypeBatch && a.ClientStatus == api.AllocClientStatusComplete {
				filled[sl] = true
			} else if a.NextAllocation == "" {
				previous[sl] = a
			}
			continue
		}
		if tg == nil || sl.idx < 0 || sl.idx >= *tg.Count || filled[sl] {
			s.stopAllocLocked(a, descNotNeeded, idx)
			continue
		}
		if *a.Job.Version != *job.Version || *a.Job.CreateIndex != *job.CreateIndex {
			if destructive(a.Job, job, a.TaskGroup) {
				s.stopAllocLocked(a, descUpdating, idx)
				previous[sl] = a
				continue
			}
			a.Job = rec.snap
			a.AllocModifyIndex = idx
			s.modifyAllocLocked(a, idx)
		}
		filled[sl] = true
	}

	failed := map[string]*api.AllocationMetric{}
	queued := map[string]int{}
	for _, tg := range job.TaskGroups {
		name := *tg.Name
		queued[name] = 0
		for i := 0; i < *tg.Count; i++ {
			sl := slot{name, i}
			if filled[sl] {
				continue
			}
			if m := failed[name]; m != nil {
				m.CoalescedFailures++
				queued[name]++
				continue
			}
			n, metric, devs := s.selectNodeLocked(job, tg)
			if n == nil {
				failed[name] = metric
				queued[name]++
				continue
			}
			a := s.createAllocLocked(rec, eval, tg, i, n, metric, devs, idx)
			placedAny = true
			if p := previous[sl]; p != nil {
				a.PreviousAllocation = p.ID
				p.NextAllocation = a.ID
				if p.DesiredStatus == api.AllocDesiredStatusRun {
					p.DesiredStatus = api.AllocDesiredStatusStop
					p.DesiredDescription = descRescheduled
				}
				s.modifyAllocLocked(p, idx)
			}
		}
	}

	switch {
	case len(failed) == 0:
		eval.Status = api.EvalStatusComplete
		eval.QueuedAllocations = queued
		s.putEvalLocked(eval, idx)
	case wasBlocked:
		// A blocked eval that still cannot place everything stays blocked.
		if placedAny {
			eval.FailedTGAllocs = failed
			eval.QueuedAllocations = queued
			s.putEvalLocked(eval, idx)
		}
	default:
		eval.Status = api.EvalStatusComplete
		eval.QueuedAllocations = queued
		eval.FailedTGAllocs = failed
		now := s.nowNano()
		blocked := &api.Evaluation{
			ID:                newID(),
			Priority:          eval.Priority,
			Type:              eval.Type,
			TriggeredBy:       evalTriggerQueuedAllocs,
			Namespace:         eval.Namespace,
			JobID:             eval.JobID,
			JobModifyIndex:    eval.JobModifyIndex,
			Status:            api.EvalStatusBlocked,
			StatusDescription: descBlocked,
			PreviousEval:      eval.ID,
			FailedTGAllocs:    failed,
			QueuedAllocations: queued,
			CreateIndex:       idx,
			CreateTime:        now,
		}
		eval.BlockedEval = blocked.ID
		s.putEvalLocked(eval, idx)
		s.putEvalLocked(blocked, idx)
	}
	s.refreshJobStatusLocked(key, idx)
}

// unblockLocked re-runs every blocked evaluation, oldest first, when
// capacity may have grown since the last time (a node came, became ready
// or eligible, a device healthy, node meta changed, an allocation ended),
// as Nomad's blocked-evals tracker does. One that still cannot place
// anything is left untouched.
func (s *Server) unblockLocked(idx uint64) {
	for pass := 0; s.capacityChanged && pass < 3; pass++ {
		s.capacityChanged = false
		s.unblockPassLocked(idx)
	}
}

func (s *Server) unblockPassLocked(idx uint64) {
	if len(s.blocked) == 0 {
		return
	}
	blocked := make([]*api.Evaluation, 0, len(s.blocked))
	for _, e := range s.blocked {
		blocked = append(blocked, e)
	}
	sortEvals(blocked)
	for _, e := range blocked {
		if e.Status != api.EvalStatusBlocked {
			continue
		}
		rec := s.jobs[nsKey{e.Namespace, e.JobID}]
		if rec == nil {
			e.Status = api.EvalStatusCancelled
			e.StatusDescription = descSuperseded
			s.putEvalLocked(e, idx)
			continue
		}
		s.evaluateLocked(rec, e, idx)
	}
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

func deviceRequests(tg *api.TaskGroup) []*api.RequestedDevice {
	var out []*api.RequestedDevice
	for _, t := range tg.Tasks {
		if t.Resources != nil {
			out = append(out, t.Resources.Devices...)
		}
	}
	return out
}

// hasDevices is Nomad's DeviceChecker: enough healthy instances in total,
// used or not.
func hasDevices(n *api.Node, reqs []*api.RequestedDevice) bool {
	if len(reqs) == 0 {
		return true
	}
	groups := n.NodeResources.Devices
	var small [8]uint64
	avail := small[:0]
	if len(groups) > len(small) {
		avail = make([]uint64, 0, len(groups))
	}
	for _, g := range groups {
		var h uint64
		for _, in := range g.Instances {
			if in.Healthy {
				h++
			}
		}
		avail = append(avail, h)
	}
outer:
	for _, r := range reqs {
		want := *r.Count
		for i, g := range groups {
			if !deviceMatches(r.Name, g) {
				continue
			}
			take := min(want, avail[i])
			avail[i] -= take
			want -= take
			if want == 0 {
				continue outer
			}
		}
		return false
	}
	return true
}

// usedDevicesLocked is the set of device instances held by live
// allocations on a node, cached until an allocation there changes.
func (s *Server) usedDevicesLocked(nr *nodeRecord) map[string]bool {
	if nr.used != nil && !nr.usedDirty {
		return nr.used
	}
	used := map[string]bool{}
	for _, a := range s.allocsByNode[nr.node.ID] {
		if allocTerminal(a) || a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				for _, id := range d.DeviceIDs {
					used[id] = true
				}
			}
		}
	}
	free := 0
	for _, g := range nr.node.NodeResources.Devices {
		for _, in := range g.Instances {
			if in.Healthy && !used[in.ID] {
				free++
			}
		}
	}
	nr.used, nr.free, nr.usedDirty = used, free, false
	return used
}

// assignDevicesLocked picks free healthy instances for each task's
// requests, in the node's group and instance order, or returns false.
func (s *Server) assignDevicesLocked(nr *nodeRecord, tg *api.TaskGroup) (map[string][]*api.AllocatedDeviceResource, bool) {
	reqs := deviceRequests(tg)
	if len(reqs) == 0 {
		return nil, true
	}
	used := s.usedDevicesLocked(nr)
	var taken map[string]bool
	isFree := func(id string) bool { return !used[id] && !taken[id] }
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
					if in.Healthy && isFree(in.ID) && uint64(len(ids)) < *r.Count {
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
			if taken == nil {
				taken = map[string]bool{}
			}
			for _, id := range got.DeviceIDs {
				taken[id] = true
			}
			out[t.Name] = append(out[t.Name], got)
		}
	}
	return out, true
}

func (s *Server) hasDriversLocked(n *api.Node, tg *api.TaskGroup) bool {
	for _, t := range tg.Tasks {
		d := n.Drivers[t.Driver]
		if d == nil || !d.Detected || !d.Healthy {
			return false
		}
	}
	return true
}

// distinctHostsLocked reports whether n already holds a live allocation of
// job (of group tg when the constraint is the group's).
func (s *Server) distinctHostsBlockLocked(n *api.Node, job *api.Job, tg *api.TaskGroup) bool {
	jobLevel := hasDistinctHosts(job.Constraints)
	tgLevel := hasDistinctHosts(tg.Constraints)
	if !jobLevel && !tgLevel {
		return false
	}
	for _, a := range s.allocsByNode[n.ID] {
		if allocTerminal(a) || a.JobID != *job.ID || a.Namespace != *job.Namespace {
			continue
		}
		if jobLevel || a.TaskGroup == *tg.Name {
			return true
		}
	}
	return false
}

func hasDistinctHosts(cs []*api.Constraint) bool {
	for _, c := range cs {
		if c.Operand == constraintDistinc && (c.RTarget == "" || c.RTarget == "true") {
			return true
		}
	}
	return false
}

func filterNode(m *api.AllocationMetric, n *api.Node, reason string) {
	m.NodesFiltered++
	if n.NodeClass != "" {
		if m.ClassFiltered == nil {
			m.ClassFiltered = map[string]int{}
		}
		m.ClassFiltered[n.NodeClass]++
	}
	if m.ConstraintFiltered == nil {
		m.ConstraintFiltered = map[string]int{}
	}
	m.ConstraintFiltered[reason]++
}

func exhaustNode(m *api.AllocationMetric, n *api.Node, dim string) {
	m.NodesExhausted++
	if n.NodeClass != "" {
		if m.ClassExhausted == nil {
			m.ClassExhausted = map[string]int{}
		}
		m.ClassExhausted[n.NodeClass]++
	}
	if m.DimensionExhausted == nil {
		m.DimensionExhausted = map[string]int{}
	}
	m.DimensionExhausted[dim]++
}

func nodeReady(n *api.Node) bool {
	return n.Status == api.NodeStatusReady && n.DrainStrategy == nil && n.SchedulingEligibility == api.NodeSchedulingEligible
}

// selectNodeLocked is one placement: the feasibility checks in Nomad's
// order (job constraints, drivers, group and task constraints, device
// presence, distinct_hosts), then device capacity. The first node, by name,
// that passes wins: the fake does not score.
func (s *Server) selectNodeLocked(job *api.Job, tg *api.TaskGroup) (*nodeRecord, *api.AllocationMetric, map[string][]*api.AllocatedDeviceResource) {
	m := &api.AllocationMetric{NodePool: *job.NodePool, NodesAvailable: map[string]int{}}
	var cands []*nodeRecord
	for _, nr := range s.nodeOrder {
		n := nr.node
		if *job.NodePool != "all" && n.NodePool != *job.NodePool {
			continue
		}
		if !nodeReady(n) {
			continue
		}
		if !slices.ContainsFunc(job.Datacenters, func(dc string) bool { return globMatch(dc, n.Datacenter) }) {
			continue
		}
		cands = append(cands, nr)
		m.NodesAvailable[n.Datacenter]++
	}
	m.NodesInPool = len(cands)
	var tgCons []*api.Constraint
	tgCons = append(tgCons, tg.Constraints...)
	for _, t := range tg.Tasks {
		tgCons = append(tgCons, t.Constraints...)
	}
	reqs := deviceRequests(tg)
	var wantDevices uint64
	for _, r := range reqs {
		wantDevices += *r.Count
	}
next:
	for _, nr := range cands {
		n := nr.node
		m.NodesEvaluated++
		for _, c := range job.Constraints {
			if !s.meets(c, n) {
				filterNode(m, n, constraintString(c))
				continue next
			}
		}
		if !s.hasDriversLocked(n, tg) {
			filterNode(m, n, filterDrivers)
			continue
		}
		for _, c := range tgCons {
			if !s.meets(c, n) {
				filterNode(m, n, constraintString(c))
				continue next
			}
		}
		if !hasDevices(n, reqs) {
			filterNode(m, n, filterDevices)
			continue
		}
		if s.distinctHostsBlockLocked(n, job, tg) {
			filterNode(m, n, filterDistinct)
			continue
		}
		if wantDevices > 0 {
			// Cheap rejection of a full node before trying to assign.
			s.usedDevicesLocked(nr)
			if uint64(nr.free) < wantDevices {
				exhaustNode(m, n, exhaustedDevices)
				continue
			}
		}
		devs, ok := s.assignDevicesLocked(nr, tg)
		if !ok {
			exhaustNode(m, n, exhaustedDevices)
			continue
		}
		return nr, m, devs
	}
	return nil, m, nil
}

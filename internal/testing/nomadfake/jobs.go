package nomadfake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Job statuses, as Nomad computes them.
const (
	jobStatusRunning = "running"
	jobStatusDead    = "dead"
)

type jobRecord struct {
	// job is the current version. The fake updates its Status and
	// ModifyIndex in place; everything else changes only with a new version.
	job *api.Job
	// snap is an immutable copy of the current version, which allocations
	// placed from it point at.
	snap *api.Job
	// unplaced: the last evaluation left a group slot without an
	// allocation (Nomad would hold a blocked evaluation for it).
	unplaced bool
}

func (j *jobRecord) key() nsKey { return nsKey{*j.job.Namespace, *j.job.ID} }

func cloneJob(j *api.Job) *api.Job {
	b, err := json.Marshal(j)
	if err != nil {
		panic("nomadfake: clone job: " + err.Error())
	}
	var out api.Job
	if err := json.Unmarshal(b, &out); err != nil {
		panic("nomadfake: clone job: " + err.Error())
	}
	return &out
}

// enforceIndex is Nomad's (*structs.Job).EnforceIndex, with its texts.
func enforceIndex(existing *api.Job, index uint64) *httpError {
	const prefix = api.RegisterEnforceIndexErrPrefix
	if existing != nil {
		if index == 0 {
			return errorf(http.StatusInternalServerError, "%s 0: job already exists", prefix)
		}
		if index != *existing.JobModifyIndex {
			return errorf(http.StatusInternalServerError, "%s %d: job exists with conflicting job modify index: %d",
				prefix, index, *existing.JobModifyIndex)
		}
	} else if index != 0 {
		return errorf(http.StatusInternalServerError, "%s %d: job does not exist", prefix, index)
	}
	return nil
}

// specChanged is Nomad's (*structs.Job).SpecChanged: everything but the
// server-set fields is compared.
func specChanged(old, updated *api.Job) bool {
	return old == nil || !bytes.Equal(specJSON(old), specJSON(updated))
}

func specJSON(j *api.Job) []byte {
	c := cloneJob(j)
	c.Status, c.StatusDescription, c.Stable, c.Version = nil, nil, nil, nil
	c.CreateIndex, c.ModifyIndex, c.JobModifyIndex, c.SubmitTime = nil, nil, nil, nil
	c.VersionTag = nil
	b, _ := json.Marshal(c)
	return b
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.jobList(w, r)
	case http.MethodPut, http.MethodPost:
		s.jobRegister(w, r, "")
	default:
		methodNotAllowed(w)
	}
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request, rest string) {
	if id, ok := strings.CutSuffix(rest, "/evaluations"); ok {
		s.jobEvaluations(w, r, id)
		return
	}
	if strings.Contains(rest, "/") {
		notFaked(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.jobInfo(w, r, rest)
	case http.MethodPut, http.MethodPost:
		s.jobRegister(w, r, rest)
	default:
		// DELETE (deregister, purge) included: the controller stops a job
		// by registering it with Stop set.
		notFaked(w, r)
	}
}

func (s *Server) jobRegister(w http.ResponseWriter, r *http.Request, urlID string) {
	var req api.JobRegisterRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Job == nil {
		writeError(w, errorf(http.StatusBadRequest, "Job must be specified"))
		return
	}
	if req.Job.ID == nil {
		writeError(w, errorf(http.StatusBadRequest, "Job ID hasn't been provided"))
		return
	}
	if urlID != "" && *req.Job.ID != urlID {
		writeError(w, errorf(http.StatusBadRequest, "Job ID does not match name"))
		return
	}
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = req.Namespace
	}
	if err := prepareJob(req.Job, ns); err != nil {
		writeError(w, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.registerLocked(req.Job, req.EnforceIndex, req.JobModifyIndex)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res.Index, map[string]any{
		"EvalID":          res.EvalID,
		"EvalCreateIndex": res.Index,
		"JobModifyIndex":  res.JobModifyIndex,
		"Warnings":        "",
		"Index":           res.Index,
		"LastContact":     0,
		"KnownLeader":     false,
	})
}

// prepareJob does what Nomad's HTTP agent does to a submitted job
// (namespace, Canonicalize, the servers' node pool and datacenter
// defaults), then checks what the fake can place.
func prepareJob(job *api.Job, ns string) *httpError {
	if ns == "" && job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	if ns == "" {
		ns = api.DefaultNamespace
	}
	job.Namespace = new(ns)
	job.Canonicalize()
	if *job.NodePool == "" {
		job.NodePool = new("default")
	}
	if len(job.Datacenters) == 0 {
		job.Datacenters = []string{"*"}
	}
	return validateJob(job)
}

// validateJob keeps Nomad's validation errors the controller could meet,
// and refuses, with 501, what the fake cannot place: jobs other than
// service jobs, and groups not pinned to one node.
func validateJob(j *api.Job) *httpError {
	if *j.Type != api.JobTypeService {
		return errorf(http.StatusNotImplemented, "nomadfake: job type %q is not faked", *j.Type)
	}
	var errs []string
	if *j.ID == "" {
		errs = append(errs, "Missing job ID")
	} else if strings.Contains(*j.ID, " ") {
		errs = append(errs, "Job ID contains a space")
	}
	if len(j.TaskGroups) == 0 {
		errs = append(errs, "Missing job task groups")
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
		for _, t := range tg.Tasks {
			if t.Driver == "" {
				errs = append(errs, fmt.Sprintf("Task %q: Missing task driver", t.Name))
			}
		}
		if pinnedNode(tg) == "" {
			return errorf(http.StatusNotImplemented,
				"nomadfake: group %q is not pinned to a node by a ${node.unique.name} = constraint: the fake does not schedule", name)
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

type registerResult struct {
	EvalID                string
	JobModifyIndex, Index uint64
}

// registerLocked is Job.Register after validation: the EnforceIndex check,
// a new version when the spec changed, an evaluation either way.
func (s *Server) registerLocked(job *api.Job, enforce bool, jobModifyIndex uint64) (registerResult, *httpError) {
	key := nsKey{*job.Namespace, *job.ID}
	rec := s.jobs[key]
	var existing *api.Job
	if rec != nil {
		existing = rec.job
	}
	if enforce {
		if err := enforceIndex(existing, jobModifyIndex); err != nil {
			return registerResult{}, err
		}
	}
	idx := s.nextIndexLocked()
	res := registerResult{JobModifyIndex: idx, Index: idx}
	if specChanged(existing, job) {
		job.Status, job.StatusDescription = new(""), new("")
		job.Stable = new(false)
		job.SubmitTime = new(s.nowNano())
		job.ModifyIndex, job.JobModifyIndex = new(idx), new(idx)
		if existing != nil {
			job.CreateIndex = new(*existing.CreateIndex)
			job.Version = new(*existing.Version + 1)
		} else {
			job.CreateIndex = new(idx)
			job.Version = new(uint64(0))
		}
		if rec == nil {
			rec = &jobRecord{}
			s.jobs[key] = rec
		}
		rec.job, rec.snap = job, cloneJob(job)
		s.touchLocked(idx, tableJobs)
		s.markLocked(string(api.TopicJob), "JobRegistered", *job.ID, rec)
	} else {
		// Nomad answers with the existing job's ModifyIndex here.
		res.JobModifyIndex = *existing.ModifyIndex
	}
	// Nomad's Job.Register triggers job-register, a stopped job's too.
	res.EvalID = s.evaluateLocked(rec, "job-register", idx).ID
	s.notifyLocked()
	return res, nil
}

// RegisterJob registers a copy of job as PUT /v1/jobs would (in the job's
// namespace, default when unset), without HTTP: for seeding the state a
// test starts from. It returns the evaluation's ID.
func (s *Server) RegisterJob(job *api.Job) (string, error) {
	j := cloneJob(job)
	if j.ID == nil {
		return "", errors.New("nomadfake: job without an ID")
	}
	if err := prepareJob(j, ""); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.registerLocked(j, false, 0)
	if err != nil {
		return "", err
	}
	return res.EvalID, nil
}

func (s *Server) jobInfo(w http.ResponseWriter, r *http.Request, id string) {
	ns := namespace(r)
	s.query(w, r, func() (any, uint64, *httpError) {
		rec := s.jobs[nsKey{ns, id}]
		if rec == nil {
			return nil, s.missingIndexLocked(tableJobs), errorf(http.StatusNotFound, "job not found")
		}
		return rec.job, *rec.job.ModifyIndex, nil
	})
}

func (s *Server) jobList(w http.ResponseWriter, r *http.Request) {
	ns := namespace(r)
	prefix := r.URL.Query().Get("prefix")
	withMeta, _ := strconv.ParseBool(r.URL.Query().Get("meta"))
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.JobListStub{}
		for k, rec := range s.jobs {
			if nsMatches(ns, k.ns) && strings.HasPrefix(k.id, prefix) {
				out = append(out, jobStub(rec.job, withMeta))
			}
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Namespace != out[j].Namespace {
				return out[i].Namespace < out[j].Namespace
			}
			return out[i].ID < out[j].ID
		})
		return out, s.tableIndexLocked(tableJobs), nil
	})
}

// jobStub is Nomad's job list stub, without the job summary.
func jobStub(j *api.Job, withMeta bool) *api.JobListStub {
	st := &api.JobListStub{
		ID:                *j.ID,
		ParentID:          *j.ParentID,
		Name:              *j.Name,
		Namespace:         *j.Namespace,
		Datacenters:       slices.Clone(j.Datacenters),
		Type:              *j.Type,
		Priority:          *j.Priority,
		Stop:              *j.Stop,
		Status:            *j.Status,
		StatusDescription: *j.StatusDescription,
		CreateIndex:       *j.CreateIndex,
		ModifyIndex:       *j.ModifyIndex,
		JobModifyIndex:    *j.JobModifyIndex,
		SubmitTime:        *j.SubmitTime,
	}
	if withMeta {
		st.Meta = j.Meta
	}
	return st
}

func (s *Server) jobEvaluations(w http.ResponseWriter, r *http.Request, id string) {
	key := nsKey{namespace(r), id}
	s.query(w, r, func() (any, uint64, *httpError) {
		out := append([]*api.Evaluation{}, s.evalsByJob[key]...)
		return out, s.tableIndexLocked(tableEvals), nil
	})
}

// newEvalLocked records a complete evaluation of rec's current version.
func (s *Server) newEvalLocked(rec *jobRecord, trigger string, idx uint64) *api.Evaluation {
	job, now := rec.job, s.nowNano()
	e := &api.Evaluation{
		ID: newID(), Priority: *job.Priority, Type: *job.Type, TriggeredBy: trigger,
		Namespace: *job.Namespace, JobID: *job.ID, JobModifyIndex: *job.JobModifyIndex,
		Status: api.EvalStatusComplete, CreateIndex: idx, ModifyIndex: idx, CreateTime: now, ModifyTime: now,
	}
	k := rec.key()
	s.evalsByJob[k] = append(s.evalsByJob[k], e)
	s.touchLocked(idx, tableEvals)
	return e
}

// refreshJobStatusLocked sets the job's status as Nomad 2.0.5 shows it
// for the controller's jobs: running with a live allocation, and running
// too while a slot is unplaced (Nomad holds a blocked evaluation; its
// job reads running, not pending: conformance.HeldDevicesNotGiven and
// NodeDownLosesAllocations), dead otherwise. A change bumps its
// ModifyIndex.
func (s *Server) refreshJobStatusLocked(k nsKey, idx uint64) {
	rec := s.jobs[k]
	if rec == nil {
		return
	}
	st := jobStatusDead
	switch {
	case slices.ContainsFunc(s.allocsByJob[k], func(a *allocRecord) bool { return a.live() }):
		st = jobStatusRunning
	case rec.unplaced && !*rec.job.Stop:
		st = jobStatusRunning
	}
	if st == *rec.job.Status {
		return
	}
	rec.job.Status = new(st)
	rec.job.ModifyIndex = new(idx)
	s.touchLocked(idx, tableJobs)
	s.markNewLocked(string(api.TopicJob), "AllocationUpdated", *rec.job.ID, rec)
}

package nomadfake

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Job statuses, as Nomad computes them.
const (
	jobStatusPending = "pending"
	jobStatusRunning = "running"
	jobStatusDead    = "dead"
)

// registerEnforceIndexErrPrefix is Nomad's structs.RegisterEnforceIndexErrPrefix.
const registerEnforceIndexErrPrefix = api.RegisterEnforceIndexErrPrefix

type jobRecord struct {
	// job is the current version. The fake updates its Status and
	// ModifyIndex in place; everything else changes only with a new version.
	job *api.Job
	// snap is an immutable copy of the current version, which allocations
	// placed from it point at.
	snap *api.Job
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

// enforceIndex is Nomad's (*structs.Job).EnforceIndex.
func enforceIndex(existing *api.Job, index uint64) *httpError {
	if existing != nil {
		if index == 0 {
			return errorf(http.StatusInternalServerError, "%s 0: job already exists", registerEnforceIndexErrPrefix)
		}
		if index != *existing.JobModifyIndex {
			return errorf(http.StatusInternalServerError, "%s %d: job exists with conflicting job modify index: %d",
				registerEnforceIndexErrPrefix, index, *existing.JobModifyIndex)
		}
	} else if index != 0 {
		return errorf(http.StatusInternalServerError, "%s %d: job does not exist", registerEnforceIndexErrPrefix, index)
	}
	return nil
}

// specChanged is Nomad's (*structs.Job).SpecChanged: everything but the
// server-set fields is compared.
func specChanged(old, updated *api.Job) bool {
	if old == nil {
		return true
	}
	return !bytes.Equal(specJSON(old), specJSON(updated))
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
	suffix := func(sfx string) (string, bool) {
		if strings.HasSuffix(rest, sfx) {
			return strings.TrimSuffix(rest, sfx), true
		}
		return "", false
	}
	if id, ok := suffix("/allocations"); ok {
		s.jobAllocations(w, r, id)
		return
	}
	if id, ok := suffix("/evaluations"); ok {
		s.jobEvaluations(w, r, id)
		return
	}
	if id, ok := suffix("/evaluate"); ok {
		s.jobEvaluate(w, r, id)
		return
	}
	if id, ok := suffix("/summary"); ok {
		s.jobSummary(w, r, id)
		return
	}
	for _, sfx := range []string{"/periodic/force", "/plan", "/dispatch", "/versions", "/revert",
		"/deployments", "/deployment", "/stable", "/scale", "/services", "/submission", "/actions", "/action", "/tag"} {
		if strings.HasSuffix(rest, sfx) {
			notFaked(w, r)
			return
		}
	}
	switch r.Method {
	case http.MethodGet:
		s.jobInfo(w, r, rest)
	case http.MethodPut, http.MethodPost:
		s.jobRegister(w, r, rest)
	case http.MethodDelete:
		s.jobDeregister(w, r, rest)
	default:
		methodNotAllowed(w)
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
		"EvalCreateIndex": res.EvalCreateIndex,
		"JobModifyIndex":  res.JobModifyIndex,
		"Warnings":        "",
		"Index":           res.Index,
		"LastContact":     0,
		"KnownLeader":     false,
	})
}

// prepareJob does what Nomad's HTTP agent and admission controllers do to a
// submitted job: namespace, Canonicalize, server defaults, validation.
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

type registerResult struct {
	EvalID                                 string
	EvalCreateIndex, JobModifyIndex, Index uint64
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
	res := registerResult{EvalCreateIndex: idx, JobModifyIndex: idx, Index: idx}
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
		rec = &jobRecord{job: job, snap: cloneJob(job)}
		s.jobs[key] = rec
		s.touchLocked(idx, tableJobs)
	} else {
		// Nomad answers with the existing job's ModifyIndex here.
		res.JobModifyIndex = *existing.ModifyIndex
	}
	eval := s.newEvalLocked(rec.job, evalTriggerJobRegister, idx)
	res.EvalID = eval.ID
	s.evaluateLocked(rec, eval, idx)
	s.unblockLocked(idx)
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

func (s *Server) jobDeregister(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	purge := false
	if v := q.Get("purge"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, errorf(http.StatusInternalServerError, "Failed to parse value of %q (%v) as a bool: %v", "purge", v, err))
			return
		}
		purge = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := nsKey{namespace(r), id}
	rec := s.jobs[key]
	if rec == nil {
		// Nomad deregisters a missing job as a no-op.
		writeJSON(w, http.StatusOK, 0, map[string]any{"EvalID": "", "EvalCreateIndex": 0, "JobModifyIndex": 0, "Index": 0})
		return
	}
	idx := s.nextIndexLocked()
	if purge {
		delete(s.jobs, key)
	} else {
		job := cloneJob(rec.job)
		job.Stop = new(true)
		job.Version = new(*job.Version + 1)
		job.ModifyIndex, job.JobModifyIndex = new(idx), new(idx)
		job.SubmitTime = new(s.nowNano())
		job.Stable = new(false)
		rec.job, rec.snap = job, cloneJob(job)
	}
	s.touchLocked(idx, tableJobs)
	eval := s.newEvalLocked(rec.job, evalTriggerJobDeregister, idx)
	eval.Type = api.JobTypeService // as Nomad does, whatever the job's type
	s.evaluateLocked(rec, eval, idx)
	s.unblockLocked(idx)
	s.notifyLocked()
	writeJSON(w, http.StatusOK, idx, map[string]any{
		"EvalID": eval.ID, "EvalCreateIndex": idx, "JobModifyIndex": idx, "Index": idx,
	})
}

func (s *Server) jobEvaluate(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		methodNotAllowed(w)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.jobs[nsKey{namespace(r), id}]
	if rec == nil {
		writeError(w, errorf(http.StatusInternalServerError, "job not found"))
		return
	}
	idx := s.nextIndexLocked()
	eval := s.newEvalLocked(rec.job, evalTriggerJobRegister, idx)
	s.evaluateLocked(rec, eval, idx)
	s.unblockLocked(idx)
	s.notifyLocked()
	writeJSON(w, http.StatusOK, idx, map[string]any{
		"EvalID": eval.ID, "EvalCreateIndex": idx, "JobModifyIndex": *rec.job.JobModifyIndex, "Index": idx,
	})
}

func (s *Server) jobInfo(w http.ResponseWriter, r *http.Request, id string) {
	ns := namespace(r)
	s.query(w, r, func() (any, uint64, *httpError) {
		rec := s.jobs[nsKey{ns, id}]
		if rec == nil {
			return nil, s.tableIndexLocked(tableJobs), errorf(http.StatusNotFound, "job not found")
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
			if !nsMatches(ns, k.ns) || !strings.HasPrefix(k.id, prefix) {
				continue
			}
			out = append(out, s.jobStubLocked(rec, withMeta))
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

func (s *Server) jobStubLocked(rec *jobRecord, withMeta bool) *api.JobListStub {
	j := rec.job
	st := &api.JobListStub{
		ID:                *j.ID,
		ParentID:          *j.ParentID,
		Name:              *j.Name,
		Namespace:         *j.Namespace,
		Datacenters:       slices.Clone(j.Datacenters),
		Type:              *j.Type,
		Priority:          *j.Priority,
		Periodic:          j.IsPeriodic(),
		ParameterizedJob:  j.IsParameterized(),
		Stop:              *j.Stop,
		Status:            *j.Status,
		StatusDescription: *j.StatusDescription,
		JobSummary:        s.jobSummaryLocked(rec),
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

func (s *Server) jobSummaryLocked(rec *jobRecord) *api.JobSummary {
	j := rec.job
	sum := &api.JobSummary{
		JobID:       *j.ID,
		Namespace:   *j.Namespace,
		Summary:     map[string]api.TaskGroupSummary{},
		CreateIndex: *j.CreateIndex,
		ModifyIndex: *j.ModifyIndex,
	}
	for _, tg := range j.TaskGroups {
		sum.Summary[*tg.Name] = api.TaskGroupSummary{}
	}
	for _, a := range s.jobAllocsLocked(rec, false) {
		tg := sum.Summary[a.TaskGroup]
		switch a.ClientStatus {
		case api.AllocClientStatusPending:
			tg.Starting++
		case api.AllocClientStatusRunning:
			tg.Running++
		case api.AllocClientStatusComplete:
			tg.Complete++
		case api.AllocClientStatusFailed:
			tg.Failed++
		case api.AllocClientStatusLost:
			tg.Lost++
		case api.AllocClientStatusUnknown:
			tg.Unknown++
		}
		sum.Summary[a.TaskGroup] = tg
	}
	for _, e := range s.evalsByJob[rec.key()] {
		if e.Status == api.EvalStatusBlocked {
			for tg, n := range e.QueuedAllocations {
				g := sum.Summary[tg]
				g.Queued += n
				sum.Summary[tg] = g
			}
		}
	}
	return sum
}

func (s *Server) jobSummary(w http.ResponseWriter, r *http.Request, id string) {
	ns := namespace(r)
	s.query(w, r, func() (any, uint64, *httpError) {
		rec := s.jobs[nsKey{ns, id}]
		if rec == nil {
			return nil, s.tableIndexLocked(tableJobs), errorf(http.StatusNotFound, "job not found")
		}
		return s.jobSummaryLocked(rec), max(s.tableIndexLocked(tableAlloc), *rec.job.ModifyIndex), nil
	})
}

// jobAllocsLocked lists a job's allocations; unless all, only those of the
// job's current incarnation (same CreateIndex), as Nomad's AllocsByJob.
func (s *Server) jobAllocsLocked(rec *jobRecord, all bool) []*api.Allocation {
	var out []*api.Allocation
	for _, a := range s.allocsByJob[rec.key()] {
		if !all && *a.Job.CreateIndex != *rec.job.CreateIndex {
			continue
		}
		out = append(out, a)
	}
	return out
}

func sortAllocs(as []*api.Allocation) {
	sort.Slice(as, func(i, j int) bool {
		if as[i].CreateIndex != as[j].CreateIndex {
			return as[i].CreateIndex < as[j].CreateIndex
		}
		return as[i].Name < as[j].Name
	})
}

func (s *Server) jobAllocations(w http.ResponseWriter, r *http.Request, id string) {
	ns := namespace(r)
	all, _ := strconv.ParseBool(r.URL.Query().Get("all"))
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.AllocationListStub{}
		rec := s.jobs[nsKey{ns, id}]
		allocs := s.allocsByJob[nsKey{ns, id}]
		if rec != nil {
			allocs = s.jobAllocsLocked(rec, all)
		}
		for _, a := range allocs {
			out = append(out, allocStub(a, false))
		}
		return out, s.tableIndexLocked(tableAlloc), nil
	})
}

func (s *Server) jobEvaluations(w http.ResponseWriter, r *http.Request, id string) {
	ns := namespace(r)
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.Evaluation{}
		for _, e := range s.evals {
			if e.JobID == id && nsMatches(ns, e.Namespace) {
				out = append(out, e)
			}
		}
		sortEvals(out)
		return out, s.tableIndexLocked(tableEvals), nil
	})
}

// jobStatusLocked is Nomad's getJobStatus, without deployments.
func (s *Server) jobStatusLocked(rec *jobRecord) string {
	j := rec.job
	for _, a := range s.jobAllocsLocked(rec, false) {
		if !allocTerminal(a) {
			return jobStatusRunning
		}
	}
	hasEval := false
	for _, e := range s.evalsByJob[rec.key()] {
		if e.Status == api.EvalStatusBlocked || e.Status == api.EvalStatusPending {
			return jobStatusPending
		}
		hasEval = true
	}
	if hasEval || *j.Stop {
		return jobStatusDead
	}
	return jobStatusPending
}

// refreshJobStatusLocked recomputes the status of the job with key k and
// bumps its ModifyIndex when it changed, as Nomad's setJobStatus does.
func (s *Server) refreshJobStatusLocked(k nsKey, idx uint64) {
	rec := s.jobs[k]
	if rec == nil {
		return
	}
	st := s.jobStatusLocked(rec)
	if st == *rec.job.Status {
		return
	}
	rec.job.Status = new(st)
	rec.job.ModifyIndex = new(idx)
	s.touchLocked(idx, tableJobs)
}

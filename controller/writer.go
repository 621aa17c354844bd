package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controller/render"
)

// writer carries out a pass's actions as check-and-set job writes
// (register, stop) and keeps the bookkeeping that makes the next pass wait
// for them: the index the job list must reach, and the jobs whose last
// write's outcome is unknown. Its clock is the wall clock: behindLimit
// bounds a wait on Nomad's servers, which run in real time.
type writer struct {
	nomad    *api.Client
	wo       *api.WriteOptions
	qo       *api.QueryOptions
	log      *slog.Logger
	metrics  *metrics
	lead     *leader // fences the writes of the leader's own passes
	settings render.Settings

	// mu guards expect, unsure and behindSince. Invariant: a pass plans
	// only on a job list whose index has reached expect and after every
	// job in unsure has been read back (resolveUnsure), or once it has
	// waited behindLimit for that.
	mu sync.Mutex
	// expect is the jobs-table index the job list must have reached before
	// the next pass: that of this controller's last job write whose outcome
	// it knows. unsure holds the jobs whose last write's outcome it does not
	// know (an error, a lost answer, a check-and-set conflict): the next
	// pass reads them first.
	expect      uint64
	unsure      map[string]bool
	behindSince time.Time // when passes began to wait for expect
}

// behindLimit is how long passes wait for the job list to show this
// controller's writes before they plan anyway.
const behindLimit = time.Minute

// behind reports whether a job list at jobsIndex misses this
// controller's own last writes. Past behindLimit of waiting it gives up
// (logs, forgets expect) and reports false: never wait forever on an index
// a write reported but the job list does not reach.
func (w *writer) behind(jobsIndex uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	behind := jobsIndex < w.expect
	switch {
	case !behind:
		w.behindSince = time.Time{}
	case w.behindSince.IsZero():
		w.behindSince = time.Now()
	case time.Since(w.behindSince) > behindLimit:
		w.log.Warn("job list still behind this controller's writes; planning anyway",
			"want_index", w.expect, "have_index", jobsIndex)
		w.expect, w.behindSince, behind = 0, time.Time{}, false
	}
	return behind
}

// forgetExpect drops the index the job list must reach: the servers'
// index went backwards (a snapshot restore), so what this controller
// expected to see is moot.
func (w *writer) forgetExpect() {
	w.mu.Lock()
	w.expect = 0
	w.mu.Unlock()
}

// wrote records the outcome of a job write: its index when known (the
// next pass waits for the job list to reach it), else the job as unsure.
func (w *writer) wrote(jobID string, index uint64, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if known {
		w.expect = max(w.expect, index)
		delete(w.unsure, jobID)
		return
	}
	w.unsure[jobID] = true
}

// resolveUnsure reads the jobs whose last write's outcome is unknown, so
// that the pass waits for the job list to show them as they are.
func (w *writer) resolveUnsure(ctx context.Context) error {
	w.mu.Lock()
	ids := make([]string, 0, len(w.unsure))
	for id := range w.unsure {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		qo := *w.qo
		rctx, cancel := context.WithTimeout(ctx, callTimeout)
		job, _, err := w.nomad.Jobs().Info(id, (&qo).WithContext(rctx))
		cancel()
		var ue api.UnexpectedResponseError
		switch {
		case err == nil && job.ModifyIndex != nil:
			w.wrote(id, *job.ModifyIndex, true)
		case errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound:
			w.wrote(id, 0, true)
		case err != nil:
			return fmt.Errorf("read job %s after a write with no answer: %w", id, err)
		}
	}
	return nil
}

// execute carries out one action against Nomad. Every write is
// check-and-set: a create must find no job of its ID, a replace and a stop
// the job at the index the plan saw. A controller acting on an old view
// (a deposed leader that wakes up) changes nothing another wrote since.
func (w *writer) execute(ctx context.Context, fenced bool, a reconcile.Action, nodes map[string]render.NodeInfo) error {
	switch a.Kind {
	case reconcile.Stop:
		w.log.Info("stop", "job", a.JobID, "replica", a.Replica, "reason", a.Reason)
		return w.stopJob(ctx, fenced, a.JobID, a.ExpectIndex)
	case reconcile.Create, reconcile.Replace:
		job, err := render.Job(render.Input{
			Model: a.Model, Profile: a.Profile, Gen: a.Gen, Decision: a.Decision,
			Nodes: nodes, Settings: w.settings,
		})
		if err != nil {
			return fmt.Errorf("render: %w", err)
		}
		if a.Kind == reconcile.Replace && *job.ID != a.JobID {
			return fmt.Errorf("render gave job %s, want %s", *job.ID, a.JobID)
		}
		if err := w.register(ctx, fenced, job, a.ExpectIndex); err != nil {
			return err
		}
		w.log.Info(a.Kind.String(), "job", *job.ID, "replica", a.Replica, "profile", a.Profile.Name,
			"domain", a.Decision.Domain.Key(), "watts", a.Decision.Watts, "reason", a.Reason)
		w.metrics.placements.WithLabelValues(a.Model.Name).Inc()
		return nil
	}
	return fmt.Errorf("unknown action %v", a.Kind)
}

// register writes job with check-and-set on index (0: it must not exist).
func (w *writer) register(ctx context.Context, fenced bool, job *api.Job, index uint64) error {
	wctx, cancel, err := w.lead.writeContext(ctx, fenced)
	if err != nil {
		return err
	}
	defer cancel()
	opts := &api.RegisterOptions{EnforceIndex: true, ModifyIndex: index}
	wo := *w.wo
	resp, _, err := w.nomad.Jobs().RegisterOpts(job, opts, (&wo).WithContext(wctx))
	if isEnforceIndexConflict(err) {
		// Someone else (a retry, another controller) wrote it first:
		// level-based, the next pass sees it.
		w.log.Info("job written by another writer first", "job", *job.ID)
		w.metrics.casConflicts.Inc()
		w.wrote(*job.ID, 0, false)
		return errConflict
	}
	if err != nil {
		w.wrote(*job.ID, 0, false)
		return fmt.Errorf("register %s: %w", *job.ID, err)
	}
	w.wrote(*job.ID, resp.JobModifyIndex, true)
	return nil
}

// stopJob stops a job as a check-and-set write: the job as Nomad holds it,
// re-registered with Stop set, on the JobModifyIndex the plan saw (Nomad's
// deregister has no such check). A job already gone, or already stopped,
// is done.
func (w *writer) stopJob(ctx context.Context, fenced bool, jobID string, index uint64) error {
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	qo := *w.qo
	job, _, err := w.nomad.Jobs().Info(jobID, (&qo).WithContext(rctx))
	cancel()
	var ue api.UnexpectedResponseError
	switch {
	case errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound:
		w.wrote(jobID, 0, true)
		return nil
	case err != nil:
		w.wrote(jobID, 0, false)
		return fmt.Errorf("read %s to stop it: %w", jobID, err)
	case job.Stop != nil && *job.Stop:
		return nil
	case job.JobModifyIndex != nil && index != 0 && *job.JobModifyIndex != index:
		w.log.Info("job changed since the pass read it; its stop waits for the next pass", "job", jobID,
			"want_index", index, "have_index", *job.JobModifyIndex)
		w.metrics.casConflicts.Inc()
		w.wrote(jobID, 0, false)
		return errConflict
	}
	if index == 0 && job.JobModifyIndex != nil {
		index = *job.JobModifyIndex
	}
	job.Stop = new(true)
	return w.register(ctx, fenced, job, index)
}

// errConflict is execute's answer to a check-and-set registration that
// another writer got to first.
var errConflict = errors.New("job registered by another writer")

// isEnforceIndexConflict reports Nomad's refusal of a check-and-set job
// registration. Nomad answers it with HTTP 500 and a message starting
// "Enforcing job modify index"; the API gives no other signal.
func isEnforceIndexConflict(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return strings.Contains(ue.Body(), "Enforcing job modify index")
	}
	return false
}

package nomadfake

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

func (s *Server) handleEvalList(w http.ResponseWriter, r *http.Request) {
	ns := namespace(r)
	q := r.URL.Query()
	prefix, jobID, status := q.Get("prefix"), q.Get("filter_job_id"), q.Get("filter_eval_status")
	s.query(w, r, func() (any, uint64, *httpError) {
		out := []*api.Evaluation{}
		for _, e := range s.evals {
			if !nsMatches(ns, e.Namespace) || !strings.HasPrefix(e.ID, prefix) {
				continue
			}
			if (jobID != "" && e.JobID != jobID) || (status != "" && e.Status != status) {
				continue
			}
			out = append(out, e)
		}
		sortEvals(out)
		return out, s.tableIndexLocked(tableEvals), nil
	})
}

func (s *Server) handleEval(w http.ResponseWriter, r *http.Request, rest string) {
	if id, ok := strings.CutSuffix(rest, "/allocations"); ok {
		s.query(w, r, func() (any, uint64, *httpError) {
			out := []*api.AllocationListStub{}
			var as []*api.Allocation
			for _, a := range s.allocs {
				if a.EvalID == id {
					as = append(as, a)
				}
			}
			sortAllocs(as)
			for _, a := range as {
				out = append(out, allocStub(a, false))
			}
			return out, s.tableIndexLocked(tableAlloc), nil
		})
		return
	}
	if strings.Contains(rest, "/") {
		notFaked(w, r)
		return
	}
	related, _ := strconv.ParseBool(r.URL.Query().Get("related"))
	s.query(w, r, func() (any, uint64, *httpError) {
		e := s.evals[rest]
		if e == nil {
			return nil, s.tableIndexLocked(tableEvals), errorf(http.StatusNotFound, "eval not found")
		}
		if !related {
			return e, e.ModifyIndex, nil
		}
		out := *e
		out.RelatedEvals = s.relatedEvalsLocked(e)
		return &out, e.ModifyIndex, nil
	})
}

// relatedEvalsLocked follows the Previous/Next/Blocked links from e, as
// Nomad's EvalsRelatedToID.
func (s *Server) relatedEvalsLocked(e *api.Evaluation) []*api.EvaluationStub {
	seen := map[string]bool{e.ID: true}
	var out []*api.Evaluation
	queue := []*api.Evaluation{e}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, id := range []string{cur.PreviousEval, cur.NextEval, cur.BlockedEval} {
			if id == "" || seen[id] {
				continue
			}
			seen[id] = true
			if n := s.evals[id]; n != nil {
				out = append(out, n)
				queue = append(queue, n)
			}
		}
	}
	sortEvals(out)
	stubs := make([]*api.EvaluationStub, 0, len(out))
	for _, x := range out {
		stubs = append(stubs, &api.EvaluationStub{
			ID: x.ID, Priority: x.Priority, Type: x.Type, TriggeredBy: x.TriggeredBy, Namespace: x.Namespace,
			JobID: x.JobID, NodeID: x.NodeID, DeploymentID: x.DeploymentID, Status: x.Status,
			StatusDescription: x.StatusDescription, WaitUntil: x.WaitUntil, NextEval: x.NextEval,
			PreviousEval: x.PreviousEval, BlockedEval: x.BlockedEval, CreateIndex: x.CreateIndex,
			ModifyIndex: x.ModifyIndex, CreateTime: x.CreateTime, ModifyTime: x.ModifyTime,
		})
	}
	return stubs
}

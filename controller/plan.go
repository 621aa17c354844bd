package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/internal/hcldecode"
	"github.com/llmgw/llmgw/internal/suggest"
)

// The bounds of POST /v1/plan (docs/controller.md, "Before a change"):
// what one request may ask the controller to place and to answer, checked
// before anything is placed, and one plan at a time (planMu), so that one
// plan grows the controller by at most 64 MB. TestPlanWithinBounds sends
// the largest request they allow to a controller over 1,000 nodes of 8
// GPUs: its live heap grows about 25 MB at the most (the Go runtime lets
// the heap reach twice the live heap before it collects). A real catalog
// of a 10,000-GPU-node fleet is hundreds of models and a few thousand
// replicas.
const (
	// maxPlanBody bounds the body: a catalog and a facility file (a
	// catalog of 500 models with two profiles each is about 150 kB).
	maxPlanBody = 512 << 10
	// MaxPlanModels is the most models a planned catalog may hold.
	MaxPlanModels = 500
	// MaxPlanReplicas is the most replicas a planned catalog may ask for:
	// the sum of its fixed models' replicas and its autoscaled models'
	// max.
	MaxPlanReplicas = 3000
	// MaxPlanTries is the most replica-profile pairs a planned catalog may
	// ask the planner to try: the sum over its models of their replicas
	// (max) times their profiles. Each try that fails keeps its reasons.
	MaxPlanTries = 6000
	// MaxPlanHolds is the most holds a plan may apply: the facility
	// file's and the request's together.
	MaxPlanHolds = 1000
	// MaxPlanBudgets is the most budgets a planned facility file may hold.
	MaxPlanBudgets = 1000
	// MaxPlanTokens is the most tokens a plan's catalog and facility
	// files may have together (bounded.HCLTokens, bounded.JSONTokens),
	// counted before they are parsed: parsing and decoding allocate about
	// 1 kB a token, whatever the shape. The largest plan the other bounds
	// allow is about 65,000.
	MaxPlanTokens = 80000
	// MaxPlanAnswer is the largest answer a plan gives; a larger one is
	// refused (422), never cut. The largest plan allowed answers about
	// 3 MB.
	MaxPlanAnswer = 16 << 20
)

// planLimitHint is the hint of a plan refused for its size.
const planLimitHint = "plan part of the catalog at a time; the limits of POST /v1/plan are in docs/controller.md (\"Before a change\")"

// planBounds checks a plan's catalog and facility (each when the request
// brought it: the files in force are the operator's) and its holds (the
// facility's and the request's, always) against the bounds above, naming
// the limit and the number asked.
func planBounds(cat facility.Catalog, checkCatalog bool, fac facility.Facility, checkFacility bool, holds int) error {
	if checkCatalog {
		if n := len(cat.Models); n > MaxPlanModels {
			return fmt.Errorf("plan limit: the catalog has %d models, more than the %d one plan may place", n, MaxPlanModels)
		}
		replicas, tries := 0, 0
		for _, m := range cat.Models {
			n := m.Replicas
			if m.Autoscale != nil {
				n = max(n, m.Autoscale.Max)
			}
			// At most MaxPlanModels models of at most 65536 replicas (the
			// catalog's own bound) and a body's worth of profiles: no
			// overflow.
			replicas += n
			tries += n * max(len(m.Profiles), 1)
		}
		if replicas > MaxPlanReplicas {
			return fmt.Errorf("plan limit: the catalog asks for %d replicas (fixed models' replicas and autoscaled models' max), more than the %d one plan may place",
				replicas, MaxPlanReplicas)
		}
		if tries > MaxPlanTries {
			return fmt.Errorf("plan limit: the catalog asks the planner to try %d replica-profile pairs (each model's replicas times its profiles), more than the %d of one plan",
				tries, MaxPlanTries)
		}
	}
	if n := len(fac.Budgets); checkFacility && n > MaxPlanBudgets {
		return fmt.Errorf("plan limit: the facility has %d budgets, more than the %d of one plan", n, MaxPlanBudgets)
	}
	if n := len(fac.Holds) + holds; n > MaxPlanHolds {
		return fmt.Errorf("plan limit: %d holds (the facility file's and the request's), more than the %d of one plan", n, MaxPlanHolds)
	}
	return nil
}

// planTokens checks the tokens of a plan's catalog and facility, as
// their names say they are written (hcldecode.IsJSON), against
// MaxPlanTokens, before either is parsed.
func planTokens(req controllerapi.PlanRequest) error {
	count := func(name, src string) int {
		if hcldecode.IsJSON(name) {
			return bounded.JSONTokens([]byte(src))
		}
		return bounded.HCLTokens([]byte(src))
	}
	n := count(req.CatalogName, req.Catalog) + count(req.FacilityName, req.Facility)
	if n > MaxPlanTokens {
		return fmt.Errorf("plan limit: the catalog and facility have about %d tokens together, more than the %d one plan may parse", n, MaxPlanTokens)
	}
	return nil
}

// postPlan answers what a pass would do with other files or more holds,
// with the reconcile pass's own planner (reconcile.Plan) on the
// controller's current view of Nomad. It writes nothing: not to Nomad, not
// to the controller's view or stored decisions. Bad files answer 422 with
// every problem at file:line, as a reload does.
func (c *Controller) postPlan(w http.ResponseWriter, r *http.Request) {
	if !c.planMu.TryLock() {
		w.Header().Set("Retry-After", "1")
		writeErr(w, http.StatusTooManyRequests, "another plan is under way: the controller computes one plan at a time", "try again in a moment")
		return
	}
	defer c.planMu.Unlock()
	var req controllerapi.PlanRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPlanBody))
	dec.DisallowUnknownFields() // a misspelt field is not a plan of the files in force
	if err := dec.Decode(&req); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("plan limit: the body is larger than %d bytes, the most a plan request may send", maxPlanBody), planLimitHint)
			return
		}
		writeErr(w, http.StatusBadRequest, "body: "+err.Error(),
			`send {"catalog": "<HCL>", "catalog_name": "catalog.hcl", "facility": "<HCL>", "holds": [{"domain": "rack=r1", "drain": true}]}`)
		return
	}
	if err := planTokens(req); err != nil {
		writeErr(w, http.StatusUnprocessableEntity, err.Error(), planLimitHint)
		return
	}
	cat, fac := c.files.get()
	catName := c.cfg.Catalog
	var errs []error
	if req.Catalog != "" {
		catName = req.CatalogName
		if catName == "" {
			catName = "catalog.hcl"
		}
		parsed, err := facility.ParseCatalog(catName, []byte(req.Catalog))
		errs = append(errs, err)
		cat = parsed
	}
	if req.Facility != "" {
		name := req.FacilityName
		if name == "" {
			name = "facility.hcl"
		}
		parsed, err := facility.ParseFacility(name, []byte(req.Facility))
		errs = append(errs, err)
		fac = parsed
	}
	if err := errors.Join(errs...); err != nil {
		writeErr(w, http.StatusUnprocessableEntity, err.Error(), "fix the file; nothing was planned")
		return
	}
	if err := planBounds(cat, req.Catalog != "", fac, req.Facility != "", len(req.Holds)); err != nil {
		writeErr(w, http.StatusUnprocessableEntity, err.Error(), planLimitHint)
		return
	}
	fac.Holds = append([]facility.Hold(nil), fac.Holds...)
	for i, h := range req.Holds {
		d, err := facility.ParseDomain(h.Domain)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("holds[%d].domain: %v", i, err), "write level=value, such as rack=r01-k01")
			return
		}
		if !c.obs.knownDomain(d) {
			writeErr(w, http.StatusNotFound, fmt.Sprintf("holds[%d]: no node is in %s", i, d), suggest.Hint(d.String(), c.obs.domainKeys()))
			return
		}
		fac.Holds = append(fac.Holds, facility.Hold{Domain: d, Reason: h.Reason, Drain: h.Drain})
	}
	view, err := c.plan(cat, fac, catName)
	switch {
	case errors.Is(err, ErrNotSynced):
		writeNotRead(w, "the controller has not read Nomad yet: "+err.Error())
		return
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err.Error(), "")
		return
	}
	b, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err.Error(), "")
		return
	}
	if len(b) > MaxPlanAnswer {
		writeErr(w, http.StatusUnprocessableEntity, fmt.Sprintf("plan limit: the answer would be %d bytes, more than the %d of one plan", len(b), MaxPlanAnswer), planLimitHint)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// plan runs reconcile.Plan on the current view of Nomad with cat and fac
// (to which withHolds adds the run-time holds, as in a pass) and describes
// the result.
func (c *Controller) plan(cat facility.Catalog, fac facility.Facility, catalogName string) (controllerapi.PlanView, error) {
	c.passMu.Lock()
	in, _, _, _, err := c.inputFor(cat, fac, true)
	if err != nil {
		c.passMu.Unlock()
		return controllerapi.PlanView{}, err
	}
	res, err := reconcile.Plan(in)
	c.passMu.Unlock()
	if err != nil {
		return controllerapi.PlanView{}, err
	}
	in.Planners = nil // the passes' own, used under passMu only
	before, err := reconcile.Before(in)
	if err != nil {
		return controllerapi.PlanView{}, err
	}
	v := controllerapi.PlanView{At: in.Now, Changes: []controllerapi.PlanChange{}, Unplaced: []controllerapi.PlanUnplaced{}, Domains: []controllerapi.PlanDomain{}, DeferredStops: res.DeferredStops,
		Warnings: cat.Warnings()}
	if err := c.tooManyStops(in, res.Actions, catalogName); err != nil {
		v.Refused = err.Error()
	}
	bySlot := map[string][]reconcile.Job{}
	byID := map[string]reconcile.Job{}
	for _, j := range in.Jobs {
		bySlot[j.Replica] = append(bySlot[j.Replica], j)
		byID[j.ID] = j
	}
	nodesOf := func(shards []facility.Shard) []string {
		out := make([]string, 0, len(shards))
		for _, s := range shards {
			out = append(out, s.Node)
		}
		return out
	}
	for _, a := range res.Actions {
		pc := controllerapi.PlanChange{Action: a.Kind.String(), Replica: a.Replica, Model: a.Model.Name, JobID: a.JobID, Reason: a.Reason}
		switch a.Kind {
		case reconcile.Stop:
			pc.Change = controllerapi.ChangeStop
			if j, ok := byID[a.JobID]; ok {
				pc.Model, pc.Profile, pc.From, pc.FromNodes = j.Model, j.Profile, j.Domain.Key(), nodesOf(j.Shards)
			}
		default:
			pc.Change = controllerapi.ChangeCreate
			pc.Profile, pc.To, pc.Nodes, pc.Watts = a.Profile.Name, a.Decision.Domain.Key(), nodesOf(a.Decision.Shards), a.Decision.Watts
			var from *reconcile.Job
			if j, ok := byID[a.JobID]; ok {
				from = &j // a replace: the job itself
			} else if js := bySlot[a.Replica]; len(js) > 0 {
				from = &js[0] // a new copy beside the slot's job
			}
			if from != nil {
				pc.Change, pc.From, pc.FromNodes = controllerapi.ChangeMove, from.Domain.Key(), nodesOf(from.Shards)
			}
		}
		switch pc.Change {
		case controllerapi.ChangeCreate:
			v.Creates++
		case controllerapi.ChangeMove:
			v.Moves++
		case controllerapi.ChangeStop:
			v.Stops++
		}
		v.Changes = append(v.Changes, pc)
	}
	slots := make([]string, 0, len(res.Decisions))
	for slot := range res.Decisions {
		slots = append(slots, slot)
	}
	sort.Strings(slots)
	for _, slot := range slots {
		if d := res.Decisions[slot]; !d.Placed {
			v.Unplaced = append(v.Unplaced, controllerapi.PlanUnplaced{Replica: slot, Model: d.Model, Reasons: d.Reasons()})
		}
	}
	after := map[string]facility.DomainUsage{}
	for _, u := range res.After {
		after[u.Domain.String()] = u
	}
	for _, u := range before {
		a := after[u.Domain.String()]
		v.Domains = append(v.Domains, controllerapi.PlanDomain{Domain: u.Domain.String(), CapWatts: u.CapWatts, LimitWatts: u.LimitWatts,
			BeforeWatts: u.DrawWatts, AfterWatts: a.DrawWatts, Held: u.Held})
	}
	if len(res.Waits) > 0 {
		v.Waiting = res.Waits
	}
	return v, nil
}

package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/httpjson"
	"github.com/llmgw/llmgw/internal/suggest"
)

// maxPlanBody bounds POST /v1/plan's body: a catalog and a facility file.
const maxPlanBody = 4 << 20

// postPlan answers what a pass would do with other files or more holds,
// with the reconcile pass's own planner (reconcile.Plan) on the
// controller's current view of Nomad. It writes nothing: not to Nomad, not
// to the controller's view or stored decisions. Bad files answer 422 with
// every problem at file:line, as a reload does.
func (c *Controller) postPlan(w http.ResponseWriter, r *http.Request) {
	var req controllerapi.PlanRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPlanBody))
	dec.DisallowUnknownFields() // a misspelt field is not a plan of the files in force
	if err := dec.Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, "body: "+err.Error(),
			`send {"catalog": "<HCL>", "catalog_name": "catalog.hcl", "facility": "<HCL>", "holds": [{"domain": "rack=r1", "drain": true}]}`)
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
	httpjson.WriteIndented(w, http.StatusOK, view)
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

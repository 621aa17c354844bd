package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/httpjson"
	"github.com/llmgw/llmgw/internal/suggest"
)

// PlanRequest is the body of POST /v1/plan: the files to try in place of
// the ones in force, and holds to add. Nothing is applied.
type PlanRequest struct {
	// Catalog is a catalog file's HCL text; empty: the catalog in force.
	Catalog string `json:"catalog,omitempty"`
	// CatalogName is the name problems in Catalog are reported at
	// (file:line); default "catalog.hcl".
	CatalogName string `json:"catalog_name,omitempty"`
	// Facility is a facility file's HCL text; empty: the facility file in
	// force. The run-time holds (llmgw ctl facility hold) apply either way.
	Facility     string `json:"facility,omitempty"`
	FacilityName string `json:"facility_name,omitempty"`
	// Holds are added to the facility's, as run-time holds would be.
	Holds []PlanHold `json:"holds,omitempty"`
}

// PlanHold is a hold a plan adds.
type PlanHold struct {
	Domain string `json:"domain"`
	Reason string `json:"reason,omitempty"`
	Drain  bool   `json:"drain,omitempty"`
}

// PlanView is what one reconcile pass would do with a request's files and
// holds on what Nomad holds now, and the budgets after it.
type PlanView struct {
	At time.Time `json:"at"`
	// Changes are the pass's actions, in the order it would carry them
	// out.
	Changes []PlanChange `json:"changes"`
	// Creates, Moves and Stops count Changes by Change.
	Creates int `json:"creates"`
	Moves   int `json:"moves"`
	Stops   int `json:"stops"`
	// Unplaced are the replicas the pass tried to place and could not.
	Unplaced []PlanUnplaced `json:"unplaced"`
	// Domains are the budgeted domains, their draw now, every job Nomad
	// holds counted (reconcile.Before), and after the pass's changes
	// (reconcile.Result.After).
	Domains []PlanDomain `json:"domains"`
	// Waiting says, by replica, why a roll or move waits this pass.
	Waiting map[string]string `json:"waiting,omitempty"`
	// DeferredStops counts the stops reconcile.max_stops leaves for later
	// passes.
	DeferredStops int `json:"deferred_stops,omitempty"`
	// Refused is set when a reload of this catalog would be refused for
	// stopping more than reconcile.max_stop_fraction of the running
	// replicas (it would need llmgw ctl reload --confirm).
	Refused string `json:"refused,omitempty"`
	// Warnings are the planned catalog's (facility.Catalog.Warnings):
	// profiles whose args no engine contract checked.
	Warnings []string `json:"warnings,omitempty"`
}

// Changes of a plan.
const (
	ChangeCreate = "create" // a new replica where its slot has no job
	ChangeMove   = "move"   // a new copy or a new placement of a replica that has a job: out of a held domain, off unhealthy GPUs, a roll, a failed job placed again
	ChangeStop   = "stop"   // a job stopped
)

// PlanChange is one action of a plan.
type PlanChange struct {
	Change  string `json:"change"` // create, move, stop
	Action  string `json:"action"` // what the controller registers: create, replace, stop
	Replica string `json:"replica"`
	Model   string `json:"model"`
	Profile string `json:"profile,omitempty"`
	// JobID is the job a replace or stop names.
	JobID string `json:"job_id,omitempty"`
	// From is where the replica's job runs now (a move, a stop).
	From      string   `json:"from,omitempty"`
	FromNodes []string `json:"from_nodes,omitempty"`
	// To is where the new placement goes (a create, a move).
	To    string   `json:"to,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
	Watts float64  `json:"watts,omitempty"`
	// Reason is the pass's reason for the action.
	Reason string `json:"reason"`
}

// PlanUnplaced is a replica the plan could not place, with every reason.
type PlanUnplaced struct {
	Replica string   `json:"replica"`
	Model   string   `json:"model"`
	Reasons []string `json:"reasons"`
}

// PlanDomain is a budgeted domain before and after a plan.
type PlanDomain struct {
	Domain      string  `json:"domain"`
	CapWatts    float64 `json:"cap_watts"`
	LimitWatts  float64 `json:"limit_watts"`
	BeforeWatts float64 `json:"before_watts"`
	AfterWatts  float64 `json:"after_watts"`
	Held        bool    `json:"held,omitempty"`
}

// maxPlanBody bounds POST /v1/plan's body: a catalog and a facility file.
const maxPlanBody = 4 << 20

// postPlan answers what a pass would do with other files or more holds,
// with the reconcile pass's own planner (reconcile.Plan) on the
// controller's current view of Nomad. It writes nothing: not to Nomad, not
// to the controller's view or stored decisions. Bad files answer 422 with
// every problem at file:line, as a reload does.
func (c *Controller) postPlan(w http.ResponseWriter, r *http.Request) {
	var req PlanRequest
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
func (c *Controller) plan(cat facility.Catalog, fac facility.Facility, catalogName string) (PlanView, error) {
	c.passMu.Lock()
	in, _, _, _, err := c.inputFor(cat, fac, true)
	if err != nil {
		c.passMu.Unlock()
		return PlanView{}, err
	}
	res, err := reconcile.Plan(in)
	c.passMu.Unlock()
	if err != nil {
		return PlanView{}, err
	}
	before, err := reconcile.Before(in)
	if err != nil {
		return PlanView{}, err
	}
	v := PlanView{At: in.Now, Changes: []PlanChange{}, Unplaced: []PlanUnplaced{}, Domains: []PlanDomain{}, DeferredStops: res.DeferredStops,
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
		pc := PlanChange{Action: a.Kind.String(), Replica: a.Replica, Model: a.Model.Name, JobID: a.JobID, Reason: a.Reason}
		switch a.Kind {
		case reconcile.Stop:
			pc.Change = ChangeStop
			if j, ok := byID[a.JobID]; ok {
				pc.Model, pc.Profile, pc.From, pc.FromNodes = j.Model, j.Profile, j.Domain.Key(), nodesOf(j.Shards)
			}
		default:
			pc.Change = ChangeCreate
			pc.Profile, pc.To, pc.Nodes, pc.Watts = a.Profile.Name, a.Decision.Domain.Key(), nodesOf(a.Decision.Shards), a.Decision.Watts
			var from *reconcile.Job
			if j, ok := byID[a.JobID]; ok {
				from = &j // a replace: the job itself
			} else if js := bySlot[a.Replica]; len(js) > 0 {
				from = &js[0] // a new copy beside the slot's job
			}
			if from != nil {
				pc.Change, pc.From, pc.FromNodes = ChangeMove, from.Domain.Key(), nodesOf(from.Shards)
			}
		}
		switch pc.Change {
		case ChangeCreate:
			v.Creates++
		case ChangeMove:
			v.Moves++
		case ChangeStop:
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
			v.Unplaced = append(v.Unplaced, PlanUnplaced{Replica: slot, Model: d.Model, Reasons: d.Reasons()})
		}
	}
	after := map[string]facility.DomainUsage{}
	for _, u := range res.After {
		after[u.Domain.String()] = u
	}
	for _, u := range before {
		a := after[u.Domain.String()]
		v.Domains = append(v.Domains, PlanDomain{Domain: u.Domain.String(), CapWatts: u.CapWatts, LimitWatts: u.LimitWatts,
			BeforeWatts: u.DrawWatts, AfterWatts: a.DrawWatts, Held: u.Held})
	}
	if len(res.Waits) > 0 {
		v.Waiting = res.Waits
	}
	return v, nil
}

package controllerapi

import (
	"time"
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
	// holds counted (controller/reconcile.Before), and after the pass's
	// changes (controller/reconcile.Result.After).
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

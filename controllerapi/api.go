package controllerapi

import (
	"time"

	"github.com/llmgw/llmgw/facility"
)

// APIError is the body of every error response.
type APIError struct {
	Error string `json:"error"`
	// Hint says what to do, where there is something to say.
	Hint string `json:"hint,omitempty"`
}

// ReplicaDetail is one replica with its explanation.
type ReplicaDetail struct {
	ReplicaView
	Explain *Explain `json:"explain,omitempty"`
	// Nomad is Nomad's own reason when it could not place the replica's
	// job: the failed-allocation metrics of its latest evaluation.
	Nomad []NomadReason `json:"nomad,omitempty"`
	// Scale is, for a replica of an autoscaled model, the model's count
	// at the last pass and why.
	Scale *ModelScale `json:"scale,omitempty"`
}

// ModelScale is an autoscaled model's count at the last pass, and why.
type ModelScale struct {
	// Explain: "wants 6, has 4: pdu=p3 would draw 17.6 kW of 17.3 kW; …".
	Explain string `json:"explain"`
	// Reason is why it wants what it wants (the autoscaler's reason, or
	// the pin's).
	Reason   string         `json:"reason"`
	Decision *ScaleDecision `json:"decision,omitempty"`
	Pin      *Pin           `json:"pin,omitempty"`
}

// NomadReason is Nomad's placement failure for one task group.
type NomadReason struct {
	Group              string         `json:"group"`
	NodesEvaluated     int            `json:"nodes_evaluated"`
	NodesFiltered      int            `json:"nodes_filtered"`
	NodesExhausted     int            `json:"nodes_exhausted"`
	ConstraintFiltered map[string]int `json:"constraint_filtered,omitempty"`
	DimensionExhausted map[string]int `json:"dimension_exhausted,omitempty"`
}

// FacilityView is the facility's budgets, holds and draw.
type FacilityView struct {
	Headroom float64      `json:"headroom"`
	Domains  []DomainView `json:"domains"`
}

// CatalogView is the catalog in force and the state of the last reload.
type CatalogView struct {
	Models   []facility.Model `json:"models"`
	LoadedAt time.Time        `json:"loaded_at"`
	// Error is the last reload's error: the catalog above is still the one
	// in force.
	Error string `json:"error,omitempty"`
	// Warnings are the catalog's (facility.Catalog.Warnings): profiles whose
	// args no engine contract checked, each naming file:line.
	Warnings []string `json:"warnings,omitempty"`
}

// HoldRequest is the body of PUT /v1/facility/holds/{domain}.
type HoldRequest struct {
	Reason string `json:"reason"`
	Drain  bool   `json:"drain"`
}

// ReloadRequest is the body of POST /v1/reload.
type ReloadRequest struct {
	// Confirm lets through a catalog that stops more than
	// reconcile.max_stop_fraction of the running replicas.
	Confirm bool `json:"confirm"`
}

// LabelsRequest is the body of PUT /v1/nodes/{node}/labels: location
// levels to set (site, room, row, rack, pdu, and fabric or hcas) and ones to
// unset.
type LabelsRequest struct {
	Set   map[string]string `json:"set"`
	Unset []string          `json:"unset"`
}

package controllerapi

import (
	"time"

	"github.com/llmgw/llmgw/facility"
)

// View is what the last pass saw and decided, as the read API shows it.
type View struct {
	At       time.Time     `json:"at"`
	Leader   bool          `json:"leader"`
	Replicas []ReplicaView `json:"replicas"`
	Nodes    []NodeView    `json:"nodes"`
	Domains  []DomainView  `json:"domains"`
	Models   []ModelView   `json:"models"`
}

// ReplicaView is one replica slot and the job (or jobs, during a roll or a
// move) serving it.
type ReplicaView struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Profile string `json:"profile,omitempty"`
	State   string `json:"state"` // serving, starting, partial, pending, failed, unplaced
	// Note says why a replica that is not serving is not, shard by shard:
	// "shard-0: no check result yet", "shard-0: health unreadable: …",
	// "shard-1: node n3 down for 31s (lost_after 0s)".
	Note string `json:"note,omitempty"`
	// Waiting says why a roll or move of the replica waits this pass:
	// max_surge reached, or no room beside it with max_unavailable 0.
	Waiting string   `json:"waiting,omitempty"`
	Domain  string   `json:"domain,omitempty"`
	Nodes   []string `json:"nodes,omitempty"`
	Watts   float64  `json:"watts,omitempty"`
	JobID   string   `json:"job_id,omitempty"`
	// Jobs lists every job of the slot when there is more than one.
	Jobs  []string  `json:"jobs,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// Engine is what the controller last read from the serving job's
	// engine metrics; absent while the replica does not serve, or its
	// engine has no known metrics.
	Engine *EngineMetrics `json:"engine,omitempty"`
	// Phases is the start of the replica's current job (its shard 0) as
	// Nomad's task events tell it: placed, fetch started and finished (or
	// weights present), engine started, model loaded, ready; each once,
	// in order, with the event's words. Only in GET /v1/replicas/{id},
	// which reads them from Nomad.
	Phases []Phase `json:"phases,omitempty"`
}

// Phase is one step of a replica's start.
type Phase struct {
	Name   string    `json:"name"` // placed, fetch_started, fetch_finished, weights_present, engine_started, model_loaded, ready
	At     time.Time `json:"at"`
	Detail string    `json:"detail,omitempty"`
}

// NodeView is one Nomad node as placement sees it.
type NodeView struct {
	Name        string            `json:"name"`
	Location    map[string]string `json:"location"`
	GPUModel    string            `json:"gpu_model,omitempty"`
	GPUsFree    int               `json:"gpus_free"`
	GPUsTotal   int               `json:"gpus_total"`
	Measured    float64           `json:"measured_watts"`
	Committed   float64           `json:"committed_watts"`
	Schedulable bool              `json:"schedulable"`
	// Status is Nomad's view: ready, down, initializing, or ready but
	// draining or ineligible.
	Status string   `json:"status"`
	Held   []string `json:"held,omitempty"` // held domains the node is in
}

// DomainView is one domain with a budget or a hold.
type DomainView struct {
	Domain     string  `json:"domain"`
	Nodes      int     `json:"nodes"`
	CapWatts   float64 `json:"cap_watts,omitempty"`   // the budget; 0: none
	LimitWatts float64 `json:"limit_watts,omitempty"` // the budget less headroom
	Committed  float64 `json:"committed_watts"`
	Measured   float64 `json:"measured_watts"`
	Headroom   float64 `json:"headroom_watts,omitempty"`
	Hold       *Hold   `json:"hold,omitempty"`
	// Count is how its budget counts shards: "declared" or "measured"
	// (docs/power.md); DeclaredWatts what Committed would be counted
	// declared; Explain says both in words: "pdu=p3: admitted 17.1 kW
	// measured (declared would be 24.5 kW) of 20.0 kW, now drawing 12.2 kW".
	Count         string  `json:"count,omitempty"`
	DeclaredWatts float64 `json:"declared_watts,omitempty"`
	Explain       string  `json:"explain,omitempty"`
}

// Hold is a domain held for maintenance.
type Hold struct {
	Reason string `json:"reason"`
	Drain  bool   `json:"drain"`
	Source string `json:"source"` // "facility" (the file) or "runtime" (the API)
}

// Explain is a replica's stored placement decision.
type Explain struct {
	Replica    string               `json:"replica"`
	Placed     bool                 `json:"placed"`
	Profile    string               `json:"profile,omitempty"`
	Domain     facility.Scope       `json:"domain,omitempty"`
	Nodes      []string             `json:"nodes,omitempty"`
	Watts      float64              `json:"watts,omitempty"`
	Rejections []facility.Rejection `json:"rejections,omitempty"`
	Reasons    []string             `json:"reasons,omitempty"`
	// Readiness says, per chosen node, what it had to fetch of the
	// model's weights (facility.Decision.Readiness): "n3: weights present,
	// nothing to fetch", "n7: 16.1 GB to fetch, ~2 m 41 s at 100 MB/s".
	Readiness []string `json:"readiness,omitempty"`
	// Waiting says why a roll or move of the replica waits (max_surge,
	// no room with max_unavailable 0).
	Waiting string    `json:"waiting,omitempty"`
	At      time.Time `json:"at"`
}

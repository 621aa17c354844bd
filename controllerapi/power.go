package controllerapi

import (
	"time"

	"github.com/llmgw/llmgw/facility"
)

// PowerView is GET /v1/power: what measured budgets count (the draw learned
// per shard of each profile on each GPU model), each budgeted domain's caps
// as the last cap round left them, every GPU's draw and cap, the domains
// admitting as declared because a cap was refused, and the last cap events.
type PowerView struct {
	At      time.Time     `json:"at"` // the last cap round; zero before one
	Learned []LearnedDraw `json:"learned"`
	Domains []PowerDomain `json:"domains,omitempty"`
	GPUs    []GPUPower    `json:"gpus,omitempty"`
	// Shares are the nodes given a power share this round (docs/power.md,
	// "Node shares"), by name; a node not listed holds none (room for
	// every GPU at its max).
	Shares  []NodeShare    `json:"shares,omitempty"`
	Refused []PowerRefusal `json:"refused,omitempty"`
	Events  []PowerEvent   `json:"events,omitempty"`
}

// LearnedDraw is what one shard of a model's profile draws on a GPU
// model, as learned (the measured rule's percentile over its window) and
// from how many samples; measured budgets count it once it rests on
// enough of them (Counted).
type LearnedDraw struct {
	Model   string  `json:"model"`
	Profile string  `json:"profile"`
	GPU     string  `json:"gpu"`
	Watts   float64 `json:"watts"`
	Samples int     `json:"samples"`
	Counted bool    `json:"counted"` // Samples reached the rule's min_samples
}

// LearnedDraws converts what facility learned for the API; minSamples is
// the measured rule's.
func LearnedDraws(ls []facility.Learned, minSamples int) []LearnedDraw {
	out := make([]LearnedDraw, 0, len(ls))
	for _, l := range ls {
		out = append(out, LearnedDraw{Model: l.Model, Profile: l.Profile, GPU: l.GPU, Watts: l.Watts, Samples: l.Samples, Counted: l.Samples >= minSamples})
	}
	return out
}

// PowerDomain is one budgeted domain in the last cap round.
type PowerDomain struct {
	Domain     string  `json:"domain"`
	Engaged    bool    `json:"engaged"` // its caps are on
	LimitWatts float64 `json:"limit_watts"`
	DrawWatts  float64 `json:"draw_watts"` // measured: base and GPUs
	// BoundWatts is the most it could draw with every GPU at its cap (or
	// its default limit uncapped).
	BoundWatts float64 `json:"bound_watts"`
	// ShortfallWatts: by how much even every GPU at its floor leaves it
	// over its limit.
	ShortfallWatts float64 `json:"shortfall_watts,omitempty"`
}

// GPUPower is one GPU in the last cap round.
type GPUPower struct {
	UUID      string  `json:"uuid"`
	Node      string  `json:"node"`
	Model     string  `json:"model,omitempty"` // the llmgw model it serves
	DrawWatts float64 `json:"draw_watts"`
	// DrawFrom is where the draw was read: "client_stats" (Nomad's) or
	// "prometheus" (llmgw.hcl's power_source); the limits and state are
	// always client stats'.
	DrawFrom      string  `json:"draw_from,omitempty"`
	EnforcedWatts float64 `json:"enforced_watts,omitempty"` // its limit, as its plugin reports it
	CapWatts      float64 `json:"cap_watts,omitempty"`      // the controller's cap; 0: none
	// FloorWatts is the least cap it may get: the larger of its minimum
	// limit and its profile's min_watts; 0: it cannot be capped (its
	// plugin takes no caps or reports no limits).
	FloorWatts float64 `json:"floor_watts,omitempty"`
	// ShareWatts is its part of its node's power share (the share the
	// node's plugin holds every second: docs/power.md, "Node shares"),
	// when under its max; 0: its share is its max.
	ShareWatts float64 `json:"share_watts,omitempty"`
	CapDomain  string  `json:"cap_domain,omitempty"`
	Reason     string  `json:"reason,omitempty"`
	State      string  `json:"state,omitempty"` // the plugin's power_cap stat
}

// NodeShare is one node's power share as the last cap round decided it:
// what its plugin holds over its GPUs every second.
type NodeShare struct {
	Node       string  `json:"node"`
	ShareWatts float64 `json:"share_watts"`
	DrawWatts  float64 `json:"draw_watts"` // its GPUs' draw in the round
	GPUs       int     `json:"gpus"`       // its GPUs under the share
}

// PowerRefusal is a measured domain admitting as declared because a GPU in
// it refused a cap.
type PowerRefusal struct {
	Domain string `json:"domain"`
	Reason string `json:"reason"`
}

// PowerEvent is one cap decision: a cap set ("cap"), moved ("change") or
// lifted ("lift") on a GPU, or a domain whose caps were refused ("refused").
type PowerEvent struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Domain string    `json:"domain"`
	GPU    string    `json:"gpu,omitempty"`
	Node   string    `json:"node,omitempty"`
	Model  string    `json:"model,omitempty"`
	Watts  float64   `json:"watts,omitempty"`
	Reason string    `json:"reason"`
}

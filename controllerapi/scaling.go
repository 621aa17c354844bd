package controllerapi

import (
	"time"
)

// ScaleDecision is the autoscaler's last decision for a model.
type ScaleDecision struct {
	At time.Time `json:"at"`
	// Current is the slots the model had; Want what the autoscaler wants.
	Current int    `json:"current"`
	Want    int    `json:"want"`
	Rule    string `json:"rule"`
	Reason  string `json:"reason"`
	// Needed is the replicas the up window's mean needs, NeededDown the
	// most the down window needed; absent when unknown.
	Needed     *float64 `json:"needed,omitempty"`
	NeededDown *float64 `json:"needed_down,omitempty"`
}

// ScaleEvent is one change of a model's count, as a pass carried it out.
type ScaleEvent struct {
	At   time.Time `json:"at"`
	From int       `json:"from"`
	To   int       `json:"to"`
	// Reason is the label of llmgw_scale_events_total: the autoscaler's
	// rule (up, panic, down, wake, idle, min, max), pin, or yield (taken
	// by a model of higher priority).
	Reason string `json:"reason"`
	// Detail is the reason in words.
	Detail string `json:"detail"`
}

// ModelView is one model of the catalog with its count: what it wants,
// has and serves, and for an autoscaled model its signals, the
// autoscaler's last decision, a pin, and what the last pass made of them.
type ModelView struct {
	Name string `json:"name"`
	// Weights, for a model whose weights the nodes' stores fetch, says
	// where they are whole.
	Weights   *WeightsView `json:"weights,omitempty"`
	Priority  int          `json:"priority"`
	Autoscale bool         `json:"autoscale"`
	// Min and Max are the autoscale policy's; a fixed model's are its
	// replicas.
	Min    int    `json:"min"`
	Max    int    `json:"max"`
	Target string `json:"target,omitempty"`
	// Wanted is what the model is to have: its replicas, or the count the
	// last pass asked for (the autoscaler's or a pin's, within min and
	// max). Has is the slots with a job after the pass's actions; Serving
	// those serving.
	Wanted  int `json:"wanted"`
	Has     int `json:"has"`
	Serving int `json:"serving"`
	// Explain is the count in one line: "wants 6, has 4: pdu=p3 would
	// draw …"; Reason why it wants what it wants.
	Explain string `json:"explain,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Decision is the autoscaler's (with a pin in force it is what the
	// autoscaler would do without it).
	Decision *ScaleDecision `json:"decision,omitempty"`
	Pin      *Pin           `json:"pin,omitempty"`
	Signals  *ModelSignals  `json:"signals,omitempty"`
	// Added, Stopped and Yielded are the slots the last pass created,
	// stopped to scale down, and stopped for a model of higher priority.
	Added   []string `json:"added,omitempty"`
	Stopped []string `json:"stopped,omitempty"`
	Yielded []string `json:"yielded,omitempty"`
	// LastChange is the last change of the count this controller carried
	// out (in memory: empty after a restart until the next).
	LastChange *ScaleEvent `json:"last_change,omitempty"`
	// Warnings are the catalog's about the model's profiles
	// (facility.Model.Warnings): args no engine contract checked.
	Warnings []string `json:"warnings,omitempty"`
}

// WeightsView is where a model's weights are: the nodes whose model store
// holds them whole (the driver's attributes), by name.
type WeightsView struct {
	Key    string `json:"key"`    // weightsapi's key, as on every node
	Source string `json:"source"` // where they come from
	// Bytes is their size as a node holding them reports it (0: none
	// does yet).
	Bytes int64    `json:"bytes,omitempty"`
	Nodes []string `json:"nodes"`
	// WarmSpares is how many nodes beyond those serving the catalog
	// asks to hold them; Spares the nodes picked, where a scale-up would
	// land ("n7 (held)", "n9 (fetching)").
	WarmSpares int      `json:"warm_spares,omitempty"`
	Spares     []string `json:"spares,omitempty"`
}

package controller

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/llmgw/llmgw/controller/reconcile"
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
	// Waiting says why a roll or move of the replica waits (max_surge,
	// no room with max_unavailable 0).
	Waiting string    `json:"waiting,omitempty"`
	At      time.Time `json:"at"`
}

func explainOf(d facility.Decision, at time.Time) Explain {
	e := Explain{Replica: d.Replica, Placed: d.Placed, Profile: d.Profile, Domain: d.Domain, Watts: d.Watts,
		Rejections: d.Rejections, Reasons: d.Reasons(), At: at}
	for _, s := range d.Shards {
		e.Nodes = append(e.Nodes, s.Node)
	}
	return e
}

// updateView rebuilds the read API's view and the gauges from a pass,
// with the view builder (viewbuild.go), and publishes it.
func (c *Controller) updateView(in reconcile.Input, res reconcile.Result, info scaleInfo) {
	_, fac := c.files.get()
	bv := viewBuilder{
		in: in, res: res, info: info, last: c.scale.lastChanges(),
		fileHolds: fac.Holds, nodes: c.obs.snapshot().nodes, leader: c.lead.isLeading(),
	}.build()
	c.metrics.setView(bv)
	c.views.publish(bv.view, c.inputGen)
}

// viewState is the read API's view as the last pass (or a standby's view
// refresh) built it, and the generations of the API's writes that wait
// for it.
type viewState struct {
	// mu guards every field below. Invariant: viewGen is the write
	// generation read before the snapshot the view was built from, so a
	// write whose generation is at most viewGen shows in the view; changed
	// is closed, and replaced, at every new view.
	mu   sync.RWMutex
	view View
	// next counts the API's writes whose effect the view must show before
	// the write answers (holds, labels): each write, once Nomad shows it,
	// takes the next number (nextGen).
	next, viewGen uint64
	changed       chan struct{}
}

// get returns the view; its lists are shared: read them, never change
// them.
func (s *viewState) get() View {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.view
}

// publish makes v, built from an input read after write generation gen,
// the view, and wakes the waiters.
func (s *viewState) publish(v View, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.view, s.viewGen = v, gen
	close(s.changed)
	s.changed = make(chan struct{})
}

// gen returns the write generation now.
func (s *viewState) gen() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.next
}

// nextGen takes the next write generation.
func (s *viewState) nextGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return s.next
}

// shows reports whether the view was built after write generation
// target, and a channel closed at the next view (waitUntil).
func (s *viewState) shows(target uint64) (bool, <-chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.viewGen >= target, s.changed
}

// saveDecisions stores each decision of the pass that changed since it
// was last stored, so explanations survive restarts without a write per
// replica per pass.
func (c *Controller) saveDecisions(res reconcile.Result) {
	now := c.now()
	for slot, d := range res.Decisions {
		e := explainOf(d, now)
		e.Waiting = res.Waits[slot]
		key := e
		key.At = time.Time{}
		b, _ := json.Marshal(key)
		if c.saved[slot] == string(b) {
			continue
		}
		if err := c.store.SaveDecision(slot, e); err != nil {
			c.log.Warn("save decision", "replica", slot, "error", err)
			continue
		}
		c.saved[slot] = string(b)
	}
}

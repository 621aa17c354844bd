package controller

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
)

func explainOf(d facility.Decision, at time.Time) controllerapi.Explain {
	e := controllerapi.Explain{Replica: d.Replica, Placed: d.Placed, Profile: d.Profile, Domain: d.Domain, Watts: d.Watts,
		Rejections: d.Rejections, Reasons: d.Reasons(), Readiness: d.Readiness(), At: at}
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
	view controllerapi.View
	// next counts the API's writes whose effect the view must show before
	// the write answers (holds, labels): each write, once Nomad shows it,
	// takes the next number (nextGen).
	next, viewGen uint64
	changed       chan struct{}
}

// get returns the view; its lists are shared: read them, never change
// them.
func (s *viewState) get() controllerapi.View {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.view
}

// publish makes v, built from an input read after write generation gen,
// the view, and wakes the waiters.
func (s *viewState) publish(v controllerapi.View, gen uint64) {
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
// replica per pass. It stops when ctx ends (the lease, or the pass's
// deadline).
func (c *Controller) saveDecisions(ctx context.Context, res reconcile.Result) {
	now := c.now()
	for slot, d := range res.Decisions {
		if ctx.Err() != nil {
			return // the rest wait for the next pass (or the next leader)
		}
		e := explainOf(d, now)
		e.Waiting = res.Waits[slot]
		key := e
		key.At = time.Time{}
		b, _ := json.Marshal(key)
		if c.saved[slot] == string(b) {
			continue
		}
		if err := c.store.SaveDecision(ctx, slot, e); err != nil {
			c.log.Warn("save decision", "replica", slot, "error", err)
			continue
		}
		c.saved[slot] = string(b)
	}
}

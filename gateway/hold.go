package gateway

import (
	"container/list"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of HoldConfig.
const (
	DefaultHoldTimeout  = 2 * time.Minute
	DefaultHoldPerModel = 256
	DefaultHoldTotal    = 4096
	DefaultWakeBurst    = 16
)

// HoldConfig is how the gateway holds requests for a model with no serving
// replica that the model list says may be at zero (gatewayapi.ListedModel.Holdable),
// until a replica is ready.
type HoldConfig struct {
	// Timeout is the longest a request is held, from its arrival; past it
	// the answer is 503 with Retry-After. 0: requests are not held (503 at
	// once, as for any model without a healthy replica).
	Timeout time.Duration
	// PerModel and Total bound the requests held for one model and for
	// all together; a request past either is answered 503 at once.
	// DefaultHoldPerModel and DefaultHoldTotal when 0.
	PerModel, Total int
	// Burst is how many held requests each ready replica is sent at once
	// when the model wakes: while requests are held, at most Burst ×
	// replicas of those released are in flight, the next released as one
	// finishes. DefaultWakeBurst when 0.
	Burst int
}

func (c HoldConfig) withDefaults() HoldConfig {
	if c.Timeout < 0 {
		c.Timeout = 0
	}
	if c.PerModel <= 0 {
		c.PerModel = DefaultHoldPerModel
	}
	if c.Total <= 0 {
		c.Total = DefaultHoldTotal
	}
	if c.Burst <= 0 {
		c.Burst = DefaultWakeBurst
	}
	return c
}

// modelState is what the gateway keeps of one known model across routing
// tables: its demand and its hold queue. It lives as long as the model is
// known (in the registry's catalog or the model list).
type modelState struct {
	name string
	// outstanding counts the model's requests in the gateway now, being
	// proxied or held.
	outstanding atomic.Int64
	arrivals    atomic.Uint64
	win         *window
	q           holdQueue
	mm          modelMetrics
}

func newModelState(name string, span time.Duration) *modelState {
	return &modelState{name: name, win: newWindow(span)}
}

// arrive counts a request for the model at t.
func (ms *modelState) arrive(t time.Time) {
	ms.arrivals.Add(1)
	ms.outstanding.Add(1)
	ms.win.arrive(t)
}

// holdQueue is a model's held requests, in arrival order.
type holdQueue struct {
	n        atomic.Int32 // len(waiting), read without the lock
	mu       sync.Mutex
	waiting  list.List // of *waiter
	released int       // released from the queue and not finished yet
}

type waitState uint8

const (
	waitHeld     waitState = iota
	waitReleased           // a replica may take it
	waitGone               // the model left the catalog
	waitLeft               // it left the queue itself: deadline or client gone
)

type waiter struct {
	ready chan struct{} // closed when released or gone
	at    time.Time
	el    *list.Element
	state waitState // under the queue's lock
}

// enqueue adds a request that arrived at at, unless the queue holds max.
func (q *holdQueue) enqueue(at time.Time, maxLen int) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting.Len() >= maxLen {
		return nil
	}
	w := &waiter{ready: make(chan struct{}), at: at}
	w.el = q.waiting.PushBack(w)
	q.n.Store(int32(q.waiting.Len()))
	return w
}

// drain releases the oldest requests while fewer than limit released ones
// are in flight, and returns how many it released.
func (q *holdQueue) drain(limit int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for q.waiting.Len() > 0 && q.released < limit {
		w := q.waiting.Remove(q.waiting.Front()).(*waiter)
		w.state = waitReleased
		close(w.ready)
		q.released++
		n++
	}
	q.n.Store(int32(q.waiting.Len()))
	return n
}

// leave takes w out of the queue, if it is still held, and returns its
// state: waitLeft if it was still held, else what released it.
func (q *holdQueue) leave(w *waiter) waitState {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state == waitHeld {
		q.waiting.Remove(w.el)
		q.n.Store(int32(q.waiting.Len()))
		w.state = waitLeft
	}
	return w.state
}

// inFlight is how many released requests are not finished yet.
func (q *holdQueue) inFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.released
}

// finish records that a released request is done.
func (q *holdQueue) finish() {
	q.mu.Lock()
	q.released--
	q.mu.Unlock()
}

// gone releases every held request as gone (the model left the catalog)
// and returns how many there were.
func (q *holdQueue) gone() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for q.waiting.Len() > 0 {
		w := q.waiting.Remove(q.waiting.Front()).(*waiter)
		w.state = waitGone
		close(w.ready)
		n++
	}
	q.n.Store(0)
	return n
}

// oldest is when the longest-held request arrived; zero when none is.
func (q *holdQueue) oldest() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if f := q.waiting.Front(); f != nil {
		return f.Value.(*waiter).at
	}
	return time.Time{}
}

// Outcomes of a held request (llmgw_gateway_held_total).
const (
	heldReleased  = "released"  // a replica became ready
	heldTimeout   = "timeout"   // past HoldConfig.Timeout: 503
	heldFull      = "full"      // the queue was full: 503
	heldCancelled = "cancelled" // the client went away
	heldGone      = "gone"      // the model left the catalog: 404
)

// holdFor decides what a request for ms's model does when the model has no
// serving replica, or has requests held before it: it is held until a
// replica can take it (p is then the model's pool, and done must be called
// once the request is answered), or it is answered here (ok false).
func (g *Gateway) holdFor(w http.ResponseWriter, r *http.Request, t *table, ms *modelState, start time.Time) (p *pool, done func(), ok bool) {
	lm, listed := t.listed[ms.name]
	if g.hold.Timeout <= 0 || ((!listed || !lm.Holdable()) && ms.q.n.Load() == 0) {
		if p := t.pools[ms.name]; p != nil {
			return p, nil, true
		}
		g.noHealthyReplica(w, ms.name)
		return nil, nil, false
	}
	var wt *waiter
	if g.heldAll.Add(1) <= int64(g.hold.Total) {
		wt = ms.q.enqueue(start, g.hold.PerModel)
	}
	if wt == nil {
		g.heldAll.Add(-1)
		g.m.held.WithLabelValues(ms.name, heldFull).Inc()
		setRetryAfter(w.Header(), g.noReplica)
		writeError(w, http.StatusServiceUnavailable, "service_unavailable", "hold_queue_full", "model",
			fmt.Sprintf("The model `%s` has no serving replica and the gateway holds as many requests as it may; retry later.", ms.name))
		g.m.request(ms.name, http.StatusServiceUnavailable)
		return nil, nil, false
	}
	// A replica may have become ready between the table this request read
	// and its enqueueing: Update drained before it was there.
	g.drainModel(ms)
	timer := time.NewTimer(g.hold.Timeout - g.now().Sub(start))
	defer timer.Stop()
	select {
	case <-wt.ready:
	case <-timer.C:
	case <-r.Context().Done():
	}
	switch ms.q.leave(wt) {
	case waitReleased:
		g.m.held.WithLabelValues(ms.name, heldReleased).Inc()
		g.m.holdSeconds.WithLabelValues(ms.name).Observe(g.now().Sub(start).Seconds())
		done = func() {
			ms.q.finish()
			g.drainModel(ms)
		}
		if p := g.tbl.Load().pools[ms.name]; p != nil {
			return p, done, true
		}
		// Its replica left again between the release and now.
		done()
		g.noHealthyReplica(w, ms.name)
		return nil, nil, false
	case waitGone:
		g.m.held.WithLabelValues(ms.name, heldGone).Inc()
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
			fmt.Sprintf("The model `%s` does not exist.", ms.name))
		g.m.request("", http.StatusNotFound)
		return nil, nil, false
	}
	g.heldAll.Add(-1)
	if r.Context().Err() != nil {
		g.m.held.WithLabelValues(ms.name, heldCancelled).Inc()
		g.m.request(ms.name, statusClientClosed)
		return nil, nil, false
	}
	g.m.held.WithLabelValues(ms.name, heldTimeout).Inc()
	setRetryAfter(w.Header(), g.noReplica)
	writeError(w, http.StatusServiceUnavailable, "service_unavailable", "hold_timeout", "model",
		fmt.Sprintf("The model `%s` had no serving replica for the %s the gateway holds a request; retry later.", ms.name, g.hold.Timeout))
	g.m.request(ms.name, http.StatusServiceUnavailable)
	return nil, nil, false
}

// drainModel releases ms's held requests that the model's replicas can
// take now: at most HoldConfig.Burst per replica in flight.
func (g *Gateway) drainModel(ms *modelState) {
	if ms.q.n.Load() == 0 {
		return
	}
	p := g.tbl.Load().pools[ms.name]
	if p == nil {
		return
	}
	if n := ms.q.drain(g.hold.Burst * len(p.eps)); n > 0 {
		g.heldAll.Add(-int64(n))
	}
}

// noHealthyReplica answers a request for a known model that no replica
// can take: 503 with the configured Retry-After.
func (g *Gateway) noHealthyReplica(w http.ResponseWriter, model string) {
	setRetryAfter(w.Header(), g.noReplica)
	writeError(w, http.StatusServiceUnavailable, "service_unavailable", "no_healthy_replica", "model",
		fmt.Sprintf("The model `%s` has no healthy replica now; retry later.", model))
	g.m.request(model, http.StatusServiceUnavailable)
}

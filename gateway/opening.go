package gateway

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPrefixOpeningWait is Options.PrefixOpeningWait's default: the
// longest a new conversation's first turn waits at the gateway for its
// replica to have room before it is sent anyway.
const DefaultPrefixOpeningWait = 30 * time.Second

// waker lets requests wait for an endpoint to have room: wake closes the
// channel the waiters armed, when a request to it ends or its engine was
// read. With no one waiting, wake costs an atomic load.
type waker struct {
	waiting atomic.Int64
	mu      sync.Mutex
	ch      chan struct{}
}

// arm returns a channel closed at the first wake after arm; disarm must
// follow. A waiter arms before it looks at the load, so that a request
// ending in between is not missed.
func (w *waker) arm() <-chan struct{} {
	w.waiting.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *waker) disarm() { w.waiting.Add(-1) }

func (w *waker) wake() {
	if w.waiting.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// release ends a request to the endpoint: one fewer in flight, and its
// waiters look again.
func (s *epState) release() {
	s.outstanding.Add(-1)
	s.freed.wake()
}

// openingLimit is how many requests endpoint e may hold (this gateway's in
// flight plus the others' its engine last reported) before a new
// conversation's first turn waits for it: Options.PrefixOpeningLimit, or,
// when that is 0, one more than the engine's slots, known once a read found
// requests waiting behind full slots. 0: no limit known.
func (g *Gateway) openingLimit(e *endpoint) int64 {
	if g.openingMax > 0 {
		return g.openingMax
	}
	if s := e.slots.Load(); s > 0 {
		return s + 1
	}
	return 0
}

// reserve counts a request in flight on e unless e holds its opening
// limit already; it reports whether it did.
func (g *Gateway) reserve(e *endpoint) bool {
	limit := g.openingLimit(e)
	for {
		own := e.outstanding.Load()
		if limit > 0 && own+e.others.Load() >= limit {
			return false
		}
		if e.outstanding.CompareAndSwap(own, own+1) {
			return true
		}
	}
}

// pickOpening chooses the replica of a request that opens a conversation
// (prefix routing) and counts it in flight there. While the replica the
// key chooses (pickPrefix) holds its opening limit, the request waits at
// the gateway, up to the gateway's opening wait, and chooses again when a
// request to that replica ends, its engine is read or it leaves. Turns
// that continue conversations are never held back this way, so a busy
// replica finishes the conversations it has before it takes on more, and
// its live histories stay within its prompt cache. Past the wait the
// request is sent to its choice anyway. It returns the pool it chose from
// (the current one after a wait), and a nil endpoint when none can take
// the request or the client went away (then cancelled is set).
func (x *exchange) pickOpening(p *pool, factor float64) (_ *pool, ep *endpoint, probe, cancelled bool) {
	g, model := x.g, x.ms.name
	var waited time.Time // when it began to wait; zero while it has not
	var expire *time.Timer
	defer func() {
		if expire != nil {
			expire.Stop()
		}
	}()
	for {
		ep, probe, x.route = p.pickPrefix(x.key, factor, x.tried, g.now())
		if ep == nil {
			return p, nil, false, false
		}
		var woken <-chan struct{}
		admitted := g.openingLimit(ep) == 0 // no limit known: nothing to wait for
		if admitted {
			ep.outstanding.Add(1)
		} else {
			woken = ep.freed.arm()
			if admitted = g.reserve(ep); admitted {
				ep.freed.disarm()
			}
		}
		if admitted {
			if !waited.IsZero() {
				g.m.openingWaits.WithLabelValues(model, "sent").Inc()
				g.m.openingWait.WithLabelValues(model).Observe(g.now().Sub(waited).Seconds())
			}
			return p, ep, probe, false
		}
		ep.br.abandon(probe)
		if expire == nil {
			waited = g.now()
			expire = time.NewTimer(g.openingWait)
		}
		select {
		case <-woken:
		case <-expire.C:
			ep.freed.disarm()
			g.m.openingWaits.WithLabelValues(model, "expired").Inc()
			g.m.openingWait.WithLabelValues(model).Observe(g.now().Sub(waited).Seconds())
			ep, probe, x.route = p.pickPrefix(x.key, factor, x.tried, g.now())
			if ep != nil {
				ep.outstanding.Add(1)
			}
			return p, ep, probe, false
		case <-x.r.Context().Done():
			ep.freed.disarm()
			g.m.openingWaits.WithLabelValues(model, "cancelled").Inc()
			return p, nil, false, true
		}
		ep.freed.disarm()
		if np := g.tbl.Load().pools[model]; np != nil {
			p = np
		}
	}
}

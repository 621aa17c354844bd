package routing

import (
	"sync"
	"sync/atomic"
	"time"
)

// How a first turn's wait for its replica ended (Prefix.Waited).
const (
	WaitSent      = "sent"
	WaitExpired   = "expired"
	WaitCancelled = "cancelled"
)

// waker lets requests wait for a replica to have room: wake closes the
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

// openingLimit is how many requests r may hold before a first turn waits
// for it: OpeningLimit, or, when that is 0, one more than the engine's
// slots, known once a read found requests waiting behind full slots. 0:
// no limit known.
func (p *Prefix) openingLimit(r *State) int64 {
	if p.OpeningLimit > 0 {
		return p.OpeningLimit
	}
	if s := r.Slots.Load(); s > 0 {
		return s + 1
	}
	return 0
}

// pickOpening chooses the replica of a request that opens a conversation
// (pickPrefix, within LoadFactor) and counts it in flight there. While the
// replica the key chooses holds its opening limit, the request waits, up
// to OpeningWait, and chooses again when a request to that replica ends,
// its engine is read or it leaves: then among the table's replicas now
// (req.Table, left in req.Replicas). Turns that continue conversations are
// never held back this way, so a busy replica finishes the conversations
// it has before it takes on more, and its live histories stay within its
// prompt cache. Past the wait the request is sent to its choice anyway.
// ok is false when none can take the request or the client went away.
func (p *Prefix) pickOpening(req *Request) (c Choice, ok bool) {
	var waited time.Time // when it began to wait; zero while it has not
	var expire *time.Timer
	defer func() {
		if expire != nil {
			expire.Stop()
		}
	}()
	for {
		set := req.Replicas
		c.Index, c.Probe, c.Route = set.pickPrefix(req.Key, p.LoadFactor, req.Tried, p.Now())
		if c.Index < 0 {
			return Choice{}, false
		}
		r := set.Replicas[c.Index].State
		var woken <-chan struct{}
		admitted := p.openingLimit(r) == 0 // no limit known: nothing to wait for
		if admitted {
			r.take()
		} else {
			woken = r.freed.arm()
			if admitted = r.reserve(p.openingLimit(r)); admitted {
				r.freed.disarm()
			}
		}
		if admitted {
			if !waited.IsZero() {
				p.Waited(WaitSent, p.Now().Sub(waited))
			}
			return c, true
		}
		r.gate.Abandon(c.Probe)
		if expire == nil {
			waited = p.Now()
			expire = time.NewTimer(p.OpeningWait)
		}
		select {
		case <-woken:
		case <-expire.C:
			r.freed.disarm()
			p.Waited(WaitExpired, p.Now().Sub(waited))
			c.Index, c.Probe, c.Route = set.pickPrefix(req.Key, p.LoadFactor, req.Tried, p.Now())
			if c.Index < 0 {
				return Choice{}, false
			}
			set.Replicas[c.Index].take()
			return c, true
		case <-req.Ctx.Done():
			r.freed.disarm()
			p.Waited(WaitCancelled, p.Now().Sub(waited))
			return Choice{}, false
		}
		r.freed.disarm()
		req.Replicas = req.Table.Replicas()
	}
}

package routing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// How a first turn's wait for its replica ended (Opening.Waited).
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

// Opening is the prefix policy's wait for the first turn of a
// conversation: it goes to its replica only while that replica holds fewer
// than its opening limit, so that a busy replica finishes the
// conversations it has before it takes on more.
type Opening struct {
	// Limit is how many requests a replica may hold (this gateway's in
	// flight plus the others' its engine last reported) before a first
	// turn waits for it; 0: one more than the engine's slots, known once
	// a read found requests waiting behind full slots.
	Limit int64
	// Wait is the longest a first turn waits; then it is sent anyway.
	Wait time.Duration
	// Now is the clock the breakers and the wait read.
	Now func() time.Time
	// Waited hears how each wait ended (WaitSent, WaitExpired,
	// WaitCancelled) and how long it lasted.
	Waited func(outcome string, waited time.Duration)
}

// limit is how many requests r may hold before a first turn waits for it:
// Limit, or, when that is 0, one more than the engine's slots, known once
// a read found requests waiting behind full slots. 0: no limit known.
func (o *Opening) limit(r *State) int64 {
	if o.Limit > 0 {
		return o.Limit
	}
	if s := r.Slots.Load(); s > 0 {
		return s + 1
	}
	return 0
}

// reserve counts a request in flight on r unless r holds limit already;
// it reports whether it did.
func (r *State) reserve(limit int64) bool {
	for {
		own := r.Outstanding.Load()
		if limit > 0 && own+r.Others.Load() >= limit {
			return false
		}
		if r.Outstanding.CompareAndSwap(own, own+1) {
			return true
		}
	}
}

// Pick chooses the replica of a request that opens a conversation
// (PickPrefix) and counts it in flight there. While the replica the key
// chooses holds its opening limit, the request waits, up to Wait, and
// chooses again when a request to that replica ends, its engine is read or
// it leaves: then among refresh's replicas (the routing table's now; nil:
// the ones it had). Turns that continue conversations are never held back
// this way, so a busy replica finishes the conversations it has before it
// takes on more, and its live histories stay within its prompt cache.
// Past the wait the request is sent to its choice anyway. i indexes the
// set it chose from (refresh's last, when it waited); it is -1 when none
// can take the request or the client went away (ctx ended: then cancelled
// is set).
func (o *Opening) Pick(ctx context.Context, s *Set, refresh func() *Set, k Key, factor float64, tried []*State) (i int, probe bool, route string, cancelled bool) {
	var waited time.Time // when it began to wait; zero while it has not
	var expire *time.Timer
	defer func() {
		if expire != nil {
			expire.Stop()
		}
	}()
	for {
		i, probe, route = s.PickPrefix(k, factor, tried, o.Now())
		if i < 0 {
			return -1, false, route, false
		}
		r := s.Replicas[i].State
		var woken <-chan struct{}
		admitted := o.limit(r) == 0 // no limit known: nothing to wait for
		if admitted {
			r.Outstanding.Add(1)
		} else {
			woken = r.freed.arm()
			if admitted = r.reserve(o.limit(r)); admitted {
				r.freed.disarm()
			}
		}
		if admitted {
			if !waited.IsZero() {
				o.Waited(WaitSent, o.Now().Sub(waited))
			}
			return i, probe, route, false
		}
		r.gate.Abandon(probe)
		if expire == nil {
			waited = o.Now()
			expire = time.NewTimer(o.Wait)
		}
		select {
		case <-woken:
		case <-expire.C:
			r.freed.disarm()
			o.Waited(WaitExpired, o.Now().Sub(waited))
			i, probe, route = s.PickPrefix(k, factor, tried, o.Now())
			if i >= 0 {
				s.Replicas[i].Outstanding.Add(1)
			}
			return i, probe, route, false
		case <-ctx.Done():
			r.freed.disarm()
			o.Waited(WaitCancelled, o.Now().Sub(waited))
			return -1, false, route, true
		}
		r.freed.disarm()
		if ns := refresh(); ns != nil {
			s = ns
		}
	}
}

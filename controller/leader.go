package controller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/store"
)

// leader holds the leader lock (the Nomad Variable llmgw/leader) for its
// controller, keeps its lease, and fences the leader's writes by it
// (writeContext). Its clock is the wall clock (time.Now), never
// Options.Now: the lease is measured against Nomad's own TTL, which runs
// in real time on the servers.
type leader struct {
	nomad    *api.Client
	wo       *api.WriteOptions
	log      *slog.Logger
	metrics  *metrics
	identity string
	ttl      time.Duration

	// mu guards leading and leaseUntil, the leader's state as the rest of
	// the controller reads it. Invariant: leaseUntil is zero whenever
	// leading is false, and no fenced write starts (writeContext) at or
	// past leaseUntil less leaseMargin.
	mu sync.Mutex
	// leading: this controller holds the lock and runs passes.
	leading bool
	// leaseUntil is when this controller's hold on the leader lock may
	// have lapsed: the moment its last successful acquire or renewal was
	// sent, plus the lock's TTL. Zero while it does not lead.
	leaseUntil time.Time
}

// Leadership timing. A renewal is sent every TTL/3 and given TTL/3 to
// answer; one that fails or times out ends the leadership at once. The
// lease (leaseUntil) runs TTL from the moment the last good renewal was
// sent: Nomad keeps the lock at least that long after it applied the
// renewal, and a standby cannot take it before the lock expires and its
// LockDelay passes, so the leader's writes, each with a deadline inside
// the lease, end before another controller can lead.
const (
	leaseMargin  = time.Second      // writes stop this long before the lease ends
	writeTimeout = 30 * time.Second // the longest one job write may take
	callTimeout  = 10 * time.Second // reads that are not blocking queries
)

// run tries to hold the leader lock until ctx ends; while it does, it
// runs lead (the reconcile loop) with a context that ends with the
// leadership.
func (l *leader) run(ctx context.Context, lead func(context.Context)) {
	ttl := l.ttl
	locks, err := l.nomad.Locks(*l.wo, api.Variable{
		Namespace: l.wo.Namespace, Path: store.LeaderPath,
		Items: api.VariableItems{"holder": l.identity},
		Lock:  &api.VariableLock{TTL: ttl.String(), LockDelay: ttl.String()},
	}, api.LocksOptionWithMaxRetries(2))
	if err != nil {
		l.log.Error("leader lock", "error", err)
		return
	}
	for ctx.Err() == nil {
		// Not cancelled with ctx: an acquire cut off in flight may still
		// take the lock in Nomad, and its holder would then not know to
		// release it. It finishes (or times out), and a controller that
		// is stopping releases what it got.
		sent := time.Now()
		actx, acancel := context.WithTimeout(context.Background(), ttl/3)
		_, err := locks.Acquire(lockCall(actx, locks, l.wo))
		acancel()
		if err == nil && ctx.Err() != nil {
			l.releaseLock(locks)
			return
		}
		if err != nil {
			if !errors.Is(err, api.ErrLockConflict) && ctx.Err() == nil {
				l.log.Warn("acquire leader lock", "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(ttl / 2):
			}
			continue
		}
		l.setLease(sent.Add(ttl))
		l.log.Info("leading", "identity", l.identity)
		l.setLeading(true)
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			lead(lctx)
		}()
		renew := time.NewTicker(ttl / 3)
	hold:
		for {
			select {
			case <-ctx.Done():
				break hold
			case <-done:
				break hold
			case <-renew.C:
				sent := time.Now()
				rctx, rcancel := context.WithTimeout(ctx, ttl/3)
				err := locks.Renew(lockCall(rctx, locks, l.wo))
				rcancel()
				if err != nil {
					if ctx.Err() == nil {
						l.log.Warn("lost leadership", "error", err)
						l.metrics.leaseLost.Inc()
					}
					break hold
				}
				l.setLease(sent.Add(ttl))
			}
		}
		l.setLease(time.Time{}) // no new write from here on
		renew.Stop()
		cancel()
		<-done
		l.setLeading(false)
		l.releaseLock(locks)
	}
}

// releaseLock gives the leader lock up, so that a standby need not wait
// for it to lapse.
func (l *leader) releaseLock(locks *api.Locks) {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := locks.Release(lockCall(rctx, locks, l.wo)); err != nil {
		l.log.Warn("release leader lock", "error", err)
	}
}

// lockCall gives the lock's next call ctx as its deadline. nomad/api's
// Locks only checks the context it is handed between retries; the HTTP
// request itself runs under the Locks' own WriteOptions, so a hung
// connection would hold a renewal forever without this.
func lockCall(ctx context.Context, l *api.Locks, wo *api.WriteOptions) context.Context {
	l.WriteOptions = *(*wo).WithContext(ctx)
	return ctx
}

func (l *leader) setLease(t time.Time) {
	l.mu.Lock()
	l.leaseUntil = t
	l.mu.Unlock()
}

func (l *leader) setLeading(v bool) {
	l.mu.Lock()
	l.leading = v
	l.mu.Unlock()
	if v {
		l.metrics.leader.Set(1)
	} else {
		l.metrics.leader.Set(0)
	}
}

// isLeading reports whether this controller holds the leader lock now.
func (l *leader) isLeading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading
}

// ErrNotLeading is a fenced write refused because this controller's lease
// on the leader lock has lapsed (or it never held one).
var ErrNotLeading = errors.New("not leading: the leader lease has lapsed")

// writeContext bounds one job write: writeTimeout, and for the leader's
// own passes the end of its lease less leaseMargin. A fenced write past
// the lease is refused. Both by the wall clock: they are deadlines on
// calls to Nomad.
func (l *leader) writeContext(ctx context.Context, fenced bool) (context.Context, context.CancelFunc, error) {
	deadline := time.Now().Add(writeTimeout)
	if fenced {
		l.mu.Lock()
		until := l.leaseUntil
		l.mu.Unlock()
		end := until.Add(-leaseMargin)
		if until.IsZero() || !time.Now().Before(end) {
			l.metrics.fencedWrites.Inc()
			return nil, nil, ErrNotLeading
		}
		if end.Before(deadline) {
			deadline = end
		}
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	return wctx, cancel, nil
}

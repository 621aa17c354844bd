package gateway

import (
	"sync"
	"sync/atomic"
	"time"
)

// BreakerState is a circuit breaker's state.
type BreakerState int32

// Breaker states, in the order of the llmgw_gateway_breaker_state gauge.
const (
	BreakerClosed   BreakerState = 0 // traffic flows
	BreakerHalfOpen BreakerState = 1 // one probe request is allowed
	BreakerOpen     BreakerState = 2 // no traffic until the open time passes
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "unknown"
}

// BreakerConfig tunes every endpoint's circuit breaker.
type BreakerConfig struct {
	// Failures is how many failures or timeouts in a row open the breaker.
	Failures int
	// OpenFor is how long a breaker stays open before it lets one probe
	// through; each failed probe doubles it, up to MaxOpenFor.
	OpenFor    time.Duration
	MaxOpenFor time.Duration
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.Failures <= 0 {
		c.Failures = DefaultBreakerFailures
	}
	if c.OpenFor <= 0 {
		c.OpenFor = DefaultBreakerOpen
	}
	if c.MaxOpenFor < c.OpenFor {
		c.MaxOpenFor = max(DefaultBreakerMaxOpen, c.OpenFor)
	}
	return c
}

// breaker is one endpoint's circuit breaker (see the package doc). The
// closed state is read without the lock, so the common path takes none.
type breaker struct {
	cfg      BreakerConfig
	onChange func(BreakerState)

	fast    atomic.Int32 // the state, for lock-free reads
	failing atomic.Bool  // failures > 0, for lock-free reads
	mu      sync.Mutex
	// Guarded by mu.
	state    BreakerState
	failures int
	openedAt time.Time
	openFor  time.Duration
	probing  bool
}

func newBreaker(cfg BreakerConfig, onChange func(BreakerState)) *breaker {
	return &breaker{cfg: cfg, onChange: onChange, openFor: cfg.OpenFor}
}

// State is the breaker's state as last changed: an open breaker whose time
// has passed reads open until a request probes it.
func (b *breaker) State() BreakerState { return BreakerState(b.fast.Load()) }

// Available reports, without taking anything, whether Acquire would let a
// request through at now.
func (b *breaker) Available(now time.Time) bool {
	if BreakerState(b.fast.Load()) == BreakerClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true
	case BreakerHalfOpen:
		return !b.probing
	default:
		return !now.Before(b.openedAt.Add(b.openFor))
	}
}

// reopensAt is when an open breaker lets a probe through; the zero time
// when it is not open.
func (b *breaker) reopensAt() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != BreakerOpen {
		return time.Time{}
	}
	return b.openedAt.Add(b.openFor)
}

// Acquire lets a request through, or not. probe reports that this request
// is the half-open probe whose outcome decides the breaker: the caller must
// report it with success, failure or abandon.
func (b *breaker) Acquire(now time.Time) (ok, probe bool) {
	if BreakerState(b.fast.Load()) == BreakerClosed {
		return true, false
	}
	b.mu.Lock()
	switch b.state {
	case BreakerClosed:
		b.mu.Unlock()
		return true, false
	case BreakerOpen:
		if now.Before(b.openedAt.Add(b.openFor)) {
			b.mu.Unlock()
			return false, false
		}
		b.setLocked(BreakerHalfOpen)
	}
	if b.probing {
		b.mu.Unlock()
		return false, false
	}
	b.probing = true
	b.mu.Unlock()
	return true, true
}

// success records a request that the endpoint answered well.
func (b *breaker) success(probe bool) {
	if !probe && BreakerState(b.fast.Load()) == BreakerClosed {
		if !b.failing.Load() {
			return
		}
		b.mu.Lock()
		if b.state == BreakerClosed {
			b.failures = 0
			b.failing.Store(false)
		}
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !probe {
		// A request from before the breaker opened says little about now;
		// only the probe closes it.
		return
	}
	b.probing = false
	b.failures = 0
	b.failing.Store(false)
	b.openFor = b.cfg.OpenFor
	b.setLocked(BreakerClosed)
}

// failure records a failure or timeout at now.
func (b *breaker) failure(probe bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		b.openFor = min(2*b.openFor, b.cfg.MaxOpenFor)
		b.openedAt = now
		b.setLocked(BreakerOpen)
		return
	}
	if b.state != BreakerClosed {
		return
	}
	b.failures++
	b.failing.Store(true)
	if b.failures >= b.cfg.Failures {
		b.openFor = b.cfg.OpenFor
		b.openedAt = now
		b.setLocked(BreakerOpen)
	}
}

// Abandon gives the probe slot back without a verdict: the client went
// away before the endpoint answered.
func (b *breaker) Abandon(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

func (b *breaker) setLocked(s BreakerState) {
	if b.state == s {
		return
	}
	b.state = s
	b.fast.Store(int32(s))
	if b.onChange != nil {
		b.onChange(s)
	}
}

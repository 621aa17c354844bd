// Package routing chooses the replica of a model that each attempt of a
// request goes to. A Policy does: the gateway chooses one per model when
// it builds its routing table (Options.Routing, else the model list's),
// and its retry loop asks that model's policy for each attempt, knowing no
// policy by name.
//
// LeastOutstanding sends a request to the replica with the fewest requests
// in flight per unit of weight (leastoutstanding.go). Prefix sends
// requests that share their prompt's first blocks (the Key, read from the
// body: key.go) to the same replica, whose engine then has them in its
// prompt cache, within a bound on each replica's load, and holds a
// conversation's first turn back while its replica is full (prefix.go, in
// the order a request goes through it). A replica's State is what the
// policies read and count: the requests in flight (this gateway's and, as
// its engine last reported, the others'), its engine's slots, its
// breaker. A policy's Pick counts the request in flight on the replica it
// chose; the caller ends it with State.Release: no one else counts.
//
// Adapters routes the requests for a model's LoRA adapters: each adapter
// to a home set of replicas by rendezvous on its name, growing with its
// requests in flight, within each replica's adapter slots, a cold
// adapter keeping its first replica (adapters.go). It is not a Policy yet:
// the gateway does not route adapters.
//
// The policy named "random" in the prefix benchmark (prefixload) is not
// one of these: that tool sends its requests straight to a replica drawn
// at random, past the gateway.
//
// docs/gateway.md ("Choosing a replica", "Prefix routing") is the
// operator's page.
package routing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/llmgw/llmgw/gatewayapi"
)

// Routes: why a replica was chosen (the gateway's X-Llmgw-Route).
const (
	RouteLeastOutstanding = gatewayapi.RoutingLeastOutstanding
	RoutePrefix           = gatewayapi.RoutingPrefix
	// RouteSpill is the route of a prefix-routed request whose first
	// choice was over the load bound.
	RouteSpill = "spill"
)

// Policy chooses the replica for each attempt of a request among its
// model's replicas.
type Policy interface {
	// Name is the policy's name, as Options.Routing, the model list and
	// the demand say it.
	Name() string
	// Key reads what the policy routes a request by from its path and
	// body: the prefix key, or the zero Key for a policy that reads none.
	Key(path string, body []byte) Key
	// Pick chooses the replica for req's next attempt among
	// req.Replicas, passing over those tried and those whose breaker
	// refuses, and counts the request in flight there (State.Release
	// ends it). ok is false when none can take the request, or when the
	// client went away while it waited.
	Pick(req *Request) (c Choice, ok bool)
}

// Request is one request as a policy sees it, from one attempt to the
// next.
type Request struct {
	// Ctx is the client's: a wait ends when it does.
	Ctx context.Context
	// Key is what the policy read of the request (Policy.Key).
	Key Key
	// Tried are the replicas of the request's earlier attempts, in order:
	// the caller adds each attempt's.
	Tried []*State
	// Replicas are the model's replicas to choose among. A policy that
	// waited chooses among Table's instead, and leaves them here.
	Replicas *Set
	// Table gives the model's replicas in the routing table now.
	Table Table
	// NoWait says the request waits for nothing: a conversation's first
	// turn is not held for its replica's room but chosen as if its wait
	// were over (Gateway.Choose, which asks where a request would go).
	NoWait bool
}

// Table is the routing table as a policy that waited sees it (it may have
// changed meanwhile).
type Table interface {
	// Replicas returns the request's model's replicas in the table now:
	// the ones it had when the model has none now.
	Replicas() *Set
}

// Choice is a policy's choice for one attempt.
type Choice struct {
	// Index is the replica's in Request.Replicas (as Pick left them).
	Index int
	// Probe says the request is the replica's half-open probe: the caller
	// reports its outcome to the breaker.
	Probe bool
	// Route says why the replica was chosen: RouteLeastOutstanding,
	// RoutePrefix or RouteSpill.
	Route string
}

// Gate is a replica's circuit breaker as the policies use it.
type Gate interface {
	// Available reports, without taking anything, whether Acquire would
	// let a request through at now.
	Available(now time.Time) bool
	// Acquire lets a request through, or not; probe says it is the
	// half-open probe, whose outcome the caller reports to the breaker.
	Acquire(now time.Time) (ok, probe bool)
	// Abandon gives a probe's slot back without a verdict.
	Abandon(probe bool)
}

// State is what the gateway knows of one replica beyond discovery: its
// requests in flight, its engine's load and slots, its breaker. It
// outlives routing tables that keep the replica at the same address.
type State struct {
	// Outstanding is this gateway's requests in flight on the replica: a
	// policy's Pick counts one, Release ends it.
	Outstanding atomic.Int64
	// Others are the requests the replica's engine held beyond this
	// gateway's at its last read: other gateways' load.
	Others atomic.Int64
	// Slots is the most requests the replica's engine was seen running at
	// once: its slots, once it has been full at a read.
	Slots atomic.Int64
	gate  Gate
	hash  uint64 // of the address, that the prefix policy ranks it by
	freed waker  // told when a request ends or the engine is read
}

// NewState returns the state of a replica at address, behind gate.
func NewState(address string, gate Gate) *State {
	return &State{gate: gate, hash: xxhash.Sum64String(address) | 1}
}

// take counts a request in flight on the replica: a policy's choice.
func (s *State) take() { s.Outstanding.Add(1) }

// reserve counts a request in flight on the replica unless it holds limit
// already (0: no limit); it reports whether it did.
func (s *State) reserve(limit int64) bool {
	for {
		own := s.Outstanding.Load()
		if limit > 0 && own+s.Others.Load() >= limit {
			return false
		}
		if s.Outstanding.CompareAndSwap(own, own+1) {
			return true
		}
	}
}

// Release ends a request to the replica: one fewer in flight, and its
// waiters look again.
func (s *State) Release() {
	s.Outstanding.Add(-1)
	s.freed.wake()
}

// Wake tells the requests waiting for the replica to look again: its
// engine was read, or it left.
func (s *State) Wake() { s.freed.wake() }

// Waiting is how many requests wait for the replica to have room.
func (s *State) Waiting() int64 { return s.freed.waiting.Load() }

// Armed is the channel the replica's waiters wait on now (nil: none armed
// since the last wake): a test sees a waiter woken and waiting again by it.
func (s *State) Armed() <-chan struct{} {
	s.freed.mu.Lock()
	defer s.freed.mu.Unlock()
	return s.freed.ch
}

// load is the replica's requests in flight: this gateway's and, as of its
// engine's last read, the others'.
func (s *State) load() int64 { return s.Outstanding.Load() + s.Others.Load() }

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

// Replica is one replica in one routing table: its weight there (a
// weight tag may change with the replica staying) and its State.
type Replica struct {
	Weight int
	*State
}

// Set is one model's replicas in one routing table, in the table's order.
type Set struct {
	Replicas []Replica
	next     atomic.Uint32 // rotates where least-outstanding's ties start
}

// usable reports whether a policy may choose r: not tried already, its
// breaker letting a request through at now.
func usable(r Replica, tried []*State, now time.Time) bool {
	for _, t := range tried {
		if t == r.State {
			return false
		}
	}
	return r.gate.Available(now)
}

// Package routing chooses the replica of a model that each attempt of a
// request goes to. Least-outstanding sends it to the replica with the
// fewest requests in flight per unit of weight (leastoutstanding.go); the
// prefix policy sends requests that share their prompt's first blocks to
// the same replica, whose engine then has them in its prompt cache, within
// a bound on each replica's load, and holds a conversation's first turn
// back while its replica is full (prefix.go, opening.go); the prefix key is
// read from the request body (key.go). A replica's State is what the
// policies read and count: the requests in flight (this gateway's and, as
// its engine last reported, the others'), its engine's slots, its breaker.
//
// docs/gateway.md ("Choosing a replica", "Prefix routing") is the
// operator's page.
package routing

import (
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
	// Outstanding is this gateway's requests in flight on the replica.
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

// load is the replica's requests in flight: this gateway's and, as of its
// engine's last read, the others'.
func (s *State) load() int64 { return s.Outstanding.Load() + s.Others.Load() }

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

package routing

import (
	"math"
	"time"
)

// How a first turn's wait for its replica ended (Prefix.Waited).
const (
	WaitSent      = "sent"
	WaitExpired   = "expired"
	WaitCancelled = "cancelled"
)

// Prefix sends requests that share their prompt's first blocks to the
// same replica (the Key's order over the replicas, weighted rendezvous),
// within a bound on each replica's load; a conversation's first turn
// waits while its replica is full (opening.go). A request with no key
// goes by least-outstanding.
type Prefix struct {
	// LoadFactor bounds a replica's load: one whose requests in flight,
	// with the next, would pass this factor times its weight's share of
	// them all is passed over for the next in the key's order (1 or more).
	LoadFactor float64
	// HistoryLoadFactor is the bound of a request that continues a
	// conversation (Key.History), whose history another replica would
	// compute again (at least LoadFactor).
	HistoryLoadFactor float64
	// OpeningLimit is how many requests a replica may hold (this
	// gateway's in flight plus the others' its engine last reported)
	// before a conversation's first turn waits for it; 0: one more than
	// the engine's slots, known once a read found requests waiting behind
	// full slots.
	OpeningLimit int64
	// OpeningWait is the longest a first turn waits; then it is sent
	// anyway. 0: none waits.
	OpeningWait time.Duration
	// Waited hears how each first turn's wait ended (WaitSent,
	// WaitExpired, WaitCancelled) and how long it lasted.
	Waited func(outcome string, waited time.Duration)
	// Now is the clock the breakers and the wait read.
	Now func() time.Time
}

// Name is RoutePrefix.
func (p *Prefix) Name() string { return RoutePrefix }

// Pick chooses by the request's key (pickPrefix), within the history load
// factor for a turn that continues a conversation; a conversation's first
// turn, on its first attempt, may wait for its replica (pickOpening) unless
// req.NoWait; a request with no key goes by least-outstanding (pick). It
// counts the request in flight on its choice.
func (p *Prefix) Pick(req *Request) (Choice, bool) {
	var c Choice
	k, set := req.Key, req.Replicas
	switch {
	case !k.OK:
		c.Index, c.Probe = set.pick(req.Tried, p.Now())
		c.Route = RouteLeastOutstanding
	case k.Opens && len(req.Tried) == 0 && p.OpeningWait > 0 && !req.NoWait:
		return p.pickOpening(req)
	default:
		f := p.LoadFactor
		if k.History {
			f = p.HistoryLoadFactor
		}
		c.Index, c.Probe, c.Route = set.pickPrefix(k, f, req.Tried, p.Now())
	}
	if c.Index < 0 {
		return Choice{}, false
	}
	set.Replicas[c.Index].take()
	return c, true
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

// maxStackReplicas is how many replicas pickPrefix ranks without
// allocating.
const maxStackReplicas = 128

// pickPrefix chooses the replica for the next attempt of a request with
// key k, by consistent hashing with bounded loads: the first in the key's
// order (rank) that can take a request as pick judges it (not tried, its
// breaker letting one through) and is within the load bound: its requests
// in flight, with this one, at most factor times its weight's share of
// all of them, counted by pick's measure (this gateway's plus the others'
// its engine reported) or by this gateway's alone. So at low load every
// request of a shared prefix goes to its first replica, and past the bound
// to the next ones in the same order, which are therefore also the same
// for every spilled request of the prefix. route is
// RoutePrefix for the first such replica in the order, RouteSpill when
// one was passed over for load. When every replica is over the bound
// (factor below 1), pick's choice stands. i is -1 when
// none can take the request.
func (s *Set) pickPrefix(k Key, factor float64, tried []*State, now time.Time) (i int, probe bool, route string) {
	n := len(s.Replicas)
	if n == 0 {
		return -1, false, RoutePrefix
	}
	var rankBuf [maxStackReplicas]float64
	var loadBuf, ownBuf [maxStackReplicas]int64
	ranks, loads, owns := rankBuf[:0], loadBuf[:0], ownBuf[:0]
	if n > maxStackReplicas {
		ranks, loads, owns = make([]float64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	}
	var total, ownTotal, weights int64
	uniform := true
	for _, r := range s.Replicas {
		if r.Weight != s.Replicas[0].Weight {
			uniform = false
			break
		}
	}
	for _, r := range s.Replicas {
		own := r.Outstanding.Load()
		l := own + r.Others.Load()
		loads, owns = append(loads, l), append(owns, own)
		rk := -1.0 // not usable
		if usable(r, tried, now) {
			rk = rank(k, r, uniform)
			total += l
			ownTotal += own
			weights += int64(max(r.Weight, 0))
		}
		ranks = append(ranks, rk)
	}
	// within: replica i is within the bound by all gateways' requests in
	// flight (the others' as of the engine's last read) or by this
	// gateway's own (exact and current). Every gateway routes a key to the
	// same replica, so its own requests are a sample of everyone's; the
	// others' count alone lags by up to a read and spills on load that
	// has gone.
	within := func(i int) bool {
		w := s.Replicas[i].Weight
		if w <= 0 || weights == 0 {
			return false
		}
		share := factor * float64(w) / float64(weights)
		return float64(loads[i]+1) <= math.Ceil(share*float64(total+1)) ||
			float64(owns[i]+1) <= math.Ceil(share*float64(ownTotal+1))
	}
	passed := false
	for {
		// The next in the key's order: the highest rank left.
		best, bestR := -1, -1.0
		for i, r := range ranks {
			if r > bestR {
				best, bestR = i, r
			}
		}
		if best < 0 {
			break
		}
		ranks[best] = -1
		if !within(best) {
			passed = true
			continue
		}
		if ok, probe := s.Replicas[best].gate.Acquire(now); ok {
			if passed {
				return best, probe, RouteSpill
			}
			return best, probe, RoutePrefix
		}
	}
	i, probe = s.pick(tried, now)
	return i, probe, RouteSpill
}

// rank is where replica r stands in key k's order: the weighted
// rendezvous score (highest first), -w/ln(u) with u uniform in (0, 1)
// from the shared key and the replica's address, w the replica's weight.
// Every gateway computes the same for the same key and address; a replica
// joining or leaving changes no other replica's score, so only the keys it
// wins or held move. With uniform set (every replica ranked has the same
// weight) the order is u's, and rank returns u's bits without the
// logarithm.
func rank(k Key, r Replica, uniform bool) float64 {
	w := float64(r.Weight)
	if w <= 0 {
		return 0
	}
	h := mix(k.Shared ^ r.hash)
	if uniform {
		return float64(h>>11) + 1
	}
	return -w / math.Log(unit(h))
}

// unit maps a hash to (0, 1).
func unit(h uint64) float64 { return (float64(h>>11) + 0.5) / (1 << 53) }

// mix is splitmix64's finalizer: it spreads the bits of x.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

package routing

import "time"

// LeastOutstanding sends each request to the replica with the fewest
// requests in flight per unit of weight.
type LeastOutstanding struct {
	// Now is the clock the breakers read.
	Now func() time.Time
}

// Name is RouteLeastOutstanding.
func (*LeastOutstanding) Name() string { return RouteLeastOutstanding }

// Key is the zero Key: least-outstanding reads nothing of the request.
func (*LeastOutstanding) Key(string, []byte) Key { return Key{} }

// Pick chooses by pick and counts the request there.
func (l *LeastOutstanding) Pick(req *Request) (Choice, bool) {
	i, probe := req.Replicas.pick(req.Tried, l.Now())
	if i < 0 {
		return Choice{}, false
	}
	req.Replicas.Replicas[i].take()
	return Choice{Index: i, Probe: probe, Route: RouteLeastOutstanding}, true
}

// pick chooses the replica for the next attempt: among those not in tried
// whose breaker lets a request through at now, the one with the fewest
// requests per unit of weight — this gateway's in flight plus the others'
// its engine last reported (weight 0 only when no other can take it). It
// takes the breaker's permission; probe says the request is its half-open
// probe. i is -1 when none can take the request.
func (s *Set) pick(tried []*State, now time.Time) (i int, probe bool) {
	n := len(s.Replicas)
	if n == 0 {
		return -1, false
	}
	start := 0
	if n > 1 {
		start = int(s.next.Add(1) % uint32(n))
	}
	for range n { // each round takes one replica out of the running
		best := -1
		var bestOut, bestW int64
		for j := range n {
			k := (start + j) % n
			r := s.Replicas[k]
			if !usable(r, tried, now) {
				continue
			}
			out, w := r.load(), int64(r.Weight)
			if best < 0 || better(out, w, bestOut, bestW) {
				best, bestOut, bestW = k, out, w
			}
		}
		if best < 0 {
			return -1, false
		}
		if ok, probe := s.Replicas[best].gate.Acquire(now); ok {
			return best, probe
		}
		// Another request took the probe between Available and Acquire.
		tried = append(tried, s.Replicas[best].State)
	}
	return -1, false
}

// better reports whether out1 requests on weight w1 is a lighter load than
// out2 on w2: out1/w1 < out2/w2, with weight 0 heavier than any other.
func better(out1, w1, out2, w2 int64) bool {
	switch {
	case w1 == 0 && w2 == 0:
		return out1 < out2
	case w1 == 0:
		return false
	case w2 == 0:
		return true
	}
	return (out1+1)*w2 < (out2+1)*w1
}

package gateway

import (
	"math"
	"sync"
	"time"
)

// Reasons a key's request is refused, as the rejections metric labels them.
const (
	reasonUnauthenticated = "unauthenticated"
	reasonModel           = "model_not_allowed"
	reasonRPM             = "requests_per_minute"
	reasonTPM             = "tokens_per_minute"
	reasonConcurrency     = "concurrency"
)

// keyLimiter holds one key's limits in this gateway: a token bucket of
// requests and one of tokens, each holding a minute's worth and refilled
// continuously, and a count of requests in flight. A request reserves
// before it is sent (one request, its estimated tokens, one slot) and
// settles after (the tokens its answer's usage reports replace the
// estimate; the slot is given back). It outlives key file reloads: a key
// that keeps its name keeps its buckets and its requests in flight.
type keyLimiter struct {
	mu       sync.Mutex
	rpm, tpm float64 // per minute in this gateway (the key's limit times share); 0: none
	conc     int64   // 0: none
	reqs     float64 // requests left in the bucket
	toks     float64 // tokens left; below 0 after answers that used more than they reserved
	last     time.Time
	inFlight int64
}

// configure sets the limits from k, times share (this gateway's part of
// them, 0 < share <= 1). Buckets keep what they hold, bounded by the new
// size.
func (l *keyLimiter) configure(k *Key, share float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prevRPM, prevTPM := l.rpm, l.tpm
	l.rpm = float64(k.RequestsPerMinute) * share
	l.tpm = float64(k.TokensPerMinute) * share
	l.conc = 0
	if k.MaxConcurrency > 0 {
		l.conc = max(1, int64(math.Floor(float64(k.MaxConcurrency)*share)))
	}
	// A bucket keeps what it holds, within its new size; a new one (a new
	// key, or a limit that was none) starts full.
	l.reqs = min(l.reqs, l.rpm)
	l.toks = min(l.toks, l.tpm)
	if l.last.IsZero() || prevRPM == 0 {
		l.reqs = l.rpm
	}
	if l.last.IsZero() || prevTPM == 0 {
		l.toks = l.tpm
	}
}

// refill adds what the time since the last call earned.
func (l *keyLimiter) refill(now time.Time) {
	if !l.last.IsZero() {
		dt := now.Sub(l.last).Minutes()
		if dt > 0 {
			l.reqs = min(l.rpm, l.reqs+dt*l.rpm)
			l.toks = min(l.tpm, l.toks+dt*l.tpm)
		}
	}
	if now.After(l.last) {
		l.last = now
	}
}

// reserve takes one request, tokens (at most a whole bucket) and a slot,
// or nothing: then it returns the reason and when to retry. It returns the
// tokens taken.
func (l *keyLimiter) reserve(now time.Time, tokens int64) (taken float64, reason string, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(now)
	if l.conc > 0 && l.inFlight >= l.conc {
		return 0, reasonConcurrency, time.Second
	}
	if l.rpm > 0 && l.reqs < 1 {
		return 0, reasonRPM, minutes((1 - l.reqs) / l.rpm)
	}
	want := 0.0
	if l.tpm > 0 {
		want = min(float64(tokens), l.tpm)
		if l.toks < want {
			return 0, reasonTPM, minutes((want - l.toks) / l.tpm)
		}
	}
	if l.rpm > 0 {
		l.reqs--
	}
	l.toks -= want
	l.inFlight++
	return want, "", 0
}

// settle ends a reservation of taken tokens: used, when known, replaces
// them (the bucket may go below 0: the key waits for it); unknown usage
// keeps the estimate. sent is false when the request never reached a
// replica: its request is given back too.
func (l *keyLimiter) settle(now time.Time, taken float64, used int64, known, sent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(now)
	l.inFlight--
	if l.tpm > 0 && known {
		l.toks = min(l.tpm, l.toks+taken-float64(used))
	}
	if !sent {
		if l.rpm > 0 {
			l.reqs = min(l.rpm, l.reqs+1)
		}
		if l.tpm > 0 && !known {
			l.toks = min(l.tpm, l.toks+taken)
		}
	}
}

func minutes(m float64) time.Duration { return time.Duration(m * float64(time.Minute)) }

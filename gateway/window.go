package gateway

import (
	"math"
	"sync"
	"time"
)

// The demand window is winSlots slots of Options.DemandWindow/winSlots
// each: the slot of now, partly filled, and the winSlots-1 before it.
const winSlots = 10

// TTFT samples are counted in log-spaced buckets: bucket 0 is below
// ttftMin, bucket i ≥ 1 is [ttftMin·2^((i-1)/ttftPerOctave),
// ttftMin·2^(i/ttftPerOctave)), the last one open-ended. 16 a doubling
// keeps a quantile within 4.5 % of the sample's; 30 doublings from 100 µs
// reach past a day.
const (
	ttftMin       = 100 * time.Microsecond
	ttftPerOctave = 16
	ttftBuckets   = 30*ttftPerOctave + 1
)

// window counts a model's arrivals and time-to-first-token samples over
// the last DemandWindow, in slots that are reused as time moves on.
type window struct {
	width time.Duration // of one slot
	mu    sync.Mutex
	slots [winSlots]winSlot
}

type winSlot struct {
	k        int64 // which slot of time this is: UnixNano / width
	arrivals uint64
	ttftN    uint64
	ttft     [ttftBuckets]uint32
}

func newWindow(span time.Duration) *window { return &window{width: slotWidth(span)} }

// slotWidth is the width of a slot of a window over span.
func slotWidth(span time.Duration) time.Duration { return max(span/winSlots, time.Millisecond) }

// windowSpan is the time a window of slots of width covers at now: the
// slots before now's and now's up to now, at most since.
func windowSpan(width time.Duration, now time.Time, since time.Duration) time.Duration {
	k0 := now.UnixNano() / int64(width)
	span := time.Duration(winSlots-1)*width + now.Sub(time.Unix(0, k0*int64(width)))
	return max(min(span, since), 0)
}

func (w *window) slotNo(t time.Time) int64 { return t.UnixNano() / int64(w.width) }

// slotLocked is the slot of time t, emptied if it held an older slot.
func (w *window) slotLocked(t time.Time) *winSlot {
	k := w.slotNo(t)
	s := &w.slots[((k%winSlots)+winSlots)%winSlots]
	if s.k != k {
		*s = winSlot{k: k}
	}
	return s
}

func (w *window) arrive(t time.Time) {
	w.mu.Lock()
	w.slotLocked(t).arrivals++
	w.mu.Unlock()
}

func (w *window) ttft(t time.Time, d time.Duration) {
	b := ttftBucket(d)
	w.mu.Lock()
	s := w.slotLocked(t)
	s.ttft[b]++
	s.ttftN++
	w.mu.Unlock()
}

// windowStats is what a window held at one time.
type windowStats struct {
	span     time.Duration // the time the counts cover
	arrivals uint64
	ttftN    uint64
	ttftP90  time.Duration // when ttftN > 0
}

// stats sums the slots of the window ending at now, over at most since
// (the time the gateway has been counting).
func (w *window) stats(now time.Time, since time.Duration) windowStats {
	k0 := w.slotNo(now)
	var st windowStats
	var hist [ttftBuckets]uint64
	w.mu.Lock()
	for i := range w.slots {
		s := &w.slots[i]
		if s.k > k0 || s.k <= k0-winSlots {
			continue
		}
		st.arrivals += s.arrivals
		st.ttftN += s.ttftN
		if s.ttftN > 0 {
			for b, n := range s.ttft {
				hist[b] += uint64(n)
			}
		}
	}
	w.mu.Unlock()
	st.span = windowSpan(w.width, now, since)
	if st.ttftN > 0 {
		st.ttftP90 = quantile(&hist, st.ttftN, 0.9)
	}
	return st
}

func ttftBucket(d time.Duration) int {
	if d < ttftMin {
		return 0
	}
	i := int(math.Floor(math.Log2(float64(d)/float64(ttftMin))*ttftPerOctave)) + 1
	return min(max(i, 1), ttftBuckets-1)
}

// bucketBounds are bucket i's bounds, in nanoseconds.
func bucketBounds(i int) (lo, hi float64) {
	if i == 0 {
		return 0, float64(ttftMin)
	}
	lo = float64(ttftMin) * math.Exp2(float64(i-1)/ttftPerOctave)
	return lo, lo * math.Exp2(1.0/ttftPerOctave)
}

// quantile is the q-quantile of the n samples counted in hist (the sample
// of rank ⌈q·n⌉), placed within its bucket by its rank there (the k-th
// of c samples at (k-½)/c of the way), linearly in the first bucket,
// geometrically in the others.
func quantile(hist *[ttftBuckets]uint64, n uint64, q float64) time.Duration {
	rank := uint64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var cum uint64
	for i, c := range hist {
		if c == 0 || cum+c < rank {
			cum += c
			continue
		}
		frac := (float64(rank-cum) - 0.5) / float64(c)
		lo, hi := bucketBounds(i)
		if i == 0 {
			return time.Duration(lo + (hi-lo)*frac)
		}
		return time.Duration(lo * math.Pow(hi/lo, frac))
	}
	lo, _ := bucketBounds(ttftBuckets - 1)
	return time.Duration(lo)
}

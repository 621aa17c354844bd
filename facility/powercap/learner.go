package powercap

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/llmgw/llmgw/facility"
)

// The learner's histogram: bin i > 0 holds watts in (γ^(i−1), γ^i], bin 0
// holds [0, 1]. A percentile is read as its bin's upper edge, so it is never
// below the true value and at most 1 % above it.
const (
	gamma = 1.01
	// MaxSampleWatts is the largest sample a learner takes: one shard
	// drawing more than 1 MW is not a reading.
	MaxSampleWatts = 1e6
	// Slots is how many parts a window is kept in: samples leave a whole
	// twelfth of the window at a time.
	Slots = 12
)

var (
	logGamma = math.Log(gamma)
	numBins  = bin(MaxSampleWatts) + 1 // 1390
)

func bin(w float64) int {
	if w <= 1 {
		return 0
	}
	return int(math.Ceil(math.Log(w)/logGamma - 1e-9))
}

func upper(b int) float64 {
	if b == 0 {
		return 1
	}
	return math.Pow(gamma, float64(b))
}

// ErrBadSample: a sample that is not a finite number from 0 to MaxSampleWatts.
var ErrBadSample = errors.New("not a power reading")

// Learner learns per key the percentile of a shard's draw over a sliding
// window. Memory per key is bounded: at most Slots histograms of at most
// 1,390 bins (a 4-byte count each), whatever the sample rate. It is not
// safe for concurrent use.
type Learner struct {
	percentile float64
	slotWidth  time.Duration
	keys       map[facility.LearnedKey]*series
}

type series struct {
	slots [Slots]slot
}

type slot struct {
	index int64            // the slot's number since the epoch; 0: empty
	n     int              // samples in it
	bins  map[int32]uint32 // bin → samples
}

// NewLearner returns a learner for a facility's measured rule.
func NewLearner(m facility.Measured) *Learner {
	return &Learner{percentile: m.Percentile, slotWidth: max(m.Window/Slots, time.Nanosecond), keys: map[facility.LearnedKey]*series{}}
}

func (l *Learner) slotOf(t time.Time) int64 { return t.UnixNano()/int64(l.slotWidth) + 1 }

// Add records that one shard of k drew watts at time at. A sample older
// than the key's window (behind its newest sample by a window or more) is
// dropped; a bad one is refused with ErrBadSample, and nothing changes.
func (l *Learner) Add(k facility.LearnedKey, at time.Time, watts float64) error {
	if math.IsNaN(watts) || watts < 0 || watts > MaxSampleWatts {
		return fmt.Errorf("%s: %v W: %w (want 0 to %g W)", k, watts, ErrBadSample, MaxSampleWatts)
	}
	s := l.keys[k]
	if s == nil {
		s = &series{}
		l.keys[k] = s
	}
	idx := l.slotOf(at)
	newest := int64(0)
	for i := range s.slots {
		newest = max(newest, s.slots[i].index)
	}
	if idx <= newest-Slots {
		return nil // older than the window
	}
	sl := &s.slots[idx%Slots]
	if sl.index != idx {
		*sl = slot{index: idx, bins: map[int32]uint32{}}
	}
	sl.bins[int32(bin(watts))]++
	sl.n++
	return nil
}

// Estimate returns k's percentile over the window ending at now, and how
// many samples it rests on (0, and 0 W, when none).
func (l *Learner) Estimate(k facility.LearnedKey, now time.Time) (watts float64, samples int) {
	s := l.keys[k]
	if s == nil {
		return 0, 0
	}
	cur := l.slotOf(now)
	counts := map[int32]uint32{}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.index == 0 || sl.index > cur || sl.index <= cur-Slots {
			continue
		}
		samples += sl.n
		for b, c := range sl.bins {
			counts[b] += c
		}
	}
	if samples == 0 {
		return 0, 0
	}
	bins := make([]int32, 0, len(counts))
	for b := range counts {
		bins = append(bins, b)
	}
	slices.Sort(bins)
	// Nearest rank: the smallest value with at least p % of samples at or below it.
	rank := int(math.Ceil(l.percentile / 100 * float64(samples)))
	seen := 0
	for _, b := range bins {
		seen += int(counts[b])
		if seen >= rank {
			return upper(int(b)), samples
		}
	}
	return upper(int(bins[len(bins)-1])), samples
}

// Learned returns every key's estimate at now with at least one sample,
// sorted by key: the table measured budgets count (facility.Fleet.Learned).
func (l *Learner) Learned(now time.Time) []facility.Learned {
	var out []facility.Learned
	for k := range l.keys {
		if w, n := l.Estimate(k, now); n > 0 {
			out = append(out, facility.Learned{LearnedKey: k, Watts: w, Samples: n})
		}
	}
	slices.SortFunc(out, func(a, b facility.Learned) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Profile, b.Profile), cmp.Compare(a.GPU, b.GPU))
	})
	return out
}

// Forget drops keys with no sample in the window ending at now, so that
// keys of profiles gone do not stay.
func (l *Learner) Forget(now time.Time) {
	for k := range l.keys {
		if _, n := l.Estimate(k, now); n == 0 {
			delete(l.keys, k)
		}
	}
}

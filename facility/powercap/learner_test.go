package powercap

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/llmgw/llmgw/facility"
)

var (
	t0  = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	key = facility.LearnedKey{Model: "m", Profile: "p", GPU: "NVIDIA H200"}
)

func rule(p float64, window time.Duration) facility.Measured {
	m := facility.DefaultMeasured()
	m.Percentile, m.Window = p, window
	return m
}

// The estimate is the exact nearest-rank percentile, read up to its bin's
// upper edge: never below it, at most 1 % above.
func TestLearnerPercentile(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range []float64{50, 90, 95, 99, 100} {
		l := NewLearner(rule(p, time.Hour))
		var xs []float64
		for i := range 5000 {
			w := 137 + r.Float64()*163 // decode
			if r.IntN(10) == 0 {
				w = 600 + r.Float64()*100 // prefill
			}
			xs = append(xs, w)
			if err := l.Add(key, t0.Add(time.Duration(i)*500*time.Millisecond), w); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(xs)
		exact := xs[int(math.Ceil(p/100*float64(len(xs))))-1]
		got, n := l.Estimate(key, t0.Add(2500*time.Second))
		if n != 5000 {
			t.Errorf("p%v: %d samples, want 5000", p, n)
		}
		if got < exact || got > exact*1.01 {
			t.Errorf("p%v: %v, exact %v: want within [exact, exact × 1.01]", p, got, exact)
		}
	}
}

// Samples leave the window a twelfth at a time; the window slides.
func TestLearnerWindow(t *testing.T) {
	t.Parallel()
	l := NewLearner(rule(100, 12*time.Minute)) // slots of one minute
	for i := range 12 {
		if err := l.Add(key, t0.Add(time.Duration(i)*time.Minute), float64(100*(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		at      time.Duration
		samples int
		most    float64
	}{
		{11 * time.Minute, 12, 1200},
		{12 * time.Minute, 11, 1200}, // the first minute's slot left
		{20 * time.Minute, 3, 1200},
		{23 * time.Minute, 0, 0},
	} {
		w, n := l.Estimate(key, t0.Add(tc.at))
		if n != tc.samples || (n > 0 && (w < tc.most || w > tc.most*1.01)) || (n == 0 && w != 0) {
			t.Errorf("at +%s: %v W over %d samples, want ~%v over %d", tc.at, w, n, tc.most, tc.samples)
		}
	}
	// A sample older than the window behind the newest is dropped.
	if err := l.Add(key, t0.Add(-time.Hour), 5000); err != nil {
		t.Fatal(err)
	}
	if w, _ := l.Estimate(key, t0.Add(11*time.Minute)); w > 1200*1.01 {
		t.Errorf("an old sample counted: %v", w)
	}
	// Learned and Forget.
	if got := l.Learned(t0.Add(11 * time.Minute)); len(got) != 1 || got[0].LearnedKey != key || got[0].Samples != 12 {
		t.Errorf("learned: %+v", got)
	}
	l.Forget(t0.Add(time.Hour))
	if got := l.Learned(t0.Add(11 * time.Minute)); len(got) != 0 {
		t.Errorf("after forget: %+v", got)
	}
}

func TestLearnerBadSamples(t *testing.T) {
	t.Parallel()
	l := NewLearner(facility.DefaultMeasured())
	for _, w := range []float64{math.NaN(), -1, math.Inf(1), MaxSampleWatts * 2} {
		if err := l.Add(key, t0, w); !errors.Is(err, ErrBadSample) {
			t.Errorf("%v: got %v, want ErrBadSample", w, err)
		}
	}
	if _, n := l.Estimate(key, t0); n != 0 {
		t.Errorf("bad samples counted: %d", n)
	}
	// 0 W and the largest are readings.
	for _, w := range []float64{0, MaxSampleWatts} {
		if err := l.Add(key, t0, w); err != nil {
			t.Errorf("%v: %v", w, err)
		}
	}
	if w, n := l.Estimate(key, t0); n != 2 || w < MaxSampleWatts || w > MaxSampleWatts*1.01 {
		t.Errorf("got %v over %d", w, n)
	}
}

// Memory is bounded: however many samples, a key holds at most Slots
// histograms of at most numBins bins.
func TestLearnerBounded(t *testing.T) {
	t.Parallel()
	l := NewLearner(rule(95, time.Hour))
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 200_000 {
		_ = l.Add(key, t0.Add(time.Duration(i)*100*time.Millisecond), r.Float64()*MaxSampleWatts)
	}
	s := l.keys[key]
	for i := range s.slots {
		if len(s.slots[i].bins) > numBins {
			t.Fatalf("slot %d: %d bins, want at most %d", i, len(s.slots[i].bins), numBins)
		}
	}
	if numBins > 1400 {
		t.Errorf("%d bins", numBins)
	}
}

package benchstat

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	for q, want := range map[float64]time.Duration{0: 1, 0.5: 3, 0.9: 5, 1: 5, 0.2: 1, 0.21: 2} {
		if got := Quantile(ds, q); got != want {
			t.Errorf("Quantile(%v, %g) = %v, want %v", ds, q, got, want)
		}
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v, want 0", got)
	}
	if ds[0] != 5 {
		t.Errorf("Quantile sorted its argument: %v", ds)
	}
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		xs          []float64
		med, lo, hi float64
	}{
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 2, 3}, 2.5, 1, 4},
		{nil, 0, 0, 0},
	} {
		med, lo, hi := Spread(c.xs)
		if med != c.med || lo != c.lo || hi != c.hi {
			t.Errorf("Spread(%v) = %g, %g, %g, want %g, %g, %g", c.xs, med, lo, hi, c.med, c.lo, c.hi)
		}
	}
}

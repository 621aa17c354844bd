package gateway

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBreaker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var changes []BreakerState
	b := newBreaker(BreakerConfig{Failures: 3, OpenFor: 10 * time.Second, MaxOpenFor: 25 * time.Second}.withDefaults(),
		func(s BreakerState) { changes = append(changes, s) })

	take := func(now time.Time) (bool, bool) { return b.Acquire(now) }

	// Failures below the threshold, broken by a success, keep it closed.
	b.failure(false, t0)
	b.failure(false, t0)
	b.success(false)
	b.failure(false, t0)
	b.failure(false, t0)
	if got := b.State(); got != BreakerClosed {
		t.Fatalf("after 2 failures: %v", got)
	}
	// The third in a row opens it.
	b.failure(false, t0)
	if got := b.State(); got != BreakerOpen {
		t.Fatalf("after 3 failures: %v", got)
	}
	if ok, _ := take(t0.Add(9 * time.Second)); ok {
		t.Fatal("open breaker let a request through")
	}
	if got := b.reopensAt(); !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("reopensAt: got %v", got)
	}
	// A success from a request sent before it opened does not close it.
	b.success(false)
	if got := b.State(); got != BreakerOpen {
		t.Fatalf("late success: %v", got)
	}

	// After OpenFor, one probe goes through; nothing else meanwhile.
	t1 := t0.Add(10 * time.Second)
	if !b.Available(t1) {
		t.Fatal("not available after OpenFor")
	}
	ok, probe := take(t1)
	if !ok || !probe {
		t.Fatalf("first request after OpenFor: ok %v probe %v", ok, probe)
	}
	if ok, _ := take(t1); ok || b.Available(t1) {
		t.Fatal("second request let through while the probe is out")
	}
	// A failed probe opens it again for twice as long.
	b.failure(true, t1)
	if ok, _ := take(t1.Add(19 * time.Second)); ok {
		t.Fatal("let through before the doubled open time")
	}
	t2 := t1.Add(20 * time.Second)
	ok, probe = take(t2)
	if !ok || !probe {
		t.Fatal("no probe after the doubled open time")
	}
	// An abandoned probe (the client left) frees the slot, no verdict.
	b.Abandon(true)
	if got := b.State(); got != BreakerHalfOpen {
		t.Fatalf("after abandon: %v", got)
	}
	ok, probe = take(t2)
	if !ok || !probe {
		t.Fatal("no new probe after abandon")
	}
	// A successful probe closes it.
	b.success(true)
	if ok, probe := take(t2); !ok || probe {
		t.Fatalf("closed: ok %v probe %v", ok, probe)
	}
	want := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("state changes (-want +got):\n%s", diff)
	}
	// Open time is capped and reset after closing.
	for range 3 {
		b.failure(false, t2)
	}
	if got := b.reopensAt(); !got.Equal(t2.Add(10 * time.Second)) {
		t.Errorf("reopened: reopensAt %v, want OpenFor after", got)
	}
	now := t2
	for range 4 {
		now = b.reopensAt()
		if ok, probe := take(now); !ok || !probe {
			t.Fatal("no probe")
		}
		b.failure(true, now)
	}
	if got := b.reopensAt().Sub(now); got != 25*time.Second {
		t.Errorf("open time after repeated failed probes: %v, want the 25s cap", got)
	}
}

package controller

import (
	"testing"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
)

// The ring keeps the last points in order once it wraps, and since drops
// the older ones.
func TestHistoryRing(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := newRing(4)
	if got := r.since(t0); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := range 6 {
		r.add(controllerapi.HistoryPoint{At: t0.Add(time.Duration(i) * time.Second), Wanted: i})
	}
	var got []int
	for _, p := range r.since(t0) {
		got = append(got, p.Wanted)
	}
	if len(got) != 4 || got[0] != 2 || got[3] != 5 {
		t.Errorf("after 6 adds to a ring of 4: %v, want 2 3 4 5", got)
	}
	if pts := r.since(t0.Add(4 * time.Second)); len(pts) != 2 || pts[0].Wanted != 4 {
		t.Errorf("since t0+4s: %+v", pts)
	}
	if n := historyCap(5 * time.Second); n != 722 {
		t.Errorf("historyCap(5s) = %d, want an hour of 5s rounds and two", n)
	}
	if n := historyCap(time.Hour); n != minHistoryPoints {
		t.Errorf("historyCap(1h) = %d, want the floor %d", n, minHistoryPoints)
	}
	if n := historyCap(100 * time.Millisecond); n != maxHistoryPoints {
		t.Errorf("historyCap(100ms) = %d, want the cap %d", n, maxHistoryPoints)
	}
}

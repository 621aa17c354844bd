package routing

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// With requests held open, picks follow the weights: weight 2 takes twice
// the requests in flight of weight 1; weight 0 only when nothing else can.
func TestPickWeightedLeastOutstanding(t *testing.T) {
	now := time.Unix(0, 0)
	ts := (&testSet{}).add("a", 1).add("b", 2).add("z", 0)
	count := map[string]int{}
	for range 30 {
		i, probe := ts.pick(nil, now)
		if i < 0 || probe {
			t.Fatalf("pick: %d, probe %v", i, probe)
		}
		ts.Replicas[i].Outstanding.Add(1)
		count[ts.name(i)]++
	}
	if diff := cmp.Diff(map[string]int{"a": 10, "b": 20}, count); diff != "" {
		t.Errorf("requests held per replica (-want +got):\n%s", diff)
	}
	// Excluding the ones tried, and open breakers.
	ts.gate("b").open = true
	if i, _ := ts.pick([]*State{ts.state("a")}, now); ts.name(i) != "z" {
		t.Errorf("a tried, b open: got %q, want z", ts.name(i))
	}
	if i, _ := ts.pick([]*State{ts.state("a"), ts.state("z")}, now); i != -1 {
		t.Errorf("everything tried or open: got %q", ts.name(i))
	}
	// A probe taken by another request between Available and Acquire:
	// the next best.
	ts.gate("b").open = false
	ts.gate("b").taken = true
	if i, _ := ts.pick([]*State{ts.state("a")}, now); ts.name(i) != "z" {
		t.Errorf("a tried, b's probe taken: got %q, want z", ts.name(i))
	}
}

// Idle replicas of equal weight share requests by rotation.
func TestPickRotatesTies(t *testing.T) {
	ts := (&testSet{}).add("a", 1).add("b", 1).add("c", 1)
	count := map[string]int{}
	for range 30 {
		i, _ := ts.pick(nil, time.Unix(0, 0))
		count[ts.name(i)]++
	}
	if diff := cmp.Diff(map[string]int{"a": 10, "b": 10, "c": 10}, count); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

package routing

import (
	"fmt"
	"time"
)

// testGate is a replica's breaker in the policies' tests: open or
// closed. taken, when set, makes the next Acquire fail once, as when
// another request took a half-open probe between Available and Acquire.
type testGate struct {
	open, taken bool
	abandoned   int
}

func (g *testGate) Available(time.Time) bool { return !g.open }

func (g *testGate) Acquire(time.Time) (ok, probe bool) {
	if g.taken {
		g.taken = false
		return false, false
	}
	return !g.open, false
}

func (g *testGate) Abandon(bool) { g.abandoned++ }

// testSet is a set of replicas for the tests, each named: its address
// is name+":1".
type testSet struct {
	Set
	names []string
}

func (ts *testSet) add(name string, weight int) *testSet {
	ts.Replicas = append(ts.Replicas, Replica{Weight: weight, State: NewState(name+":1", &testGate{})})
	ts.names = append(ts.names, name)
	return ts
}

// testPool is n replicas of weight 1, r0 to r<n-1>.
func testPool(n int) *testSet {
	ts := &testSet{}
	for i := range n {
		ts.add(fmt.Sprintf("r%d", i), 1)
	}
	return ts
}

// name is replica i's name, "" for -1.
func (ts *testSet) name(i int) string {
	if i < 0 {
		return ""
	}
	return ts.names[i]
}

// state is the named replica's state.
func (ts *testSet) state(name string) *State {
	for i, n := range ts.names {
		if n == name {
			return ts.Replicas[i].State
		}
	}
	panic("no replica " + name)
}

func (ts *testSet) gate(name string) *testGate { return ts.state(name).gate.(*testGate) }

// without is ts less the named replica (the same states: it left).
func (ts *testSet) without(name string) *testSet {
	out := &testSet{}
	for i, n := range ts.names {
		if n != name {
			out.Replicas = append(out.Replicas, ts.Replicas[i])
			out.names = append(out.names, n)
		}
	}
	return out
}

package controller

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// placed reports whether every slot of alphaBeta has exactly one live job.
func (e *env) placedAll(slots ...string) (bool, string) {
	jobs, err := ctlharness.ListLive(e.API)
	if err != nil {
		return false, err.Error()
	}
	by := bySlot(jobs)
	for _, s := range slots {
		if len(by[s]) != 1 {
			return false, fmt.Sprintf("slot %s has jobs %v", s, jobIDs(by[s]))
		}
	}
	return len(by) == len(slots), fmt.Sprintf("slots %v", sortedKeys(by))
}

func (h *ctl) health(t *testing.T) (leader, synced bool) {
	t.Helper()
	var body map[string]any
	if code, raw := ctlharness.Call(t, http.MethodGet, h.URL+"/healthz", "", nil, &body); code != http.StatusOK {
		t.Fatalf("%s healthz: %d %s", h.Name, code, raw)
	}
	return body["leader"] == true, body["synced"] == true
}

var alphaBetaSlots = []string{"alpha-0", "alpha-1", "alpha-2", "beta-0"}

// Two controllers on one Nomad: one leads and places, the other stands by
// and serves the same view.
func TestOneLeaderPlaces(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`, nomadfake.WithAutoRun(true))
	a, b := e.start("ctl-a"), e.start("ctl-b")
	wait.For(t, "every replica placed", func() (bool, string) { return e.placedAll(alphaBetaSlots...) })
	wait.For(t, "both views to show four serving replicas", func() (bool, string) {
		var saw []string
		for _, h := range []*ctl{a, b} {
			n := 0
			for _, r := range h.replicas(t) {
				if r.State == "serving" {
					n++
				}
			}
			saw = append(saw, fmt.Sprintf("%s: %d serving", h.Name, n))
			if n != 4 {
				return false, strings.Join(saw, ", ")
			}
		}
		return true, ""
	})
	leader, standby := a, b
	if e.LockHolder() == b.Name {
		leader, standby = b, a
	}
	if l, _ := leader.health(t); !l {
		t.Errorf("%s holds the lock but says it does not lead", leader.Name)
	}
	if l, _ := standby.health(t); l {
		t.Errorf("%s stands by but says it leads", standby.Name)
	}
	if n := standby.Tap.Writes(); n != 0 {
		t.Errorf("standby %s sent %d job writes, want 0", standby.Name, n)
	}
	if n := leader.Tap.Writes(); n != 4 {
		t.Errorf("leader %s sent %d job writes, want 4", leader.Name, n)
	}
	if diff := cmp.Diff(leader.replicas(t), standby.replicas(t)); diff != "" {
		t.Errorf("standby's replicas differ from the leader's (-leader +standby):\n%s", diff)
	}
}

// When the leader dies without releasing its lock, the lock lapses (2 ×
// TTL after its last renewal, then the lock delay) and the standby takes
// over.
func TestStandbyTakesOverWhenLeaderLockLapses(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`, nomadfake.WithAutoRun(true))
	a := e.start("ctl-a")
	wait.For(t, "ctl-a to lead", func() (bool, string) { return e.LockHolder() == "ctl-a", e.LockHolder() })
	wait.For(t, "every replica placed", func() (bool, string) { return e.placedAll(alphaBetaSlots...) })
	b := e.start("ctl-b")
	wait.For(t, "ctl-b synced", func() (bool, string) { _, s := b.health(t); return s, "" })

	// ctl-a freezes: it can no longer reach Nomad, so it neither renews
	// nor releases the lock.
	a.Tap.SetDown(true)
	e.Clock.Advance(3*testLockTTL + time.Second)
	e.Fake.Tick()
	wait.For(t, "ctl-b to take the lock", func() (bool, string) { return e.LockHolder() == "ctl-b", e.LockHolder() })
	wait.For(t, "ctl-b to say it leads", func() (bool, string) { l, _ := b.health(t); return l, "" })
	wait.For(t, "ctl-a to step down", func() (bool, string) { l, _ := a.health(t); return !l, "" })

	// The new leader acts: one more replica.
	e.WriteCatalog(strings.Replace(alphaBeta, "replicas = 3", "replicas = 4", 1))
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "alpha-3 placed", func() (bool, string) { return e.placedAll(append(alphaBetaSlots, "alpha-3")...) })
	if n := b.Tap.Writes(); n != 1 {
		t.Errorf("ctl-b sent %d job writes, want 1", n)
	}
	if n := a.Tap.Writes(); n != 4 {
		t.Errorf("ctl-a sent %d job writes, want its 4 before it froze", n)
	}
}

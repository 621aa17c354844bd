package controller

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/faultproxy"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// A leader whose connection to Nomad hangs (every byte held by the proxy)
// steps down when its lock renewal times out, instead of waiting on it
// forever; the standby takes the lock once it lapses and acts; the old
// leader, its traffic released, writes no job: its lease ended. Then the
// proxy resets every connection: the old leader's blocking queries fail
// and, once the network is back, resume and catch up with Nomad.
func TestStalledLeaderStepsDownAndIsFenced(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`, nomadfake.WithAutoRun(true))
	px, err := faultproxy.New(e.Fake.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	a := e.startAt("ctl-a", px.URL(), &ctlharness.Tap{})
	wait.For(t, "ctl-a to lead", func() (bool, string) { return e.LockHolder() == "ctl-a", e.LockHolder() })
	wait.For(t, "every replica placed", func() (bool, string) { return e.placedAll(alphaBetaSlots...) })
	b := e.start("ctl-b")
	wait.For(t, "ctl-b synced", func() (bool, string) { _, s := b.health(t); return s, "" })

	px.Set(true, false) // every byte between ctl-a and Nomad is held
	wait.For(t, "ctl-a to step down on its renewal's deadline", func() (bool, string) { l, _ := a.health(t); return !l, "" })
	before := a.Tap.Writes()
	e.Clock.Advance(3*testLockTTL + time.Second)
	e.Fake.Tick()
	wait.For(t, "ctl-b to take the lock", func() (bool, string) { return e.LockHolder() == "ctl-b", e.LockHolder() })
	e.WriteCatalog(strings.Replace(alphaBeta, "replicas = 3", "replicas = 4", 1))
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "alpha-3 placed by ctl-b", func() (bool, string) { return e.placedAll(append(alphaBetaSlots, "alpha-3")...) })

	px.Set(false, false) // ctl-a's held traffic goes through
	wait.For(t, "ctl-a to catch up with Nomad after the stall", func() (bool, string) { return e.caughtUp(a.Controller) })
	if n := a.Tap.Writes() - before; n != 0 {
		t.Errorf("ctl-a sent %d job writes after it stepped down", n)
	}
	if l, _ := a.health(t); l {
		t.Errorf("ctl-a leads again while ctl-b holds the lock")
	}
	for slot, jobs := range bySlot(e.LiveJobs()) {
		if len(jobs) != 1 {
			t.Errorf("slot %s has jobs %v, want one", slot, jobIDs(jobs))
		}
	}

	px.Set(false, true) // reset: every connection of ctl-a dies
	px.Set(false, false)
	e.WriteCatalog(strings.Replace(alphaBeta, "replicas = 3", "replicas = 5", 1))
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "alpha-4 placed by ctl-b", func() (bool, string) { return e.placedAll(append(alphaBetaSlots, "alpha-3", "alpha-4")...) })
	wait.For(t, "ctl-a's watches to resume after the reset", func() (bool, string) { return e.caughtUp(a.Controller) })
}

// A leader cut off from Nomad while it writes its pass's records (the
// decisions, the gateways' model list) steps down on its renewal's
// deadline: the record write in flight ends with the lease, and no other
// starts. (They used to run out their own 10 s timeouts one after the
// other, and the leader went on leading, and writing, long after its
// lease: CI saw 40 s.) Every variable write but the first lock acquire
// hangs here until the caller gives up, so the controller can neither
// renew nor take the lock again.
func TestLeaderCutOffInItsRecordWritesStepsDown(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`, nomadfake.WithAutoRun(true))
	var (
		mu       sync.Mutex
		acquired bool
		records  []string // the record writes the fake received
	)
	release := make(chan struct{})
	leaderPath := "/v1/var/" + store.LeaderPath
	e.Fake.Hook(func(r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasPrefix(r.URL.Path, "/v1/var/"+store.Prefix) {
			return
		}
		mu.Lock()
		if r.URL.Path == leaderPath && r.URL.Query().Has("lock-acquire") && !acquired {
			acquired = true
			mu.Unlock()
			return
		}
		if r.URL.Path != leaderPath {
			records = append(records, r.URL.Path)
		}
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	a := e.start("ctl-a")
	t.Cleanup(func() { close(release) }) // before ctl-a stops (cleanups run last first)
	wait.For(t, "every replica placed by ctl-a", func() (bool, string) { return e.placedAll(alphaBetaSlots...) })
	wait.For(t, "ctl-a to write its first record", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(records) > 0, ""
	})
	wait.For(t, "ctl-a to step down on its renewal's deadline", func() (bool, string) { l, _ := a.health(t); return !l, "" })
	mu.Lock()
	got := slices.Clone(records)
	mu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "/v1/var/"+store.DecisionsPath) {
		t.Errorf("record writes before ctl-a stepped down: %q, want the one decision in flight when its lease ended", got)
	}
}

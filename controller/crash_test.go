package controller

// Crash tests (issue 5): controllers are stopped at random points while
// they place, their writes are lost or refused, and fresh ones take over.
// Throughout, no budgeted domain may go over its limit and no replica may
// have two jobs of one profile; once a last controller has converged,
// every replica has exactly one job, of the catalog's profile.

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// crashFleet is four racks of two PDUs of two nodes, 4 H200s a node.
func crashFleet() []ctlharness.Node {
	var out []ctlharness.Node
	for r := 1; r <= 4; r++ {
		for _, p := range []string{"a", "b"} {
			for n := 1; n <= 2; n++ {
				out = append(out, ctlharness.Node{Name: fmt.Sprintf("n%d%s%d", r, p, n), Rack: fmt.Sprintf("r%d", r), PDU: fmt.Sprintf("p%d%s", r, p), GPUs: 4})
			}
		}
	}
	return out
}

// Budgets bind hard: a PDU (two nodes, 600 W base) takes two 500 W
// shards, a rack (four nodes) four. The fleet has room for 16 shards.
const crashFacility = `
headroom = 0
budget "pdu=p1a" { watts = 1600 }
budget "pdu=p1b" { watts = 1600 }
budget "pdu=p2a" { watts = 1600 }
budget "pdu=p2b" { watts = 1600 }
budget "pdu=p3a" { watts = 1600 }
budget "pdu=p3b" { watts = 1600 }
budget "pdu=p4a" { watts = 1600 }
budget "pdu=p4b" { watts = 1600 }
budget "rack=r1" { watts = 3200 }
budget "rack=r2" { watts = 3200 }
budget "rack=r3" { watts = 3200 }
budget "rack=r4" { watts = 3200 }
`

// crashCatalog: beta (two 500 W shards kept within a rack) first, so that
// it finds a rack with room, then alpha's single 500 W shards.
func crashCatalog(beta, alpha int, alphaArgs string) string {
	return fmt.Sprintf(`
model "beta" {
  source   = "org/beta"
  replicas = %d
  profile "x2n" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 1
    nodes       = 2
    keep_within = "rack"
    watts       = 500
  }
}
model "alpha" {
  source   = "org/alpha"
  replicas = %d
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
    args   = [%s]
  }
}
`, beta, alpha, alphaArgs)
}

// crashPlan is what the fake's hook does to the current round's
// controller, and what it saw.
type crashPlan struct {
	mu      sync.Mutex
	victim  *ctl
	writes  int    // job writes the victim sent this round
	faultAt int    // the write to lose or refuse; 0: none
	fault   string // "lose" (applied, answer lost) or "refuse" (not applied)
	killAt  int    // the write at which the victim is stopped; 0: never
	hard    bool   // cut it off from Nomad first: it cannot release the lock
	killed  bool
	events  []string
	bad     []string // invariant violations, at any point
}

// checkNow checks the invariants that must hold at every point: no
// budgeted domain over its limit, no replica with two jobs of one
// profile.
func checkNow(client *api.Client, defs map[string]ctlharness.Node, fac facility.Facility) []string {
	over, err := budgetCheck(client, defs, fac)
	if err != nil {
		return []string{"budget check: " + err.Error()}
	}
	jobs, err := ctlharness.ListLive(client)
	if err != nil {
		return []string{"list jobs: " + err.Error()}
	}
	seen := map[string]string{}
	for _, j := range jobs {
		k := j.Replica + "/" + j.FP
		if other, dup := seen[k]; dup {
			over = append(over, fmt.Sprintf("replica %s has two jobs of one profile: %s and %s", j.Replica, other, j.ID))
		}
		seen[k] = j.ID
	}
	return over
}

// converged reports whether every slot of the catalog has exactly one
// live job of its model's (only) profile, and nothing else runs.
func converged(client *api.Client, cat facility.Catalog) (bool, string) {
	jobs, err := ctlharness.ListLive(client)
	if err != nil {
		return false, err.Error()
	}
	by := bySlot(jobs)
	want := 0
	for _, m := range cat.Models {
		fp := facility.ProfileFingerprint(m, m.Profiles[0])
		for i := range m.Replicas {
			slot := facility.ReplicaID(m.Name, i)
			want++
			if js := by[slot]; len(js) != 1 || js[0].FP != fp {
				return false, fmt.Sprintf("slot %s has jobs %v", slot, jobIDs(js))
			}
		}
	}
	if len(by) != want {
		return false, fmt.Sprintf("%d slots have jobs, want %d: %v", len(by), want, sortedKeys(by))
	}
	return true, ""
}

func TestCrashDuringPlacement(t *testing.T) {
	const maxRounds = 25 // per phase
	e := newEnv(t, crashFleet(), crashCatalog(1, 12, `"--max-model-len", "8192"`), crashFacility, nomadfake.WithAutoRun(true))
	e.Config.Reconcile.PartialDeadline = 24 * time.Hour
	fac, err := facility.ParseFacility("facility.hcl", []byte(crashFacility))
	if err != nil {
		t.Fatal(err)
	}
	checker := e.Fake.Client(t)
	p := &crashPlan{}
	e.Fake.Hook(func(r *http.Request) {
		if !ctlharness.IsJobWrite(r.Method, r.URL.Path) {
			return
		}
		bad := checkNow(checker, e.Nodes, fac)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.bad = append(p.bad, bad...)
		if p.victim == nil || p.killed {
			return
		}
		p.writes++
		if p.writes == p.faultAt {
			status := []int{nomadfake.DropConnection, http.StatusInternalServerError, http.StatusBadGateway}[p.writes%3]
			if p.fault == "lose" {
				e.Fake.FailNextAfterApply(r.Method, r.URL.Path, 1, status)
			} else {
				e.Fake.FailNext(r.Method, r.URL.Path, 1, status)
			}
			p.events = append(p.events, fmt.Sprintf("%s write %d (%s %s) status %d", p.fault, p.writes, r.Method, r.URL.Path, status))
		}
		if p.writes == p.killAt {
			if p.hard {
				p.victim.Tap.SetDown(true)
			}
			p.killed = true
			p.events = append(p.events, fmt.Sprintf("kill (hard %v) at write %d (%s %s)", p.hard, p.writes, r.Method, r.URL.Path))
			p.victim.Cancel()
		}
	})

	rng := rand.New(rand.NewPCG(5, 2026))
	n := 0
	phase := func(name string) {
		cat := e.Catalog()
		for round := 0; round < maxRounds; round++ {
			if ok, _ := converged(checker, cat); ok {
				break
			}
			n++
			p.mu.Lock()
			p.writes, p.killed, p.hard, p.faultAt, p.fault, p.killAt = 0, false, false, 0, "", 0
			switch rng.IntN(4) {
			case 0:
				p.killAt = 1 + rng.IntN(6)
			case 1:
				p.killAt, p.hard = 1+rng.IntN(6), true
			case 2:
				p.faultAt, p.fault = 1+rng.IntN(6), "lose"
				p.killAt = p.faultAt + 1 + rng.IntN(4)
			case 3:
				p.faultAt, p.fault = 1+rng.IntN(6), "refuse"
				p.killAt = p.faultAt + 1 + rng.IntN(4)
			}
			plan := fmt.Sprintf("%s round %d: fault %q at %d, kill at %d (hard %v)", name, round, p.fault, p.faultAt, p.killAt, p.hard)
			p.mu.Unlock()

			c := e.start(fmt.Sprintf("ctl-%d", n))
			p.mu.Lock()
			p.victim = c
			p.mu.Unlock()
			wait.For(t, plan+": the controller killed or converged", func() (bool, string) {
				select {
				case <-c.Done():
					return true, ""
				default:
				}
				ok, why := converged(checker, cat)
				return ok, why + "; lock held by " + e.LockHolder()
			})
			c.Stop()
			p.mu.Lock()
			p.victim = nil
			hard, killed, events := p.hard && p.killed, p.killed, p.events
			p.events = nil
			p.mu.Unlock()
			t.Logf("%s: killed %v; %s", plan, killed, strings.Join(events, "; "))
			if hard {
				// Its lock lapses: 2 × TTL after its last renewal, then the
				// lock delay.
				e.Clock.Advance(3*testLockTTL + time.Second)
				e.Fake.Tick()
			}
			if h := e.LockHolder(); h != "" {
				t.Fatalf("%s: leader lock still held by %s after the controller stopped", plan, h)
			}
		}
		// A last controller, with nothing in its way, converges.
		c := e.start(fmt.Sprintf("ctl-%d-final", n))
		wait.For(t, name+": convergence", func() (bool, string) { return converged(checker, cat) })
		c.Stop()
	}

	phase("placement")
	e.WriteCatalog(crashCatalog(1, 12, `"--max-model-len", "16384"`))
	phase("roll")
	e.WriteCatalog(crashCatalog(2, 8, `"--max-model-len", "16384"`))
	phase("resize")
	if n < 10 {
		t.Errorf("only %d controllers were stopped on the way: the test exercises too little", n)
	}

	// A restarted controller finds nothing to do.
	e.HoldLock()
	c := e.start("ctl-check")
	if n := e.Pass(c); n != 0 {
		t.Errorf("a controller started after convergence sent %d job writes, want 0", n)
	}
	for _, r := range c.replicas(t) {
		if r.State != "serving" {
			t.Errorf("replica %s is %s, want serving", r.ID, r.State)
		}
	}
	p.mu.Lock()
	bad := append(p.bad, checkNow(checker, e.Nodes, fac)...)
	p.mu.Unlock()
	for _, b := range bad {
		t.Errorf("invariant broken: %s", b)
	}
}

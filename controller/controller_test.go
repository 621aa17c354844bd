package controller

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// alphaBeta: three single-GPU replicas that spread over racks, and one
// two-node replica kept within a rack.
const alphaBeta = `
model "alpha" {
  source   = "org/alpha"
  replicas = 3
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
    args   = ["--max-model-len", "8192"]
  }
}
model "beta" {
  source   = "org/beta"
  replicas = 1
  profile "x2n" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 2
    nodes       = 2
    keep_within = "rack"
    watts       = 900
  }
}
`

func TestPlacesMissingReplicasAndAdoptsOnRestart(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c1 := e.start("ctl-1")
	if n := e.Pass(c1); n != 4 {
		t.Errorf("first pass sent %d job writes, want 4 registrations", n)
	}
	jobs := e.LiveJobs()
	slots := bySlot(jobs)
	if got, want := sortedKeys(slots), []string{"alpha-0", "alpha-1", "alpha-2", "beta-0"}; !slices.Equal(got, want) {
		t.Fatalf("slots with jobs = %v, want %v", got, want)
	}
	cat := e.Catalog()
	racks := map[string]bool{}
	for _, j := range jobs {
		if len(slots[j.Replica]) != 1 {
			t.Errorf("slot %s has jobs %v, want one", j.Replica, jobIDs(slots[j.Replica]))
		}
		checkJobMeta(t, e, cat, j)
		if j.Model == "alpha" {
			racks[e.RackOf(j.Nodes[0])] = true
		}
	}
	if len(racks) != 3 {
		t.Errorf("alpha's 3 replicas are in racks %v, want one in each of 3 racks", sortedKeys(racks))
	}
	beta := slots["beta-0"][0]
	if len(beta.Nodes) != 2 || beta.Nodes[0] == beta.Nodes[1] || e.RackOf(beta.Nodes[0]) != e.RackOf(beta.Nodes[1]) {
		t.Errorf("beta-0 on nodes %v, want two nodes of one rack", beta.Nodes)
	}

	// Nothing serves yet: a second pass waits, and so does one after the
	// engines serve.
	if n := e.Pass(c1); n != 0 {
		t.Errorf("second pass sent %d job writes, want 0", n)
	}
	e.ServeAll()
	if n := e.Pass(c1); n != 0 {
		t.Errorf("pass once serving sent %d job writes, want 0", n)
	}
	before := c1.replicas(t)
	for _, r := range before {
		if r.State != "serving" {
			t.Errorf("replica %s is %s, want serving", r.ID, r.State)
		}
	}

	// A restarted controller adopts everything and creates nothing.
	c1.Stop()
	c2 := e.start("ctl-2")
	if n := e.Pass(c2); n != 0 {
		t.Errorf("restarted controller sent %d job writes on its first pass, want 0", n)
	}
	if diff := cmp.Diff(before, c2.replicas(t)); diff != "" {
		t.Errorf("replicas after restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(jobIDs(jobs), jobIDs(e.LiveJobs())); diff != "" {
		t.Errorf("jobs after restart (-before +after):\n%s", diff)
	}
}

// checkJobMeta checks a job's llmgw meta and its placement constraints
// against the catalog and the node it was pinned to.
func checkJobMeta(t *testing.T, e *env, cat facility.Catalog, j ctlharness.LiveJob) {
	t.Helper()
	var m facility.Model
	for _, x := range cat.Models {
		if x.Name == j.Model {
			m = x
		}
	}
	p := m.Profiles[0]
	fp := facility.ProfileFingerprint(m, p)
	want := map[string]string{
		render.MetaManaged: "true", render.MetaModel: m.Name, render.MetaProfile: p.Name,
		render.MetaProfileFP: fp, render.MetaShards: fmt.Sprint(p.Nodes), render.MetaGPU: p.GPU,
		render.MetaGPUs: fmt.Sprint(p.GPUs),
	}
	for k, v := range want {
		if j.Meta[k] != v {
			t.Errorf("job %s meta %s = %q, want %q", j.ID, k, j.Meta[k], v)
		}
	}
	if got := render.JobID(j.Replica, fp, j.Gen); got != j.ID {
		t.Errorf("job %s: ID from its meta is %s", j.ID, got)
	}
	job, _, err := e.API.Jobs().Info(j.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	rack := e.RackOf(j.Nodes[0])
	if !hasConstraint(job.Constraints, "${meta.llmgw.rack}", "=", rack) {
		t.Errorf("job %s has no constraint pinning rack %s: %v", j.ID, rack, constraintStrings(job.Constraints))
	}
	if !strings.Contains(j.Meta[render.MetaDomain], "rack="+rack) {
		t.Errorf("job %s meta llmgw.domain = %q, want rack=%s in it", j.ID, j.Meta[render.MetaDomain], rack)
	}
	if len(job.TaskGroups) != len(j.Nodes) {
		t.Fatalf("job %s has %d groups for %d nodes", j.ID, len(job.TaskGroups), len(j.Nodes))
	}
	for i, tg := range job.TaskGroups {
		if !hasConstraint(tg.Constraints, "${node.unique.name}", "=", j.Nodes[i]) {
			t.Errorf("job %s group %s is not pinned to %s: %v", j.ID, *tg.Name, j.Nodes[i], constraintStrings(tg.Constraints))
		}
	}
	if p.Nodes > 1 && !hasConstraint(job.Constraints, "", "distinct_hosts", "true") {
		t.Errorf("multi-node job %s has no distinct_hosts: %v", j.ID, constraintStrings(job.Constraints))
	}
}

func hasConstraint(cs []*api.Constraint, l, op, r string) bool {
	for _, c := range cs {
		if c.LTarget == l && c.Operand == op && c.RTarget == r {
			return true
		}
	}
	return false
}

func constraintStrings(cs []*api.Constraint) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.LTarget+" "+c.Operand+" "+c.RTarget)
	}
	return out
}

// A multi-node replica is rebuilt from every shard's allocations, in
// whatever order Nomad lists them, including a failed allocation that was
// replaced.
func TestAdoptsMultiNodeReplicaFromAllShardsInAnyOrder(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c1 := e.start("ctl-1")
	e.Pass(c1)
	e.ServeAll()
	beta := bySlot(e.LiveJobs())["beta-0"][0]

	// Shard 1's allocation fails and Nomad's rescheduler replaces it on
	// the same node (the node its group is pinned to).
	var failed string
	for _, a := range e.Fake.Allocations(beta.ID) {
		if a.TaskGroup == render.GroupName(1) {
			failed = a.ID
		}
	}
	if err := e.Fake.SetAllocStatus(failed, api.AllocClientStatusFailed, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Fake.Reschedule(failed); err != nil {
		t.Fatal(err)
	}
	if n := len(e.Fake.Allocations(beta.ID)); n != 3 {
		t.Fatalf("beta has %d allocations, want 3 (two shards, one replaced)", n)
	}
	e.Settle(c1) // shard 1's replacement is pending: starting, nothing to do
	c1.Stop()

	for _, tc := range []struct {
		name  string
		serve bool
		want  string
	}{
		{"replacement pending", false, "starting"},
		{"replacement running", true, "serving"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.serve {
				e.ServeJob(beta.ID)
			}
			for seed := range uint64(6) {
				c := e.startTap(fmt.Sprintf("ctl-%s-%d", tc.name, seed), &ctlharness.Tap{Shuffle: rand.New(rand.NewPCG(seed, 7))})
				if n := e.Pass(c); n != 0 {
					t.Errorf("seed %d: adopting controller sent %d job writes, want 0", seed, n)
				}
				var got controllerapi.ReplicaView
				for _, r := range c.replicas(t) {
					if r.ID == "beta-0" {
						got = r
					}
				}
				want := controllerapi.ReplicaView{ID: "beta-0", Model: "beta", Profile: "x2n", State: tc.want,
					Domain: got.Domain, Nodes: beta.Nodes, Watts: 1800, JobID: beta.ID, Since: got.Since}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("seed %d: beta-0 (-want +got):\n%s", seed, diff)
				}
				c.Stop()
			}
		})
	}
}

// Two jobs claiming one replica: the one that serves is kept, whatever
// their age; when both serve, the older.
func TestDuplicateReplicaKeepsTheServingJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serving []int // generations whose allocations run and are healthy
		keep    int
	}{
		{"newer serves", []int{1}, 1},
		{"older serves", []int{0}, 0},
		{"both serve", []int{0, 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
			ids := []string{
				e.Seed(e.RenderJob("alpha", "h1", 0, 0, "n1")),
				e.Seed(e.RenderJob("alpha", "h1", 0, 1, "n3")),
			}
			for _, g := range tc.serving {
				e.ServeJob(ids[g])
			}
			e.HoldLock()
			c := e.start("ctl")
			if n := e.Pass(c); n != 1 {
				t.Errorf("pass sent %d job writes, want 1 (the stop)", n)
			}
			if diff := cmp.Diff([]string{ids[tc.keep]}, jobIDs(e.LiveJobs())); diff != "" {
				t.Errorf("live jobs (-want +got):\n%s", diff)
			}
			if n := e.Pass(c); n != 0 {
				t.Errorf("next pass sent %d job writes, want 0", n)
			}
		})
	}
}

const oneAlpha = `
model "alpha" {
  source   = "org/alpha"
  replicas = 1
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
  }
}
`

// A managed job whose meta the controller cannot read is stopped; a job
// under llmgw's prefix that is not managed is left alone.
func TestOrphanStopped(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	good := e.Seed(e.RenderJob("alpha", "h1", 0, 0, "n1"))
	e.ServeJob(good)
	bad := e.RenderJob("alpha", "h1", 0, 1, "n2")
	bad.ID, bad.Name = new("llmgw-mystery"), new("llmgw-mystery")
	delete(bad.Meta, render.MetaReplica)
	e.Seed(bad)
	foreign := e.RenderJob("alpha", "h1", 0, 2, "n3")
	foreign.ID, foreign.Name = new("llmgw-someone-elses"), new("llmgw-someone-elses")
	foreign.Meta = map[string]string{"owner": "ops"}
	e.Seed(foreign)

	e.HoldLock()
	c := e.start("ctl")
	if n := e.Pass(c); n != 1 {
		t.Errorf("pass sent %d job writes, want 1 (stop the orphan)", n)
	}
	stubs, _, err := e.API.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range stubs {
		got[s.ID] = s.Stop
	}
	want := map[string]bool{good: false, "llmgw-mystery": true, "llmgw-someone-elses": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("jobs and whether they are stopped (-want +got):\n%s", diff)
	}
}

// A model that leaves the catalog has its jobs stopped; put back, it is
// placed again.
func TestModelRemovedAndReAdded(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	before := bySlot(e.LiveJobs())

	alphaOnly := strings.Replace(alphaBeta[:strings.Index(alphaBeta, `model "beta"`)], "replicas = 3", "replicas = 1", 1)
	e.WriteCatalog(alphaOnly + `model "gamma" {
  source = "org/gamma"
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    watts  = 400
  }
}
`)
	// Three of the four running replicas would go: refused without the
	// operator's say-so, and nothing is stopped.
	err := c.Reload()
	if !errors.Is(err, ErrTooManyStops) || !strings.Contains(err.Error(), "would stop 3 of the 4 running replicas") {
		t.Fatalf("reload that stops 3 of 4: %v, want ErrTooManyStops naming the count", err)
	}
	if n := e.Pass(c); n != 0 {
		t.Fatalf("pass after the refused reload wrote %d jobs", n)
	}
	if err := c.ReloadConfirmed(); err != nil {
		t.Fatal(err)
	}
	e.Pass(c)
	after := bySlot(e.LiveJobs())
	if got, want := sortedKeys(after), []string{"alpha-0", "gamma-0"}; !slices.Equal(got, want) {
		t.Errorf("slots with live jobs = %v, want %v", got, want)
	}
	if diff := cmp.Diff(jobIDs(before["alpha-0"]), jobIDs(after["alpha-0"])); diff != "" {
		t.Errorf("alpha-0 jobs (-before +after):\n%s", diff)
	}
	e.ServeAll()
	e.Settle(c)

	// beta comes back: placed again, although its stopped job is still in
	// Nomad under the ID a first generation would have.
	e.WriteCatalog(alphaBeta)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.Settle(c)
	back := bySlot(e.LiveJobs())
	if got, want := sortedKeys(back), []string{"alpha-0", "alpha-1", "alpha-2", "beta-0"}; !slices.Equal(got, want) {
		t.Fatalf("slots with live jobs after beta came back = %v, want %v", got, want)
	}
	for _, s := range []string{"alpha-0", "alpha-1", "alpha-2", "beta-0"} {
		if len(back[s]) != 1 {
			t.Errorf("slot %s has jobs %v, want one", s, jobIDs(back[s]))
		}
	}
	if back["beta-0"][0].ID == before["beta-0"][0].ID {
		t.Errorf("beta-0 came back as its old, stopped job %s", before["beta-0"][0].ID)
	}
}

// A changed profile rolls: the new job first, the old one stopped once
// the new one serves.
func TestProfileChangeRollsNewFirst(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	old := e.LiveJobs()
	if len(old) != 1 {
		t.Fatalf("jobs %v, want one", jobIDs(old))
	}

	e.WriteCatalog(strings.Replace(oneAlpha, `watts  = 500`, `watts  = 500
    args   = ["--enable-prefix-caching"]`, 1))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := e.Pass(c); n != 1 {
		t.Errorf("pass after the change sent %d job writes, want 1 (the new job)", n)
	}
	jobs := e.LiveJobs()
	if len(jobs) != 2 {
		t.Fatalf("live jobs during the roll: %v, want the old and the new", jobIDs(jobs))
	}
	var fresh ctlharness.LiveJob
	for _, j := range jobs {
		if j.ID != old[0].ID {
			fresh = j
		}
	}
	cat := e.Catalog()
	if want := facility.ProfileFingerprint(cat.Models[0], cat.Models[0].Profiles[0]); fresh.FP != want || fresh.FP == old[0].FP {
		t.Errorf("new job's fingerprint %s, want %s (old %s)", fresh.FP, want, old[0].FP)
	}
	if n := e.Pass(c); n != 0 {
		t.Errorf("pass while the new job starts sent %d job writes, want 0", n)
	}
	e.ServeJob(fresh.ID)
	if n := e.Pass(c); n != 1 {
		t.Errorf("pass once the new job serves sent %d job writes, want 1 (stop the old)", n)
	}
	if diff := cmp.Diff([]string{fresh.ID}, jobIDs(e.LiveJobs())); diff != "" {
		t.Errorf("live jobs after the roll (-want +got):\n%s", diff)
	}
}

// A drain hold set through the API moves what runs in the domain: new
// copies outside first, the old ones stopped once the new ones serve.
func TestDrainHoldMovesNewCopyFirst(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	beta := bySlot(e.LiveJobs())["beta-0"][0]
	held := e.RackOf(beta.Nodes[0])
	inHeld := map[string]string{} // slot -> job in the held rack
	for _, j := range e.LiveJobs() {
		if e.RackOf(j.Nodes[0]) == held {
			inHeld[j.Replica] = j.ID
		}
	}

	var h controllerapi.Hold
	code, body := ctlharness.Call(t, http.MethodPut, c.URL+"/v1/facility/holds/rack="+held, "", controllerapi.HoldRequest{Reason: "PDU swap", Drain: true}, nil)
	if code != http.StatusOK {
		t.Fatalf("PUT hold: %d %s", code, body)
	}
	e.Pass(c)
	slots := bySlot(e.LiveJobs())
	var fresh []string
	for slot, old := range inHeld {
		if len(slots[slot]) != 2 {
			t.Errorf("slot %s during the move has jobs %v, want the old and a new one", slot, jobIDs(slots[slot]))
			continue
		}
		for _, j := range slots[slot] {
			if j.ID == old {
				continue
			}
			fresh = append(fresh, j.ID)
			for _, n := range j.Nodes {
				if e.RackOf(n) == held {
					t.Errorf("new job %s of %s is on %s in held rack %s", j.ID, slot, n, held)
				}
			}
		}
	}
	if n := e.Pass(c); n != 0 {
		t.Errorf("pass while the new copies start sent %d job writes, want 0", n)
	}
	for _, id := range fresh {
		e.ServeJob(id)
	}
	e.Pass(c)
	for _, j := range e.LiveJobs() {
		for _, n := range j.Nodes {
			if e.RackOf(n) == held {
				t.Errorf("job %s still runs on %s in held rack %s", j.ID, n, held)
			}
		}
	}
	if got := len(e.LiveJobs()); got != 4 {
		t.Errorf("%d live jobs after the move, want 4", got)
	}

	var fv controllerapi.FacilityView
	ctlharness.Call(t, http.MethodGet, c.URL+"/v1/facility", "", nil, &fv)
	for _, d := range fv.Domains {
		if d.Domain == "rack="+held {
			h = *d.Hold
		}
	}
	if diff := cmp.Diff(controllerapi.Hold{Reason: "PDU swap", Drain: true, Source: "runtime"}, h); diff != "" {
		t.Errorf("hold in /v1/facility (-want +got):\n%s", diff)
	}
	if code, body := ctlharness.Call(t, http.MethodDelete, c.URL+"/v1/facility/holds/rack="+held, "", nil, nil); code != http.StatusOK {
		t.Errorf("DELETE hold: %d %s", code, body)
	}
	if code, _ := ctlharness.Call(t, http.MethodDelete, c.URL+"/v1/facility/holds/rack="+held, "", nil, nil); code != http.StatusNotFound {
		t.Errorf("DELETE of a released hold: %d, want 404", code)
	}
}

// A hold without drain moves nothing, and nothing new goes there.
func TestHoldWithoutDrainPlacesNothingThere(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	first := e.LiveJobs()[0]
	held := e.RackOf(first.Nodes[0])
	if code, body := ctlharness.Call(t, http.MethodPut, c.URL+"/v1/facility/holds/rack="+held, "", controllerapi.HoldRequest{Reason: "firmware"}, nil); code != http.StatusOK {
		t.Fatalf("PUT hold: %d %s", code, body)
	}
	if n := e.Pass(c); n != 0 {
		t.Errorf("pass after a hold without drain sent %d job writes, want 0", n)
	}
	e.WriteCatalog(strings.Replace(oneAlpha, "replicas = 1", "replicas = 5", 1))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.ServeAll()
	e.Settle(c)
	jobs := e.LiveJobs()
	if len(jobs) != 5 {
		t.Fatalf("live jobs %v, want 5", jobIDs(jobs))
	}
	for _, j := range jobs {
		if j.ID == first.ID {
			continue
		}
		if r := e.RackOf(j.Nodes[0]); r == held {
			t.Errorf("new job %s placed on %s in held rack %s", j.ID, j.Nodes[0], held)
		}
	}
	if !slices.Contains(jobIDs(jobs), first.ID) {
		t.Errorf("job %s in the held rack was moved or stopped", first.ID)
	}
}

// A PDU budget too small for another replica leaves it unplaced, and the
// replica's explain says why.
func TestBudgetTooSmallExplained(t *testing.T) {
	nodes := []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 4}, {Name: "n2", Rack: "r2", PDU: "p2", GPUs: 4}}
	fac := `
headroom = 0
budget "pdu=p1" { watts = 1000 }
budget "pdu=p2" { watts = 1000 }
`
	e := newEnv(t, nodes, strings.Replace(oneAlpha, "replicas = 1", "replicas = 3", 1), fac)
	e.HoldLock()
	c := e.start("ctl")
	if n := e.Pass(c); n != 2 {
		t.Errorf("pass sent %d job writes, want 2: one replica per PDU", n)
	}
	var d controllerapi.ReplicaDetail
	if code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas/alpha-2", "", nil, &d); code != http.StatusOK {
		t.Fatalf("GET replica: %d %s", code, body)
	}
	if d.State != "unplaced" || d.JobID != "" {
		t.Errorf("alpha-2 is %s (job %q), want unplaced with no job", d.State, d.JobID)
	}
	if d.Explain == nil || d.Explain.Placed {
		t.Fatalf("alpha-2's explain = %+v, want a refused decision", d.Explain)
	}
	want := []string{"over budget: pdu=p1 would draw 1.3 kW of 1.0 kW", "over budget: pdu=p2 would draw 1.3 kW of 1.0 kW"}
	for _, w := range want {
		if !slices.Contains(d.Explain.Reasons, w) {
			t.Errorf("alpha-2's reasons %q lack %q", d.Explain.Reasons, w)
		}
	}
	var kinds []string
	for _, r := range d.Explain.Rejections {
		kinds = append(kinds, r.Kind.String())
	}
	if !slices.Contains(kinds, "over_budget") {
		t.Errorf("alpha-2's rejection kinds %v lack over_budget", kinds)
	}

	// The explanation survives a restart (it is in Nomad Variables), and a
	// standby serves it: ctl-2 never leads here.
	c.Stop()
	c2 := e.start("ctl-2")
	var d2 controllerapi.ReplicaDetail
	wait.For(t, "ctl-2 to serve alpha-2", func() (bool, string) {
		code, body := ctlharness.Call(t, http.MethodGet, c2.URL+"/v1/replicas/alpha-2", "", nil, &d2)
		return code == http.StatusOK, body
	})
	if diff := cmp.Diff(d.Explain, d2.Explain, cmpopts.IgnoreFields(controllerapi.Explain{}, "At")); diff != "" {
		t.Errorf("explain after restart (-before +after):\n%s", diff)
	}
	if n := c2.Tap.Writes(); n != 0 {
		t.Errorf("standby sent %d job writes, want 0", n)
	}
}

// When Nomad cannot place a job the facility placed (its GPUs went
// unhealthy between the decision and the registration), the replica's
// explain carries Nomad's own reasons. The fake does not compute them:
// it reports the metric set here, which is what Nomad 2.0.5 reports for
// this case (e2e TestControllerNomadReasonsInExplain).
func TestNomadReasonsInExplain(t *testing.T) {
	e := newEnv(t, []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 2}}, oneAlpha, `headroom = 0`)
	e.Fake.SetPlacementFailureMetric(api.AllocationMetric{NodesEvaluated: 1, NodesFiltered: 1,
		ConstraintFiltered: map[string]int{"missing devices": 1}})
	e.Fake.Hook(func(r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/jobs" {
			for i := range 2 {
				_ = e.Fake.SetDeviceHealth(e.NodeIDs["n1"], fmt.Sprintf("n1-gpu%d", i), false)
			}
		}
	})
	e.HoldLock()
	c := e.start("ctl")
	if n := e.Pass(c); n != 1 {
		t.Fatalf("pass sent %d job writes, want 1", n)
	}
	if n := e.Pass(c); n != 0 {
		t.Errorf("pass with the job pending sent %d job writes, want 0", n)
	}
	var d controllerapi.ReplicaDetail
	if code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas/alpha-0", "", nil, &d); code != http.StatusOK {
		t.Fatalf("GET replica: %d %s", code, body)
	}
	if d.State != "pending" {
		t.Errorf("alpha-0 is %s, want pending", d.State)
	}
	want := []controllerapi.NomadReason{{Group: "shard-0", NodesEvaluated: 1, NodesFiltered: 1,
		ConstraintFiltered: map[string]int{"missing devices": 1}}}
	if diff := cmp.Diff(want, d.Nomad); diff != "" {
		t.Errorf("Nomad's reasons (-want +got):\n%s", diff)
	}
}

// A pass never acts on a job list that misses the controller's own last
// registration: that job's draw would count nowhere, and another replica
// could be placed into the budget it uses. Here, with blocking queries
// (the stream refused), the job list's blocking query is held back while
// the allocation list moves on; with the event stream, the stream is held
// back.
func TestPassWaitsForItsOwnWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lost   bool // the registration's answer is lost: the controller does not know it happened
		stream bool // followed through the event stream, not blocking queries
	}{
		{"answered", false, false},
		{"answer lost", true, false},
		{"stream answered", false, true},
		{"stream answer lost", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []ctlharness.Node{{Name: "a1", Rack: "r1", PDU: "p1", GPUs: 1}, {Name: "a2", Rack: "r1", PDU: "p1", GPUs: 1}}
			// Two nodes' base draw and one 500 W shard: one replica fits.
			fac := `budget "pdu=p1" { watts = 1100 }`
			zeta := strings.ReplaceAll(oneAlpha, "alpha", "zeta")
			e := newEnv(t, nodes, zeta, fac)
			var mu sync.Mutex
			gate := make(chan struct{})
			held := true
			e.Fake.Hook(func(r *http.Request) {
				mu.Lock()
				h := held
				mu.Unlock()
				if h && r.Method == http.MethodGet && r.URL.Path == "/v1/jobs" && r.URL.Query().Get("index") != "" {
					<-gate
				}
			})
			release := sync.OnceFunc(func() {
				mu.Lock()
				held = false
				mu.Unlock()
				close(gate)
			})
			t.Cleanup(release)
			if !tc.stream {
				e.Fake.FailNext(http.MethodGet, "/v1/event/stream", 1, http.StatusForbidden)
			}
			e.HoldLock()
			c := e.start("ctl")
			wait.For(t, "sync", func() (bool, string) { return e.caughtUp(c.Controller) })
			if tc.stream {
				e.Fake.HoldEventStreams(true)
				t.Cleanup(func() { e.Fake.HoldEventStreams(false) })
			}
			if tc.lost {
				e.Fake.FailNextAfterApply(http.MethodPut, "/v1/jobs", 1, nomadfake.DropConnection)
			}
			err := c.Pass(t.Context())
			if tc.lost == (err == nil) {
				t.Fatalf("first pass: %v", err)
			}
			if got := len(e.LiveJobs()); got != 1 {
				t.Fatalf("%d live jobs after the first pass, want 1", got)
			}
			if !tc.stream {
				// The stream delivers the job and its allocation together.
				wait.For(t, "the allocation list to show zeta-0", func() (bool, string) {
					snap := c.obs.snapshot()
					return len(snap.allocs) == 1, fmt.Sprintf("%d allocations", len(snap.allocs))
				})
			}

			// A model before zeta in the catalog: with zeta-0 unseen, p1
			// would look as if it had room.
			e.WriteCatalog(oneAlpha + zeta)
			if err := c.Reload(); err != nil {
				t.Fatal(err)
			}
			before := c.Tap.Writes()
			if err := c.Pass(t.Context()); !errors.Is(err, ErrBehind) {
				t.Errorf("pass with the job list behind: %v, want ErrBehind", err)
			}
			if n := c.Tap.Writes() - before; n != 0 {
				t.Errorf("pass with the job list behind sent %d job writes, want 0", n)
			}
			release()
			e.Fake.HoldEventStreams(false)
			if n := e.Pass(c); n != 0 {
				t.Errorf("pass once caught up sent %d job writes, want 0 (alpha-0 is over budget)", n)
			}
			fv, err := facility.ParseFacility("f", []byte(fac))
			if err != nil {
				t.Fatal(err)
			}
			over, err := budgetCheck(e.API, e.Nodes, fv)
			if err != nil {
				t.Fatal(err)
			}
			if len(over) > 0 {
				t.Errorf("over budget: %v", over)
			}
			var d controllerapi.ReplicaDetail
			ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas/alpha-0", "", nil, &d)
			if d.State != "unplaced" {
				t.Errorf("alpha-0 is %s, want unplaced", d.State)
			}
		})
	}
}

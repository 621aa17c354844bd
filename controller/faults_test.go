package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
)

// When the node of a replica goes down, Nomad marks its allocation lost
// (desired stop) and cannot place it anywhere else (the group is pinned to
// its node). The next pass places the replica again, off that node, and
// the new allocation serves once its check passes: not after
// partial_deadline. On a real Nomad: e2e TestControllerNodeLossReplacesReplica.
func TestNodeDownReplacesReplicaAtOnce(t *testing.T) {
	e := newEnv(t, []ctlharness.Node{{Name: "a1", Rack: "r1", PDU: "p1", GPUs: 2}, {Name: "a2", Rack: "r1", PDU: "p1", GPUs: 2}}, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	jobs := e.LiveJobs()
	if len(jobs) != 1 {
		t.Fatalf("jobs: %v", jobIDs(jobs))
	}
	first := jobs[0]
	dead := first.Nodes[0]
	if err := e.Fake.SetNodeStatus(e.NodeIDs[dead], api.NodeStatusDown); err != nil {
		t.Fatal(err)
	}
	if n := e.Pass(c); n != 1 {
		t.Fatalf("pass after node %s went down wrote %d jobs, want 1 (the replica placed again)", dead, n)
	}
	jobs = e.LiveJobs()
	if len(jobs) != 1 || jobs[0].ID != first.ID {
		t.Fatalf("jobs after the node loss: %v, want %s re-registered in place", jobIDs(jobs), first.ID)
	}
	if slices.Contains(jobs[0].Nodes, dead) {
		t.Fatalf("replica placed again on the dead node %s: %v", dead, jobs[0].Nodes)
	}
	e.ServeAll()
	e.Settle(c)
	rs := c.replicas(t)
	if len(rs) != 1 || rs[0].State != reconcile.Serving.String() {
		t.Fatalf("replicas after the move: %+v, want alpha-0 serving", rs)
	}
}

// A node that stops answering is "down" for lost_after before its shards
// count as failed: until then the replica is left where it is and the API
// says why; once lost_after passes (the controller wakes itself for it),
// the replica is placed elsewhere. On a real Nomad: e2e
// TestControllerNodeLossWaitsForLostAfter.
func TestNodeDownWaitsForLostAfter(t *testing.T) {
	e := newEnv(t, []ctlharness.Node{{Name: "a1", Rack: "r1", PDU: "p1", GPUs: 2}, {Name: "a2", Rack: "r1", PDU: "p1", GPUs: 2}}, oneAlpha, `headroom = 0`)
	e.Config.Reconcile.LostAfter = time.Minute
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	first := e.LiveJobs()[0]
	dead := first.Nodes[0]
	// The fake's SetNodeStatus("disconnected") changes only the node, as a
	// disconnect block keeps the allocations (as "unknown" in Nomad).
	if err := e.Fake.SetNodeStatus(e.NodeIDs[dead], api.NodeStatusDisconnected); err != nil {
		t.Fatal(err)
	}
	if n := e.Pass(c); n != 0 {
		t.Fatalf("pass within lost_after wrote %d jobs, want 0", n)
	}
	rs := c.replicas(t)
	if len(rs) != 1 || !strings.Contains(rs[0].Note, "failed after lost_after 1m0s") {
		t.Fatalf("replicas within lost_after: %+v, want a note on the disconnected node", rs)
	}
	e.Clock.Advance(time.Minute)
	if n := e.Pass(c); n != 1 {
		t.Fatalf("pass after lost_after wrote %d jobs, want 1", n)
	}
	if j := e.LiveJobs(); len(j) != 1 || slices.Contains(j[0].Nodes, dead) {
		t.Fatalf("jobs after lost_after: %+v", j)
	}
}

// A controller that starts on a catalog that would stop most of what runs
// (a truncated file, the wrong path) holds those stops back and says so in
// /v1/catalog; a confirmed reload lets them through.
func TestStartOnTruncatedCatalogHoldsStops(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl-1")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	c.Stop()
	before := jobIDs(e.LiveJobs())
	e.WriteCatalog(strings.Replace(alphaBeta[:strings.Index(alphaBeta, `model "beta"`)], "replicas = 3", "replicas = 1", 1))
	c2 := e.start("ctl-2")
	if n := e.Pass(c2); n != 0 {
		t.Fatalf("first pass on a truncated catalog wrote %d jobs, want 0", n)
	}
	if got := jobIDs(e.LiveJobs()); !slices.Equal(got, before) {
		t.Fatalf("jobs changed: %v, want %v", got, before)
	}
	var cv controllerapi.CatalogView
	if code, body := ctlharness.Call(t, "GET", c2.URL+"/v1/catalog", "", nil, &cv); code != 200 || !strings.Contains(cv.Error, "would stop 3 of the 4 running replicas") {
		t.Fatalf("catalog view: %d %s", code, body)
	}
	if err := c2.ReloadConfirmed(); err != nil {
		t.Fatal(err)
	}
	if n := e.Pass(c2); n != 3 {
		t.Fatalf("pass after the confirmed reload wrote %d jobs, want 3 stops", n)
	}
}

// A replica whose GPU turns unhealthy is moved off it, new copy first: the
// old job keeps serving until the new one does, then it is stopped. On a
// real Nomad: e2e TestDeviceHealthInRealNomad (the GPU shows unhealthy),
// TestChaos's gpu-fail (the replica moves off it).
func TestUnhealthyGPUMovesReplicaNewCopyFirst(t *testing.T) {
	e := newEnv(t, []ctlharness.Node{{Name: "a1", Rack: "r1", PDU: "p1", GPUs: 2}, {Name: "a2", Rack: "r1", PDU: "p1", GPUs: 2}}, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	old := e.LiveJobs()[0]
	var node, dev string
	for _, a := range e.Fake.Allocations(old.ID) {
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				node, dev = a.NodeID, d.DeviceIDs[0]
			}
		}
	}
	if dev == "" {
		t.Fatal("the replica's allocation holds no device")
	}
	if err := e.Fake.SetDeviceHealth(node, dev, false); err != nil {
		t.Fatal(err)
	}
	if n := e.Pass(c); n != 1 {
		t.Fatalf("pass after the GPU turned unhealthy wrote %d jobs, want 1 (a new copy)", n)
	}
	jobs := e.LiveJobs()
	if len(jobs) != 2 {
		t.Fatalf("jobs while moving: %v, want the old and a new one", jobIDs(jobs))
	}
	rs := c.replicas(t)
	if len(rs) != 1 || rs[0].JobID != old.ID || rs[0].State != reconcile.Serving.String() {
		t.Fatalf("while the new copy starts the old one must serve: %+v", rs)
	}
	e.ServeAll()
	e.Pass(c)
	jobs = e.LiveJobs()
	if len(jobs) != 1 || jobs[0].ID == old.ID {
		t.Fatalf("jobs after the new copy serves: %v, want only the new one", jobIDs(jobs))
	}
	for _, a := range e.Fake.Allocations(jobs[0].ID) {
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				if slices.Contains(d.DeviceIDs, dev) {
					t.Fatalf("new copy placed on the unhealthy GPU %s", dev)
				}
			}
		}
	}
}

// The stored decisions of replicas that left the catalog are deleted.
func TestDecisionsOfRemovedSlotsDeleted(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	stored := func() []string {
		vs, _, err := e.API.Variables().PrefixList(store.DecisionsPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			out = append(out, strings.TrimPrefix(v.Path, store.DecisionsPath))
		}
		slices.Sort(out)
		return out
	}
	if got, want := stored(), []string{"alpha-0", "alpha-1", "alpha-2", "beta-0"}; !slices.Equal(got, want) {
		t.Fatalf("decisions stored: %v, want %v", got, want)
	}
	e.WriteCatalog(strings.Replace(alphaBeta, "replicas = 3", "replicas = 2", 1))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.Pass(c)
	if got, want := stored(), []string{"alpha-0", "alpha-1", "beta-0"}; !slices.Equal(got, want) {
		t.Fatalf("decisions stored after alpha-2 left: %v, want %v", got, want)
	}
}

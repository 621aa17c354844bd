package controller

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// listReads is how many times each list (and node) was read in full.
func listReads(e *env) [4]int64 {
	tr := e.Fake.Traffic()
	return [4]int64{tr["GET /v1/nodes"].Requests, tr["GET /v1/node/:id"].Requests, tr["GET /v1/allocations"].Requests, tr["GET /v1/jobs"].Requests}
}

func waitNodeStatus(t *testing.T, c *ctl, id, status string) {
	t.Helper()
	wait.For(t, "the controller to see node "+id+" "+status, func() (bool, string) {
		n := c.obs.snapshot().nodes[id]
		if n == nil {
			return false, "no node"
		}
		return n.Status == status, n.Status
	})
}

// A change costs the controller the change's events: no list, and no
// node, is read again.
func TestStreamFollowsChangesWithoutRereadingLists(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	if n := e.Pass(c); n != 1 {
		t.Fatalf("first pass sent %d job writes, want 1", n)
	}
	before := listReads(e)
	if err := e.Fake.SetNodeStatus(e.NodeIDs["n5"], api.NodeStatusDown); err != nil {
		t.Fatal(err)
	}
	waitNodeStatus(t, c, e.NodeIDs["n5"], api.NodeStatusDown)
	id := e.Seed(e.RenderJob("alpha", "h1", 7, 0, "n6"))
	wait.For(t, "the controller to see "+id+" and its allocation", func() (bool, string) {
		snap := c.obs.snapshot()
		jobs, allocs := 0, 0
		for _, j := range snap.jobs {
			if j.ID == id {
				jobs++
			}
		}
		for _, a := range snap.allocs {
			if a.JobID == id && a.AllocatedResources != nil {
				allocs++
			}
		}
		return jobs == 1 && allocs == 1, fmt.Sprintf("%d jobs, %d allocations", jobs, allocs)
	})
	if after := listReads(e); after != before {
		t.Errorf("reads of the node list, nodes, allocation list, job list: %v before the changes, %v after; want none", before, after)
	}
}

// When the stream ends, the lists are read again: a change made while no
// subscription was open, whose event has left the servers' buffer, is
// still seen.
func TestStreamEndedReadsTheListsAgain(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`, nomadfake.WithEventBuffer(1))
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	var once sync.Once
	e.Fake.Hook(func(r *http.Request) {
		if r.URL.Path != "/v1/event/stream" {
			return
		}
		once.Do(func() {
			// Between subscriptions: two writes, so that the first one's
			// event is gone from a buffer of one.
			if err := e.Fake.SetNodeStatus(e.NodeIDs["n4"], api.NodeStatusDown); err != nil {
				t.Error(err)
			}
			if err := e.Fake.SetNodeStatus(e.NodeIDs["n5"], api.NodeStatusDown); err != nil {
				t.Error(err)
			}
		})
	})
	before := listReads(e)
	e.Fake.EndEventStreams()
	waitNodeStatus(t, c, e.NodeIDs["n4"], api.NodeStatusDown)
	waitNodeStatus(t, c, e.NodeIDs["n5"], api.NodeStatusDown)
	if after := listReads(e); after[0] <= before[0] || after[2] <= before[2] || after[3] <= before[3] {
		t.Errorf("reads of the node list, nodes, allocation list, job list: %v before the stream ended, %v after; want every list read again", before, after)
	}
}

// A Nomad that refuses the stream (a token without node:read) is
// followed with blocking queries.
func TestStreamRefusedFallsBackToBlockingQueries(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.Fake.FailNext(http.MethodGet, "/v1/event/stream", 1, http.StatusForbidden)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	before := listReads(e)
	if err := e.Fake.SetNodeStatus(e.NodeIDs["n5"], api.NodeStatusDown); err != nil {
		t.Fatal(err)
	}
	waitNodeStatus(t, c, e.NodeIDs["n5"], api.NodeStatusDown)
	if after := listReads(e); after[0] <= before[0] {
		t.Errorf("node list read %d times before the change, %d after; want the blocking query to answer it", before[0], after[0])
	}
	if n := e.Fake.Traffic()["GET /v1/event/stream"].Requests; n != 1 {
		t.Errorf("%d subscriptions; want the one refused", n)
	}
}

// A subscription answered 200 that ends before its first event, again
// and again (as Nomad 2.0.5 ends one whose token lacks the capability),
// counts as refused.
func TestStreamEndingAtOnceFallsBackToBlockingQueries(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	// 200 with a body that is no event: the stream ends at once.
	e.Fake.FailNext(http.MethodGet, "/v1/event/stream", streamFailuresToFallBack, http.StatusOK)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	wait.For(t, "the blocking query on the node list", func() (bool, string) {
		for _, r := range e.Fake.Requests() {
			if r.Path == "/v1/nodes" && r.Query.Get("index") != "" {
				return true, ""
			}
		}
		return false, fmt.Sprint(e.Fake.Traffic()["GET /v1/event/stream"].Requests, " subscriptions")
	})
	if err := e.Fake.SetNodeStatus(e.NodeIDs["n5"], api.NodeStatusDown); err != nil {
		t.Fatal(err)
	}
	waitNodeStatus(t, c, e.NodeIDs["n5"], api.NodeStatusDown)
	if n := e.Fake.Traffic()["GET /v1/event/stream"].Requests; n != streamFailuresToFallBack {
		t.Errorf("%d subscriptions; want %d, then blocking queries", n, streamFailuresToFallBack)
	}
}

func TestServingChecksReReadAtABoundedRate(t *testing.T) {
	for _, tc := range []struct {
		every time.Duration
		n     int
		want  time.Duration
	}{
		{10 * time.Second, 0, 10 * time.Second},
		{10 * time.Second, 250, 10 * time.Second},
		{10 * time.Second, 2500, 100 * time.Second},
		{time.Second, 100, 4 * time.Second},
	} {
		if got := servingEvery(tc.every, tc.n); got != tc.want {
			t.Errorf("servingEvery(%s, %d) = %s, want %s", tc.every, tc.n, got, tc.want)
		}
	}
}

// A list the token may not read yet (403) is read again; it is no sign
// that the stream is refused.
func TestStreamListForbiddenIsRetriedOnTheStream(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.Fake.FailNext(http.MethodGet, "/v1/nodes", streamFailuresToFallBack, http.StatusForbidden)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	if err := e.Fake.SetNodeStatus(e.NodeIDs["n5"], api.NodeStatusDown); err != nil {
		t.Fatal(err)
	}
	waitNodeStatus(t, c, e.NodeIDs["n5"], api.NodeStatusDown)
	for _, r := range e.Fake.Requests() {
		if r.Query.Get("index") != "" && r.Path != "/v1/event/stream" {
			t.Errorf("blocking query %s?%s: the stream should have been kept", r.Path, r.Query.Encode())
		}
	}
	// The test's own reads (CaughtUp) may take some of the failures.
	if n := e.Fake.Traffic()["GET /v1/event/stream"].Requests; n < 2 {
		t.Errorf("%d subscriptions; want a second after the failed list read", n)
	}
}

// A node changed while the stream is followed keeps its GPUs' attributes:
// a replica placed on it after the change is registered with the draw
// derived from the GPU's power_limit (1 GPU × 700 W), as one placed from
// the lists is. (The api package's event decoding dropped every device
// attribute, so the draw came out 0: on a real Nomad, a measured domain
// then counted three running 700 W replicas as nothing.)
func TestStreamNodeEventKeepsDeviceAttributes(t *testing.T) {
	derived := `
model "alpha" {
  source   = "org/alpha"
  replicas = %d
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
  }
}
`
	e := newEnv(t, sixNodes, fmt.Sprintf(derived, 1), `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		if err := e.Fake.SetNodeStatus(e.NodeIDs[n], api.NodeStatusDown); err != nil {
			t.Fatal(err)
		}
		waitNodeStatus(t, c, e.NodeIDs[n], api.NodeStatusDown)
		if err := e.Fake.SetNodeStatus(e.NodeIDs[n], api.NodeStatusReady); err != nil {
			t.Fatal(err)
		}
		waitNodeStatus(t, c, e.NodeIDs[n], api.NodeStatusReady)
	}
	for id, n := range c.obs.snapshot().nodes {
		var got []string
		for _, d := range n.NodeResources.Devices {
			a := d.Attributes["power_limit"]
			if a == nil || a.IntVal == nil || *a.IntVal != 700 {
				got = append(got, fmt.Sprintf("%s: %+v", d.Name, a))
			}
		}
		if len(got) > 0 {
			t.Errorf("node %s from its events: power_limit %v; want 700 W on every GPU", id, got)
		}
	}
	e.WriteCatalog(fmt.Sprintf(derived, 3))
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	e.Settle(c)
	live := e.LiveJobs()
	if len(live) != 3 {
		t.Fatalf("%d live jobs; want 3", len(live))
	}
	for _, j := range live {
		if len(j.Watts) != 1 || j.Watts[0] != 700 {
			t.Errorf("job %s registered with draw %v W; want [700] (1 GPU × its power_limit)", j.ID, j.Watts)
		}
	}
}

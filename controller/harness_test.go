package controller

// The controller's own tests run on the one controller test harness,
// internal/testing/ctlharness (a nomadfake server with a fleet in racks
// and PDUs, the catalog and facility files, one clock shared by the fake
// and the controllers, controllers run in-process through the real
// nomad/api client). This file builds the controller it runs and tells it
// what a controller has seen of Nomad (its snapshot), for Pass to wait
// until a pass would see all of it.

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

const (
	h200      = ctlharness.GPU
	baseWatts = ctlharness.BaseWatts
	// testLockTTL is the controllers' leader lock TTL (Nomad's minimum).
	testLockTTL = ctlharness.LockTTL
)

// env is one test's Nomad (the fake), fleet, files and clock: the
// harness's Env.
type env struct{ *ctlharness.Env }

func newEnv(t testing.TB, nodes []ctlharness.Node, catalog, fac string, opts ...nomadfake.Option) *env {
	t.Helper()
	e := &env{ctlharness.New(t, ctlharness.Spec{Nodes: nodes, Catalog: catalog, Facility: fac, Fake: opts})}
	// Checks of serving allocations are read again every check interval.
	e.Config.Driver.CheckInterval, e.Config.Driver.CheckTimeout = time.Second, time.Second
	// The controller's tests follow Nomad through the event stream, as
	// nomad.event_stream's default does (the harness's configuration is
	// built whole, not loaded); those of the blocking queries make the
	// fake refuse it.
	e.Config.Nomad.EventStream = true
	return e
}

// ctl is a controller under test as the harness runs it.
type ctl struct {
	*Controller
	*ctlharness.Ctl
}

// start builds a controller named name and runs it (Run) until Stop or
// the end of the test; mods change its options. Whether it leads depends
// on the leader lock: see HoldLock for controllers driven by hand with
// Pass.
func (e *env) start(name string, mods ...func(*Options)) *ctl {
	e.T.Helper()
	return e.startTap(name, &ctlharness.Tap{}, mods...)
}

// startTap is start with a tap set up beforehand (to shuffle lists from
// the first read on).
func (e *env) startTap(name string, tp *ctlharness.Tap, mods ...func(*Options)) *ctl {
	e.T.Helper()
	return e.startAt(name, e.Fake.URL(), tp, mods...)
}

// startAt is startTap with the controller reaching Nomad at url (a proxy
// in front of the fake).
func (e *env) startAt(name, url string, tp *ctlharness.Tap, mods ...func(*Options)) *ctl {
	e.T.Helper()
	h := &ctl{}
	h.Ctl = e.StartAt(name, url, tp, func(s ctlharness.Setup) (ctlharness.Controller, error) {
		opts := Options{
			Config: s.Config, Nomad: s.Nomad, Identity: s.Name, Now: s.Now, Logger: s.Logger,
			PowerInterval: time.Hour, LockTTL: testLockTTL,
			// Engines are not scraped unless a test asks (engines_test.go):
			// nomadfake's allocations have loopback addresses nothing serves.
			EngineMetricsInterval: time.Hour,
		}
		for _, m := range mods {
			m(&opts)
		}
		c, err := New(opts)
		if err != nil {
			return nil, err
		}
		h.Controller = c
		return c, nil
	})
	h.Ready = func() (bool, string) { return e.caughtUp(h.Controller) }
	return h
}

// caughtUp reports whether the controller's snapshot holds what Nomad
// holds now: every managed job, allocation and node at its current modify
// index, and the checks of the serving allocations as they are.
func (e *env) caughtUp(c *Controller) (bool, string) {
	return e.CaughtUp(func() ctlharness.Seen {
		snap := c.obs.snapshot()
		s := ctlharness.Seen{Synced: snap.synced(), Index: map[string]uint64{}, Checks: map[string]bool{}}
		for _, j := range snap.jobs {
			s.Index["job/"+j.ID] = j.ModifyIndex
		}
		for _, a := range snap.allocs {
			s.Index["alloc/"+a.ID] = a.ModifyIndex
		}
		for id, n := range snap.nodes {
			s.Index["node/"+id] = n.ModifyIndex
		}
		for id, chk := range snap.checks {
			s.Checks[id] = chk.Passing
		}
		return s
	})
}

// bySlot groups live jobs by replica id.
func bySlot(jobs []ctlharness.LiveJob) map[string][]ctlharness.LiveJob {
	out := map[string][]ctlharness.LiveJob{}
	for _, j := range jobs {
		out[j.Replica] = append(out[j.Replica], j)
	}
	return out
}

func jobIDs(jobs []ctlharness.LiveJob) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// replicas reads GET /v1/replicas.
func (h *ctl) replicas(t testing.TB) []controllerapi.ReplicaView {
	t.Helper()
	var out []controllerapi.ReplicaView
	// 503 until the controller has read Nomad and built its first view.
	wait.For(t, h.Name+" to answer GET /v1/replicas", func() (bool, string) {
		out = nil
		code, body := ctlharness.Call(t, http.MethodGet, h.URL+"/v1/replicas", "", nil, &out)
		switch code {
		case http.StatusOK:
			return true, ""
		case http.StatusServiceUnavailable:
			return false, body
		}
		t.Fatalf("GET /v1/replicas: %d %s", code, body)
		return false, ""
	})
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// budgetCheck computes, from the managed jobs Nomad holds (not stopped,
// not dead) and their meta llmgw.nodes and llmgw.watts, every budgeted
// domain's draw as the facility counts it with nothing measured: per node
// base watts plus its shards, summed over the domain's nodes. It returns a
// description of every domain over its limit.
func budgetCheck(client *api.Client, defs map[string]ctlharness.Node, fac facility.Facility) ([]string, error) {
	stubs, _, err := client.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		return nil, err
	}
	perNode := map[string]float64{}
	for name := range defs {
		perNode[name] = baseWatts
	}
	for _, s := range stubs {
		if s.Stop || s.Status == "dead" {
			continue
		}
		m, err := render.ParseMeta(s.Meta)
		if err != nil {
			continue
		}
		for i, n := range m.Nodes {
			perNode[n] += m.Watts[i]
		}
	}
	var over []string
	for _, b := range fac.Budgets {
		draw := 0.0
		for name, d := range defs {
			in := (b.Domain.Level == facility.LevelRack && d.Rack == b.Domain.Value) ||
				(b.Domain.Level == facility.LevelPDU && d.PDU == b.Domain.Value)
			if in {
				draw += perNode[name]
			}
		}
		if limit := fac.Limit(b); draw > limit+1e-9 {
			over = append(over, fmt.Sprintf("%s draws %.0f W of %.0f W", b.Domain, draw, limit))
		}
	}
	return over, nil
}

// sixNodes is three racks of two nodes, each node on its own PDU, 4 H200s
// each.
var sixNodes = []ctlharness.Node{
	{Name: "n1", Rack: "r1", PDU: "p1a", GPUs: 4}, {Name: "n2", Rack: "r1", PDU: "p1b", GPUs: 4},
	{Name: "n3", Rack: "r2", PDU: "p2a", GPUs: 4}, {Name: "n4", Rack: "r2", PDU: "p2b", GPUs: 4},
	{Name: "n5", Rack: "r3", PDU: "p3a", GPUs: 4}, {Name: "n6", Rack: "r3", PDU: "p3b", GPUs: 4},
}

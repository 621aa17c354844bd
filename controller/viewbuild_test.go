package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
)

// The view builder reads only its fields: from them alone it makes each
// node's status, location and holds, each held domain with its source
// (the facility file or a run-time hold), and no budget gauge for a
// domain that has a hold and no budget.
func TestViewBuilderNodesAndHolds(t *testing.T) {
	rack, err := facility.ParseDomain("rack=r1")
	if err != nil {
		t.Fatal(err)
	}
	pdu, err := facility.ParseDomain("pdu=p1")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := reconcile.Input{
		Now: at,
		Fleet: facility.Fleet{Nodes: []facility.Node{{
			Name: "n1", Location: facility.Location{Rack: "r1", PDU: "p1"}, BaseWatts: 100, MeasuredWatts: 150,
			GPUs: []facility.GPU{{Model: h200, Count: 8, Free: 6}},
		}}},
		Facility: facility.Facility{Holds: []facility.Hold{
			{Domain: rack, Reason: "swap", Drain: true},
			{Domain: pdu, Reason: "breaker test"},
		}},
	}
	bv := viewBuilder{
		in:        in,
		fileHolds: []facility.Hold{{Domain: rack}},
		nodes: map[string]*api.Node{"id-1": {
			Name: "n1", Status: api.NodeStatusReady, SchedulingEligibility: api.NodeSchedulingIneligible,
		}},
		leader: true,
	}.build()

	v := bv.view
	if !v.At.Equal(at) || !v.Leader {
		t.Errorf("view at %v leader %v, want %v and true", v.At, v.Leader, at)
	}
	if len(v.Nodes) != 1 {
		t.Fatalf("nodes %+v, want n1", v.Nodes)
	}
	n := v.Nodes[0]
	if n.Status != "ineligible" || n.Schedulable || n.GPUsFree != 6 || n.GPUsTotal != 8 || n.Committed != 150 ||
		!slices.Equal(n.Held, []string{"rack=r1", "pdu=p1"}) || n.Location["rack"] != "r1" || n.Location["pdu"] != "p1" {
		t.Errorf("node %+v", n)
	}
	if len(v.Domains) != 2 {
		t.Fatalf("domains %+v, want pdu=p1 and rack=r1", v.Domains)
	}
	for _, d := range v.Domains {
		want := map[string]controllerapi.Hold{
			"pdu=p1":  {Reason: "breaker test", Source: "runtime"},
			"rack=r1": {Reason: "swap", Drain: true, Source: "facility"},
		}[d.Domain]
		if d.Hold == nil || *d.Hold != want || d.Nodes != 1 || d.Measured != 150 || d.CapWatts != 0 {
			t.Errorf("domain %s: %+v (hold %+v), want hold %+v on 1 node measuring 150 W", d.Domain, d, d.Hold, want)
		}
	}
	if v.Domains[0].Domain != "pdu=p1" {
		t.Errorf("domains not sorted: %s first", v.Domains[0].Domain)
	}
	if len(bv.budgets) != 0 || len(bv.replicas) != 0 || len(bv.rejections) != 0 || bv.adoptedJobs != 0 {
		t.Errorf("gauges %+v, want none: no budget, no model, no job", bv)
	}
}

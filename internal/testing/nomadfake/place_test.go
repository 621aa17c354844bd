package nomadfake_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

// Each slot goes to the node its group is pinned to, on free healthy
// GPUs taken in the node's order; GPUs are never given twice.
func TestPlacementOnPinnedNode(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	n2 := gpuNode(s, "n2", 8, nil)
	if err := s.SetDeviceHealth(n2, "n2-gpu0", false); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, c, gpuJobOn("a", "n2", 2, 3))
	mustRegister(t, c, gpuJobOn("b", "n2", 1, 2))
	var got [][]string
	for _, a := range s.Allocations("") {
		if a.NodeName != "n2" || a.ClientStatus != "pending" || a.DesiredStatus != "run" {
			t.Errorf("%s on %s: client %s desired %s, want pending/run on n2", a.Name, a.NodeName, a.ClientStatus, a.DesiredStatus)
		}
		got = append(got, devicesOf(a))
	}
	// b wants 2 GPUs and one healthy one is left: it is not placed.
	want := [][]string{{"n2-gpu1", "n2-gpu2", "n2-gpu3"}, {"n2-gpu4", "n2-gpu5", "n2-gpu6"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devices of the allocations (-want +got):\n%s", diff)
	}
	// Nomad 2.0.5 shows a job with an unplaced slot running, not pending
	// (conformance.HeldDevicesNotGiven).
	if b, _, _ := c.Jobs().Info("b", nil); *b.Status != "running" {
		t.Errorf("job b is %s, want running", *b.Status)
	}

	// Groups not pinned to a node, and other job types, are refused.
	j := gpuJob("free", 1, 1)
	j.TaskGroups[0].Constraints = nil
	if _, _, err := c.Jobs().Register(j, nil); statusCode(err) != 501 || !strings.Contains(err.Error(), "not pinned") {
		t.Errorf("unpinned group: %v, want 501 not pinned", err)
	}
	batch := gpuJob("batch", 1, 1)
	batch.Type = new("batch")
	if _, _, err := c.Jobs().Register(batch, nil); statusCode(err) != 501 {
		t.Errorf("batch job: %v, want 501", err)
	}
}

// A group that cannot be placed (its node down or unknown, its GPUs
// taken) gets the metric SetPlacementFailureMetric set in the evaluation's
// FailedTGAllocs; it is not retried until the next evaluation.
func TestPlacementFailureReportsTheSetMetric(t *testing.T) {
	s, c := newFake(t)
	n1 := gpuNode(s, "n1", 2, nil)
	m := api.AllocationMetric{NodesEvaluated: 1, NodesFiltered: 1, ConstraintFiltered: map[string]int{"missing devices": 1}}
	s.SetPlacementFailureMetric(m)
	if err := s.SetNodeStatus(n1, "down"); err != nil {
		t.Fatal(err)
	}
	resp := mustRegister(t, c, gpuJob("m-0", 1, 1))
	mustRegister(t, c, gpuJobOn("m-1", "nowhere", 1, 1))
	for _, id := range []string{"m-0", "m-1"} {
		evals, _, err := c.Jobs().Evaluations(id, nil)
		if err != nil || len(evals) != 1 {
			t.Fatalf("evaluations of %s: %+v %v", id, evals, err)
		}
		if diff := cmp.Diff(map[string]*api.AllocationMetric{"engine": &m}, evals[0].FailedTGAllocs); diff != "" {
			t.Errorf("%s's FailedTGAllocs (-want +got):\n%s", id, diff)
		}
		if evals[0].Status != "complete" || evals[0].TriggeredBy != "job-register" {
			t.Errorf("%s's eval: %s by %s", id, evals[0].Status, evals[0].TriggeredBy)
		}
	}
	if evals, _, _ := c.Jobs().Evaluations("m-0", nil); evals[0].ID != resp.EvalID {
		t.Errorf("the register answered eval %s, the job lists %s", resp.EvalID, evals[0].ID)
	}
	if err := s.SetNodeStatus(n1, "ready"); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Allocations("m-0")); n != 0 {
		t.Fatalf("%d allocations once the node is back, want 0: there are no blocked evaluations", n)
	}
	mustRegister(t, c, gpuJob("m-0", 1, 1)) // the same spec: a new evaluation
	if as := live(s.Allocations("m-0")); len(as) != 1 {
		t.Fatalf("after an evaluation: %d live allocations, want 1", len(as))
	}
	if j, _, _ := c.Jobs().Info("m-0", nil); *j.Status != "running" {
		t.Errorf("job status %q, want running", *j.Status)
	}
}

// SetAllocStatus moves an allocation as its client would, its checks
// follow, a node down loses it, and Reschedule places its slot again.
func TestAllocLifecycleAndChecks(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 1, 4))
	a := s.Allocations("m-0")[0]
	checks := func() []string {
		t.Helper()
		st, err := c.Allocations().Checks(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range st {
			out = append(out, r.Check+"="+r.Status)
		}
		return out
	}
	if got := checks(); len(got) != 0 {
		t.Errorf("checks of a pending allocation: %v, want none", got)
	}
	for _, tc := range []struct {
		healthy bool
		want    string
	}{{true, "ready=success"}, {false, "ready=failure"}} {
		if err := s.SetAllocStatus(a.ID, "running", tc.healthy); err != nil {
			t.Fatal(err)
		}
		if got := checks(); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("checks of a running allocation (healthy %v): %v, want %s", tc.healthy, got, tc.want)
		}
	}
	stubs, _, err := c.Allocations().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(stubs) != 1 || stubs[0].ClientStatus != "running" || stubs[0].AllocatedResources == nil {
		t.Fatalf("stubs %+v, want one running, with resources", stubs)
	}
	if ports := stubs[0].AllocatedResources.Shared.Ports; len(ports) != 1 || ports[0].Label != "http" || ports[0].HostIP != "127.0.0.1" || ports[0].Value < 20000 {
		t.Errorf("ports %+v, want the group's http port on 127.0.0.1", ports)
	}
	info, _, _ := c.Jobs().Info("m-0", nil)
	if *info.Status != "running" {
		t.Errorf("job status %q, want running", *info.Status)
	}

	// A failure stays until Reschedule stands in for Nomad's rescheduler.
	if err := s.SetAllocStatus(a.ID, "failed", false); err != nil {
		t.Fatal(err)
	}
	if got := live(s.Allocations("m-0")); len(got) != 0 {
		t.Fatalf("failed alloc replaced by itself: %+v", got)
	}
	id, err := s.Reschedule(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	as := s.Allocations("m-0")
	if len(as) != 2 || as[0].DesiredStatus != "stop" || as[1].ID != id || as[1].Name != a.Name || as[1].NodeName != "n1" {
		t.Fatalf("after Reschedule: %+v, want the failed one stopped and a new one of its slot on n1", as)
	}
	if _, err := s.Reschedule(id); err == nil {
		t.Error("rescheduled a live allocation")
	}

	// A node going down loses what runs there; nothing replaces it.
	if err := s.SetNodeStatus(as[1].NodeID, "down"); err != nil {
		t.Fatal(err)
	}
	lost := s.Allocations("m-0")[1]
	if lost.ClientStatus != "lost" || lost.DesiredStatus != "stop" || len(s.Allocations("m-0")) != 2 {
		t.Errorf("alloc on a down node: %s/%s, want lost/stop and no replacement", lost.ClientStatus, lost.DesiredStatus)
	}
	if _, err := c.Allocations().Checks(lost.ID, nil); statusCode(err) != 404 {
		t.Errorf("checks through a down node: %v, want 404", err)
	}
	// Its slot cannot be placed again (pinned to the down node): Nomad
	// 2.0.5 shows the job running (conformance.NodeDownLosesAllocations).
	if info, _, _ := c.Jobs().Info("m-0", nil); *info.Status != "running" {
		t.Errorf("job status %q, want running", *info.Status)
	}
}

func TestAutoRun(t *testing.T) {
	s, c := newFake(t, nomadfake.WithAutoRun(true))
	gpuNode(s, "n1", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 2, 1))
	for _, a := range s.Allocations("m-0") {
		st, err := c.Allocations().Checks(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.ClientStatus != "running" || len(st) != 1 {
			t.Errorf("%s: %s with %d check results, want running with one", a.Name, a.ClientStatus, len(st))
		}
	}
	s.AutoRun(false)
	mustRegister(t, c, gpuJob("m-1", 1, 1))
	if a := s.Allocations("m-1")[0]; a.ClientStatus != "pending" {
		t.Errorf("after AutoRun(false): %s, want pending", a.ClientStatus)
	}
}

package nomadfake_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

func rackNodes(s *nomadfake.Server) map[string]string {
	ids := map[string]string{}
	for _, n := range []struct{ name, rack, pdu string }{
		{"n1", "r01", "p1"}, {"n2", "r01", "p1"}, {"n3", "r02", "p2"},
	} {
		ids[n.name] = gpuNode(s, n.name, 8, map[string]string{"llmgw.rack": n.rack, "llmgw.pdu": n.pdu, "llmgw.fabric": "ib0"})
	}
	return ids
}

func TestPlacementHonoursMetaConstraints(t *testing.T) {
	s, c := newFake(t)
	ids := rackNodes(s)
	rack := api.NewConstraint("${meta.llmgw.rack}", "=", "r02")
	mustRegister(t, c, gpuJob("m-0", 1, 4, rack))
	as := jobAllocs(t, c, "m-0")
	if len(as) != 1 || as[0].NodeID != ids["n3"] || as[0].NodeName != "n3" {
		t.Fatalf("allocations %+v, want one on n3 (rack r02)", as)
	}
	if as[0].ClientStatus != "pending" || as[0].DesiredStatus != "run" || as[0].Name != "m-0.engine[0]" {
		t.Errorf("new alloc %s: client %s desired %s", as[0].Name, as[0].ClientStatus, as[0].DesiredStatus)
	}

	// Other operators the controller renders.
	tests := []struct {
		name string
		c    *api.Constraint
		want string
	}{
		{"not equal", api.NewConstraint("${meta.llmgw.pdu}", "!=", "p1"), "n3"},
		{"regexp on name", api.NewConstraint("${node.unique.name}", "regexp", "^n2$"), "n2"},
		{"node id", api.NewConstraint("${node.unique.id}", "=", ids["n2"]), "n2"},
		{"set_contains", api.NewConstraint("${meta.llmgw.fabric}", "set_contains", "ib0"), "n1"},
		{"attribute", api.NewConstraint("${attr.unique.hostname}", "=", "n3"), "n3"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "op-" + string(rune('a'+i))
			mustRegister(t, c, gpuJob(id, 1, 1, tt.c))
			as := jobAllocs(t, c, id)
			if len(as) != 1 || as[0].NodeName != tt.want {
				t.Errorf("placed %+v, want one on %s", as, tt.want)
			}
		})
	}
}

func TestNoFitRecordsFailedTGAllocsAndBlockedEval(t *testing.T) {
	s, c := newFake(t)
	rackNodes(s)
	rack := api.NewConstraint("${meta.llmgw.rack}", "=", "r09")
	resp := mustRegister(t, c, gpuJob("m-0", 2, 4, rack))
	if got := jobAllocs(t, c, "m-0"); len(got) != 0 {
		t.Fatalf("placed %d allocations with an unsatisfiable constraint", len(got))
	}
	ev, _, err := c.Evaluations().Info(resp.EvalID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != "complete" || ev.TriggeredBy != "job-register" || ev.BlockedEval == "" {
		t.Errorf("eval status %q trigger %q blocked %q", ev.Status, ev.TriggeredBy, ev.BlockedEval)
	}
	want := &api.AllocationMetric{
		NodesEvaluated:     3,
		NodesFiltered:      3,
		NodesInPool:        3,
		NodePool:           "default",
		NodesAvailable:     map[string]int{"dc1": 3},
		ConstraintFiltered: map[string]int{"${meta.llmgw.rack} = r09": 3},
		CoalescedFailures:  1,
	}
	if diff := cmp.Diff(want, ev.FailedTGAllocs["engine"]); diff != "" {
		t.Errorf("FailedTGAllocs[engine] (-want +got):\n%s", diff)
	}
	if ev.QueuedAllocations["engine"] != 2 {
		t.Errorf("queued %v, want engine: 2", ev.QueuedAllocations)
	}
	blocked, _, err := c.Evaluations().Info(ev.BlockedEval, nil)
	if err != nil {
		t.Fatal(err)
	}
	if blocked.Status != "blocked" || blocked.PreviousEval != ev.ID || blocked.TriggeredBy != "queued-allocs" {
		t.Errorf("blocked eval %+v", blocked)
	}
	if len(ev.RelatedEvals) != 1 || ev.RelatedEvals[0].ID != blocked.ID {
		t.Errorf("related evals %+v, want the blocked eval", ev.RelatedEvals)
	}
	info, _, _ := c.Jobs().Info("m-0", nil)
	if *info.Status != "pending" {
		t.Errorf("job status %q, want pending (blocked eval)", *info.Status)
	}

	// A node in the rack appears: the blocked eval places both 4-GPU
	// shards on its 8 GPUs.
	gpuNode(s, "n9", 8, map[string]string{"llmgw.rack": "r09"})
	if got := liveAllocs(jobAllocs(t, c, "m-0")); len(got) != 2 {
		t.Fatalf("%d allocations after capacity appeared, want 2", len(got))
	}
	blocked, _, _ = c.Evaluations().Info(ev.BlockedEval, nil)
	if blocked.Status != "complete" {
		t.Errorf("blocked eval now %q, want complete", blocked.Status)
	}
}

func TestDistinctHostsAndDeviceCounts(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	gpuNode(s, "n2", 8, nil)

	// distinct_hosts: two shards fit, the third is filtered.
	j := gpuJob("mn-0", 3, 8)
	j.Constrain(&api.Constraint{Operand: "distinct_hosts", RTarget: "true"})
	resp := mustRegister(t, c, j)
	as := jobAllocs(t, c, "mn-0")
	if len(as) != 2 || as[0].NodeID == as[1].NodeID {
		t.Fatalf("distinct_hosts placed %+v, want two on different nodes", as)
	}
	ev, _, _ := c.Evaluations().Info(resp.EvalID, nil)
	m := ev.FailedTGAllocs["engine"]
	if m == nil || m.ConstraintFiltered["distinct_hosts"] != 2 || m.NodesEvaluated != 2 {
		t.Fatalf("failed metric %+v, want distinct_hosts filtering both nodes", m)
	}
	if _, _, err := c.Jobs().Deregister("mn-0", true, nil); err != nil {
		t.Fatal(err)
	}

	// Device counts: 8 GPUs per node, 3 GPUs per shard: two per node.
	resp = mustRegister(t, c, gpuJob("d-0", 5, 3))
	as = liveAllocs(jobAllocs(t, c, "d-0"))
	if len(as) != 4 {
		t.Fatalf("%d shards of 3 GPUs on 2×8 GPUs, want 4", len(as))
	}
	seen := map[string]bool{}
	for _, a := range as {
		full, _, err := c.Allocations().Info(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		devs := full.AllocatedResources.Tasks["engine"].Devices
		if len(devs) != 1 || devs[0].Name != h200 || len(devs[0].DeviceIDs) != 3 {
			t.Fatalf("%s devices %+v", a.Name, devs)
		}
		for _, id := range devs[0].DeviceIDs {
			if seen[id] {
				t.Errorf("GPU %s given twice", id)
			}
			seen[id] = true
		}
		if ports := full.AllocatedResources.Shared.Ports; len(ports) != 1 || ports[0].Label != "http" || ports[0].Value == 0 {
			t.Errorf("%s ports %+v, want a dynamic http port", a.Name, ports)
		}
	}
	ev, _, _ = c.Evaluations().Info(resp.EvalID, nil)
	want := &api.AllocationMetric{
		NodesEvaluated:     2,
		NodesExhausted:     2,
		NodesInPool:        2,
		NodePool:           "default",
		NodesAvailable:     map[string]int{"dc1": 2},
		DimensionExhausted: map[string]int{"devices: no devices match request": 2},
	}
	if diff := cmp.Diff(want, ev.FailedTGAllocs["engine"]); diff != "" {
		t.Errorf("exhausted metric (-want +got):\n%s", diff)
	}

	// A device the nodes do not have at all is a filter, not exhaustion.
	b := gpuJob("b-0", 1, 1)
	b.TaskGroups[0].Tasks[0].Resources.Devices[0].Name = "nvidia/gpu/NVIDIA B200"
	resp = mustRegister(t, c, b)
	ev, _, _ = c.Evaluations().Info(resp.EvalID, nil)
	if m := ev.FailedTGAllocs["engine"]; m == nil || m.ConstraintFiltered["missing devices"] != 2 {
		t.Errorf("B200 on H200 nodes: %+v, want missing devices ×2", m)
	}

	// Stopping a shard frees its GPUs for the blocked fifth.
	if err := s.SetAllocStatus(as[0].ID, "complete", false); err != nil {
		t.Fatal(err)
	}
	// A complete service alloc is replaced, and the blocked eval also
	// places: both want the three freed GPUs, only one gets them.
	if got := len(liveAllocs(jobAllocs(t, c, "d-0"))); got != 4 {
		t.Errorf("%d live shards after one completed, want 4", got)
	}
}

func TestUnhealthyDevicesAreNotPlaced(t *testing.T) {
	s, c := newFake(t)
	id := gpuNode(s, "n1", 2, nil)
	if err := s.SetDeviceHealth(id, "n1-gpu0", false); err != nil {
		t.Fatal(err)
	}
	resp := mustRegister(t, c, gpuJob("m-0", 1, 2))
	ev, _, _ := c.Evaluations().Info(resp.EvalID, nil)
	if m := ev.FailedTGAllocs["engine"]; m == nil || m.ConstraintFiltered["missing devices"] != 1 {
		t.Fatalf("one healthy GPU for a 2-GPU shard: %+v", m)
	}
	n, _, err := c.Nodes().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.NodeResources.Devices[0].Instances[0].Healthy {
		t.Error("node info shows the GPU healthy")
	}
	if err := s.SetDeviceHealth(id, "n1-gpu0", true); err != nil {
		t.Fatal(err)
	}
	if got := len(jobAllocs(t, c, "m-0")); got != 1 {
		t.Errorf("%d allocations after the GPU recovered, want 1", got)
	}
}

func TestNodeReadinessEligibilityAndDrain(t *testing.T) {
	s, c := newFake(t)
	down := s.AddNode(nomadfake.NodeSpec{Name: "down", Status: "down", Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(h200, 700, 1, "d0")}})
	inel := s.AddNode(nomadfake.NodeSpec{Name: "inel", Eligibility: "ineligible", Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(h200, 700, 1, "i0")}})
	drain := s.AddNode(nomadfake.NodeSpec{Name: "drain", Drain: true, Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(h200, 700, 1, "r0")}})
	other := s.AddNode(nomadfake.NodeSpec{Name: "other", Datacenter: "dc2", Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(h200, 700, 1, "o0")}})
	resp := mustRegister(t, c, gpuJob("m-0", 1, 1))
	ev, _, _ := c.Evaluations().Info(resp.EvalID, nil)
	if m := ev.FailedTGAllocs["engine"]; m == nil || m.NodesEvaluated != 0 || m.NodesInPool != 0 {
		t.Fatalf("no ready node in dc1: metric %+v", m)
	}

	if _, err := c.Nodes().ToggleEligibility(drain, true, nil); err == nil {
		t.Error("marked a draining node eligible")
	}
	if _, err := c.Nodes().UpdateDrain(drain, nil, true, nil); err != nil {
		t.Fatal(err)
	}
	as := jobAllocs(t, c, "m-0")
	if len(as) != 1 || as[0].NodeID != drain {
		t.Fatalf("after the drain ended: %+v, want one alloc on the undrained node", as)
	}
	list, _, err := c.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, n := range list {
		got[n.ID] = n.Status + "/" + n.SchedulingEligibility
		if n.NodeResources == nil || len(n.NodeResources.Devices) != 1 {
			t.Errorf("%s: resources=true stub without devices", n.Name)
		}
	}
	want := map[string]string{down: "down/eligible", inel: "ready/ineligible", drain: "ready/eligible", other: "ready/eligible"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

func TestAllocLifecycle(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	gpuNode(s, "n2", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 1, 4))
	a := jobAllocs(t, c, "m-0")[0]

	if err := s.SetAllocStatus(a.ID, "running", true); err != nil {
		t.Fatal(err)
	}
	stubs, _, err := c.Allocations().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	st := stubs[0]
	if st.ClientStatus != "running" || st.DeploymentStatus == nil || st.DeploymentStatus.Healthy == nil || !*st.DeploymentStatus.Healthy {
		t.Fatalf("running stub %+v", st)
	}
	var events []string
	for _, e := range st.TaskStates["engine"].Events {
		events = append(events, e.Type)
	}
	if diff := cmp.Diff([]string{"Received", "Task Setup", "Started"}, events); diff != "" {
		t.Errorf("task events (-want +got):\n%s", diff)
	}
	if err := s.AddTaskEvent(a.ID, "engine", api.TaskEvent{Type: "Driver", DisplayMessage: "loading weights 40%"}); err != nil {
		t.Fatal(err)
	}
	full, _, _ := c.Allocations().Info(a.ID, nil)
	if evs := full.TaskStates["engine"].Events; evs[len(evs)-1].DisplayMessage != "loading weights 40%" {
		t.Errorf("last event %+v", evs[len(evs)-1])
	}
	if full.Job == nil || *full.Job.ID != "m-0" || full.Job.Meta["llmgw.managed"] != "true" {
		t.Errorf("allocation's job %+v, want the job with its meta", full.Job)
	}
	info, _, _ := c.Jobs().Info("m-0", nil)
	if *info.Status != "running" {
		t.Errorf("job status %q, want running", *info.Status)
	}

	// Without AutoReschedule a failure stays; the next evaluation replaces it.
	if err := s.SetAllocStatus(a.ID, "failed", false); err != nil {
		t.Fatal(err)
	}
	if got := liveAllocs(jobAllocs(t, c, "m-0")); len(got) != 0 {
		t.Fatalf("failed alloc replaced without an evaluation: %+v", got)
	}
	if _, _, err := c.Jobs().ForceEvaluate("m-0", nil); err != nil {
		t.Fatal(err)
	}
	live := liveAllocs(jobAllocs(t, c, "m-0"))
	if len(live) != 1 {
		t.Fatalf("%d live allocations after an evaluation, want 1", len(live))
	}
	repl, _, _ := c.Allocations().Info(live[0].ID, nil)
	old, _, _ := c.Allocations().Info(a.ID, nil)
	if repl.PreviousAllocation != a.ID || old.NextAllocation != repl.ID || old.DesiredDescription != "alloc was rescheduled because it failed" {
		t.Errorf("replacement links: prev %q next %q desc %q", repl.PreviousAllocation, old.NextAllocation, old.DesiredDescription)
	}
	evals, _, err := c.Jobs().Evaluations("m-0", nil)
	if err != nil || len(evals) != 2 || evals[0].ID != repl.EvalID {
		t.Fatalf("job evaluations %+v err %v, want the register and the forced eval, newest first", evals, err)
	}
	byEval, _, err := c.Evaluations().Allocations(repl.EvalID, nil)
	if err != nil || len(byEval) != 1 || byEval[0].ID != repl.ID {
		t.Errorf("allocations of the forced eval: %+v err %v", byEval, err)
	}

	// With AutoReschedule, a node going down replaces its allocations.
	s.AutoReschedule(true)
	if err := s.SetNodeStatus(repl.NodeID, "down"); err != nil {
		t.Fatal(err)
	}
	lost, _, _ := c.Allocations().Info(repl.ID, nil)
	if lost.ClientStatus != "lost" || lost.DesiredStatus != "stop" {
		t.Errorf("alloc on a down node: %s/%s, want lost/stop", lost.ClientStatus, lost.DesiredStatus)
	}
	live = liveAllocs(jobAllocs(t, c, "m-0"))
	if len(live) != 1 || live[0].NodeID == repl.NodeID {
		t.Errorf("after node down: live %+v, want one on the other node", live)
	}
	if full, _, _ := c.Allocations().Info(live[0].ID, nil); full.PreviousAllocation != repl.ID {
		t.Errorf("replacement of the lost alloc: previous %q, want %q", full.PreviousAllocation, repl.ID)
	}
}

func TestAutoRun(t *testing.T) {
	s, c := newFake(t, nomadfake.WithAutoRun(true))
	gpuNode(s, "n1", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 2, 1))
	for _, a := range jobAllocs(t, c, "m-0") {
		if a.ClientStatus != "running" || !*a.DeploymentStatus.Healthy {
			t.Errorf("%s: %s, want running and healthy at once", a.Name, a.ClientStatus)
		}
	}
	s.AutoRun(false)
	mustRegister(t, c, gpuJob("m-1", 1, 1))
	if a := jobAllocs(t, c, "m-1")[0]; a.ClientStatus != "pending" {
		t.Errorf("after AutoRun(false): %s, want pending", a.ClientStatus)
	}
}

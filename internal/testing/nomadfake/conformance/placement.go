package conformance

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// PlacementOnPinnedNode: each slot <job>.<group>[i] gets an allocation on
// the group's pinned node, with the task's CPU, memory and distinct
// healthy GPUs of that node, and the group's dynamic port on 127.0.0.1.
func PlacementOnPinnedNode(t *testing.T, tg *Target) {
	id := "conf-place"
	resp := tg.register(t, tg.job(id, tg.Nodes[0], 2, 1))
	as := tg.waitRunning(t, id, 2)
	if e := tg.evaluation(t, id, resp.EvalID); len(e.FailedTGAllocs) != 0 {
		t.Errorf("evaluation of a placeable job has FailedTGAllocs %v", e.FailedTGAllocs)
	}
	g := tg.gpuGroup(t, tg.nodeID(t, tg.Nodes[0]))
	var ids []string
	for _, in := range g.Instances {
		ids = append(ids, in.ID)
	}
	var names, held []string
	for _, a := range as {
		names = append(names, a.Name)
		if a.NodeName != tg.Nodes[0] {
			t.Errorf("%s on node %s, want %s", a.Name, a.NodeName, tg.Nodes[0])
		}
		devs := devicesOf(a)
		if len(devs) != 1 || !slices.Contains(ids, devs[0]) {
			t.Errorf("%s holds GPUs %q, want one of %q", a.Name, devs, ids)
		}
		held = append(held, devs...)
		tr := a.AllocatedResources.Tasks["engine"]
		if tr == nil || tr.Cpu.CpuShares != 100 || tr.Memory.MemoryMB != 64 {
			t.Errorf("%s: task resources %+v, want 100 MHz and 64 MB", a.Name, tr)
		}
		var port *api.PortMapping
		for i, p := range a.AllocatedResources.Shared.Ports {
			if p.Label == "http" {
				port = &a.AllocatedResources.Shared.Ports[i]
			}
		}
		if port == nil || port.Value <= 0 || port.HostIP != "127.0.0.1" {
			t.Errorf("%s: port http %+v, want a port on 127.0.0.1", a.Name, port)
		}
	}
	slices.Sort(names)
	if want := []string{id + ".engine[0]", id + ".engine[1]"}; !slices.Equal(names, want) {
		t.Errorf("allocations %q, want %q", names, want)
	}
	slices.Sort(held)
	if len(slices.Compact(held)) != len(as) {
		t.Errorf("two allocations share a GPU: %q", held)
	}
	tg.waitJobStatus(t, id, "running")
}

// HeldDevicesNotGiven: GPUs a live allocation holds are not given again;
// a group that cannot be placed gets FailedTGAllocs in its evaluation and
// no allocation; its job reads running (Nomad 2.0.5 holds a blocked
// evaluation and does not show it pending).
func HeldDevicesNotGiven(t *testing.T, tg *Target) {
	node := tg.Nodes[0]
	first := "conf-held-a"
	tg.register(t, tg.job(first, node, 1, uint64(tg.GPUs-1)))
	held := devicesOf(tg.waitRunning(t, first, 1)[0])

	over := "conf-held-b"
	resp := tg.register(t, tg.job(over, node, 1, 2))
	e := tg.evaluation(t, over, resp.EvalID)
	if _, ok := e.FailedTGAllocs["engine"]; !ok {
		t.Errorf("evaluation of a job needing 2 GPUs where 1 is free: FailedTGAllocs %v, want group engine", e.FailedTGAllocs)
	}
	tg.waitJobStatus(t, over, "running")
	if as := tg.allocs(t, over); len(as) != 0 {
		t.Errorf("unplaceable job has %d allocations", len(as))
	}

	fits := "conf-held-c"
	tg.register(t, tg.job(fits, node, 1, 1))
	got := devicesOf(tg.waitRunning(t, fits, 1)[0])
	if len(got) != 1 || slices.Contains(held, got[0]) {
		t.Errorf("the last free GPU went as %q; %q are held", got, held)
	}
}

// UnhealthyDeviceNotGiven: an instance the device plugin reports
// unhealthy is not given.
func UnhealthyDeviceNotGiven(t *testing.T, tg *Target) {
	node := tg.Nodes[1]
	nodeID := tg.nodeID(t, node)
	g := tg.gpuGroup(t, nodeID)
	bad := g.Instances[0].ID
	tg.SetDeviceHealth(t, node, bad, false)
	t.Cleanup(func() { tg.SetDeviceHealth(t, node, bad, true) })
	for _, in := range tg.gpuGroup(t, nodeID).Instances {
		if in.ID == bad && in.Healthy {
			t.Fatalf("%s still healthy", bad)
		}
	}

	all := "conf-sick-all"
	resp := tg.register(t, tg.job(all, node, 1, uint64(tg.GPUs)))
	if e := tg.evaluation(t, all, resp.EvalID); e.FailedTGAllocs["engine"] == nil {
		t.Errorf("a job needing every GPU with one unhealthy: FailedTGAllocs %v, want group engine", e.FailedTGAllocs)
	}
	tg.stop(t, all)

	rest := "conf-sick-rest"
	tg.register(t, tg.job(rest, node, 1, uint64(tg.GPUs-1)))
	got := devicesOf(tg.waitRunning(t, rest, 1)[0])
	if len(got) != tg.GPUs-1 || slices.Contains(got, bad) {
		t.Errorf("job got GPUs %q; %s is unhealthy", got, bad)
	}
}

// NewVersionReplacesAllocations: a new version of a job (its meta
// changed) stops the live allocations of the old one and places its slots
// again.
func NewVersionReplacesAllocations(t *testing.T, tg *Target) {
	id := "conf-version"
	tg.register(t, tg.job(id, tg.Nodes[1], 1, 1))
	old := tg.waitRunning(t, id, 1)[0]
	j := tg.job(id, tg.Nodes[1], 1, 1)
	j.SetMeta("conformance.change", "1")
	if _, _, err := tg.Client.Jobs().Register(j, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "version 1 running in place of version 0", func() (bool, string) {
		var state []string
		oldDone, newRunning := false, false
		for _, a := range tg.allocs(t, id) {
			state = append(state, fmt.Sprintf("%s v%d %s/%s", a.Name, a.JobVersion, a.DesiredStatus, a.ClientStatus))
			if a.ID == old.ID {
				oldDone = a.DesiredStatus == api.AllocDesiredStatusStop && a.ClientStatus == api.AllocClientStatusComplete
			} else if a.JobVersion == 1 && a.Name == id+".engine[0]" && a.NodeName == tg.Nodes[1] &&
				a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusRunning {
				newRunning = true
			}
		}
		return oldDone && newRunning, fmt.Sprint(state)
	})
}

// StopByRegistration: registering a job with Stop set stops its
// allocations (desired stop, then complete); the job stays listed,
// stopped, and is dead.
func StopByRegistration(t *testing.T, tg *Target) {
	id := "conf-stop"
	tg.register(t, tg.job(id, tg.Nodes[0], 1, 0))
	a := tg.waitRunning(t, id, 1)[0]
	j := tg.job(id, tg.Nodes[0], 1, 0)
	j.Stop = new(true)
	resp, _, err := tg.Client.Jobs().Register(j, nil)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stopped job's allocation complete", func() (bool, string) {
		for _, b := range tg.allocs(t, id) {
			if b.ID == a.ID {
				return b.DesiredStatus == api.AllocDesiredStatusStop && b.ClientStatus == api.AllocClientStatusComplete,
					b.DesiredStatus + "/" + b.ClientStatus
			}
		}
		return false, "allocation gone"
	})
	if e := tg.evaluation(t, id, resp.EvalID); e.TriggeredBy != "job-register" {
		t.Errorf("the stopping registration's evaluation is triggered by %q, want job-register", e.TriggeredBy)
	}
	tg.waitJobStatus(t, id, "dead")
	stubs, _, err := tg.Client.Jobs().PrefixList(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(stubs) != 1 || !stubs[0].Stop {
		t.Fatalf("after the stop the list holds %d stubs (want %s, stopped)", len(stubs), id)
	}
}

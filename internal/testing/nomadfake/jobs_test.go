package nomadfake_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

func TestEnforceRegisterCheckAndSet(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	job := gpuJob("m-0", 1, 1)

	resp, wm, err := c.Jobs().EnforceRegister(job, 0, nil)
	if err != nil {
		t.Fatalf("create-only register: %v", err)
	}
	if resp.EvalID == "" || resp.JobModifyIndex == 0 || wm.LastIndex != resp.JobModifyIndex {
		t.Fatalf("register response %+v, write index %d", resp, wm.LastIndex)
	}
	first := resp.JobModifyIndex

	// The Nomad texts, which api.RegisterEnforceIndexErrPrefix starts.
	tests := []struct {
		name  string
		index uint64
		id    string
		want  string
	}{
		{"create-only on an existing job", 0, "m-0", "Enforcing job modify index 0: job already exists"},
		{"stale index", first + 100, "m-0", "job exists with conflicting job modify index: " + strconv.FormatUint(first, 10)},
		{"index on a missing job", 7, "m-1", "Enforcing job modify index 7: job does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := c.Jobs().EnforceRegister(gpuJob(tt.id, 1, 1), tt.index, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if got := statusCode(err); got != 500 {
				t.Errorf("status %d, want 500 as Nomad answers", got)
			}
			if !strings.Contains(err.Error(), api.RegisterEnforceIndexErrPrefix) {
				t.Errorf("error %q lacks %q", err, api.RegisterEnforceIndexErrPrefix)
			}
		})
	}

	// The same spec again: no new version, Nomad answers the job's
	// ModifyIndex and only creates an eval.
	again, _, err := c.Jobs().EnforceRegister(gpuJob("m-0", 1, 1), first, nil)
	if err != nil {
		t.Fatalf("unchanged register with the right index: %v", err)
	}
	info, _, err := c.Jobs().Info("m-0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if *info.JobModifyIndex != first || *info.Version != 0 {
		t.Errorf("unchanged spec: JobModifyIndex %d Version %d, want %d and 0", *info.JobModifyIndex, *info.Version, first)
	}
	if again.JobModifyIndex != *info.ModifyIndex {
		t.Errorf("unchanged register answered JobModifyIndex %d, want the job's ModifyIndex %d", again.JobModifyIndex, *info.ModifyIndex)
	}

	// A changed spec with the right index makes version 1.
	changed := gpuJob("m-0", 1, 1)
	changed.SetMeta("llmgw.profile_fp", "v2")
	resp2, _, err := c.Jobs().EnforceRegister(changed, first, nil)
	if err != nil {
		t.Fatalf("update with the current index: %v", err)
	}
	info, _, _ = c.Jobs().Info("m-0", nil)
	if *info.Version != 1 || *info.JobModifyIndex != resp2.JobModifyIndex || resp2.JobModifyIndex <= first {
		t.Errorf("after update: Version %d JobModifyIndex %d (reply %d), first %d", *info.Version, *info.JobModifyIndex, resp2.JobModifyIndex, first)
	}
	// The old index is now stale.
	if _, _, err := c.Jobs().EnforceRegister(gpuJob("m-0", 1, 1), first, nil); err == nil {
		t.Error("register with a superseded index succeeded")
	}
}

func TestConcurrentCreateOnlyRegistrationOneWins(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	const racers = 8
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			_, _, errs[i] = c.Jobs().EnforceRegister(gpuJob("m-0", 1, 1), 0, nil)
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !strings.Contains(err.Error(), "job already exists"):
			t.Errorf("loser error %v, want job already exists", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d registrations won, want exactly 1", wins)
	}
	if got := len(jobAllocs(t, c, "m-0")); got != 1 {
		t.Errorf("%d allocations, want 1: a lost race must not place", got)
	}
}

func TestJobListPrefixAndMeta(t *testing.T) {
	_, c := newFake(t)
	for _, id := range []string{"a-1", "a-2", "b-1"} {
		mustRegister(t, c, gpuJob(id, 0, 0))
	}
	stubs, qm, err := c.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, &api.QueryOptions{Prefix: "a-"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range stubs {
		ids = append(ids, st.ID)
		if st.Meta["llmgw.managed"] != "true" || st.Meta["llmgw.replica"] != st.ID {
			t.Errorf("%s: meta %v, want the job meta with meta=true", st.ID, st.Meta)
		}
		if st.JobSummary == nil || st.Namespace != "default" {
			t.Errorf("%s: summary %v namespace %q", st.ID, st.JobSummary, st.Namespace)
		}
	}
	if diff := cmp.Diff([]string{"a-1", "a-2"}, ids); diff != "" {
		t.Errorf("prefix list (-want +got):\n%s", diff)
	}
	if qm.LastIndex == 0 || !qm.KnownLeader {
		t.Errorf("query meta %+v: want an index and a known leader", qm)
	}
	plain, _, err := c.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != 3 || plain[0].Meta != nil {
		t.Errorf("plain list: %d jobs, meta %v; want 3 and no meta", len(plain), plain[0].Meta)
	}
}

func TestJobInfoNotFound(t *testing.T) {
	_, c := newFake(t)
	_, _, err := c.Jobs().Info("nope", nil)
	if statusCode(err) != 404 || !strings.Contains(err.Error(), "job not found") {
		t.Fatalf("got %v, want 404 job not found", err)
	}
}

func TestDeregisterStopsAndPurgeRemoves(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 2, 1))
	mustRegister(t, c, gpuJob("m-1", 1, 1))

	evalID, wm, err := c.Jobs().Deregister("m-0", false, nil)
	if err != nil || evalID == "" || wm.LastIndex == 0 {
		t.Fatalf("deregister: eval %q index %d err %v", evalID, wm.LastIndex, err)
	}
	info, _, err := c.Jobs().Info("m-0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !*info.Stop || *info.Status != "dead" || *info.Version != 1 {
		t.Errorf("stopped job: Stop %v Status %q Version %d; want true, dead, 1", *info.Stop, *info.Status, *info.Version)
	}
	for _, a := range jobAllocs(t, c, "m-0") {
		if a.DesiredStatus != "stop" || a.ClientStatus != "complete" {
			t.Errorf("alloc %s: desired %s client %s, want stop/complete", a.Name, a.DesiredStatus, a.ClientStatus)
		}
	}
	ev, _, err := c.Evaluations().Info(evalID, nil)
	if err != nil || ev.TriggeredBy != "job-deregister" || ev.Status != "complete" {
		t.Fatalf("deregister eval %+v err %v", ev, err)
	}

	if _, _, err := c.Jobs().Deregister("m-1", true, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Jobs().Info("m-1", nil); statusCode(err) != 404 {
		t.Errorf("purged job info: %v, want 404", err)
	}
	as := jobAllocs(t, c, "m-1")
	if len(as) != 1 || as[0].DesiredStatus != "stop" {
		t.Errorf("purged job's allocations %+v: want one stopped, still listed", as)
	}
	// Deregistering a missing job is a no-op, as in Nomad.
	if id, _, err := c.Jobs().Deregister("ghost", true, nil); err != nil || id != "" {
		t.Errorf("deregister missing job: eval %q err %v", id, err)
	}
}

func TestJobUpdateReplacesOrUpdatesInPlace(t *testing.T) {
	s, c := newFake(t, nomadfake.WithAutoRun(true))
	gpuNode(s, "n1", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 1, 2))
	orig := jobAllocs(t, c, "m-0")
	if len(orig) != 1 || orig[0].ClientStatus != "running" || orig[0].JobVersion != 0 {
		t.Fatalf("initial allocations %+v", orig)
	}

	// Count only: in place, plus one new allocation.
	mustRegister(t, c, gpuJob("m-0", 2, 2))
	as := jobAllocs(t, c, "m-0")
	live := liveAllocs(as)
	if len(as) != 2 || len(live) != 2 {
		t.Fatalf("after scale-up: %d allocations, %d live; want 2 and 2", len(as), len(live))
	}
	for _, a := range live {
		if a.JobVersion != 1 {
			t.Errorf("%s at version %d, want 1 (in-place update)", a.Name, a.JobVersion)
		}
	}

	// A task change is destructive: new allocations replace the old ones.
	j := gpuJob("m-0", 2, 2)
	j.TaskGroups[0].Tasks[0].Config["args"] = []string{"--max-model-len=8192"}
	mustRegister(t, c, j)
	as = jobAllocs(t, c, "m-0")
	live = liveAllocs(as)
	if len(live) != 2 {
		t.Fatalf("%d live allocations after a destructive update, want 2", len(live))
	}
	for _, a := range as {
		switch {
		case a.JobVersion == 2:
			full, _, err := c.Allocations().Info(a.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if full.PreviousAllocation == "" {
				t.Errorf("%s replaces nothing, want PreviousAllocation", a.Name)
			}
		case a.DesiredStatus != "stop" || a.DesiredDescription != "alloc is being updated due to job update":
			t.Errorf("old %s v%d: desired %s %q", a.Name, a.JobVersion, a.DesiredStatus, a.DesiredDescription)
		}
	}
}

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
	if got := len(s.Allocations("m-0")); got != 1 {
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
		if st.Namespace != "default" || st.Status != "dead" {
			t.Errorf("%s: namespace %q status %q, want default and dead (no allocation)", st.ID, st.Namespace, st.Status)
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

// The controller stops a job by registering it with Stop set: its
// allocations stop (complete at once, there is no client to wait for) and
// the job is dead. Nomad's DELETE is not faked.
func TestStopByRegisterStopsAllocations(t *testing.T) {
	s, c := newFake(t, nomadfake.WithAutoRun(true))
	gpuNode(s, "n1", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 2, 1))
	info, _, err := c.Jobs().Info("m-0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if *info.Status != "running" {
		t.Fatalf("job status %q, want running", *info.Status)
	}
	info.Stop = new(true)
	if _, _, err := c.Jobs().EnforceRegister(info, *info.JobModifyIndex, nil); err != nil {
		t.Fatal(err)
	}
	info, _, _ = c.Jobs().Info("m-0", nil)
	if !*info.Stop || *info.Status != "dead" || *info.Version != 1 {
		t.Errorf("stopped job: Stop %v Status %q Version %d; want true, dead, 1", *info.Stop, *info.Status, *info.Version)
	}
	for _, a := range s.Allocations("m-0") {
		if a.DesiredStatus != "stop" || a.ClientStatus != "complete" {
			t.Errorf("alloc %s: desired %s client %s, want stop/complete", a.Name, a.DesiredStatus, a.ClientStatus)
		}
	}
	if _, _, err := c.Jobs().Deregister("m-0", true, nil); statusCode(err) != 501 {
		t.Errorf("DELETE: %v, want 501 (not faked)", err)
	}
}

// Every new version replaces the job's live allocations; the same spec
// again makes no version and keeps them.
func TestNewVersionReplacesAllocations(t *testing.T) {
	s, c := newFake(t, nomadfake.WithAutoRun(true))
	gpuNode(s, "n1", 8, nil)
	gpuNode(s, "n2", 8, nil)
	mustRegister(t, c, gpuJob("m-0", 1, 2))
	orig := s.Allocations("m-0")
	if len(orig) != 1 || orig[0].ClientStatus != "running" || orig[0].NodeName != "n1" {
		t.Fatalf("initial allocations %+v", orig)
	}
	mustRegister(t, c, gpuJob("m-0", 1, 2))
	if as := s.Allocations("m-0"); len(as) != 1 || as[0].ModifyIndex != orig[0].ModifyIndex {
		t.Fatalf("unchanged spec touched the allocations: %+v", as)
	}

	mustRegister(t, c, gpuJobOn("m-0", "n2", 1, 2))
	as := s.Allocations("m-0")
	if len(as) != 2 {
		t.Fatalf("%d allocations after the update, want the old and its replacement", len(as))
	}
	if old := as[0]; old.ID != orig[0].ID || old.DesiredStatus != "stop" || old.ClientStatus != "complete" {
		t.Errorf("old allocation %s: desired %s client %s, want stop/complete", old.ID, old.DesiredStatus, old.ClientStatus)
	}
	if repl := as[1]; repl.NodeName != "n2" || *repl.Job.Version != 1 || repl.DesiredStatus != "run" {
		t.Errorf("replacement on %s at version %d desired %s, want n2, 1, run", repl.NodeName, *repl.Job.Version, repl.DesiredStatus)
	}
}

package conformance

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// evaluation finds job id's evaluation evalID once it has completed.
func (tg *Target) evaluation(t *testing.T, id, evalID string) *api.Evaluation {
	t.Helper()
	var out *api.Evaluation
	eventually(t, "evaluation "+evalID+" of "+id+" complete", func() (bool, string) {
		es, _, err := tg.Client.Jobs().Evaluations(id, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, e := range es {
			if e.ID == evalID {
				out = e
				return e.Status == api.EvalStatusComplete, "status " + e.Status
			}
		}
		return false, fmt.Sprintf("not among %d evaluations", len(es))
	})
	return out
}

func (tg *Target) waitJobStatus(t *testing.T, id, status string) {
	t.Helper()
	eventually(t, "job "+id+" "+status, func() (bool, string) {
		j, _, err := tg.Client.Jobs().Info(id, nil)
		if err != nil {
			return false, err.Error()
		}
		return *j.Status == status, "status " + *j.Status
	})
}

// RegisterCreatesVersionZero: a new job is version 0, created at the
// index the registration answers, with the servers' defaults (namespace
// default, node pool default, datacenters ["*"]); its evaluation is
// triggered by job-register; it runs once its allocation does.
func RegisterCreatesVersionZero(t *testing.T, tg *Target) {
	id := "conf-create"
	resp := tg.register(t, tg.job(id, tg.Nodes[0], 1, 0))
	if resp.EvalID == "" || resp.JobModifyIndex == 0 {
		t.Fatalf("register answered EvalID %q, JobModifyIndex %d", resp.EvalID, resp.JobModifyIndex)
	}
	j, _, err := tg.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *j.Version != 0 || *j.CreateIndex != resp.JobModifyIndex || *j.JobModifyIndex != resp.JobModifyIndex {
		t.Errorf("new job: Version %d CreateIndex %d JobModifyIndex %d; want 0, %d, %d",
			*j.Version, *j.CreateIndex, *j.JobModifyIndex, resp.JobModifyIndex, resp.JobModifyIndex)
	}
	if *j.Namespace != api.DefaultNamespace || *j.NodePool != "default" || !slices.Equal(j.Datacenters, []string{"*"}) {
		t.Errorf("new job: namespace %q, node pool %q, datacenters %q; want default, default, [*]", *j.Namespace, *j.NodePool, j.Datacenters)
	}
	if *j.SubmitTime == 0 {
		t.Errorf("new job: SubmitTime 0")
	}
	e := tg.evaluation(t, id, resp.EvalID)
	if e.TriggeredBy != "job-register" || e.JobModifyIndex != resp.JobModifyIndex {
		t.Errorf("evaluation: TriggeredBy %q JobModifyIndex %d; want job-register, %d", e.TriggeredBy, e.JobModifyIndex, resp.JobModifyIndex)
	}
	as := tg.waitRunning(t, id, 1)
	if as[0].Name != id+".engine[0]" || as[0].NodeName != tg.Nodes[0] || as[0].JobVersion != 0 {
		t.Errorf("allocation %s on %s of version %d; want %s.engine[0] on %s, version 0", as[0].Name, as[0].NodeName, as[0].JobVersion, id, tg.Nodes[0])
	}
	tg.waitJobStatus(t, id, "running")
}

// RegisterEnforceIndex: EnforceIndex with 0 only creates; any other index
// must be the job's JobModifyIndex; each refusal is HTTP 500 with Nomad's
// text.
func RegisterEnforceIndex(t *testing.T, tg *Target) {
	id := "conf-enforce"
	j := tg.job(id, tg.Nodes[0], 0, 0)
	resp, _, err := tg.Client.Jobs().EnforceRegister(j, 0, nil)
	if err != nil {
		t.Fatalf("create-only registration of a new job: %v", err)
	}
	tg.cleanup(t, id)
	_, _, err = tg.Client.Jobs().EnforceRegister(tg.job(id, tg.Nodes[0], 0, 0), 0, nil)
	wantErr(t, "create-only registration of an existing job", err, http.StatusInternalServerError,
		"Enforcing job modify index 0: job already exists")
	bad := resp.JobModifyIndex + 1000
	_, _, err = tg.Client.Jobs().EnforceRegister(tg.job(id, tg.Nodes[0], 0, 0), bad, nil)
	wantErr(t, "registration at a wrong index", err, http.StatusInternalServerError,
		fmt.Sprintf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", bad, resp.JobModifyIndex))
	_, _, err = tg.Client.Jobs().EnforceRegister(tg.job("conf-enforce-absent", tg.Nodes[0], 0, 0), 5, nil)
	wantErr(t, "registration of an absent job at an index", err, http.StatusInternalServerError,
		"Enforcing job modify index 5: job does not exist")

	j2 := tg.job(id, tg.Nodes[0], 0, 0)
	j2.SetMeta("conformance.change", "1")
	resp2, _, err := tg.Client.Jobs().EnforceRegister(j2, resp.JobModifyIndex, nil)
	if err != nil {
		t.Fatalf("registration at the job's JobModifyIndex: %v", err)
	}
	got, _, err := tg.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Version != 1 || *got.JobModifyIndex != resp2.JobModifyIndex || resp2.JobModifyIndex <= resp.JobModifyIndex {
		t.Errorf("after the update: Version %d JobModifyIndex %d (answered %d, first %d); want 1 and a new index",
			*got.Version, *got.JobModifyIndex, resp2.JobModifyIndex, resp.JobModifyIndex)
	}
}

// RegisterCreateOnlyRace: of concurrent create-only registrations of one
// job exactly one succeeds.
func RegisterCreateOnlyRace(t *testing.T, tg *Target) {
	id := "conf-race"
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = tg.Client.Jobs().EnforceRegister(tg.job(id, tg.Nodes[0], 0, 0), 0, nil)
		})
	}
	wg.Wait()
	tg.cleanup(t, id)
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		wantErr(t, "a losing create-only registration", err, http.StatusInternalServerError, "job already exists")
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent create-only registrations succeeded, want 1", won, n)
	}
	j, _, err := tg.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *j.Version != 0 {
		t.Errorf("job version %d, want 0", *j.Version)
	}
}

// RegisterUnchangedSpec: registering the same spec again makes no new
// version (Version, JobModifyIndex kept) and answers the job's
// ModifyIndex as JobModifyIndex, but still creates an evaluation. The job
// runs first, so that on a real Nomad its status change has moved its
// ModifyIndex past its JobModifyIndex (the fake places and runs it in the
// registration's own write, so there the two answers cannot differ).
func RegisterUnchangedSpec(t *testing.T, tg *Target) {
	id := "conf-same"
	first := tg.register(t, tg.job(id, tg.Nodes[0], 1, 0))
	tg.waitRunning(t, id, 1)
	tg.waitJobStatus(t, id, "running")
	before, _, err := tg.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *before.ModifyIndex == *before.JobModifyIndex {
		t.Logf("running job: ModifyIndex %d equals JobModifyIndex: this target cannot tell them apart", *before.ModifyIndex)
	}
	again, _, err := tg.Client.Jobs().Register(tg.job(id, tg.Nodes[0], 1, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	after, _, err := tg.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *after.Version != 0 || *after.JobModifyIndex != first.JobModifyIndex {
		t.Errorf("after the same spec again: Version %d JobModifyIndex %d; want 0, %d", *after.Version, *after.JobModifyIndex, first.JobModifyIndex)
	}
	if again.JobModifyIndex != *before.ModifyIndex {
		t.Errorf("the same spec again answered JobModifyIndex %d, want the job's ModifyIndex %d (its JobModifyIndex is %d)",
			again.JobModifyIndex, *before.ModifyIndex, *before.JobModifyIndex)
	}
	if again.EvalID == "" || again.EvalID == first.EvalID {
		t.Fatalf("the same spec again answered evaluation %q (first %q), want a new one", again.EvalID, first.EvalID)
	}
	tg.evaluation(t, id, again.EvalID)
}

// RegisterValidationErrors: a job Nomad's validation refuses is answered
// HTTP 500 with Nomad's texts.
func RegisterValidationErrors(t *testing.T, tg *Target) {
	for _, c := range []struct {
		name string
		mod  func(*api.Job)
		text string
	}{
		{"negative count", func(j *api.Job) { j.TaskGroups[0].Count = new(-1) }, `count can't be negative`},
		{"no driver", func(j *api.Job) { j.TaskGroups[0].Tasks[0].Driver = "" }, `Missing task driver`},
		{"space in the ID", func(j *api.Job) { j.ID, j.Name = new("conf bad"), new("conf bad") }, `Job ID contains a space`},
	} {
		j := tg.job("conf-invalid", tg.Nodes[0], 0, 0)
		c.mod(j)
		_, _, err := tg.Client.Jobs().Register(j, nil)
		if err == nil {
			tg.cleanup(t, *j.ID)
		}
		wantErr(t, c.name, err, http.StatusInternalServerError, c.text)
	}
}

// JobListPrefixAndMeta: GET /v1/jobs filters by ?prefix, sorts by ID,
// adds Meta only with ?meta=true, and lists every namespace with "*".
func JobListPrefixAndMeta(t *testing.T, tg *Target) {
	for _, id := range []string{"conf-list-b", "conf-list-a", "conf-other"} {
		tg.register(t, tg.job(id, tg.Nodes[0], 0, 0))
	}
	ids := func(ss []*api.JobListStub) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Namespace+"/"+s.ID)
		}
		return out
	}
	plain, _, err := tg.Client.Jobs().PrefixList("conf-list-")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(plain); !slices.Equal(got, []string{"default/conf-list-a", "default/conf-list-b"}) {
		t.Fatalf("prefix conf-list-: %q", got)
	}
	for _, s := range plain {
		if s.Meta != nil {
			t.Errorf("stub %s without ?meta carries Meta %v", s.ID, s.Meta)
		}
		if s.Type != api.JobTypeService || s.Stop || s.JobModifyIndex == 0 {
			t.Errorf("stub %s: Type %q Stop %v JobModifyIndex %d", s.ID, s.Type, s.Stop, s.JobModifyIndex)
		}
	}
	withMeta, _, err := tg.Client.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}},
		&api.QueryOptions{Prefix: "conf-list-", Namespace: api.AllNamespacesNamespace})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(withMeta); !slices.Equal(got, []string{"default/conf-list-a", "default/conf-list-b"}) {
		t.Fatalf("prefix conf-list- in namespace *: %q", got)
	}
	for _, s := range withMeta {
		if s.Meta["conformance.job"] != s.ID {
			t.Errorf("stub %s with ?meta=true: Meta %v", s.ID, s.Meta)
		}
	}
}

package conformance

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func headerIndex(t *testing.T, what string, r rawResponse) uint64 {
	t.Helper()
	v := r.header.Get("X-Nomad-Index")
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s: X-Nomad-Index %q: %v", what, v, err)
	}
	return n
}

// IndexesAndHeaders: every read answers X-Nomad-Index (an object's
// ModifyIndex; for a list or a missing object the table's index, at least
// 1), X-Nomad-KnownLeader true and X-Nomad-LastContact; writes answer
// X-Nomad-Index and every write's index is above the ones before.
func IndexesAndHeaders(t *testing.T, tg *Target) {
	list := tg.raw(t, http.MethodGet, "/v1/jobs", "")
	if list.code != http.StatusOK {
		t.Fatalf("GET /v1/jobs: %d %s", list.code, list.body)
	}
	// A table never written answers 0 (Nomad 2.0.5 does, on a new
	// cluster); any other, its last write.
	before := headerIndex(t, "GET /v1/jobs", list)
	if got := list.header.Get("X-Nomad-KnownLeader"); got != "true" {
		t.Errorf("GET /v1/jobs: X-Nomad-KnownLeader %q, want true", got)
	}
	if _, err := strconv.ParseUint(list.header.Get("X-Nomad-LastContact"), 10, 64); err != nil {
		t.Errorf("GET /v1/jobs: X-Nomad-LastContact %q: %v", list.header.Get("X-Nomad-LastContact"), err)
	}

	id := "conf-index"
	resp, wm, err := tg.Client.Jobs().Register(tg.job(id, tg.Nodes[0], 0, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	tg.cleanup(t, id)
	if wm.LastIndex <= before || resp.JobModifyIndex <= before {
		t.Errorf("register after index %d answered X-Nomad-Index %d, JobModifyIndex %d; want both above it", before, wm.LastIndex, resp.JobModifyIndex)
	}
	j, qm, err := tg.Client.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if qm.LastIndex != *j.ModifyIndex {
		t.Errorf("GET /v1/job/%s: X-Nomad-Index %d, want the job's ModifyIndex %d", id, qm.LastIndex, *j.ModifyIndex)
	}
	if !qm.KnownLeader {
		t.Errorf("GET /v1/job/%s: KnownLeader false", id)
	}
	stubs, lqm, err := tg.Client.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stubs {
		if s.ModifyIndex > lqm.LastIndex {
			t.Errorf("GET /v1/jobs: index %d below job %s's ModifyIndex %d", lqm.LastIndex, s.ID, s.ModifyIndex)
		}
	}

	for _, m := range []struct{ path, body string }{
		{"/v1/job/conf-index-missing", "job not found"},
		{"/v1/node/00000000-0000-4000-8000-000000000000", "node not found"},
		{"/v1/var/conf-index/missing", "variable not found"},
	} {
		r := tg.raw(t, http.MethodGet, m.path, "")
		if r.code != http.StatusNotFound || !strings.Contains(r.body, m.body) {
			t.Errorf("GET %s: %d %q, want 404 %q", m.path, r.code, r.body, m.body)
			continue
		}
		if n := headerIndex(t, "GET "+m.path, r); n < 1 {
			t.Errorf("GET %s: X-Nomad-Index %d, want at least 1", m.path, n)
		}
	}

	w := tg.raw(t, http.MethodPut, "/v1/var/conf-index/v", `{"Items":{"k":"v"}}`)
	if w.code != http.StatusOK {
		t.Fatalf("PUT /v1/var/conf-index/v: %d %s", w.code, w.body)
	}
	t.Cleanup(func() { _, _ = tg.Client.Variables().Delete("conf-index/v", nil) })
	widx := headerIndex(t, "PUT /v1/var/conf-index/v", w)
	if widx <= wm.LastIndex {
		t.Errorf("variable write's index %d is not above the job's %d", widx, wm.LastIndex)
	}
	v, _, err := tg.Client.Variables().Read("conf-index/v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.ModifyIndex != widx {
		t.Errorf("the write answered X-Nomad-Index %d, the variable's ModifyIndex is %d", widx, v.ModifyIndex)
	}
}

// BlockingQueryWakesOnWrite: a read with ?index=N answers once its index
// exceeds N, with what the write changed.
func BlockingQueryWakesOnWrite(t *testing.T, tg *Target) {
	_, qm, err := tg.Client.Variables().PrefixList("conf-block/", nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		vs  []*api.VariableMetadata
		idx uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		vs, m, err := tg.Client.Variables().PrefixList("conf-block/", &api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: 5 * time.Minute})
		r := result{vs: vs, err: err}
		if m != nil {
			r.idx = m.LastIndex
		}
		done <- r
	}()
	if _, _, err := tg.Client.Variables().Create(&api.Variable{Path: "conf-block/a", Items: api.VariableItems{"k": "v"}}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = tg.Client.Variables().Delete("conf-block/a", nil) })
	var r result
	select {
	case r = <-done:
	case <-time.After(Deadline):
		t.Fatalf("a blocking list at index %d did not answer within %s of a write", qm.LastIndex, Deadline)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.idx <= qm.LastIndex || len(r.vs) != 1 || r.vs[0].Path != "conf-block/a" {
		t.Fatalf("blocking list at %d answered index %d with %d variables; want a higher index and conf-block/a", qm.LastIndex, r.idx, len(r.vs))
	}
}

// BlockingQueryWaitBounds: with nothing changing, ?wait ends a blocking
// read, which answers the index it was given.
func BlockingQueryWaitBounds(t *testing.T, tg *Target) {
	_, qm, err := tg.Client.Variables().PrefixList("conf-wait/", nil)
	if err != nil {
		t.Fatal(err)
	}
	vs, m, err := tg.Client.Variables().PrefixList("conf-wait/", &api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if m.LastIndex != qm.LastIndex || len(vs) != 0 {
		t.Fatalf("a blocking list at %d that timed out answered index %d with %d variables, want %d and none", qm.LastIndex, m.LastIndex, len(vs), qm.LastIndex)
	}
}

// BlockingQueryOnMissingObject: a blocking read of a missing object
// answers 404 with the table's index when its wait ends, and answers the
// object once it is written.
func BlockingQueryOnMissingObject(t *testing.T, tg *Target) {
	id := "conf-block-missing"
	_, qm, err := tg.Client.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = tg.Client.Jobs().Info(id, &api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: time.Second})
	wantErr(t, "blocking read of a missing job", err, http.StatusNotFound, "job not found")

	type result struct {
		j   *api.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Another job's change wakes the read too, with 404 again: it is
		// asked again from the table's new index.
		idx := qm.LastIndex
		for {
			j, _, err := tg.Client.Jobs().Info(id, &api.QueryOptions{WaitIndex: idx, WaitTime: 5 * time.Minute})
			if statusOf(err) != http.StatusNotFound {
				done <- result{j, err}
				return
			}
			// The table's index before a plain read: a registration
			// after it is seen by the read or wakes the next wait.
			_, m, lerr := tg.Client.Jobs().List(nil)
			if lerr != nil {
				done <- result{nil, lerr}
				return
			}
			idx = m.LastIndex
			if j, _, err := tg.Client.Jobs().Info(id, nil); statusOf(err) != http.StatusNotFound {
				done <- result{j, err}
				return
			}
		}
	}()
	tg.register(t, tg.job(id, tg.Nodes[0], 0, 0))
	var r result
	select {
	case r = <-done:
	case <-time.After(Deadline):
		t.Fatalf("a blocking read of %s did not answer within %s of its registration", id, Deadline)
	}
	if r.err != nil {
		t.Fatalf("blocking read of %s: %v; want the job once registered", id, r.err)
	}
	if *r.j.ID != id {
		t.Fatalf("blocking read answered job %s", *r.j.ID)
	}
}

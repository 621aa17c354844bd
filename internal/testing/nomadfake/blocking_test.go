package nomadfake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// inFlight reports whether a GET on path is being served (a blocked query).
func inFlight(s *nomadfake.Server, path string) bool {
	for _, r := range s.Requests() {
		if r.Method == "GET" && r.Path == path && r.Status == 0 && r.Query.Get("index") != "" {
			return true
		}
	}
	return false
}

type listResult struct {
	jobs []*api.JobListStub
	qm   *api.QueryMeta
	err  error
}

func TestBlockingQueryWakesOnChange(t *testing.T) {
	s, c := newFake(t)
	mustRegister(t, c, gpuJob("a", 0, 0))
	_, qm, err := c.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan listResult, 1)
	go func() {
		jobs, qm2, err := c.Jobs().List(&api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: 5 * time.Minute})
		done <- listResult{jobs, qm2, err}
	}()
	wait.Until(t, "the list to block", func() bool { return inFlight(s, "/v1/jobs") })

	// A write to another table does not answer a jobs query.
	if _, _, err := c.Variables().Create(&api.Variable{Path: "x", Items: api.VariableItems{"k": "v"}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("jobs query answered by a variable write: %+v", r.qm)
	default:
	}

	resp := mustRegister(t, c, gpuJob("b", 0, 0))
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.qm.LastIndex <= qm.LastIndex || r.qm.LastIndex < resp.JobModifyIndex || len(r.jobs) != 2 {
		t.Errorf("woken query: index %d (was %d, write %d), %d jobs; want a newer index and 2 jobs",
			r.qm.LastIndex, qm.LastIndex, resp.JobModifyIndex, len(r.jobs))
	}
}

func TestBlockingQueryReturnsAtWaitWithoutChange(t *testing.T) {
	_, c := newFake(t)
	mustRegister(t, c, gpuJob("a", 0, 0))
	info, qm, err := c.Jobs().Info("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The client's wait is honoured; nothing changes, so the same index
	// comes back.
	_, qm2, err := c.Jobs().Info("a", &api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if qm2.LastIndex != qm.LastIndex || qm.LastIndex != *info.ModifyIndex {
		t.Errorf("index %d after an idle wait, want %d (the job's ModifyIndex %d)", qm2.LastIndex, qm.LastIndex, *info.ModifyIndex)
	}
}

func TestBlockingQueryOnMissingObjectWakesWhenCreated(t *testing.T) {
	s, c := newFake(t)
	_, _, err := c.Variables().Peek("llmgw/holds", nil)
	if err != nil {
		t.Fatal(err)
	}
	idx := s.Index()
	done := make(chan error, 1)
	go func() {
		_, qm, err := c.Variables().Read("llmgw/holds", &api.QueryOptions{WaitIndex: max(idx, 1), WaitTime: time.Minute})
		if err == nil && qm.LastIndex <= idx {
			err = errors.New("stale index")
		}
		done <- err
	}()
	wait.Until(t, "the read to block", func() bool { return inFlight(s, "/v1/var/llmgw/holds") })
	if _, _, err := c.Variables().Create(&api.Variable{Path: "llmgw/holds", Items: api.VariableItems{"rack=r1": "{}"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("blocked read of a created variable: %v", err)
	}
}

func TestBlockingQueryEndsWithContextAndClose(t *testing.T) {
	s, c := newFake(t)
	// A node first: a table never written answers index 0, and ?index=0
	// does not block.
	gpuNode(s, "n1", 1, nil)
	_, qm, err := c.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, _, err := c.Nodes().List((&api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: time.Minute}).WithContext(ctx))
		errc <- err
	}()
	wait.Until(t, "the list to block", func() bool { return inFlight(s, "/v1/nodes") })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled blocking query: %v, want context.Canceled", err)
	}
	// The server side of that query ends too.
	wait.Until(t, "the handler to end", func() bool { return !inFlight(s, "/v1/nodes") })

	go func() {
		_, _, err := c.Nodes().List(&api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: time.Minute})
		errc <- err
	}()
	wait.Until(t, "the list to block", func() bool { return inFlight(s, "/v1/nodes") })
	s.Close() // must not wait for the minute
	if err := <-errc; err != nil {
		t.Logf("query ended by Close: %v", err)
	}
}

func TestQueryHeadersAndBadParams(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 1, nil)
	_, qm, err := c.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if qm.LastIndex == 0 || !qm.KnownLeader || qm.LastContact != 0 {
		t.Errorf("query meta %+v, want index, known leader, no contact lag", qm)
	}
	_, _, err = c.Nodes().List(&api.QueryOptions{Filter: `Name == "n1"`})
	if statusCode(err) != 501 {
		t.Errorf("filter expression: %v, want 501 (not faked)", err)
	}
	_, _, err = c.Nodes().List(&api.QueryOptions{Params: map[string]string{"index": "x"}})
	if statusCode(err) != 400 {
		t.Errorf("bad index: %v, want 400", err)
	}
	if _, _, err := c.Deployments().List(nil); statusCode(err) != 501 {
		t.Errorf("unfaked endpoint: %v, want 501", err)
	}
}

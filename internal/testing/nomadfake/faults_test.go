package nomadfake_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

func TestFailNext(t *testing.T) {
	s, c := newFake(t)
	s.FailNext(http.MethodPut, "/v1/jobs", 2, http.StatusServiceUnavailable)
	for range 2 {
		if _, _, err := c.Jobs().Register(gpuJob("m-0", 0, 0), nil); statusCode(err) != http.StatusServiceUnavailable {
			t.Fatalf("injected failure: %v, want 503", err)
		}
	}
	if _, _, err := c.Jobs().Info("m-0", nil); statusCode(err) != 404 {
		t.Fatalf("a failed-before-apply register created the job: %v", err)
	}
	mustRegister(t, c, gpuJob("m-0", 0, 0)) // the rule is used up

	var injected, puts int
	for _, r := range s.Requests() {
		if r.Method == http.MethodPut && r.Path == "/v1/jobs" {
			puts++
			if r.Injected {
				injected++
			}
			if !strings.Contains(string(r.Body), `"ID":"m-0"`) {
				t.Errorf("logged body %s lacks the job", r.Body)
			}
		}
	}
	if puts != 3 || injected != 2 {
		t.Errorf("request log: %d PUT /v1/jobs, %d injected; want 3 and 2", puts, injected)
	}
	s.ResetRequests()
	if got := len(s.Requests()); got != 0 {
		t.Errorf("%d requests after reset", got)
	}
}

func TestFailNextAfterApplyAndRetryIsIdempotent(t *testing.T) {
	s, c := newFake(t)
	gpuNode(s, "n1", 8, nil)
	s.FailNextAfterApply(http.MethodPut, "/v1/jobs", 1, http.StatusInternalServerError)
	if _, _, err := c.Jobs().EnforceRegister(gpuJob("m-0", 1, 1), 0, nil); statusCode(err) != 500 {
		t.Fatalf("lost response: %v, want 500", err)
	}
	// The write happened; a create-only retry cannot duplicate it.
	if _, _, err := c.Jobs().EnforceRegister(gpuJob("m-0", 1, 1), 0, nil); err == nil || !strings.Contains(err.Error(), "job already exists") {
		t.Fatalf("retry: %v, want job already exists", err)
	}
	if got := len(s.Allocations("m-0")); got != 1 {
		t.Errorf("%d allocations, want 1", got)
	}
}

func TestDropConnection(t *testing.T) {
	s, c := newFake(t)
	s.FailNext("", "/v1/nodes", 1, nomadfake.DropConnection)
	_, _, err := c.Nodes().List(nil)
	if err == nil || statusCode(err) != 0 {
		t.Fatalf("dropped connection: %v, want a transport error", err)
	}
	if _, _, err := c.Nodes().List(nil); err != nil {
		t.Fatalf("after the drop: %v", err)
	}
}

func TestHookCancelsCallerMidRequest(t *testing.T) {
	s, c := newFake(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	released := make(chan struct{})
	s.Hook(func(r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/jobs" {
			cancel() // the controller "crashes" with its request in flight
			<-released
		}
	})
	_, _, err := c.Jobs().Register(gpuJob("m-0", 0, 0), (&api.WriteOptions{}).WithContext(ctx))
	close(released)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("register with a cancelled caller: %v, want context.Canceled", err)
	}
	// The server still applies what it received, as a real one would.
	wait.Until(t, "the job to be registered", func() bool {
		_, _, err := c.Jobs().Info("m-0", nil)
		return err == nil
	})
}

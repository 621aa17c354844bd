package controller

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
)

// writeBodies is a body each write route would act on, by pattern: the
// refusals below must come before the body is looked at.
var writeBodies = map[string]any{
	"PUT /v1/facility/holds/{domain}": controllerapi.HoldRequest{Reason: "x", Drain: true},
	"PUT /v1/nodes/{node}/labels":     controllerapi.LabelsRequest{Set: map[string]string{"row": "row9"}},
	"POST /v1/plan":                   controllerapi.PlanRequest{},
	"POST /v1/reload":                 controllerapi.ReloadRequest{Confirm: true},
	"PUT /v1/models/{model}/pin":      controllerapi.PinRequest{Replicas: 1},
}

// Without api_token and without insecure_writes, every write of the API
// (every route but GET) is refused with 403, whatever the request says of
// itself, and changes nothing; the reads stay open.
func TestWritesNeedAToken(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.Config.InsecureWrites = false
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	writes := 0
	for pattern := range c.routes() {
		method, path, _ := strings.Cut(pattern, " ")
		path = pathOf("GET " + path)
		if method == http.MethodGet {
			if code, body := ctlharness.Call(t, method, c.URL+path, "", nil, nil); code == http.StatusUnauthorized || code == http.StatusForbidden {
				t.Errorf("GET %s without a token: %d %s, want it open", path, code, body)
			}
			continue
		}
		writes++
		for _, auth := range []string{"", "Bearer anything"} {
			code, ae := rawCall(t, c.Handler(), method, path, "127.0.0.1:5000", auth, "alice", writeBodies[pattern])
			if code != http.StatusForbidden || ae.Error != "writes need an API token, and this controller has no api_token" ||
				!strings.Contains(ae.Hint, "api_token") || !strings.Contains(ae.Hint, "insecure_writes") {
				t.Errorf("%s %s (Authorization %q): %d %+v, want 403 naming api_token and insecure_writes", method, path, auth, code, ae)
			}
		}
	}
	if writes < 7 {
		t.Errorf("only %d write routes", writes)
	}
	if got := e.Fake.Node(e.NodeIDs["n1"]).Meta["llmgw.row"]; got != "row1" {
		t.Errorf("n1's row = %q after refused writes, want row1", got)
	}
	for _, path := range []string{store.HoldsPath, store.PinsPath} {
		if v := e.Fake.Variable("default", path); v != nil {
			t.Errorf("%s written by refused writes: %v", path, v.Items)
		}
	}
}

// With insecure_writes, writes need no token, but only from a loopback
// address; and what a write records as its author is the mode
// ("insecure-loopback"), not the X-LLMGW-User header the request carries.
func TestInsecureWritesFromLoopbackOnly(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	h := c.Handler()
	hold := controllerapi.HoldRequest{Reason: "fan swap"}
	for _, remote := range []string{"192.0.2.7:4000", "[2001:db8::1]:4000", "not-an-address"} {
		code, ae := rawCall(t, h, http.MethodPut, "/v1/facility/holds/rack=r1", remote, "", "", hold)
		if code != http.StatusForbidden || !strings.Contains(ae.Error, "insecure_writes takes writes from this host only") {
			t.Errorf("PUT hold from %s: %d %+v, want 403", remote, code, ae)
		}
	}
	if v := e.Fake.Variable("default", store.HoldsPath); v != nil {
		t.Fatalf("holds written from a remote address: %v", v.Items)
	}
	var got HoldAnswer
	code, raw := rawCallInto(t, h, http.MethodPut, "/v1/facility/holds/rack=r1", "[::1]:4000", "", "mallory", hold, &got)
	if code != http.StatusOK {
		t.Fatalf("PUT hold from ::1: %d %s", code, raw)
	}
	if got.SetBy != CallerInsecure {
		t.Errorf("hold set_by %q, want %q (never the X-LLMGW-User header)", got.SetBy, CallerInsecure)
	}
	holds, err := c.store.Holds()
	if err != nil || len(holds) != 1 || holds[0].SetBy != CallerInsecure {
		t.Errorf("stored holds %+v (%v), want one set by %q", holds, err, CallerInsecure)
	}
}

// With api_token, a write records "api_token" as its author, not the
// header.
func TestSetByIsTheToken(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.Config.APIToken, e.Config.InsecureWrites = "s3cret", false
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	var got HoldAnswer
	code, raw := rawCallInto(t, c.Handler(), http.MethodPut, "/v1/facility/holds/rack=r1", "192.0.2.7:4000", "Bearer s3cret", "mallory",
		controllerapi.HoldRequest{Reason: "x"}, &got)
	if code != http.StatusOK || got.SetBy != CallerToken {
		t.Errorf("PUT hold with the token: %d set_by %q (%s), want 200 set by %q", code, got.SetBy, raw, CallerToken)
	}
}

// A configuration built in code with both is refused.
func TestInsecureWritesWithATokenRefused(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	cfg := e.Config
	cfg.APIToken = "s3cret"
	if _, err := New(Options{Config: cfg, Nomad: e.API}); err == nil || !strings.Contains(err.Error(), "insecure_writes and api_token") {
		t.Errorf("New with insecure_writes and api_token: %v, want an error", err)
	}
}

// rawCall sends one request to h as if from remote, with the
// Authorization and X-LLMGW-User headers when not empty, and decodes an
// error answer.
func rawCall(t *testing.T, h http.Handler, method, path, remote, auth, user string, body any) (int, controllerapi.APIError) {
	t.Helper()
	var ae controllerapi.APIError
	code, raw := rawCallInto(t, h, method, path, remote, auth, user, body, nil)
	if code >= 400 {
		if err := json.Unmarshal([]byte(raw), &ae); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, code, raw, err)
		}
	}
	return code, ae
}

func rawCallInto(t *testing.T, h http.Handler, method, path, remote, auth, user string, body, out any) (int, string) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(method, path, bytes.NewReader(b))
	req.RemoteAddr = remote
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if user != "" {
		req.Header.Set("X-LLMGW-User", user)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if out != nil && rec.Code < 300 {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, rec.Body)
		}
	}
	return rec.Code, rec.Body.String()
}

package controller

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
)

// planFacility budgets every rack; the plan tests hold r1 with drain.
const planFacility = `
headroom = 0
budget "rack=r1" { watts = 6000 }
budget "rack=r2" { watts = 6000 }
budget "rack=r3" { watts = 6000 }
`

// POST /v1/plan is a pass on what Nomad holds now with other files and
// more holds: its creates, moves and stops, and the budgets before and
// after. Nothing is applied: Nomad sees no write, the replicas the API
// shows stay, no decision is stored.
func TestPlanEndpoint(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, planFacility)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	_, replicasBefore := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas", "", nil, nil)
	var before []controllerapi.ReplicaView
	ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas", "", nil, &before)
	where := map[string]controllerapi.ReplicaView{}
	for _, r := range before {
		where[r.ID] = r
	}

	// alpha goes to 5 replicas, beta leaves the catalog, and rack r1 is
	// held with drain.
	cat := strings.Replace(alphaBeta[:strings.Index(alphaBeta, `model "beta"`)], "replicas = 3", "replicas = 5", 1)
	e.Fake.ResetRequests()
	var v controllerapi.PlanView
	code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "",
		controllerapi.PlanRequest{Catalog: cat, CatalogName: "new-catalog.hcl", Holds: []controllerapi.PlanHold{{Domain: "rack=r1", Reason: "swap", Drain: true}}}, &v)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/plan: %d %s", code, body)
	}
	for _, r := range e.Fake.Requests() {
		if r.Method != http.MethodGet && !strings.Contains(r.Path, "llmgw/leader") {
			t.Errorf("the plan wrote to Nomad: %s %s", r.Method, r.Path)
		}
	}
	if _, after := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas", "", nil, nil); after != replicasBefore {
		t.Errorf("the replicas the API shows changed with the plan:\n%s\nwas\n%s", after, replicasBefore)
	}
	if h := e.Fake.Variable("default", "llmgw/holds"); h != nil && strings.Contains(h.Items["holds"], "rack=r1") {
		t.Errorf("the plan's hold was stored: %+v", h)
	}

	got := map[string][]string{}
	for _, ch := range v.Changes {
		got[ch.Change] = append(got[ch.Change], ch.Replica)
		switch ch.Change {
		case controllerapi.ChangeCreate, controllerapi.ChangeMove:
			if ch.To == "" || len(ch.Nodes) == 0 {
				t.Errorf("%s %s goes to %q %v: want a domain and nodes", ch.Change, ch.Replica, ch.To, ch.Nodes)
			}
			for _, n := range ch.Nodes {
				if e.RackOf(n) == "r1" {
					t.Errorf("%s %s goes to %s in held rack r1", ch.Change, ch.Replica, n)
				}
			}
		}
		if ch.Change == controllerapi.ChangeMove && (ch.From != where[ch.Replica].Domain || !strings.Contains(ch.Reason, "held")) {
			t.Errorf("move of %s from %q (%s), want from %q out of the held domain", ch.Replica, ch.From, ch.Reason, where[ch.Replica].Domain)
		}
	}
	var inR1 []string
	for _, r := range before {
		if r.Model == "alpha" && e.RackOf(r.Nodes[0]) == "r1" {
			inR1 = append(inR1, r.ID)
		}
	}
	want := map[string][]string{
		controllerapi.ChangeCreate: {"alpha-3", "alpha-4"},
		controllerapi.ChangeStop:   {"beta-0"},
	}
	if len(inR1) == 0 {
		t.Fatalf("no alpha replica in rack r1 (%+v): the hold moves nothing", before)
	}
	want[controllerapi.ChangeMove] = inR1
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s\n%s", diff, body)
	}
	if v.Creates != 2 || v.Stops != 1 || v.Moves != len(inR1) {
		t.Errorf("counts: %d creates, %d moves, %d stops", v.Creates, v.Moves, v.Stops)
	}

	// Budgets after: each rack's draw changes by what the plan creates
	// there and stops there (a move's old copy stays until its new one
	// serves).
	delta := map[string]float64{}
	for _, ch := range v.Changes {
		for _, n := range ch.Nodes {
			delta["rack="+e.RackOf(n)] += ch.Watts / float64(len(ch.Nodes))
		}
		if ch.Change == controllerapi.ChangeStop {
			for _, r := range before {
				if r.JobID == ch.JobID {
					for _, n := range r.Nodes {
						delta["rack="+e.RackOf(n)] -= r.Watts / float64(len(r.Nodes))
					}
				}
			}
		}
	}
	if len(v.Domains) != 3 {
		t.Fatalf("domains %+v, want the three racks", v.Domains)
	}
	for _, d := range v.Domains {
		if d.CapWatts != 6000 || d.AfterWatts != d.BeforeWatts+delta[d.Domain] {
			t.Errorf("%s: cap %g, before %g, after %g; want cap 6000 and after = before %+g", d.Domain, d.CapWatts, d.BeforeWatts, d.AfterWatts, delta[d.Domain])
		}
		if d.Held != (d.Domain == "rack=r1") {
			t.Errorf("%s held = %v", d.Domain, d.Held)
		}
	}
	if v.Refused != "" {
		t.Errorf("stopping beta-0, 1 of 4 running replicas: refused %q", v.Refused)
	}

	// A catalog without alpha stops 3 of the 4: a reload of it would be
	// refused, and the plan says so.
	v = controllerapi.PlanView{}
	onlyBeta := alphaBeta[strings.Index(alphaBeta, `model "beta"`):]
	if code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", controllerapi.PlanRequest{Catalog: onlyBeta}, &v); code != http.StatusOK ||
		v.Stops != 3 || !strings.Contains(v.Refused, "max_stop_fraction") {
		t.Errorf("plan without alpha: %d, %d stops, refused %q; want 3 stops, refused:\n%s", code, v.Stops, v.Refused, body)
	}

	// The files in force, nothing added: nothing to do.
	v = controllerapi.PlanView{}
	if code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", controllerapi.PlanRequest{}, &v); code != http.StatusOK || len(v.Changes) != 0 {
		t.Errorf("plan of the files in force: %d, %d changes, want none:\n%s", code, len(v.Changes), body)
	}
}

// A bad catalog or facility is refused as a reload refuses it: every
// problem at file:line, under the name the caller gave; a bad hold names
// the field.
func TestPlanEndpointBadInput(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, planFacility)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	badCat := strings.Replace(alphaBeta, `gpus   = 1`, `gpus   = "one"`, 1)
	for _, tc := range []struct {
		name string
		req  controllerapi.PlanRequest
		code int
		want []string
	}{
		{"bad catalog", controllerapi.PlanRequest{Catalog: badCat, CatalogName: "cat/new.hcl"}, http.StatusUnprocessableEntity, []string{"cat/new.hcl:8: gpus"}},
		{"bad both", controllerapi.PlanRequest{Catalog: badCat, Facility: `budget "rack=r1" { watts = -1 }`, FacilityName: "fac.hcl"}, http.StatusUnprocessableEntity,
			[]string{"catalog.hcl:8: gpus", "fac.hcl:1:"}},
		{"bad hold", controllerapi.PlanRequest{Holds: []controllerapi.PlanHold{{Domain: "shelf=s1"}}}, http.StatusBadRequest, []string{"holds[0].domain:"}},
		{"unknown hold", controllerapi.PlanRequest{Holds: []controllerapi.PlanHold{{Domain: "rack=r9"}}}, http.StatusNotFound, []string{"holds[0]: no node is in rack=r9", "did you mean"}},
	} {
		if tc.name == "bad both" {
			tc.req.CatalogName = ""
		}
		code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", tc.req, nil)
		if code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: %s lacks %q", tc.name, body, w)
			}
		}
	}
	if code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", map[string]any{"hold": []string{"rack=r1"}}, nil); code != http.StatusBadRequest ||
		!strings.Contains(body, `unknown field \"hold\"`) {
		t.Errorf("a misspelt field: %d %s, want 400 naming it", code, body)
	}
	if code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", "not an object", nil); code != http.StatusBadRequest {
		t.Errorf("a body that is not a plan request: %d %s, want 400", code, body)
	}
}

// A catalog whose args no contract checked loads and plans, and the plan
// and the catalog view carry the warning at the profile's line.
func TestCatalogWarnings(t *testing.T) {
	unchecked := strings.Replace(alphaBeta, `    args   = ["--max-model-len", "8192"]`, `    engine_version = "0.99.0"
    args   = ["--max-model-len", "8192", "--a-flag-of-0.99"]`, 1)
	e := newEnv(t, sixNodes, unchecked, planFacility)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	const want = `:5: profile alpha/h1: engine_version "0.99.0": llmgw has no contract for vllm 0.99.0 (it has vllm@v0.28.0)`
	var cv controllerapi.CatalogView
	if code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/catalog", "", nil, &cv); code != http.StatusOK || len(cv.Warnings) != 1 || !strings.Contains(cv.Warnings[0], want) {
		t.Errorf("GET /v1/catalog: %d, warnings %q, want one containing %q\n%s", code, cv.Warnings, want, body)
	}
	var mv controllerapi.ModelView
	if code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/models/alpha", "", nil, &mv); code != http.StatusOK || len(mv.Warnings) != 1 || !strings.Contains(mv.Warnings[0], want) {
		t.Errorf("GET /v1/models/alpha: %d, warnings %q, want one containing %q\n%s", code, mv.Warnings, want, body)
	}
	var v controllerapi.PlanView
	code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", controllerapi.PlanRequest{Catalog: unchecked, CatalogName: "new.hcl"}, &v)
	if code != http.StatusOK || len(v.Warnings) != 1 || !strings.HasPrefix(v.Warnings[0], "new.hcl"+want) {
		t.Errorf("POST /v1/plan: %d, warnings %q, want one starting %q\n%s", code, v.Warnings, "new.hcl"+want, body)
	}
	var checked controllerapi.PlanView
	code, body = ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", controllerapi.PlanRequest{Catalog: alphaBeta, CatalogName: "new.hcl"}, &checked)
	if code != http.StatusOK || len(checked.Warnings) != 0 {
		t.Errorf("POST /v1/plan of a checked catalog: %d, warnings %q, want none\n%s", code, checked.Warnings, body)
	}
}

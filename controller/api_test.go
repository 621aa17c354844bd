package controller

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// Labels set through the API are Nomad dynamic node metadata: the fake's
// node shows them, and so does the controller once it observes the node.
func TestLabelsWriteDynamicNodeMeta(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)

	code, body := ctlharness.Call(t, http.MethodPut, c.URL+"/v1/nodes/n1/labels", "",
		controllerapi.LabelsRequest{Set: map[string]string{"rack": "r9", "fabric": "ib0"}, Unset: []string{"pdu"}}, nil)
	if code != http.StatusOK {
		t.Fatalf("PUT labels: %d %s", code, body)
	}
	meta := e.Fake.Node(e.NodeIDs["n1"]).Meta
	got := map[string]string{"rack": meta["llmgw.rack"], "pdu": meta["llmgw.pdu"], "fabric": meta["llmgw.fabric"]}
	if diff := cmp.Diff(map[string]string{"rack": "r9", "pdu": "", "fabric": "ib0"}, got); diff != "" {
		t.Errorf("node n1's meta (-want +got):\n%s", diff)
	}
	e.Pass(c)
	var nodes []controllerapi.NodeView
	ctlharness.Call(t, http.MethodGet, c.URL+"/v1/nodes?domain=rack=r9", "", nil, &nodes)
	if len(nodes) != 1 || nodes[0].Name != "n1" {
		t.Fatalf("nodes in rack=r9: %+v, want n1", nodes)
	}
	if diff := cmp.Diff(map[string]string{"site": "s1", "room": "a", "row": "row1", "rack": "r9"}, nodes[0].Location); diff != "" {
		t.Errorf("n1's location (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name, node string
		body       any
		code       int
		contains   string
	}{
		{"unknown label", "n1", controllerapi.LabelsRequest{Set: map[string]string{"cage": "c1"}}, http.StatusBadRequest, `unknown label \"cage\"`},
		{"space", "n1", controllerapi.LabelsRequest{Set: map[string]string{"rack": "r 1"}}, http.StatusBadRequest, `label rack: value \"r 1\" has ' '`},
		{"newline", "n1", controllerapi.LabelsRequest{Set: map[string]string{"rack": "r1\nr2"}}, http.StatusBadRequest, `label rack: value \"r1\\nr2\" has '\\n'`},
		{"escape", "n1", controllerapi.LabelsRequest{Set: map[string]string{"site": "\x1b[2J"}}, http.StatusBadRequest, "label site: value"},
		{"NUL", "n1", controllerapi.LabelsRequest{Set: map[string]string{"pdu": "p\x00"}}, http.StatusBadRequest, "label pdu: value"},
		{"too long", "n1", controllerapi.LabelsRequest{Set: map[string]string{"row": strings.Repeat("r", 64)}}, http.StatusBadRequest, "more than 63"},
		{"base_watts not a number", "n1", controllerapi.LabelsRequest{Set: map[string]string{"base_watts": "abc"}}, http.StatusBadRequest, `label base_watts: \"abc\" is not a number of watts`},
		{"hcas with a space", "n1", controllerapi.LabelsRequest{Set: map[string]string{"hcas": "mlx5_0, mlx5_1"}}, http.StatusBadRequest, "label hcas"},
		// One bad label refuses the request whole: rack stays r9.
		{"one bad of two", "n1", controllerapi.LabelsRequest{Set: map[string]string{"rack": "r8", "base_watts": "-5"}}, http.StatusBadRequest, "label base_watts"},
		{"unknown unset", "n1", controllerapi.LabelsRequest{Unset: []string{"cage"}}, http.StatusBadRequest, `unset: unknown label \"cage\"`},
		{"set and unset", "n1", controllerapi.LabelsRequest{Set: map[string]string{"rack": "r8"}, Unset: []string{"rack"}}, http.StatusBadRequest, "both set and unset"},
		{"nothing", "n1", controllerapi.LabelsRequest{}, http.StatusBadRequest, "nothing to set"},
		{"unknown node", "n7", controllerapi.LabelsRequest{Set: map[string]string{"rack": "r1"}}, http.StatusNotFound, "did you mean"},
	} {
		code, body := ctlharness.Call(t, http.MethodPut, c.URL+"/v1/nodes/"+tc.node+"/labels", "", tc.body, nil)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, body, tc.code, tc.contains)
		}
	}
	meta = e.Fake.Node(e.NodeIDs["n1"]).Meta
	if meta["llmgw.rack"] != "r9" || meta["llmgw.base_watts"] != "" || meta["llmgw.hcas"] != "" {
		t.Errorf("n1's meta after the refused writes: rack %q, base_watts %q, hcas %q; want r9 and none", meta["llmgw.rack"], meta["llmgw.base_watts"], meta["llmgw.hcas"])
	}
}

// With api_token set, every call of the API needs it, reads too; only
// /healthz, /metrics and the console's files stay open. A refused call is
// 401 with the API's error shape and a WWW-Authenticate challenge, and a
// refused GET /v1/replicas/{id} asks Nomad nothing.
func TestAPITokenOnEveryCall(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.Config.APIToken, e.Config.InsecureWrites = "s3cret", false
	// n1's GPUs go bad as alpha-0's job is registered there: Nomad cannot
	// place it, and the replica is pending (as TestNomadReasonsInExplain).
	e.Fake.Hook(func(r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/jobs" {
			for i := range 4 {
				_ = e.Fake.SetDeviceHealth(e.NodeIDs["n1"], fmt.Sprintf("n1-gpu%d", i), false)
			}
		}
	})
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.Pass(c) // the view has alpha-0's job, pending
	labels := controllerapi.LabelsRequest{Set: map[string]string{"row": "row2"}}
	var reads []string // every GET of the API (redact_test.go's pathOf)
	for pattern := range c.routes() {
		if strings.HasPrefix(pattern, "GET ") {
			reads = append(reads, pathOf(pattern))
		}
	}
	if len(reads) < 9 {
		t.Fatalf("only %d GET routes: %v", len(reads), reads)
	}
	for _, path := range reads {
		for _, token := range []string{"", "wrong", "s3cret x"} {
			req, err := http.NewRequest(http.MethodGet, c.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var ae controllerapi.APIError
			err = json.NewDecoder(resp.Body).Decode(&ae)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || err != nil || ae.Error != "missing or wrong API token" || !strings.Contains(ae.Hint, "LLMGW_TOKEN") {
				t.Errorf("GET %s with token %q: %d %+v (%v), want 401 with the API's error and hint", path, token, resp.StatusCode, ae, err)
			}
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Errorf("GET %s with token %q: WWW-Authenticate %q, want a Bearer challenge", path, token, got)
			}
		}
		// The scheme must be Bearer: the bare token is not enough.
		req, _ := http.NewRequest(http.MethodGet, c.URL+path, nil)
		req.Header.Set("Authorization", "s3cret")
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with Authorization: s3cret (no scheme): %v %v, want 401", path, resp.Status, err)
		} else {
			_ = resp.Body.Close()
		}
		if code, body := ctlharness.Call(t, http.MethodGet, c.URL+path, "s3cret", nil, nil); code == http.StatusUnauthorized {
			t.Errorf("GET %s with the token: %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/metrics", "/ui/", "/ui/app.js"} {
		if code, body := ctlharness.Call(t, http.MethodGet, c.URL+path, "", nil, nil); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s, want 200", path, code, body)
		}
	}

	// alpha-0 is not serving (nothing runs on the fake): its detail asks
	// Nomad for the job's evaluations, but only for a caller with the token.
	evals := func() int {
		n := 0
		for _, r := range e.Fake.Requests() {
			if strings.Contains(r.Path, "/evaluations") {
				n++
			}
		}
		return n
	}
	e.Fake.ResetRequests()
	ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas/alpha-0", "", nil, nil)
	if n := evals(); n != 0 {
		t.Errorf("GET /v1/replicas/alpha-0 without a token made %d evaluation reads in Nomad, want 0", n)
	}
	var d controllerapi.ReplicaDetail
	if code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/replicas/alpha-0", "s3cret", nil, &d); code != http.StatusOK || d.State == "serving" {
		t.Fatalf("GET /v1/replicas/alpha-0: %d %s", code, body)
	}
	if n := evals(); n == 0 {
		t.Errorf("GET /v1/replicas/alpha-0 with the token (state %s) read no evaluations: the check above proves nothing", d.State)
	}

	for _, tc := range []struct {
		method, path, token string
		body                any
		code                int
	}{
		{http.MethodPut, "/v1/facility/holds/rack=r1", "", controllerapi.HoldRequest{Reason: "x"}, http.StatusUnauthorized},
		{http.MethodPut, "/v1/facility/holds/rack=r1", "wrong", controllerapi.HoldRequest{Reason: "x"}, http.StatusUnauthorized},
		{http.MethodDelete, "/v1/facility/holds/rack=r1", "", nil, http.StatusUnauthorized},
		{http.MethodPut, "/v1/nodes/n1/labels", "", labels, http.StatusUnauthorized},
		{http.MethodPut, "/v1/nodes/n1/labels", "s3cret x", labels, http.StatusUnauthorized},
		{http.MethodPost, "/v1/reload", "", nil, http.StatusUnauthorized},
		{http.MethodPost, "/v1/plan", "", controllerapi.PlanRequest{}, http.StatusUnauthorized},
		{http.MethodPut, "/v1/models/alpha/pin", "", nil, http.StatusUnauthorized},
		{http.MethodPut, "/v1/facility/holds/rack=r1", "s3cret", controllerapi.HoldRequest{Reason: "x"}, http.StatusOK},
		{http.MethodDelete, "/v1/facility/holds/rack=r1", "s3cret", nil, http.StatusOK},
		{http.MethodPut, "/v1/nodes/n1/labels", "s3cret", labels, http.StatusOK},
		{http.MethodPost, "/v1/plan", "s3cret", controllerapi.PlanRequest{}, http.StatusOK},
	} {
		if code, body := ctlharness.Call(t, tc.method, c.URL+tc.path, tc.token, tc.body, nil); code != tc.code {
			t.Errorf("%s %s with token %q: %d %s, want %d", tc.method, tc.path, tc.token, code, body, tc.code)
		}
	}
	if got := e.Fake.Node(e.NodeIDs["n1"]).Meta["llmgw.row"]; got != "row2" {
		t.Errorf("n1's row = %q after the authorised call, want row2", got)
	}
	if v := e.Fake.Variable("default", "llmgw/holds"); v == nil || strings.Contains(v.Items["holds"], "rack=r1") {
		t.Errorf("holds variable after set and release: %+v", v)
	}
}

// A catalog reload with a bad file keeps the catalog in force and shows
// the error; a good reload clears it.
func TestBadCatalogReloadKeepsTheOldOne(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)
	jobs := jobIDs(e.LiveJobs())

	e.WriteCatalog(strings.Replace(alphaBeta, `gpus   = 1`, `gpus   = "one"`, 1))
	err := c.Reload()
	if err == nil {
		t.Fatal("reload of a bad catalog: no error")
	}
	var cv controllerapi.CatalogView
	if code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/catalog", "", nil, &cv); code != http.StatusOK {
		t.Fatalf("GET catalog: %d %s", code, body)
	}
	if cv.Error != err.Error() || !strings.Contains(cv.Error, "catalog.hcl:") {
		t.Errorf("catalog error = %q, want the reload's %q, naming the file and line", cv.Error, err)
	}
	var names []string
	for _, m := range cv.Models {
		names = append(names, m.Name)
	}
	if diff := cmp.Diff([]string{"alpha", "beta"}, names); diff != "" {
		t.Errorf("models in force (-want +got):\n%s", diff)
	}
	var health map[string]any
	ctlharness.Call(t, http.MethodGet, c.URL+"/healthz", "", nil, &health)
	if health["config_error"] != err.Error() {
		t.Errorf("healthz = %v, want config_error %q", health, err)
	}
	if n := e.Pass(c); n != 0 {
		t.Errorf("pass after the refused reload sent %d job writes, want 0", n)
	}
	if diff := cmp.Diff(jobs, jobIDs(e.LiveJobs())); diff != "" {
		t.Errorf("jobs after the refused reload (-before +after):\n%s", diff)
	}

	e.WriteCatalog(alphaBeta)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	cv = controllerapi.CatalogView{}
	ctlharness.Call(t, http.MethodGet, c.URL+"/v1/catalog", "", nil, &cv)
	if cv.Error != "" {
		t.Errorf("catalog error after a good reload = %q, want none", cv.Error)
	}
}

// Until the controller has read Nomad once (and built its view from it),
// every call whose answer comes from that read is 503 with the API's error
// shape saying so and a Retry-After, not an empty list; /healthz, /metrics
// and the calls that need no read answer as always. Once it has read
// Nomad, the same calls answer.
func TestCallsWaitForTheFirstReadOfNomad(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.startTap("ctl", &ctlharness.Tap{Down: true}) // Nomad unreachable: nothing is read

	type req struct{ method, path, body string }
	needRead := []req{
		{http.MethodGet, "/v1/replicas", ""},
		{http.MethodGet, "/v1/replicas/alpha-0", ""},
		{http.MethodGet, "/v1/nodes", ""},
		{http.MethodGet, "/v1/nodes?domain=rack=r1", ""},
		{http.MethodGet, "/v1/facility", ""},
		{http.MethodGet, "/v1/models", ""},
		{http.MethodGet, "/v1/models/alpha", ""},
		{http.MethodGet, "/v1/models/alpha/history", ""},
		{http.MethodPut, "/v1/facility/holds/rack=r1", `{"reason": "x"}`},
		{http.MethodPut, "/v1/nodes/n1/labels", `{"set": {"rack": "r9"}}`},
		{http.MethodPost, "/v1/plan", `{}`},
	}
	type answer struct {
		StatusCode int
		Header     http.Header
	}
	do := func(r req) (answer, string) {
		t.Helper()
		hr, err := http.NewRequest(r.method, c.URL+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, resp.Body); err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header}, b.String()
	}
	for _, r := range needRead {
		resp, body := do(r)
		var ae controllerapi.APIError
		_ = json.Unmarshal([]byte(body), &ae)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(ae.Error, "has not read Nomad yet") || !strings.Contains(ae.Error, "nodes") || ae.Hint == "" {
			t.Errorf("%s %s before the first read: %d Retry-After %q %s; want 503 with Retry-After saying Nomad is not read yet",
				r.method, r.path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	for _, r := range []req{
		{http.MethodGet, "/healthz", ""}, {http.MethodGet, "/metrics", ""}, {http.MethodGet, "/v1/catalog", ""},
		{http.MethodGet, "/v1/signals", ""},
	} {
		if resp, body := do(r); resp.StatusCode != http.StatusOK {
			t.Errorf("%s %s before the first read: %d %s, want 200", r.method, r.path, resp.StatusCode, body)
		}
	}
	if e.Fake.Variable("default", "llmgw/holds") != nil {
		t.Error("a hold was written before the first read")
	}

	c.Tap.SetDown(false)
	wait.For(t, "GET /v1/nodes to answer", func() (bool, string) {
		resp, body := do(needRead[2])
		return resp.StatusCode == http.StatusOK, body
	})
	for _, r := range needRead[:8] {
		if resp, body := do(r); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s after the first read: %d %s", r.method, r.path, resp.StatusCode, body)
		}
	}
	var nodes []controllerapi.NodeView
	ctlharness.Call(t, http.MethodGet, c.URL+"/v1/nodes", "", nil, &nodes)
	if len(nodes) != len(sixNodes) {
		t.Errorf("GET /v1/nodes after the first read: %d nodes, want %d", len(nodes), len(sixNodes))
	}
}

// A label, a hold and a release answer once the controller's view shows
// them: the next read shows the write, whether the controller stands by
// (its view refreshed) or leads (its pass). The fake's node shows new
// metadata a second after the client took it, as a Nomad client sends it
// with its next node update.
func TestWritesShowInTheNextRead(t *testing.T) {
	for _, lead := range []bool{false, true} {
		t.Run(map[bool]string{false: "standby", true: "leader"}[lead], func(t *testing.T) {
			e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`, nomadfake.WithNodeMetaDelay(time.Second))
			if !lead {
				e.HoldLock()
			}
			c := e.start("ctl")
			wait.For(t, "the controller to read Nomad (and lead)", func() (bool, string) {
				leader, _ := c.health(t)
				code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/nodes", "", nil, nil)
				return code == http.StatusOK && leader == lead, body
			})

			nodeIn := func(domain string) []controllerapi.NodeView {
				t.Helper()
				var nodes []controllerapi.NodeView
				if code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/nodes?domain="+domain, "", nil, &nodes); code != http.StatusOK {
					t.Fatalf("GET /v1/nodes?domain=%s: %d %s", domain, code, body)
				}
				return nodes
			}
			write := func(method, path string, body any) {
				t.Helper()
				code, raw := ctlharness.Call(t, method, c.URL+path, "", body, nil)
				if code != http.StatusOK || strings.Contains(raw, "warning") {
					t.Fatalf("%s %s: %d %s, want 200 without a warning", method, path, code, raw)
				}
			}

			write(http.MethodPut, "/v1/nodes/n1/labels", controllerapi.LabelsRequest{Set: map[string]string{"rack": "r9"}})
			if nodes := nodeIn("rack=r9"); len(nodes) != 1 || nodes[0].Name != "n1" {
				t.Errorf("nodes in rack=r9 right after the label: %+v, want n1", nodes)
			}

			write(http.MethodPut, "/v1/facility/holds/rack=r9", controllerapi.HoldRequest{Reason: "fan swap"})
			if nodes := nodeIn("rack=r9"); len(nodes) != 1 || !slices.Contains(nodes[0].Held, "rack=r9") {
				t.Errorf("nodes in rack=r9 right after the hold: %+v, want n1 held", nodes)
			}
			var fac controllerapi.FacilityView
			ctlharness.Call(t, http.MethodGet, c.URL+"/v1/facility", "", nil, &fac)
			if !slices.ContainsFunc(fac.Domains, func(d controllerapi.DomainView) bool { return d.Domain == "rack=r9" && d.Hold != nil }) {
				t.Errorf("facility right after the hold: %+v, want rack=r9 held", fac.Domains)
			}

			write(http.MethodDelete, "/v1/facility/holds/rack=r9", nil)
			if nodes := nodeIn("rack=r9"); len(nodes) != 1 || len(nodes[0].Held) != 0 {
				t.Errorf("nodes in rack=r9 right after the release: %+v, want n1 not held", nodes)
			}

			// Unset, a label the client file also sets stays masked (Nomad's
			// merge, as the fake has it): n1 has no rack.
			write(http.MethodPut, "/v1/nodes/n1/labels", controllerapi.LabelsRequest{Unset: []string{"rack"}})
			var all []controllerapi.NodeView
			ctlharness.Call(t, http.MethodGet, c.URL+"/v1/nodes", "", nil, &all)
			for _, n := range all {
				if rack, ok := n.Location["rack"]; n.Name == "n1" && ok {
					t.Errorf("n1 right after unsetting its rack: in rack %q, want none", rack)
				}
			}
		})
	}
}

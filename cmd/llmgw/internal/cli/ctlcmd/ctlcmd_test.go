package ctlcmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctltest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// now is the CLI's clock in the tests: 2h5m after the controller's.
var now = ctltest.Epoch.Add(2*time.Hour + 5*time.Minute)

// result is one run of llmgw ctl.
type result struct {
	code           int
	stdout, stderr string
}

// run runs `llmgw ctl args…` as cli.Execute does (errors on stderr, one
// "llmgw: " line each), with env as its environment.
func run(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	root := &cobra.Command{Use: "llmgw", SilenceUsage: true, SilenceErrors: true}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(New(Options{
		Getenv: func(k string) string { return env[k] },
		Now:    func() time.Time { return now },
	}))
	var stdout, stderr bytes.Buffer
	root.SetArgs(append([]string{"ctl"}, args...))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(t.Context())
	if err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(&stderr, "llmgw: %s\n", line)
		}
	}
	return result{exitCode(err), stdout.String(), stderr.String()}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", name, diff)
	}
}

func addrEnv(e *ctltest.Env) map[string]string { return map[string]string{EnvAddr: e.URL} }

// Every table, against a controller on the Nomad fake.
func TestTablesAgainstController(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{})
	env := addrEnv(e)
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"models.golden", []string{"models"}},
		{"replicas.golden", []string{"replicas"}},
		{"replicas-alpha.golden", []string{"replicas", "--model", "alpha"}},
		{"explain-placed.golden", []string{"explain", "beta-0"}},
		{"explain-unplaced.golden", []string{"explain", "gamma-0"}},
		{"nodes.golden", []string{"nodes"}},
		{"nodes-domain.golden", []string{"nodes", "--domain", "rack=r01-k01"}},
		{"facility.golden", []string{"facility"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			r := run(t, env, tc.args...)
			if r.code != ExitOK || r.stderr != "" {
				t.Fatalf("llmgw ctl %s: exit %d, stderr %q", strings.Join(tc.args, " "), r.code, r.stderr)
			}
			golden(t, tc.golden, r.stdout)
		})
	}
}

// -o json prints what the API answered.
func TestJSONOutputIsTheAPIs(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{})
	env := addrEnv(e)
	for _, tc := range []struct {
		args []string
		path string
	}{
		{[]string{"models"}, "/v1/models"},
		{[]string{"replicas"}, "/v1/replicas"},
		{[]string{"replicas", "--model", "beta"}, "/v1/replicas?model=beta"},
		{[]string{"explain", "gamma-0"}, "/v1/replicas/gamma-0"},
		{[]string{"nodes"}, "/v1/nodes"},
		{[]string{"nodes", "--domain", "pdu=p01-a"}, "/v1/nodes?domain=pdu%3Dp01-a"},
		{[]string{"facility"}, "/v1/facility"},
	} {
		r := run(t, env, append(tc.args, "-o", "json")...)
		if r.code != ExitOK {
			t.Fatalf("llmgw ctl %s -o json: exit %d, stderr %q", strings.Join(tc.args, " "), r.code, r.stderr)
		}
		var got, want any
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("llmgw ctl %s -o json: %v: %s", strings.Join(tc.args, " "), err, r.stdout)
		}
		_, body := e.Call(http.MethodGet, tc.path, "", nil, &want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("llmgw ctl %s -o json differs from GET %s (-api +ctl):\n%s\n%s", strings.Join(tc.args, " "), tc.path, diff, body)
		}
	}
}

// Holds and labels change what the controller serves; the tables show it.
func TestWritesAgainstController(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{})
	env := addrEnv(e)
	var out bytes.Buffer
	step := func(args ...string) result {
		t.Helper()
		r := run(t, env, args...)
		fmt.Fprintf(&out, "$ llmgw ctl %s\n%s%s", shellWords(args), r.stdout, r.stderr)
		if r.code != ExitOK {
			t.Fatalf("llmgw ctl %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
		return r
	}
	// readNow reads a table once, right after a write, and records it: a
	// write answers once the controller's view shows it.
	readNow := func(want string, args ...string) {
		t.Helper()
		r := step(args...)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("llmgw ctl %s right after the write: %q, want %q in it", strings.Join(args, " "), r.stdout, want)
		}
	}

	step("facility", "hold", "rack=r01-k01", "--drain", "--reason", "fan swap")
	readNow("drain (runtime) fan swap", "facility")
	readNow("rack=r01-k01", "nodes", "--domain", "rack=r01-k01")
	step("facility", "release", "rack=r01-k01")
	if r := run(t, env, "facility"); strings.Contains(r.stdout, "fan swap") {
		t.Errorf("llmgw ctl facility right after the release: %q, want no fan swap", r.stdout)
	}

	step("label", "n01", "rack=r01-k09", "pdu=p09-a")
	readNow("r01-k09", "nodes", "--domain", "rack=r01-k09")
	step("label", "n01", "--unset", "pdu")
	readNow("ams1/a/r01/r01-k09/-", "nodes", "--domain", "rack=r01-k09")
	golden(t, "writes.golden", out.String())

	// Writes print the API's answer with -o json.
	r := run(t, env, "facility", "hold", "pdu=p01-b", "--reason", "breaker test", "-o", "json")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != ExitOK || err != nil ||
		got["domain"] != "pdu=p01-b" || got["reason"] != "breaker test" || got["set_by"] != "insecure-loopback" {
		t.Errorf("facility hold -o json: exit %d, %v, %q; want the hold, set by the controller's insecure mode (no token)", r.code, err, r.stdout)
	}
	if r := run(t, env, "facility", "release", "pdu=p01-b", "-o", "json"); r.code != ExitOK || !strings.Contains(r.stdout, `"released": "pdu=p01-b"`) {
		t.Errorf("facility release -o json: exit %d, %q", r.code, r.stdout)
	}

	if got := e.Fake.Node(e.NodeIDs["n01"]).Meta["llmgw.rack"]; got != "r01-k09" {
		t.Errorf("n01's meta llmgw.rack = %q, want r01-k09 (Nomad dynamic node metadata)", got)
	}
	if v := e.Fake.Variable("default", "llmgw/holds"); v != nil && strings.Contains(v.Items["holds"], "r01-k01") {
		t.Errorf("holds variable after release still holds rack=r01-k01: %v", v.Items)
	}
}

// Errors say what to do, on stderr, with an exit status per class.
func TestErrorsAndExitCodes(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{Token: "s3cret"})
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	env := addrEnv(e)
	withToken := map[string]string{EnvAddr: e.URL, EnvToken: "s3cret"}
	var out bytes.Buffer
	for _, tc := range []struct {
		env  map[string]string
		args []string
		code int
	}{
		{withToken, []string{"explain", "alpah-0"}, ExitNotFound},
		{withToken, []string{"replicas", "--model", "alpah"}, ExitNotFound},
		{withToken, []string{"nodes", "--domain", "rack=r01-k1"}, ExitNotFound},
		{withToken, []string{"nodes", "--domain", "shelf=s1"}, ExitUsage},
		{env, []string{"replicas"}, ExitUnauthorized},
		{env, []string{"explain", "alpha-0"}, ExitUnauthorized},
		{withToken, []string{"label", "n1", "rack=r01-k01"}, ExitNotFound},
		{withToken, []string{"label", "n01", "cage=c1"}, ExitUsage},
		{withToken, []string{"label", "n01", "base_watts=abc"}, ExitUsage},
		{withToken, []string{"label", "n01", "rack"}, ExitUsage},
		{withToken, []string{"label", "n01"}, ExitUsage},
		{withToken, []string{"facility", "hold", "rack=r01-k9"}, ExitNotFound},
		{withToken, []string{"facility", "release", "rack=r01-k01"}, ExitNotFound},
		{withToken, []string{"facility", "release", "rack=r02-k02"}, ExitNotFound},
		{env, []string{"facility", "hold", "rack=r01-k01"}, ExitUnauthorized},
		{map[string]string{EnvAddr: e.URL, EnvToken: "wrong"}, []string{"label", "n01", "rack=r01-k01"}, ExitUnauthorized},
		{map[string]string{EnvAddr: closed.URL}, []string{"replicas"}, ExitUnreachable},
		{map[string]string{EnvAddr: "ftp://x"}, []string{"replicas"}, ExitUsage},
		{env, []string{"explain"}, ExitUsage},
		{env, []string{"replicas", "--modl", "alpha"}, ExitUsage},
		{env, []string{"replicas", "-o", "yaml"}, ExitUsage},
		{env, []string{"replica"}, ExitUsage},
	} {
		r := run(t, tc.env, tc.args...)
		if r.code != tc.code {
			t.Errorf("llmgw ctl %s: exit %d, want %d (stderr %q)", strings.Join(tc.args, " "), r.code, tc.code, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("llmgw ctl %s: stdout %q, want none", strings.Join(tc.args, " "), r.stdout)
		}
		stderr := strings.ReplaceAll(r.stderr, strings.TrimPrefix(closed.URL, "http://"), "127.0.0.1:PORT")
		fmt.Fprintf(&out, "$ llmgw ctl %s\n%sexit %d\n\n", strings.Join(tc.args, " "), stderr, r.code)
	}
	golden(t, "errors.golden", out.String())

	// The right token (--token wins over the environment) is accepted.
	r := run(t, map[string]string{EnvAddr: e.URL, EnvToken: "wrong"}, "--token", "s3cret", "facility", "hold", "pdu=p01-a")
	if r.code != ExitOK {
		t.Errorf("hold with --token: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Names complete from the API; the completion command writes scripts.
func TestCompletion(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{})
	env := addrEnv(e)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"explain", "al"}, []string{"alpha-0", "alpha-1", "alpha-2", "alpha"}},
		{[]string{"explain", "alpha-0", ""}, nil},
		{[]string{"label", "n0"}, []string{"n01", "n02", "n03", "n04", "n05", "n06", "n07", "n08"}},
		{[]string{"label", "n01", "r"}, []string{"room=", "row=", "rack="}},
		{[]string{"label", "n01", "--unset", ""}, labelNames},
		{[]string{"nodes", "--domain", "rack="}, []string{"rack=r01-k01", "rack=r01-k02", "rack=r02-k01", "rack=r02-k02"}},
		{[]string{"replicas", "--model", ""}, []string{"alpha", "beta", "gamma"}},
		{[]string{"facility", "hold", "row="}, []string{"row=r01", "row=r02"}},
		{[]string{"facility", "release", ""}, nil}, // no run-time hold; the file's cannot be released here
		{[]string{"-o", ""}, []string{"table", "json"}},
	} {
		// cobra's hidden __complete command, as the shell scripts call it.
		root := &cobra.Command{Use: "llmgw"}
		root.AddCommand(New(Options{Getenv: func(k string) string { return env[k] }}))
		var stdout bytes.Buffer
		root.SetArgs(append([]string{cobra.ShellCompRequestCmd, "ctl"}, tc.args...))
		root.SetOut(&stdout)
		root.SetErr(io.Discard)
		if err := root.Execute(); err != nil {
			t.Fatalf("complete %v: %v", tc.args, err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			if l != "" && !strings.HasPrefix(l, ":") && !strings.HasPrefix(l, "Completion ended") {
				got = append(got, strings.SplitN(l, "\t", 2)[0])
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("completions of %q (-want +got):\n%s", tc.args, diff)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		r := run(t, env, "completion", sh)
		if r.code != ExitOK || !strings.Contains(r.stdout, "llmgw") {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", sh, r.code, len(r.stdout), r.stderr)
		}
	}
	if r := run(t, env, "completion", "tcsh"); r.code != ExitUsage {
		t.Errorf("completion tcsh: exit %d, want %d", r.code, ExitUsage)
	}
}

// shellWords writes args as a shell would need them typed.
func shellWords(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " \t'\"$") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// recorded serves API answers recorded in testdata/api: a replica rolling
// to a new job, a multi-node one, one Nomad could not place, a catalog
// whose last reload was refused, and a facility whose PDU p1 counts
// measured with its caps engaged (the lower-priority model's GPUs at their
// profile's min_watts) and whose PDU p2 admits declared because a GPU
// refused a cap.
func recorded(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{
		"/v1/replicas":             "replicas.json",
		"/v1/replicas/llama-70b-1": "replica-llama-70b-1.json",
		"/v1/replicas/llama-70b-0": "replica-llama-70b-0.json",
		"/v1/catalog":              "catalog.json",
		"/v1/facility":             "facility.json",
		"/v1/power":                "power.json",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := files[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error": "no replica \"x\"", "hint": "did you mean llama-70b-1?"}`))
			return
		}
		b, err := os.ReadFile(filepath.Join("testdata", "api", name))
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return map[string]string{EnvAddr: srv.URL}
}

// Tables from recorded API answers: what a small test controller does not
// produce.
func TestTablesFromRecordedAPI(t *testing.T) {
	env := recorded(t)
	for _, tc := range []struct {
		golden string
		args   []string
		stderr string
	}{
		{"recorded-replicas.golden", []string{"replicas"}, ""},
		{"recorded-explain.golden", []string{"explain", "llama-70b-1"}, ""},
		{"recorded-explain-adapters.golden", []string{"explain", "llama-70b-0"}, ""},
		{"recorded-models.golden", []string{"models"}, "llmgw: warning: the last catalog reload was refused; the catalog above stays in force:\nllmgw: catalog.hcl:12: profile llama-70b/h200x4: gpus: want a whole number\n"},
		{"recorded-facility.golden", []string{"facility"}, ""},
		{"recorded-power.golden", []string{"power"}, ""},
		{"recorded-power-events1.golden", []string{"power", "--events", "1"}, ""},
	} {
		r := run(t, env, tc.args...)
		if r.code != ExitOK || r.stderr != tc.stderr {
			t.Errorf("llmgw ctl %s: exit %d, stderr %q, want 0 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.stderr)
		}
		golden(t, tc.golden, r.stdout)
	}
}

func TestReload(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{Token: "s3cret"})
	if r := run(t, addrEnv(e), "reload"); r.code != ExitUnauthorized {
		t.Errorf("reload without the token: exit %d (%s), want %d", r.code, r.stderr, ExitUnauthorized)
	}
	r := run(t, map[string]string{EnvAddr: e.URL, EnvToken: "s3cret"}, "reload", "--confirm")
	if r.code != ExitOK || r.stdout != "reloaded\n" {
		t.Errorf("reload --confirm: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// The models of a catalog with an autoscaled model: the table, explain of
// the model and of its replica, and a pin set and released with scale.
func TestAutoscaledModels(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{Autoscale: true, Token: "s3cret"})
	env := map[string]string{EnvAddr: e.URL, EnvToken: "s3cret"}
	var out bytes.Buffer
	step := func(code int, args ...string) {
		t.Helper()
		r := run(t, env, args...)
		fmt.Fprintf(&out, "$ llmgw ctl %s\n%s%s", shellWords(args), r.stdout, r.stderr)
		if r.code != code {
			t.Fatalf("llmgw ctl %s: exit %d, want %d; stderr %q", strings.Join(args, " "), r.code, code, r.stderr)
		}
	}
	step(ExitOK, "models")
	step(ExitOK, "explain", "delta")
	step(ExitOK, "explain", "delta-0")
	step(ExitOK, "scale", "delta", "2", "--for", "4h", "--reason", "load test")
	e.Pass()
	e.Pass()
	step(ExitOK, "models")
	step(ExitOK, "explain", "delta")
	step(ExitOK, "scale", "delta", "--release")
	step(ExitNotFound, "scale", "delta", "--release")
	step(ExitUsage, "scale", "alpha", "2")
	step(ExitUsage, "scale", "delta", "9")
	step(ExitUsage, "scale", "delta", "two")
	step(ExitUsage, "scale", "delta", "2", "--for", "1y")
	step(ExitNotFound, "scale", "dleta", "2")
	golden(t, "autoscale.golden", out.String())

	if r := run(t, addrEnv(e), "scale", "delta", "2"); r.code != ExitUnauthorized {
		t.Errorf("scale without the token: exit %d, want %d", r.code, ExitUnauthorized)
	}
	r := run(t, env, "models", "-o", "json")
	var got, want any
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != ExitOK || err != nil {
		t.Fatalf("models -o json: exit %d, %v", r.code, err)
	}
	e.Call(http.MethodGet, "/v1/models", "s3cret", nil, &want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("models -o json differs from GET /v1/models (-api +ctl):\n%s", diff)
	}
}

// Against a controller that has not read Nomad yet, every read of what it
// read says so plainly on stderr and exits 1, rather than printing an empty
// table.
func TestBeforeTheControllerReadsNomad(t *testing.T) {
	e := ctltest.StartUnread(t)
	env := addrEnv(e)
	for _, args := range [][]string{
		{"nodes"}, {"replicas"}, {"facility"}, {"power"}, {"models"}, {"explain", "alpha-0"}, {"nodes", "-o", "json"},
		{"label", "n01", "rack=r01-k01"}, {"facility", "hold", "rack=r01-k01"},
	} {
		r := run(t, env, args...)
		if r.code != ExitError || r.stdout != "" ||
			!strings.Contains(r.stderr, "llmgw: the controller has not read Nomad yet") || !strings.Contains(r.stderr, "try again in a moment") {
			t.Errorf("llmgw ctl %s: exit %d, stdout %q, stderr %q; want exit %d and the controller's message on stderr",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, ExitError)
		}
	}
}

// A write whose answer carries a warning (done, but the controller's view
// did not show it in time) succeeds and prints the warning on stderr.
func TestWriteWarning(t *testing.T) {
	const warn = "node n01 has the new labels, but Nomad's servers did not show them within 15s"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/nodes/n01/labels":
			_, _ = io.WriteString(w, `{"node": "n01", "set": {"rack": "r9"}, "warning": "`+warn+`"}`)
		case "/v1/facility/holds/rack=r9":
			_, _ = io.WriteString(w, `{"domain": "rack=r9", "warning": "`+warn+`"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{EnvAddr: srv.URL}
	for _, args := range [][]string{
		{"label", "n01", "rack=r9"}, {"facility", "hold", "rack=r9"}, {"facility", "release", "rack=r9"}, {"label", "n01", "rack=r9", "-o", "json"},
	} {
		r := run(t, env, args...)
		if r.code != ExitOK || r.stderr != "llmgw: warning: "+warn+"\n" {
			t.Errorf("llmgw ctl %s: exit %d, stderr %q; want 0 and the warning", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// The recorded facility and power answers are the API's: every field
// decodes into controllerapi's types, so the tables above read what a
// controller sends.
func TestRecordedPowerIsTheAPIs(t *testing.T) {
	for name, v := range map[string]any{"facility.json": &controllerapi.FacilityView{}, "power.json": &controllerapi.PowerView{}} {
		b, err := os.ReadFile(filepath.Join("testdata", "api", name))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("testdata/api/%s: %v", name, err)
		}
	}
}

// llmgw ctl power -o json prints GET /v1/power as it is; a bad --events is
// a usage error.
func TestPowerJSONAndFlags(t *testing.T) {
	env := recorded(t)
	r := run(t, env, "power", "-o", "json")
	var got, want any
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != ExitOK || err != nil {
		t.Fatalf("power -o json: exit %d, %v, stderr %q", r.code, err, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "api", "power.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("power -o json differs from the API's answer (-api +ctl):\n%s", diff)
	}
	// A controller that stands by (ctltest's) shows what it learned and no
	// cap round; its facility table has no caps.
	e := ctltest.Start(t, ctltest.Options{})
	if r := run(t, addrEnv(e), "power"); r.code != ExitOK || !strings.Contains(r.stdout, "Learned (per shard)") ||
		!strings.Contains(r.stdout, "no cap round yet: caps are decided by the leader") {
		t.Errorf("power against a standing-by controller: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, env, "power", "--events", "-1"); r.code != ExitUsage || !strings.Contains(r.stderr, "--events -1: want 0 or more") {
		t.Errorf("power --events -1: exit %d, stderr %q; want a usage error naming --events", r.code, r.stderr)
	}
}

// A 403 (a controller without api_token refusing a write) keeps the
// controller's hint, which says what to set on the controller; a 401 says
// to set the token here.
func TestForbiddenKeepsTheControllersHint(t *testing.T) {
	raw := []byte(`{"error": "writes need an API token, and this controller has no api_token", "hint": "set api_token in the controller's llmgw.hcl"}`)
	err := apiError(http.MethodPut, "/v1/facility/holds/rack=r1", http.StatusForbidden, raw)
	var e *Error
	if !errors.As(err, &e) || e.Code != ExitUnauthorized || e.Hint != "set api_token in the controller's llmgw.hcl" {
		t.Errorf("403: %#v, want exit %d with the controller's hint", err, ExitUnauthorized)
	}
	err = apiError(http.MethodGet, "/v1/replicas", http.StatusUnauthorized, []byte(`{"error": "missing or wrong API token", "hint": "send Authorization"}`))
	if !errors.As(err, &e) || e.Code != ExitUnauthorized || !strings.Contains(e.Hint, EnvToken) {
		t.Errorf("401: %#v, want exit %d with a hint naming %s", err, ExitUnauthorized, EnvToken)
	}
	// A plan while another is under way is the controller's refusal, not
	// a bad command line.
	err = apiError(http.MethodPost, "/v1/plan", http.StatusTooManyRequests, []byte(`{"error": "another plan is under way", "hint": "try again in a moment"}`))
	if !errors.As(err, &e) || e.Code != ExitError || e.Hint != "try again in a moment" {
		t.Errorf("429: %#v, want exit %d with the controller's hint", err, ExitError)
	}
}

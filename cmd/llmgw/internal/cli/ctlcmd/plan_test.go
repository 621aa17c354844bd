package ctlcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctltest"
)

// llmgw ctl plan against a controller on the Nomad fake: a catalog with
// one more alpha and no beta, and rack r01-k01 drained. The table and the
// JSON say the same; nothing reaches Nomad but reads; a bad catalog is
// refused at file:line; the token is needed.
func TestPlan(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{Token: "s3cret"})
	env := map[string]string{EnvAddr: e.URL, EnvToken: "s3cret"}
	dir := t.TempDir()
	cat := strings.Replace(ctltest.Catalog, "replicas = 3", "replicas = 4", 1)
	cat = cat[:strings.Index(cat, `model "beta"`)] + cat[strings.Index(cat, `model "gamma"`):]
	catFile := filepath.Join(dir, "catalog.hcl")
	badFile := filepath.Join(dir, "bad.hcl")
	for path, src := range map[string]string{catFile: cat, badFile: strings.Replace(cat, "gpus   = 1", `gpus   = "one"`, 1)} {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.Fake.ResetRequests()
	var out bytes.Buffer
	step := func(code int, args ...string) result {
		t.Helper()
		r := run(t, env, args...)
		shown := strings.ReplaceAll(shellWords(args), dir, "DIR")
		fmt.Fprintf(&out, "$ llmgw ctl %s\n%s%s", shown, r.stdout, strings.ReplaceAll(r.stderr, dir, "DIR"))
		if r.code != code {
			t.Fatalf("llmgw ctl %s: exit %d, want %d; stderr %q", strings.Join(args, " "), r.code, code, r.stderr)
		}
		return r
	}
	step(ExitOK, "plan")
	step(ExitOK, "plan", "--catalog", catFile, "--hold", "rack=r01-k01", "--drain", "--reason", "fan swap")
	step(ExitUsage, "plan", "--catalog", badFile)
	step(ExitNotFound, "plan", "--hold", "rack=r01-k9")
	step(ExitUsage, "plan", "--drain")
	step(ExitUsage, "plan", "--catalog", filepath.Join(dir, "missing.hcl"))
	golden(t, "plan.golden", out.String())
	if !strings.Contains(out.String(), "DIR/bad.hcl:") {
		t.Errorf("the bad catalog's error does not name it at file:line:\n%s", out.String())
	}
	for _, r := range e.Fake.Requests() {
		if r.Method != http.MethodGet && !strings.Contains(r.Path, "llmgw/leader") {
			t.Errorf("ctl plan wrote to Nomad: %s %s", r.Method, r.Path)
		}
	}

	// -o json is the API's answer, and says what the table says.
	r := step(ExitOK, "plan", "--catalog", catFile, "--hold", "rack=r01-k01", "--drain", "-o", "json")
	var v controllerapi.PlanView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	var kinds []string
	for _, ch := range v.Changes {
		kinds = append(kinds, ch.Change+" "+ch.Replica)
	}
	if v.Creates < 1 || v.Stops < 1 || v.Moves < 1 {
		t.Errorf("plan -o json: %d creates, %d moves, %d stops (%v): want each at least once", v.Creates, v.Moves, v.Stops, kinds)
	}
	if !strings.Contains(strings.Join(kinds, ","), "stop beta-0") || !strings.Contains(strings.Join(kinds, ","), "create alpha-3") {
		t.Errorf("plan -o json changes %v: want alpha-3 created and beta-0 stopped", kinds)
	}
	var api controllerapi.PlanView
	req := controllerapi.PlanRequest{Catalog: cat, CatalogName: catFile, Holds: []controllerapi.PlanHold{{Domain: "rack=r01-k01", Drain: true}}}
	if code, body := e.Call(http.MethodPost, "/v1/plan", "s3cret", req, &api); code != http.StatusOK {
		t.Fatalf("POST /v1/plan: %d %s", code, body)
	}
	if diff := cmp.Diff(api, v); diff != "" {
		t.Errorf("plan -o json differs from POST /v1/plan (-api +ctl):\n%s", diff)
	}

	if r := run(t, addrEnv(e), "plan"); r.code != ExitUnauthorized {
		t.Errorf("plan without the token: exit %d, want %d", r.code, ExitUnauthorized)
	}
}

// The catalog's warnings (args no contract checked) show before the
// summary line.
func TestRenderPlanWarnings(t *testing.T) {
	w := `catalog.hcl:3: profile m/p: check_args = false: args are not checked against engine "vllm"'s contract, only for flags llmgw sets`
	got := string(renderPlan(controllerapi.PlanView{Warnings: []string{w}}))
	if !strings.Contains(got, "\nWARNINGS\n"+w+"\n\n0 creates") {
		t.Errorf("plan text has no WARNINGS section before the summary:\n%s", got)
	}
	if got := string(renderPlan(controllerapi.PlanView{})); strings.Contains(got, "WARNINGS") {
		t.Errorf("plan text without warnings shows the section:\n%s", got)
	}
}

// explain MODEL shows the model's warnings.
func TestRenderModelWarnings(t *testing.T) {
	w := `catalog.hcl:3: profile m/p: check_args = false: args are not checked against engine "vllm"'s contract, only for flags llmgw sets`
	for _, auto := range []bool{false, true} {
		got := string(renderModel(controllerapi.ModelView{Name: "m", Autoscale: auto, Warnings: []string{w}}, time.Now()))
		if !strings.Contains(got, "Warning:") || !strings.Contains(got, w) {
			t.Errorf("autoscale %v: explain shows no warning:\n%s", auto, got)
		}
	}
}

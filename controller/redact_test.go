package controller

import (
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
)

// secretCatalog has env values that must never leave the controller.
const secretCatalog = `
model "alpha" {
  source   = "org/alpha"
  replicas = 2
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
    env    = { HF_TOKEN = "hf_SECRET_one", VLLM_LOGGING_LEVEL = "DEBUG_SECRET_two" }
    env_from_variable "API_KEY" {
      variable = "nomad/jobs"
      key      = "api_key"
    }
  }
}
model "delta" {
  source   = "org/delta"
  priority = 70
  autoscale {
    min = 1
    max = 2
    target { outstanding_per_replica = 4 }
  }
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
    env    = { WANDB_API_KEY = "wandb_SECRET_three" }
  }
}
`

var secrets = []string{"hf_SECRET_one", "DEBUG_SECRET_two", "wandb_SECRET_three", "plan_SECRET_four"}

// pathOf turns a GET pattern of routes into a path with real values.
func pathOf(pattern string) string {
	path := strings.TrimPrefix(pattern, "GET ")
	return strings.NewReplacer("{id}", "alpha-0", "{model}", "alpha", "{node}", "n1", "{domain}", "rack=r1").Replace(path)
}

// No answer of the API carries a profile's env value: every GET route
// (routes, so a new one is walked too, and for each model), /healthz,
// /metrics, and the answers of a reload and of a plan whose catalog has
// its own. The keys are shown, with Redacted; env_from_variable's
// references are shown.
func TestAPINeverReturnsEnvValues(t *testing.T) {
	e := newEnv(t, sixNodes, secretCatalog, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	e.ServeAll()
	e.Settle(c)

	check := func(what string, code int, body string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s (%d) returns env value %q:\n%s", what, code, s, body)
			}
		}
	}
	var gets []string
	for pattern := range c.routes() {
		if !strings.HasPrefix(pattern, "GET ") {
			continue
		}
		gets = append(gets, pathOf(pattern))
		if strings.Contains(pattern, "{model}") {
			gets = append(gets, strings.ReplaceAll(pathOf(pattern), "/alpha", "/delta"))
		}
		if strings.Contains(pattern, "{id}") {
			gets = append(gets, strings.ReplaceAll(pathOf(pattern), "alpha-0", "delta-0"))
		}
	}
	gets = append(gets, "/healthz", "/metrics", "/v1/replicas?model=alpha")
	walked := 0
	for _, path := range gets {
		code, body := ctlharness.Call(t, http.MethodGet, c.URL+path, "", nil, nil)
		check("GET "+path, code, body)
		if code == http.StatusOK {
			walked++
		}
	}
	if walked < 12 {
		t.Errorf("only %d GETs answered 200: the walk proves little", walked)
	}

	code, body := ctlharness.Call(t, http.MethodGet, c.URL+"/v1/catalog", "", nil, nil)
	for _, want := range []string{`"HF_TOKEN": "(redacted)"`, `"WANDB_API_KEY": "(redacted)"`, `"Variable": "nomad/jobs"`, `"Key": "api_key"`} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /v1/catalog (%d) lacks %s:\n%s", code, want, body)
		}
	}

	code, body = ctlharness.Call(t, http.MethodPost, c.URL+"/v1/reload", "", nil, nil)
	if code != http.StatusOK || !strings.Contains(body, Redacted) {
		t.Errorf("POST /v1/reload: %d, want 200 with redacted env:\n%s", code, body)
	}
	check("POST /v1/reload", code, body)

	planCat := strings.Replace(secretCatalog, `wandb_SECRET_three`, `plan_SECRET_four`, 1)
	code, body = ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", controllerapi.PlanRequest{Catalog: planCat}, nil)
	if code != http.StatusOK {
		t.Errorf("POST /v1/plan: %d %s", code, body)
	}
	check("POST /v1/plan", code, body)
	bad := strings.Replace(planCat, `gpus   = 1`, `gpus   = "plan_SECRET_four"`, 1)
	code, body = ctlharness.Call(t, http.MethodPost, c.URL+"/v1/plan", "", controllerapi.PlanRequest{Catalog: bad}, nil)
	if code != http.StatusUnprocessableEntity {
		t.Errorf("POST /v1/plan of a bad catalog: %d %s, want 422", code, body)
	}
}

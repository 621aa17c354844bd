package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// secretFlags is the Variable item the engine gets through
// env_from_variable: fake-engine reads its own flags from
// FAKE_ENGINE_FLAGS and prints the load time in its startup line, so the
// engine's log shows whether the value arrived.
const secretFlags = "--load-seconds 1.25"

// TestControllerVariableEnvOverRealNomad: a profile's env_from_variable
// reaches the engine on a Nomad with ACLs on. The value sits in the Nomad
// Variable nomad/jobs (which every job of the namespace may read with its
// workload identity, no policy needed); the controller, whose token holds
// only jobs/llmgw-acl.hcl (no variable read beyond llmgw/), renders the
// template and never reads it; Nomad's template writes it into the task's
// secrets dir; the driver passes it to the engine. Neither the job Nomad
// stores nor the controller's API carries the value. A second model names
// a Variable outside the job's implicit paths: with ACLs its task cannot
// read it and the replica never serves, which is why the docs say
// nomad/jobs; without ACLs it serves too.
func TestControllerVariableEnvOverRealNomad(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	t.Run("acl", func(t *testing.T) {
		variableEnv(t, nomadtest.StartACL(t, gpuClient("gpu-1", "k1", "p1", plugins, engine, "")), engine, true)
	})
	t.Run("no acl", func(t *testing.T) {
		variableEnv(t, nomadtest.Start(t, gpuClient("gpu-1", "k1", "p1", plugins, engine, "")), engine, false)
	})
}

func variableEnv(t *testing.T, c *nomadtest.Cluster, engine string, acl bool) {
	mgmt := c.API
	for path, items := range map[string]api.VariableItems{
		"nomad/jobs":       {"engine_flags": secretFlags},
		"llmgw/secrets/hf": {"engine_flags": secretFlags},
	} {
		if _, _, err := mgmt.Variables().Create(&api.Variable{Path: path, Items: items}, nil); err != nil {
			t.Fatalf("variable %s: %v", path, err)
		}
	}
	src, err := os.ReadFile(aclPolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	token := ""
	if acl {
		if _, err := mgmt.ACLPolicies().Upsert(&api.ACLPolicy{Name: "llmgw", Rules: string(src)}, nil); err != nil {
			t.Fatal(err)
		}
		tok, _, err := mgmt.ACLTokens().Create(&api.ACLToken{Name: "llmgw", Type: "client", Policies: []string{"llmgw"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		token = tok.SecretID
	}
	model := func(name, variable string) string {
		return fmt.Sprintf(`
model %[1]q {
  source   = "org/%[1]s"
  replicas = 1
  profile "x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    env    = { OTHER_SETTING = "plain" }
    env_from_variable "FAKE_ENGINE_FLAGS" {
      variable = %[2]q
      key      = "engine_flags"
    }
  }
}
`, name, variable)
	}
	catalog := model("alpha", "nomad/jobs") + model("beta", "llmgw/secrets/hf")
	cfg := controllerFiles(t, c.Server.Addr(), engine, catalog, `headroom = 0`)
	cfg.Nomad.Token = token
	h := runLoggedController(t, cfg, "ctl-1")
	want := []string{"alpha-0"}
	if !acl {
		want = append(want, "beta-0")
	}
	rs := waitServing(t, h.base, 3*time.Minute, want...)
	alpha := replicaByID(rs, "alpha-0")

	// The engine started with the Variable's value.
	for _, id := range want {
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			a, _, err := mgmt.Allocations().Info(serviceAlloc(t, c, replicaByID(rs, id).JobID), nil)
			if err != nil {
				return false, err.Error()
			}
			out, _ := c.Logs(a, "engine", "stdout")
			return strings.Contains(out, " load_seconds=1.25"), id + ": engine stdout: " + out
		})
	}

	// The job Nomad holds names the Variable, never the value.
	job, _, err := mgmt.Jobs().Info(alpha.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(job)
	if strings.Contains(string(b), secretFlags) {
		t.Errorf("job %s carries the Variable's value", alpha.JobID)
	}
	if !strings.Contains(string(b), `nomadVar \"nomad/jobs\"`) {
		t.Errorf("job %s has no nomadVar template", alpha.JobID)
	}
	// Nor does the controller's API: env values are redacted, references shown.
	resp, err := http.Get(h.base + "/v1/catalog")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), secretFlags) || strings.Contains(string(body), `"plain"`) || !strings.Contains(string(body), `"OTHER_SETTING": "(redacted)"`) {
		t.Errorf("GET /v1/catalog shows an env value or no redaction:\n%s", body)
	}

	if !acl {
		return
	}
	// beta's Variable is outside its job's implicit paths: Nomad's template
	// cannot read it with the task's identity, and beta does not serve.
	var betaJob string
	for _, r := range getReplicas(t, h.base) {
		if r.ID == "beta-0" {
			betaJob = r.JobID
			if r.State == "serving" {
				t.Errorf("beta-0 serves with a Variable its workload identity may not read")
			}
		}
	}
	if betaJob == "" {
		t.Fatal("beta-0 has no job")
	}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		stubs, _, err := mgmt.Jobs().Allocations(betaJob, false, nil)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, s := range stubs {
			for _, ts := range s.TaskStates {
				for _, ev := range ts.Events {
					msg := ev.Type + ": " + ev.DisplayMessage
					seen = append(seen, msg)
					if strings.Contains(msg, "llmgw/secrets/hf") || strings.Contains(strings.ToLower(msg), "permission denied") {
						t.Logf("beta's task event: %s", msg)
						return true, ""
					}
				}
			}
		}
		return false, fmt.Sprintf("beta's task events: %v", seen)
	})
	for _, r := range getReplicas(t, h.base) {
		if r.ID == "beta-0" && r.State == "serving" {
			t.Errorf("beta-0 serves with a Variable its workload identity may not read")
		}
	}
}

package facility

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const envVarCatalog = `
model "alpha" {
  source   = "org/alpha"
  replicas = 1
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    env    = { VLLM_LOGGING_LEVEL = "DEBUG" }
    env_from_variable "HF_TOKEN" {
      variable = "nomad/jobs"
      key      = "hf_token"
    }
    env_from_variable "API_KEY" {
      variable = "llmgw/secrets/alpha"
      key      = "api-key.v2"
    }
  }
}
`

// env_from_variable names an item of a Nomad Variable per engine variable;
// the references are part of the fingerprint, sorted by name.
func TestEnvFromVariable(t *testing.T) {
	t.Parallel()
	cat, err := ParseCatalog("catalog.hcl", []byte(envVarCatalog))
	if err != nil {
		t.Fatal(err)
	}
	p := cat.Models[0].Profiles[0]
	want := []VariableEnv{
		{Name: "API_KEY", Variable: "llmgw/secrets/alpha", Key: "api-key.v2", Pos: Pos{"catalog.hcl", 13}},
		{Name: "HF_TOKEN", Variable: "nomad/jobs", Key: "hf_token", Pos: Pos{"catalog.hcl", 9}},
	}
	if diff := cmp.Diff(want, p.EnvFromVariable); diff != "" {
		t.Errorf("env_from_variable (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"VLLM_LOGGING_LEVEL": "DEBUG"}, p.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}

	// The fingerprint follows the references; a profile without any keeps
	// the fingerprint it had before env_from_variable existed.
	fp := ProfileFingerprint(cat.Models[0], p)
	q := p
	q.EnvFromVariable = []VariableEnv{want[0], {Name: "HF_TOKEN", Variable: "nomad/jobs", Key: "hf_token_2"}}
	if ProfileFingerprint(cat.Models[0], q) == fp {
		t.Error("changing an env_from_variable key kept the fingerprint")
	}
	q.EnvFromVariable = nil
	r := p
	r.EnvFromVariable = []VariableEnv{}
	if ProfileFingerprint(cat.Models[0], q) != ProfileFingerprint(cat.Models[0], r) {
		t.Error("nil and empty env_from_variable fingerprint differently")
	}
}

// Every bad env_from_variable is reported at its line.
func TestEnvFromVariableErrors(t *testing.T) {
	t.Parallel()
	src := `
model "alpha" {
  source = "org/alpha"
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    env    = { HF_TOKEN = "hf_plain" }
    env_from_variable "HF_TOKEN" {
      variable = "nomad/jobs"
      key      = "hf_token"
    }
    env_from_variable "9X" {
      variable = "/bad//path"
      key      = "a b"
    }
    env_from_variable "B" {
      variable = "nomad/secrets"
      key      = "k"
    }
    env_from_variable "B" {
      variable = "llmgw/secrets/hf"
      key      = "k"
    }
    env_from_variable "C" {
      variable = "llmgw/secrets/hf"
    }
  }
}
`
	_, err := ParseCatalog("catalog.hcl", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`catalog.hcl:8: profile "h1": env_from_variable "HF_TOKEN": HF_TOKEN is in env too (line 7): give it one source`,
		`catalog.hcl:12: profile "h1": env_from_variable "9X": not an environment variable name`,
		`catalog.hcl:13: profile "h1": env_from_variable "9X": variable: "/bad//path" is not a Nomad Variable path`,
		`catalog.hcl:14: profile "h1": env_from_variable "9X": key: "a b" is not an item key`,
		`catalog.hcl:17: profile "h1": env_from_variable "B": variable: "nomad/secrets": Nomad keeps nomad/ for itself`,
		`catalog.hcl:20: profile "h1": env_from_variable "B": given twice (first at catalog.hcl:16)`,
		`catalog.hcl:24: Missing required argument: The argument "key" is required`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 7 {
		t.Errorf("%d problems, want 7:\n%v", n, err)
	}
}

func TestCheckVariablePath(t *testing.T) {
	t.Parallel()
	for path, ok := range map[string]bool{
		"nomad/jobs": true, "nomad/jobs/llmgw": true, "llmgw/secrets/hf": true, "a~b_c-d": true,
		"": false, "/x": false, "x/": false, "x//y": false, "x y": false, "x.y": false, "nomad/x": false, "nomad": false,
		strings.Repeat("a", 129): false,
	} {
		if err := CheckVariablePath(path); (err == nil) != ok {
			t.Errorf("CheckVariablePath(%q) = %v, want ok %v", path, err, ok)
		}
	}
}

package driver

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// The lean supervisor is taken only when an executable file stands
// beside the driver; otherwise the error says why.
func TestLeanSupervisor(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "nomad-driver-llmgw")
	lean := filepath.Join(dir, "llmgw-supervisor")
	if _, err := LeanSupervisor(self); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: %v, want not exist", err)
	}
	if err := os.Mkdir(lean, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LeanSupervisor(self); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory: %v, want is a directory", err)
	}
	if err := os.Remove(lean); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lean, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LeanSupervisor(self); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("not executable: %v, want permission", err)
	}
	if err := os.Chmod(lean, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := LeanSupervisor(self); err != nil || got != lean {
		t.Errorf("executable: %q, %v; want %q", got, err, lean)
	}
}

// lookPath takes a name with a slash as it is, else the first executable
// on PATH, and skips what cannot run.
func TestLookPath(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(a, "engine"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, "engine"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := lookPath("engine", a+":"+b); err != nil || got != filepath.Join(b, "engine") {
		t.Errorf("on PATH: %q, %v", got, err)
	}
	if _, err := lookPath("engine", a); err == nil || !strings.Contains(err.Error(), "not found on PATH") {
		t.Errorf("only a non-executable on PATH: %v", err)
	}
	if _, err := lookPath(filepath.Join(a, "engine"), ""); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("a path that cannot run: %v", err)
	}
}

// A template's env file (such as the controller's env_from_variable
// template, secrets/llmgw-variables.env) reaches the driver as part of the
// task environment Nomad builds: the engine gets it, values untouched,
// and the task config's env, where the controller leaves such a name out,
// does not mask it.
func TestTemplateEnvReachesTheEngine(t *testing.T) {
	conf := DefaultConfig()
	conf.AllowAnyCommand = true
	tc := TaskConfig{Engine: "command", Command: "/bin/sh", Port: "http", Env: map[string]string{"VLLM_LOGGING_LEVEL": "DEBUG"}}
	task := &driverpb.TaskConfig{
		Env: map[string]string{
			"PATH":     "/usr/bin:/bin",
			"HF_TOKEN": `hf_a"b c=d`, // as Nomad parsed it from HF_TOKEN="hf_a\"b c=d"
			"API_KEY":  "k-123",
		},
		Resources: &driverpb.Resources{Ports: []*driverpb.PortMapping{{Label: "http", Value: 23000}}},
	}
	pl, err := makePlan(conf, task, tc, noNVML)
	if err != nil {
		t.Fatal(err)
	}
	env := envMap(pl.env)
	for k, want := range map[string]string{"HF_TOKEN": `hf_a"b c=d`, "API_KEY": "k-123", "VLLM_LOGGING_LEVEL": "DEBUG"} {
		if env[k] != want {
			t.Errorf("engine env %s = %q, want %q", k, env[k], want)
		}
	}
}

package driver

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

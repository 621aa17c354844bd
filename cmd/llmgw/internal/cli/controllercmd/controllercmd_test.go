package controllercmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIdentity(t *testing.T) {
	host, _ := os.Hostname()
	base := fmt.Sprintf("%s:%d", host, os.Getpid())
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if got := identity(getenv); got != base {
		t.Errorf("identity outside Nomad = %q, want %q", got, base)
	}
	env["NOMAD_ALLOC_ID"] = "5b1f0c0e-8f55-4c1e-9e43-2d1c7a0b9f10"
	if got, want := identity(getenv), base+" alloc 5b1f0c0e-8f55-4c1e-9e43-2d1c7a0b9f10"; got != want {
		t.Errorf("identity in a Nomad task = %q, want %q", got, want)
	}
}

// insecure_writes on an address that is not loopback: the controller does
// not start, and says why.
func TestInsecureWritesOnlyOnLoopback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "llmgw.hcl")
	if err := os.WriteFile(path, []byte("listen = \"0.0.0.0:0\"\ninsecure_writes = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(t.Context(), path, "info")
	if err == nil || !strings.Contains(err.Error(), `insecure_writes: listen "0.0.0.0:0" is not a loopback address`) {
		t.Errorf("run: %v, want insecure_writes refused", err)
	}
}

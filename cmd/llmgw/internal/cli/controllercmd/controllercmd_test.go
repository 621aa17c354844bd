package controllercmd

import (
	"fmt"
	"os"
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

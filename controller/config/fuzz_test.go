package config

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/internal/hcldecode"
	"github.com/llmgw/llmgw/internal/testing/hostile"
)

// FuzzParse: Parse never panics, and either returns a configuration that
// holds its invariants or errors that are all *Error naming the file.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		`listen = "127.0.0.1:9797"`,
		"nomad {\n  address = \"https://n:4646\"\n  tls {\n    insecure = true\n  }\n}\n",
		"consul {}\nservice_provider = \"consul\"\n",
		"driver {\n  ready_timeout = \"30m\"\n  env = { A = \"1\" }\n  engines = { vllm = \"/bin/vllm\" }\n}\n",
		"reconcile {\n  interval = \"30s\"\n  partial_deadline = \"10m\"\n}\n",
		"node_base_watts = 1200\npriority = 50\ndatacenters = [\"*\"]\n",
		`api_token = env("TOKEN")`,
		"listen = \n",
		"driver {\n  kill_timeout = \"-1s\"\n}\n",
		"nomad {\n  namespace = \"a\"\n  namespaces = [\"default\", \"a\"]\n}\n",
		"nomad {\n  namespaces = [\"b\"]\n}\n",
	} {
		f.Add(s)
	}
	for _, b := range hostile.HCLSeeds() {
		f.Add(string(b))
	}
	env := envMap(map[string]string{"TOKEN": "t", "NOMAD_ADDR": "http://127.0.0.1:4646"})
	f.Fuzz(func(t *testing.T, src string) {
		c, err := Parse("f.hcl", []byte(src), env)
		if err != nil {
			var errs []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			} else {
				errs = []error{err}
			}
			for _, e := range errs {
				var ce *hcldecode.Problem
				if !errors.As(e, &ce) {
					t.Fatalf("error %q is not a *hcldecode.Problem", e)
				}
				if !strings.HasPrefix(e.Error(), "f.hcl:") {
					t.Fatalf("error %q does not name the file", e)
				}
			}
			return
		}
		if checkListen(c.Listen) != nil || checkNomadAddress(c.Nomad.Address) != nil {
			t.Fatalf("bad listen %q or address %q accepted", c.Listen, c.Nomad.Address)
		}
		if c.ServiceProvider == "consul" && c.Consul == nil {
			t.Fatal("consul provider without consul block accepted")
		}
		if ns := c.Nomad.Namespaces; len(ns) == 0 || (len(ns) > 1 || ns[0] != AllNamespaces) && !slices.Contains(ns, cmp.Or(c.Nomad.Namespace, "default")) {
			t.Fatalf("namespaces %q without nomad.namespace %q accepted", ns, c.Nomad.Namespace)
		}
		if c.NodeBaseWatts < 0 || c.Priority < 0 || len(c.Datacenters) == 0 {
			t.Fatalf("bad values accepted: %+v", c)
		}
		d := c.Driver
		if d.ReadyInterval < minReadyInterval || d.ReadyTimeout <= 0 || d.KillTimeout <= 0 || d.ShutdownDelay < 0 ||
			d.CheckInterval < minCheckIntervalTimeout || d.CheckTimeout < minCheckIntervalTimeout ||
			c.Reconcile.Interval <= 0 || c.Reconcile.PartialDeadline <= 0 {
			t.Fatalf("bad durations accepted: %+v %+v", d, c.Reconcile)
		}
	})
}

// Package nomadtest is the e2e suite's face of internal/testing/localnomad: real
// Nomad agents from NOMAD_BIN (and Consul agents from CONSUL_BIN, for the
// tests that need them) on loopback, with failures reported through
// testing.TB, everything stopped when the test ends, and the agents' logs
// printed (and kept under LLMGW_E2E_LOGS when set) when it fails.
package nomadtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// ClientOptions describes one client agent.
type ClientOptions = localnomad.ClientOptions

// Agent is one Nomad agent process.
type Agent = localnomad.Agent

// Cluster is a server and its clients, tied to a test.
type Cluster struct {
	*localnomad.Cluster
	t testing.TB
}

// Bin returns NOMAD_BIN, or skips the test with a message saying how to run
// it.
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("NOMAD_BIN")
	if bin == "" {
		t.Skip("skipping real-Nomad test: NOMAD_BIN is not set (point it at a Nomad agent binary; see e2e/README.md)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("NOMAD_BIN=%s: %v", bin, err)
	}
	return bin
}

// ConsulBin returns CONSUL_BIN, or skips the test with a message saying how
// to run it.
func ConsulBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("CONSUL_BIN")
	if bin == "" {
		t.Skip("skipping real-Consul test: CONSUL_BIN is not set (point it at a Consul agent binary; see e2e/README.md)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("CONSUL_BIN=%s: %v", bin, err)
	}
	return bin
}

// Consul is a Consul dev server and client agents, one per Nomad client
// that registers services (a Nomad client must have its own agent).
type Consul struct {
	Server *localnomad.ConsulAgent
	// Clients by the name of the Nomad client each is for; an agent's own
	// name is "consul-" and that name.
	Clients map[string]*localnomad.ConsulAgent
}

// ClientAddrs maps the name of each Nomad client to its Consul agent's
// HTTP address (host:port), as ClientOptions.Consul takes it.
func (c *Consul) ClientAddrs() map[string]string {
	out := map[string]string{}
	for n, a := range c.Clients {
		out[n] = a.HostPort()
	}
	return out
}

// StartConsul starts a Consul dev server from CONSUL_BIN on loopback and a
// client agent joined to it for each Nomad client named in clients, and
// waits until every one knows the leader; they are stopped when the test
// ends, after whatever the test started later (a Nomad cluster registering
// services in them), and their logs printed if it failed.
func StartConsul(t testing.TB, clients ...string) *Consul {
	t.Helper()
	dir := t.TempDir()
	srv, err := localnomad.StartConsul(ConsulBin(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &Consul{Server: srv, Clients: map[string]*localnomad.ConsulAgent{}}
	all := []*localnomad.ConsulAgent{srv}
	t.Cleanup(func() {
		for _, a := range slices.Backward(all) {
			if err := a.Stop(); err != nil {
				t.Errorf("stopping consul: %v", err)
			}
		}
		if t.Failed() {
			for _, a := range all {
				showLog(t, a.Agent)
			}
		}
	})
	for _, n := range clients {
		a, err := srv.StartClient("consul-"+n, dir)
		if err != nil {
			t.Fatal(err)
		}
		c.Clients[n] = a
		all = append(all, a)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for _, a := range all {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatalf("consul agent %s not ready: %v", a.Name, err)
		}
	}
	return c
}

// Start launches a server and the clients, and waits until every client's
// node is ready and the server has a leader.
func Start(t testing.TB, clients ...ClientOptions) *Cluster {
	t.Helper()
	lc, err := localnomad.New(Bin(t), "")
	if err != nil {
		t.Fatalf("start nomad: %v", err)
	}
	c := &Cluster{Cluster: lc, t: t}
	t.Cleanup(c.shutdown)
	for _, co := range clients {
		if _, err := lc.AddClient(co); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReady(90 * time.Second)
	return c
}

// StartACL is Start with Nomad's ACLs on in every agent, bootstrapped
// before the clients start: API carries the management token
// (ManagementToken), as every helper here does.
func StartACL(t testing.TB, clients ...ClientOptions) *Cluster {
	t.Helper()
	lc, err := localnomad.NewWithOptions(Bin(t), "", localnomad.Options{ACL: true})
	if err != nil {
		t.Fatalf("start nomad with ACLs: %v", err)
	}
	c := &Cluster{Cluster: lc, t: t}
	t.Cleanup(c.shutdown)
	for _, co := range clients {
		if _, err := lc.AddClient(co); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitReady(90 * time.Second)
	return c
}

// AddClient starts one more client agent without waiting for its node to be
// ready (it may be expected to fail).
func (c *Cluster) AddClient(co ClientOptions) *Agent {
	c.t.Helper()
	a, err := c.Cluster.AddClient(co)
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

// WaitReady polls until every client's node is ready.
func (c *Cluster) WaitReady(timeout time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Cluster.WaitReady(ctx); err != nil {
		c.t.Fatalf("nomad cluster not ready: %v", err)
	}
}

// NodeID returns the node ID of the named client.
func (c *Cluster) NodeID(name string) string {
	c.t.Helper()
	id, err := c.Cluster.NodeID(name)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// Logs fetches a task's stdout or stderr through the agent API.
func (c *Cluster) Logs(alloc *api.Allocation, task, typ string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Cluster.Logs(ctx, alloc, task, typ)
}

// WaitAllocs polls the job's allocations until want says they are done.
func (c *Cluster) WaitAllocs(jobID string, timeout time.Duration, want func([]*api.AllocationListStub) (bool, string)) []*api.AllocationListStub {
	c.t.Helper()
	var last []*api.AllocationListStub
	Eventually(c.t, timeout, func() (bool, string) {
		allocs, _, err := c.API.Jobs().Allocations(jobID, true, nil)
		if err != nil {
			return false, err.Error()
		}
		last = allocs
		return want(allocs)
	})
	return last
}

func (c *Cluster) shutdown() {
	agents := append([]*Agent{c.Server}, c.Clients...)
	if c.t.Failed() {
		for _, a := range agents {
			showLog(c.t, a)
		}
	}
	// With LLMGW_E2E_LOGS, the agents' directories outlive their shutdown
	// long enough to keep whole logs, shutdown included: what goes wrong
	// while the cluster stops (a task Nomad cannot kill, an agent that
	// hangs) fails the test only after this, in its own clean-up checks.
	keep := os.Getenv("LLMGW_E2E_LOGS") != ""
	if err := c.Shutdown(keep); err != nil {
		c.t.Logf("shutting the cluster down: %v", err)
	}
	if keep {
		for _, a := range agents {
			keepLog(c.t, a, "-shutdown")
		}
		if err := os.RemoveAll(c.Root); err != nil {
			c.t.Logf("removing %s: %v", c.Root, err)
		}
	}
}

// showLog prints the end of an agent's log, and keeps all of it under
// LLMGW_E2E_LOGS when set.
func showLog(t testing.TB, a *Agent) {
	t.Logf("---- %s agent log (last 60 lines) ----\n%s", a.Name, localnomad.Tail(a.Log(), 60))
	keepLog(t, a, "")
}

// keepLog writes the agent's whole log under LLMGW_E2E_LOGS, when set, as
// <test>-<agent><suffix>.log.
func keepLog(t testing.TB, a *Agent, suffix string) {
	keep := os.Getenv("LLMGW_E2E_LOGS")
	if keep != "" && os.MkdirAll(keep, 0o755) == nil {
		dst := filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_")+"-"+a.Name+suffix+".log")
		if os.WriteFile(dst, []byte(a.Log()), 0o644) == nil {
			t.Logf("full %s log kept at %s", a.Name, dst)
		}
	}
}

// Eventually is wait.For as the e2e tests spell it: cond polled every
// 250ms (it asks a real agent) until it returns true or timeout passes;
// the string explains the last failed check.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	wait.For(t, "the condition", cond, wait.Within(timeout), wait.Every(250*time.Millisecond))
}

// PluginDir makes a plugin dir holding copies of the given binaries.
func PluginDir(t testing.TB, bins ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins")
	if err := localnomad.PluginDir(dir, bins...); err != nil {
		t.Fatal(err)
	}
	return dir
}

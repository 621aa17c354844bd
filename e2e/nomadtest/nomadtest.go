// Package nomadtest runs real Nomad agents for the e2e tests: one server and
// any number of clients on loopback, each with its own data dir, ports,
// node meta, plugin dir and plugin configuration, started from the binary
// named by NOMAD_BIN. Readiness is always polled, never slept for.
//
// Agents can be stopped and started again on the same data dir, which is
// how the driver's recovery and the controller's adoption are tested.
package nomadtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

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

// ClientOptions describes one client agent.
type ClientOptions struct {
	Name string
	Meta map[string]string
	// PluginDir holds the external plugin binaries; empty for none.
	PluginDir string
	// Plugins maps a plugin binary name to the HCL body of its config block,
	// e.g. {"nomad-device-nvml": `mock { system = "dgxh200" }`}.
	Plugins map[string]string
	// RawExec enables the raw_exec driver (default true).
	NoRawExec bool
	// Extra is appended to the client block.
	Extra string
}

// Agent is one Nomad agent process.
type Agent struct {
	Name    string
	Dir     string // data dir parent: config, data, log
	HTTP    int
	RPC     int
	Serf    int
	config  string
	bin     string
	t       testing.TB
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	logFile *os.File
}

// Cluster is a server and its clients.
type Cluster struct {
	Server  *Agent
	Clients []*Agent
	API     *api.Client
	t       testing.TB
	root    string
}

// Start launches a server and the clients, and waits until every client's
// node is ready and the server has a leader. Everything is stopped when the
// test ends; on failure the agents' logs are printed.
func Start(t testing.TB, clients ...ClientOptions) *Cluster {
	t.Helper()
	bin := Bin(t)
	// Not t.TempDir: Nomad leaves tmpfs mounts (task secrets dirs) behind
	// that must be unmounted before the tree can be removed.
	root, err := os.MkdirTemp("", "llmgw-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, root: root}
	srv := newAgent(t, bin, root, "server")
	srv.config = fmt.Sprintf(`
name       = "server"
data_dir   = %q
bind_addr  = "127.0.0.1"
log_level  = "DEBUG"
disable_update_check = true
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1:%d"
  rpc  = "127.0.0.1:%d"
  serf = "127.0.0.1:%d"
}
server {
  enabled          = true
  bootstrap_expect = 1
}
client { enabled = false }
consul {
  client_auto_join = false
  server_auto_join = false
  auto_advertise   = false
}
`, filepath.Join(srv.Dir, "data"), srv.HTTP, srv.RPC, srv.Serf, srv.HTTP, srv.RPC, srv.Serf)
	c.Server = srv
	t.Cleanup(c.stopAll)
	if err := srv.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	cfg := api.DefaultConfig()
	cfg.Address = fmt.Sprintf("http://127.0.0.1:%d", srv.HTTP)
	cfg.Namespace = ""
	cfg.Region = ""
	cfg.SecretID = ""
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("nomad api client: %v", err)
	}
	c.API = client
	for i, co := range clients {
		if co.Name == "" {
			co.Name = fmt.Sprintf("client-%d", i+1)
		}
		a := newAgent(t, bin, root, co.Name)
		a.config = clientConfig(a, srv, co, i)
		c.Clients = append(c.Clients, a)
		if err := a.Start(); err != nil {
			t.Fatalf("start client %s: %v", co.Name, err)
		}
	}
	c.WaitReady(90 * time.Second)
	return c
}

func clientConfig(a, srv *Agent, co ClientOptions, i int) string {
	var meta, plugins strings.Builder
	keys := make([]string, 0, len(co.Meta))
	for k := range co.Meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&meta, "    %q = %q\n", k, co.Meta[k])
	}
	if !co.NoRawExec {
		plugins.WriteString("plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n")
	}
	names := make([]string, 0, len(co.Plugins))
	for k := range co.Plugins {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&plugins, "plugin %q {\n  config {\n%s\n  }\n}\n", n, co.Plugins[n])
	}
	pluginDir := ""
	if co.PluginDir != "" {
		pluginDir = fmt.Sprintf("plugin_dir = %q", co.PluginDir)
	}
	// Each client gets its own dynamic port range so two clients on one
	// host never hand out the same port.
	minPort := 21000 + i*1000
	return fmt.Sprintf(`
name       = %q
data_dir   = %q
bind_addr  = "127.0.0.1"
log_level  = "DEBUG"
disable_update_check = true
%s
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1:%d"
  rpc  = "127.0.0.1:%d"
  serf = "127.0.0.1:%d"
}
server { enabled = false }
client {
  enabled          = true
  servers          = ["127.0.0.1:%d"]
  min_dynamic_port = %d
  max_dynamic_port = %d
  network_interface = "lo"
  meta {
%s  }
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
%s
}
consul {
  client_auto_join = false
  server_auto_join = false
  auto_advertise   = false
}
%s
`, co.Name, filepath.Join(a.Dir, "data"), pluginDir, a.HTTP, a.RPC, a.Serf, a.HTTP, a.RPC, a.Serf,
		srv.RPC, minPort, minPort+999, meta.String(), co.Extra, plugins.String())
}

func newAgent(t testing.TB, bin, root, name string) *Agent {
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 3)
	return &Agent{Name: name, Dir: dir, HTTP: ports[0], RPC: ports[1], Serf: ports[2], bin: bin, t: t}
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return out
}

// Start launches the agent (again, on the same data dir after Stop).
func (a *Agent) Start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		return fmt.Errorf("agent %s already running", a.Name)
	}
	cfgPath := filepath.Join(a.Dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(a.config), 0o644); err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(a.Dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(a.bin, "agent", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own process group, so that a test can stop the agent without
	// signalling the tasks it started (Nomad keeps tasks running when a
	// client agent stops).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	a.cmd, a.logFile, a.exited = cmd, lf, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(cmd, a.exited)
	return nil
}

// Stop sends SIGINT and waits for the agent to exit (SIGKILL after 30s).
func (a *Agent) Stop() {
	a.mu.Lock()
	cmd, exited, lf := a.cmd, a.exited, a.logFile
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	lf.Close()
}

// Exited reports whether the agent process has ended by itself.
func (a *Agent) Exited() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.exited == nil {
		return true
	}
	select {
	case <-a.exited:
		return true
	default:
		return false
	}
}

// Log returns the agent's log so far.
func (a *Agent) Log() string {
	b, _ := os.ReadFile(filepath.Join(a.Dir, "agent.log"))
	return string(b)
}

// Addr is the agent's HTTP address.
func (a *Agent) Addr() string { return fmt.Sprintf("http://127.0.0.1:%d", a.HTTP) }

// stopAll stops every job (so that no task outlives the test), then the
// agents, then unmounts what Nomad left mounted and removes the tree.
func (c *Cluster) stopAll() {
	if c.t.Failed() {
		keep := os.Getenv("LLMGW_E2E_LOGS")
		for _, a := range append([]*Agent{c.Server}, c.Clients...) {
			c.t.Logf("---- %s agent log (last 60 lines) ----\n%s", a.Name, tail(a.Log(), 60))
			if keep != "" {
				dst := filepath.Join(keep, strings.ReplaceAll(c.t.Name(), "/", "_")+"-"+a.Name+".log")
				if err := os.MkdirAll(keep, 0o755); err == nil {
					_ = os.WriteFile(dst, []byte(a.Log()), 0o644)
					c.t.Logf("full %s log kept at %s", a.Name, dst)
				}
			}
		}
	}
	if c.API != nil && !c.Server.Exited() {
		c.stopJobs(30 * time.Second)
	}
	for _, a := range c.Clients {
		a.Stop()
	}
	c.Server.Stop()
	unmountUnder(c.root)
	if err := os.RemoveAll(c.root); err != nil {
		c.t.Logf("remove %s: %v", c.root, err)
	}
}

// stopJobs deregisters every job and waits (bounded) for their
// allocations to stop running.
func (c *Cluster) stopJobs(timeout time.Duration) {
	jobs, _, err := c.API.Jobs().List(nil)
	if err != nil {
		return
	}
	for _, j := range jobs {
		_, _, _ = c.API.Jobs().Deregister(j.ID, false, nil)
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		allocs, _, err := c.API.Allocations().List(nil)
		if err != nil {
			return
		}
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
				running++
			}
		}
		if running == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Logf("allocations still running %s after stopping every job", timeout)
}

// unmountUnder detaches every mount below root, deepest first.
func unmountUnder(root string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], root+"/") {
			points = append(points, f[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// AddClient starts one more client agent without waiting for its node to be
// ready (it may be expected to fail).
func (c *Cluster) AddClient(co ClientOptions) *Agent {
	c.t.Helper()
	i := len(c.Clients)
	if co.Name == "" {
		co.Name = fmt.Sprintf("client-%d", i+1)
	}
	a := newAgent(c.t, c.Server.bin, filepath.Dir(c.Server.Dir), co.Name)
	a.config = clientConfig(a, c.Server, co, i)
	c.Clients = append(c.Clients, a)
	if err := a.Start(); err != nil {
		c.t.Fatalf("start client %s: %v", co.Name, err)
	}
	return a
}

// WaitReady polls until every client's node is registered and ready.
func (c *Cluster) WaitReady(timeout time.Duration) {
	c.t.Helper()
	want := map[string]bool{}
	for _, a := range c.Clients {
		want[a.Name] = true
	}
	Eventually(c.t, timeout, func() (bool, string) {
		for _, a := range append([]*Agent{c.Server}, c.Clients...) {
			if a.Exited() {
				c.t.Fatalf("agent %s exited:\n%s", a.Name, tail(a.Log(), 40))
			}
		}
		if _, err := c.API.Status().Leader(); err != nil {
			return false, "no leader: " + err.Error()
		}
		nodes, _, err := c.API.Nodes().List(nil)
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range nodes {
			if want[n.Name] && n.Status == api.NodeStatusReady {
				ready++
			}
		}
		return ready == len(want), fmt.Sprintf("%d of %d clients ready", ready, len(want))
	})
}

// NodeID returns the node ID of the named client.
func (c *Cluster) NodeID(name string) string {
	c.t.Helper()
	nodes, _, err := c.API.Nodes().List(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name == name {
			return n.ID
		}
	}
	c.t.Fatalf("no node named %s", name)
	return ""
}

// Eventually polls cond every 250ms until it returns true or timeout passes;
// the string explains the last failed check.
func Eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for {
		ok, w := cond()
		if ok {
			return
		}
		why = w
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %s", timeout, why)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// PluginDir makes a plugin dir holding copies of the given binaries.
func PluginDir(t testing.TB, bins ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range bins {
		data, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(b)), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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

// Logs fetches a task's stdout or stderr through the agent API.
func (c *Cluster) Logs(alloc *api.Allocation, task, typ string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	frames, errs := c.API.AllocFS().Logs(alloc, false, task, typ, "start", 0, ctx.Done(), nil)
	var buf bytes.Buffer
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return buf.String(), nil
			}
			buf.Write(f.Data)
		case err := <-errs:
			if err != nil {
				return buf.String(), err
			}
		case <-ctx.Done():
			return buf.String(), nil
		}
	}
}

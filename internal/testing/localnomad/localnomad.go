// Package localnomad runs real Nomad agents on loopback: one server and any
// number of clients, each with its own data dir, ports, node meta, plugin
// dir and plugin configuration. The e2e suite (through e2e/nomadtest) and
// `make demo` use it. Readiness is polled, never slept for; agents can be
// stopped and started again on the same data dir. StartConsul runs a
// Consul dev server beside them, and StartClient a Consul client agent for
// each client that registers consul-provider services
// (ClientOptions.Consul). NewWithOptions can turn Nomad's ACLs on and
// bootstrap them (Options.ACL).
package localnomad

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"
)

// ClientOptions describes one client agent.
type ClientOptions struct {
	Name string
	Meta map[string]string
	// PluginDir holds the external plugin binaries; empty for none.
	PluginDir string
	// Plugins maps a plugin binary name to the HCL body of its config block,
	// e.g. {"nomad-device-nvml": `mock { system = "dgxh200" }`}.
	Plugins map[string]string
	// NoRawExec leaves the raw_exec driver disabled.
	NoRawExec bool
	// Extra is appended inside the client block.
	Extra string
	// AgentExtra is appended at the top level of the agent's
	// configuration (a telemetry block, say).
	AgentExtra string
	// Consul is the host:port of a Consul agent's HTTP API (ConsulAgent's
	// HostPort) the client registers consul-provider services in; empty
	// for none.
	Consul string
}

// Agent is one agent process: a Nomad agent, or a ConsulAgent's.
type Agent struct {
	Name   string
	Dir    string // holds agent.hcl, agent.log and data/
	HTTP   int
	RPC    int
	Serf   int
	config string
	bin    string
	// args is the command line after the binary, given the config file's
	// path; nil: `agent -config <path>` (Nomad's).
	args func(config string) []string

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
	Root    string
	bin     string
	// ManagementToken is the secret of the token the ACL bootstrap gave
	// (Options.ACL); API carries it. Empty without ACLs.
	ManagementToken string
	acl             bool
}

// Options are settings of every agent of a cluster.
type Options struct {
	// ACL turns Nomad's ACLs on in the server and every client
	// (acl { enabled = true }). NewWithOptions then bootstraps them once the
	// server has a leader and gives API the management token.
	ACL bool
}

// aclBootstrapTimeout bounds the wait for a server to take the ACL
// bootstrap (it needs a leader first).
const aclBootstrapTimeout = 90 * time.Second

// New prepares a cluster in a new directory under os.TempDir (or root when
// not empty) and starts its server; add clients with AddClient.
func New(bin, root string) (*Cluster, error) { return NewWithOptions(bin, root, Options{}) }

// NewWithOptions is New with o; with o.ACL it returns once the ACLs are
// bootstrapped.
func NewWithOptions(bin, root string, o Options) (*Cluster, error) {
	if root == "" {
		d, err := os.MkdirTemp("", "llmgw-nomad-")
		if err != nil {
			return nil, err
		}
		// Traversable, as a Nomad data_dir must be for tasks that run as
		// another user (the llmgw driver's engines run as nobody).
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, err
		}
		root = d
	}
	c := &Cluster{Root: root, bin: bin, acl: o.ACL}
	srv, err := newAgent(bin, root, "server")
	if err != nil {
		return nil, err
	}
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
	if o.ACL {
		srv.config += aclBlock
	}
	c.Server = srv
	cfg := api.DefaultConfig()
	cfg.Address = srv.Addr()
	cfg.Namespace, cfg.Region, cfg.SecretID = "", "", ""
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad api client: %w", err)
	}
	c.API = client
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	if o.ACL {
		ctx, cancel := context.WithTimeout(context.Background(), aclBootstrapTimeout)
		defer cancel()
		if err := c.bootstrapACL(ctx); err != nil {
			return nil, errors.Join(err, srv.Stop())
		}
	}
	return c, nil
}

// aclBlock turns ACLs on in an agent's configuration.
const aclBlock = "acl {\n  enabled = true\n}\n"

// bootstrapACL polls /v1/acl/bootstrap until the server takes it (it
// answers 500 "no cluster leader" until it has one) and gives API the
// management token.
func (c *Cluster) bootstrapACL(ctx context.Context) error {
	var tok *api.ACLToken
	err := Poll(ctx, func() (bool, string, error) {
		if c.Server.Exited() {
			return false, "", fmt.Errorf("%w: %s:\n%s", ErrAgentExited, c.Server.Name, Tail(c.Server.Log(), 40))
		}
		t, _, err := c.API.ACLTokens().Bootstrap(nil)
		if err != nil {
			return false, "acl bootstrap: " + err.Error(), nil
		}
		tok = t
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("acl bootstrap: %w", err)
	}
	c.ManagementToken = tok.SecretID
	c.API.SetSecretID(tok.SecretID)
	return nil
}

// AddClient starts one more client agent; it does not wait for its node.
func (c *Cluster) AddClient(co ClientOptions) (*Agent, error) {
	i := len(c.Clients)
	if co.Name == "" {
		co.Name = fmt.Sprintf("client-%d", i+1)
	}
	a, err := newAgent(c.bin, c.Root, co.Name)
	if err != nil {
		return nil, err
	}
	// Nomad makes its data_dir 0700; tasks that run as another user (the
	// llmgw driver's engines run as nobody) need to traverse it to their
	// task dirs, so it is made 0711 first, as an operator does.
	if err := os.MkdirAll(filepath.Join(a.Dir, "data"), 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(a.Dir, "data"), 0o711); err != nil {
		return nil, err
	}
	a.config = clientConfig(a, c.Server, co, i)
	if c.acl {
		// A client needs no token of its own to register: it is its node.
		a.config += aclBlock
	}
	c.Clients = append(c.Clients, a)
	if err := a.Start(); err != nil {
		return nil, fmt.Errorf("start client %s: %w", co.Name, err)
	}
	return a, nil
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
	consulAddr := ""
	if co.Consul != "" {
		consulAddr = fmt.Sprintf("address = %q", co.Consul)
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
  enabled           = true
  servers           = ["127.0.0.1:%d"]
  min_dynamic_port  = %d
  max_dynamic_port  = %d
  network_interface = "lo"
  meta {
%s  }
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
%s
}
consul {
  %s
  client_auto_join = false
  server_auto_join = false
  auto_advertise   = false
}
%s
%s
`, co.Name, filepath.Join(a.Dir, "data"), pluginDir, a.HTTP, a.RPC, a.Serf, a.HTTP, a.RPC, a.Serf,
		srv.RPC, minPort, minPort+999, meta.String(), co.Extra, consulAddr, plugins.String(), co.AgentExtra)
}

func newAgent(bin, root, name string) (*Agent, error) {
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	return &Agent{Name: name, Dir: dir, HTTP: ports[0], RPC: ports[1], Serf: ports[2], bin: bin}, nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
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
	args := []string{"agent", "-config", cfgPath}
	if a.args != nil {
		args = a.args(cfgPath)
	}
	cmd := exec.Command(a.bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own process group, so that stopping the agent does not signal
	// the tasks it started (Nomad keeps tasks running when a client agent
	// stops), and Ctrl-C on a demo reaches only the demo. Pdeathsig: an
	// agent dies with the process that started it, even if that one
	// crashes without cleaning up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startPinned(cmd); err != nil {
		_ = lf.Close()
		return err
	}
	a.cmd, a.logFile, a.exited = cmd, lf, make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(cmd, a.exited)
	return nil
}

// Stop sends SIGINT and waits for the agent to exit. An agent still running
// 30 s later is killed with SIGKILL, and so are the processes it started
// (its plugins, which Nomad leaves running when it is killed so that its
// next start can reattach to them: nothing would end them here); the
// error then says so and names them. An agent that stops by itself ends
// its plugins itself: what is left after that is a leak the caller sees.
func (a *Agent) Stop() error {
	a.mu.Lock()
	cmd, exited, lf := a.cmd, a.exited, a.logFile
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return nil
	}
	var err error
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		victims := processesOf(cmd.Process.Pid, a.Dir)
		_ = cmd.Process.Kill()
		for _, pid := range victims {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		<-exited
		err = fmt.Errorf("agent %s did not stop within 30s of SIGINT: killed it and the processes it started %v", a.Name, victims)
	}
	_ = lf.Close()
	return err
}

// Exited reports whether the agent process has ended (or was never started).
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

// ErrAgentExited is returned while waiting when an agent process has died.
var ErrAgentExited = errors.New("agent exited")

// WaitReady polls until the server has a leader and every client's node is
// registered and ready, or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	want := map[string]bool{}
	for _, a := range c.Clients {
		want[a.Name] = true
	}
	return Poll(ctx, func() (bool, string, error) {
		for _, a := range append([]*Agent{c.Server}, c.Clients...) {
			if a.Exited() {
				return false, "", fmt.Errorf("%w: %s:\n%s", ErrAgentExited, a.Name, Tail(a.Log(), 40))
			}
		}
		if _, err := c.API.Status().Leader(); err != nil {
			return false, "no leader: " + err.Error(), nil
		}
		nodes, _, err := c.API.Nodes().List(nil)
		if err != nil {
			return false, err.Error(), nil
		}
		ready := 0
		for _, n := range nodes {
			if want[n.Name] && n.Status == api.NodeStatusReady {
				ready++
			}
		}
		return ready == len(want), fmt.Sprintf("%d of %d clients ready", ready, len(want)), nil
	})
}

// Poll calls cond every 250ms until it reports done, returns an error, or
// ctx ends; the error then says what the last check saw.
func Poll(ctx context.Context, cond func() (done bool, why string, err error)) error {
	var why string
	for {
		ok, w, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		why = w
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), why)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// NodeID returns the node ID of the named client.
func (c *Cluster) NodeID(name string) (string, error) {
	nodes, _, err := c.API.Nodes().List(nil)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if n.Name == name {
			return n.ID, nil
		}
	}
	return "", fmt.Errorf("no node named %s", name)
}

// StopJobs deregisters every job and waits (bounded by ctx) for their
// allocations to stop running.
func (c *Cluster) StopJobs(ctx context.Context) error {
	jobs, _, err := c.API.Jobs().List(nil)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		_, _, _ = c.API.Jobs().Deregister(j.ID, false, nil)
	}
	return Poll(ctx, func() (bool, string, error) {
		allocs, _, err := c.API.Allocations().List(nil)
		if err != nil {
			return false, err.Error(), nil
		}
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
				running++
			}
		}
		return running == 0, fmt.Sprintf("%d allocations still running", running), nil
	})
}

// Shutdown stops every job (so that no task outlives the cluster), then
// the agents, then unmounts what Nomad left mounted (task secrets dirs) and
// removes the cluster's directory unless keep is set.
func (c *Cluster) Shutdown(keep bool) error {
	var errs []error
	if !c.Server.Exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.StopJobs(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop jobs: %w", err))
		}
		cancel()
	}
	for _, a := range c.Clients {
		if err := a.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Server.Stop(); err != nil {
		errs = append(errs, err)
	}
	unmountUnder(c.Root)
	if !keep {
		if err := os.RemoveAll(c.Root); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// PluginDir makes dir (created if needed) hold copies of the given binaries.
func PluginDir(dir string, bins ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, b := range bins {
		data, err := os.ReadFile(b)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(b)), data, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// Logs fetches a task's stdout or stderr through the agent API.
func (c *Cluster) Logs(ctx context.Context, alloc *api.Allocation, task, typ string) (string, error) {
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

// Kill ends the agent as a machine's death would: SIGKILL to the agent
// and, at the same moment, to every process it started (its plugins, the
// driver's supervisors and engines, found as its descendants and as the
// processes whose working directory is under the agent's Dir), with no
// chance to clean up. It returns the PIDs it killed besides the agent.
// Start brings the agent back on the same data dir, as a rebooted node.
func (a *Agent) Kill() []int {
	a.mu.Lock()
	cmd, exited, lf := a.cmd, a.exited, a.logFile
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return nil
	}
	victims := processesOf(cmd.Process.Pid, a.Dir)
	_ = cmd.Process.Kill()
	for _, pid := range victims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-exited
	_ = lf.Close()
	return victims
}

// Processes lists what the running agent started, itself left out: its
// descendants (plugins) and the processes tied to its directory (task
// supervisors and engines, which leave its process tree). Nil when the
// agent does not run.
func (a *Agent) Processes() []int {
	a.mu.Lock()
	cmd := a.cmd
	a.mu.Unlock()
	if cmd == nil {
		return nil
	}
	return processesOf(cmd.Process.Pid, a.Dir)
}

func processesOf(agent int, dir string) []int {
	out := descendants(agent)
	for _, pid := range underDir(dir) {
		if pid != agent && !slices.Contains(out, pid) {
			out = append(out, pid)
		}
	}
	return out
}

// descendants lists the PIDs below pid in the process tree, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range procPIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid int
		if _, err := fmt.Sscanf(s[i+1:], " %s %d", &state, &ppid); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// underDir lists the processes tied to dir: their working directory is
// dir or below, or their command line or environment names a path under it
// (a task's supervisor, re-parented away from the agent, still carries its
// allocation's directory).
func underDir(dir string) []int {
	var out []int
	needle := []byte(dir + "/")
	for _, p := range procPIDs() {
		if p == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			out = append(out, p)
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", p, f))
			if err == nil && bytes.Contains(b, needle) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func procPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Alive reports which of pids still run (not zombies).
func Alive(pids []int) []int {
	var out []int
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && s[i+2] == 'Z' {
			continue
		}
		out = append(out, p)
	}
	return out
}

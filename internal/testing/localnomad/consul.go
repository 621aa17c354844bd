package localnomad

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"
)

// ConsulAgent is a Consul agent on loopback: a dev-mode server (StartConsul:
// the whole Consul cluster, its state in memory) or a client agent joined
// to it (StartClient). Nomad clients register consul-provider services in
// their own agent (ClientOptions.Consul): each Nomad client needs its own
// Consul client agent, as on a real node, because a Nomad client removes
// from its agent every Nomad-registered service it does not run itself —
// two Nomad clients sharing an agent deregister each other's services
// every 30 s.
//
// Its HTTP, RPC (server) and Serf LAN ports and SerfWAN are free loopback
// ports; gRPC, gRPC-TLS, HTTPS and DNS are off. It is stopped like a Nomad
// agent (Stop), and dies with the process that started it.
type ConsulAgent struct {
	*Agent
	SerfWAN int
}

// StartConsul writes a Consul dev server's config into dir/consul (dir
// must exist and is the caller's to remove) and starts it from bin; it does
// not wait for it (WaitReady).
func StartConsul(bin, dir string) (*ConsulAgent, error) {
	return startConsul(bin, dir, "consul", nil)
}

// StartClient starts a Consul client agent named name that joins s, with
// its config and data in dir/name; it does not wait for it (WaitReady).
func (s *ConsulAgent) StartClient(name, dir string) (*ConsulAgent, error) {
	return startConsul(s.bin, dir, name, s)
}

func startConsul(bin, dir, name string, join *ConsulAgent) (*ConsulAgent, error) {
	if dir == "" {
		return nil, fmt.Errorf("start consul agent %s: no directory", name)
	}
	a, err := newAgent(bin, dir, name)
	if err != nil {
		return nil, err
	}
	wan, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	c := &ConsulAgent{Agent: a, SerfWAN: wan[0]}
	role := "" // a server: -dev says it all
	a.args = func(cfg string) []string { return []string{"agent", "-dev", "-config-file", cfg} }
	if join != nil {
		role = fmt.Sprintf(`
server     = false
data_dir   = %q
retry_join = ["127.0.0.1:%d"]
retry_interval = "1s"
`, filepath.Join(a.Dir, "data"), join.Serf)
		a.args = func(cfg string) []string { return []string{"agent", "-config-file", cfg} }
	}
	a.config = fmt.Sprintf(`
node_name            = %q
bind_addr            = "127.0.0.1"
client_addr          = "127.0.0.1"
advertise_addr       = "127.0.0.1"
advertise_addr_wan   = "127.0.0.1"
log_level            = "DEBUG"
disable_update_check = true
%s
ports {
  http     = %d
  server   = %d
  serf_lan = %d
  serf_wan = %d
  https    = -1
  grpc     = -1
  grpc_tls = -1
  dns      = -1
}
`, name, role, a.HTTP, a.RPC, a.Serf, c.SerfWAN)
	if err := a.Start(); err != nil {
		return nil, fmt.Errorf("start consul agent %s: %w", name, err)
	}
	return c, nil
}

// HostPort is the HTTP API's address as host:port, the form Nomad's consul
// block and `llmgw gateway --consul` take.
func (c *ConsulAgent) HostPort() string { return fmt.Sprintf("127.0.0.1:%d", c.HTTP) }

// WaitReady polls the agent's /v1/status/leader until it knows the leader
// (a server: it has elected itself; a client: it has joined), or ctx ends.
func (c *ConsulAgent) WaitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return Poll(ctx, func() (bool, string, error) {
		if c.Exited() {
			return false, "", fmt.Errorf("%w: %s:\n%s", ErrAgentExited, c.Name, Tail(c.Log(), 40))
		}
		resp, err := client.Get(c.Addr() + "/v1/status/leader")
		if err != nil {
			return false, c.Name + ": " + err.Error(), nil
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		var leader string
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &leader) != nil || leader == "" {
			return false, fmt.Sprintf("%s: /v1/status/leader: %s %q", c.Name, resp.Status, b), nil
		}
		return true, "", nil
	})
}

// Package plugintest launches a plugin binary the way a Nomad client does —
// go-plugin handshake with Nomad's magic cookie, gRPC only — and drives it
// over its gRPC services: PluginInfo, ConfigSchema, SetConfig with a config
// built from an HCL `config {}` body evaluated against the plugin's own
// schema and cty-msgpack encoded, then the device or driver RPCs.
//
// A plugin's tests build its binary with Build, launch it with Start (or
// Launch, outside a test), configure it with Configure, then call the RPCs
// on Instance.Device or Instance.Driver. ReattachConfig and
// Options.Reattach reconnect to a running plugin as a restarted Nomad client
// does; Crash kills it as a crash would.
//
// It is for tests only; no production binary may link it.
package plugintest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// Instance is one running plugin process and its gRPC stubs.
type Instance struct {
	Base   basepb.BasePluginClient     // the BasePlugin service, which every plugin serves
	Device devicepb.DevicePluginClient // set for device plugins
	Driver driverpb.DriverClient       // set for driver plugins
	Info   *basepb.PluginInfoResponse  // what PluginInfo answered at launch

	client *plugin.Client
	logs   *syncBuffer
}

// Options tune how the plugin is launched.
type Options struct {
	Args []string // appended to the command line, like plugin { args = [...] }
	Env  []string // extra environment, KEY=VALUE
	// Reattach, when set, connects to an already running plugin process
	// instead of launching one (as a restarted Nomad client does).
	Reattach *plugin.ReattachConfig
}

// Start launches bin, dispenses the base plugin and calls PluginInfo, then
// dispenses the device or driver stub the plugin's type calls for. The
// plugin is killed when the test ends.
func Start(t testing.TB, bin string, opts Options) *Instance {
	t.Helper()
	inst, err := Launch(bin, opts)
	if err != nil {
		t.Fatalf("launch plugin %s: %v", bin, err)
	}
	t.Cleanup(func() {
		inst.Kill()
		if t.Failed() {
			t.Logf("plugin log:\n%s", inst.Logs())
		}
	})
	return inst
}

// Launch is Start without a testing.TB; the caller must Kill the instance.
func Launch(bin string, opts Options) (*Instance, error) {
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "plugintest", Output: logs, Level: hclog.Trace, JSONFormat: false})
	cfg := &plugin.ClientConfig{
		HandshakeConfig:  nomadplugin.Handshake,
		Plugins:          nomadplugin.ClientPluginSet(),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		StartTimeout:     30 * time.Second,
	}
	if opts.Reattach != nil {
		cfg.Reattach = opts.Reattach
	} else {
		cmd := exec.Command(bin, opts.Args...)
		cmd.Env = append(os.Environ(), opts.Env...)
		cfg.Cmd = cmd
	}
	c := plugin.NewClient(cfg)
	inst := &Instance{client: c, logs: logs}
	rpc, err := c.Client()
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("handshake: %w\n%s", err, logs.String())
	}
	raw, err := rpc.Dispense(nomadplugin.PluginKeyBase)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("dispense base: %w", err)
	}
	inst.Base = raw.(basepb.BasePluginClient)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := inst.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("PluginInfo: %w", err)
	}
	inst.Info = info
	switch info.GetType() {
	case basepb.PluginType_DEVICE:
		raw, err = rpc.Dispense(nomadplugin.PluginKeyDevice)
		if err == nil {
			inst.Device = raw.(devicepb.DevicePluginClient)
		}
	case basepb.PluginType_DRIVER:
		raw, err = rpc.Dispense(nomadplugin.PluginKeyDriver)
		if err == nil {
			inst.Driver = raw.(driverpb.DriverClient)
		}
	default:
		err = fmt.Errorf("unknown plugin type %v", info.GetType())
	}
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("dispense: %w", err)
	}
	return inst, nil
}

// Configure fetches the plugin's schema, evaluates body (the inside of a
// `config {}` block) against it with the schema's defaults, encodes it as
// cty msgpack, and sends SetConfig with Nomad's negotiated API version and
// a client port range of 20000–32000, as a Nomad client would.
func (i *Instance) Configure(ctx context.Context, body string) error {
	data, err := i.EncodeConfig(ctx, body)
	if err != nil {
		return err
	}
	_, err = i.Base.SetConfig(ctx, &basepb.SetConfigRequest{
		MsgpackConfig:    data,
		PluginApiVersion: nomadplugin.APIVersion,
		NomadConfig: &basepb.NomadConfig{Driver: &basepb.NomadDriverConfig{
			ClientMinPort: 20000, ClientMaxPort: 32000,
		}},
	})
	return err
}

// EncodeConfig evaluates body against the plugin's ConfigSchema and returns
// the cty-msgpack bytes Nomad would send.
func (i *Instance) EncodeConfig(ctx context.Context, body string) ([]byte, error) {
	schema, err := i.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		return nil, fmt.Errorf("ConfigSchema: %w", err)
	}
	return hclspec.EncodeHCL(schema.GetSpec(), "config.hcl", []byte(body), nil)
}

// ReattachConfig returns what a Nomad client stores to find the plugin
// process again after its own restart.
func (i *Instance) ReattachConfig() *plugin.ReattachConfig { return i.client.ReattachConfig() }

// Pid is the plugin process's pid, or 0.
func (i *Instance) Pid() int {
	if rc := i.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Kill ends the plugin process gracefully, then forcibly.
func (i *Instance) Kill() { i.client.Kill() }

// Crash kills the plugin process with SIGKILL, as an OOM killer or a crash
// would, without letting it clean up.
func (i *Instance) Crash() error {
	pid := i.Pid()
	if pid == 0 {
		return fmt.Errorf("plugin has no pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("plugin pid %d still alive after SIGKILL", pid)
}

// Logs returns what the plugin and the go-plugin client logged.
func (i *Instance) Logs() string { return i.logs.String() }

// WaitLog polls the plugin's log until it contains substr or the timeout
// passes.
func (i *Instance) WaitLog(substr string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(i.Logs(), substr) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// Build compiles the main package at pkg (an import path such as
// "github.com/llmgw/llmgw/cmd/nomad-device-nvml") once per test process and
// returns the binary's path. When LLMGW_BIN_DIR is set, a binary of the
// package's base name there is used instead (make test builds them first).
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	name := filepath.Base(pkg)
	if dir := os.Getenv("LLMGW_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			built[pkg] = p
			return p
		}
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "llmgw-plugintest-") //nolint:usetesting // shared by every test of the process (one build each), not one test's
		if err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		// Readable by everyone, so that a plugin may run what was built
		// here as another user (the llmgw driver runs engines as nobody).
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("temp dir: %v", err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, name)
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// goTool finds the go command: GOROOT/bin/go of the toolchain running the
// tests when GOROOT is set (go test sets it), else go on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

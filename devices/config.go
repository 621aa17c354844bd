package devices

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
)

// Config is the plugin's configuration, the `config {}` block of
// `plugin "nomad-device-nvml"` in the Nomad client's agent configuration.
type Config struct {
	IgnoredGPUIDs     []string      `codec:"ignored_gpu_ids"`
	FingerprintPeriod time.Duration `codec:"fingerprint_period"`
	HealthEvents      bool          `codec:"health_events"`
	IgnoredXIDs       []uint64      `codec:"ignored_xids"`
	HealthRecovery    time.Duration `codec:"health_recovery"`
	Mock              *MockConfig   `codec:"mock"`
	PowerCaps         *PowerCaps    `codec:"power_caps"`
}

// PowerCaps is the power_caps block: where the controller's caps for this
// node are (Nomad variables) and what to do when the controller is lost.
// The plugin caps nothing while the block is absent.
type PowerCaps struct {
	// NomadAddr is Nomad's HTTP API; empty: NOMAD_ADDR, else
	// http://127.0.0.1:4646 (as Nomad's API client reads them).
	NomadAddr string `codec:"nomad_addr"`
	// TokenFile holds the ACL token (read at configuration); empty:
	// NOMAD_TOKEN, else none.
	TokenFile string `codec:"token_file"`
	Namespace string `codec:"namespace"`
	// NodeName is this node's name in Nomad; empty: the host name, Nomad's
	// default node name.
	NodeName string `codec:"node_name"`
	// Prefix of the variables: <Prefix>/<NodeName> holds the caps,
	// <Prefix>/_heartbeat the controller's lease.
	Prefix string        `codec:"variable_prefix"`
	Lease  time.Duration `codec:"lease"`
	// FallbackWatts caps a GPU when the controller is lost and gave no
	// fallback for it; nil: keep its last cap.
	FallbackWatts *float64 `codec:"fallback_watts"`
	// ShareInterval is how often the plugin reads its GPUs' draw and holds
	// the node's share (a format-2 variable); ShareHold how long the node
	// draws under the lift line before its share caps lift.
	ShareInterval time.Duration `codec:"share_interval"`
	ShareHold     time.Duration `codec:"share_hold"`

	token string // read from TokenFile by Validate
}

// validVarPath is what Nomad accepts as a variable path.
var validVarPath = regexp.MustCompile("^[a-zA-Z0-9-_~/]{1,128}$")

// MockConfig selects one of go-nvml's mock systems instead of real NVML.
type MockConfig struct {
	System     string              `codec:"system"`
	GPUs       *int                `codec:"gpus"`
	PowerWatts *float64            `codec:"power_watts"`
	Seed       string              `codec:"seed"`
	MIG        map[string][]string `codec:"mig"`
	EventsFile string              `codec:"events_file"`
	// Draw is DrawFixed (the default) or DrawLoad.
	Draw string `codec:"draw"`
	// DenyPowerLimit makes setting a power limit fail with NO_PERMISSION,
	// as on a real GPU when the plugin does not run as root.
	DenyPowerLimit bool `codec:"deny_power_limit"`
}

// DefaultIgnoredXIDs are the XIDs that an application, not the GPU, causes
// (faults in user code, resets it asked for, preemption, video engine and
// context-switch timeouts); they do not make a device unhealthy.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// ConfigSpec is the schema Nomad evaluates the config block against.
func ConfigSpec() *hclspec.Spec {
	return hclspec.Object(map[string]*hclspec.Spec{
		"ignored_gpu_ids": hclspec.Default(
			hclspec.Attr("ignored_gpu_ids", "list(string)"), hclspec.Literal("[]")),
		"fingerprint_period": hclspec.Default(
			hclspec.Attr("fingerprint_period", "string"), hclspec.Literal(`"1m"`)),
		"health_events": hclspec.Default(
			hclspec.Attr("health_events", "bool"), hclspec.Literal("true")),
		"ignored_xids": hclspec.Default(
			hclspec.Attr("ignored_xids", "list(number)"), hclspec.Literal("[13, 31, 43, 45, 68, 109]")),
		"health_recovery": hclspec.Default(
			hclspec.Attr("health_recovery", "string"), hclspec.Literal(`"5m"`)),
		"power_caps": hclspec.Block("power_caps", false, hclspec.Object(map[string]*hclspec.Spec{
			"nomad_addr": hclspec.Attr("nomad_addr", "string"),
			"token_file": hclspec.Attr("token_file", "string"),
			"namespace": hclspec.Default(
				hclspec.Attr("namespace", "string"), hclspec.Literal(`"default"`)),
			"node_name": hclspec.Attr("node_name", "string"),
			"variable_prefix": hclspec.Default(
				hclspec.Attr("variable_prefix", "string"), hclspec.Literal(strconv.Quote(devicesapi.PowerCapsPrefix))),
			"lease": hclspec.Default(
				hclspec.Attr("lease", "string"), hclspec.Literal(`"45s"`)),
			"fallback_watts": hclspec.Attr("fallback_watts", "number"),
			"share_interval": hclspec.Default(
				hclspec.Attr("share_interval", "string"), hclspec.Literal(`"1s"`)),
			"share_hold": hclspec.Default(
				hclspec.Attr("share_hold", "string"), hclspec.Literal(`"30s"`)),
		})),
		"mock": hclspec.Block("mock", false, hclspec.Object(map[string]*hclspec.Spec{
			"system":      hclspec.RequiredAttr("system", "string"),
			"gpus":        hclspec.Attr("gpus", "number"),
			"power_watts": hclspec.Attr("power_watts", "number"),
			"seed":        hclspec.Attr("seed", "string"),
			"mig":         hclspec.Attr("mig", "map(list(string))"),
			"events_file": hclspec.Attr("events_file", "string"),
			"draw": hclspec.Default(
				hclspec.Attr("draw", "string"), hclspec.Literal(`"fixed"`)),
			"deny_power_limit": hclspec.Default(
				hclspec.Attr("deny_power_limit", "bool"), hclspec.Literal("false")),
		})),
	})
}

// DecodeConfig decodes and validates what Nomad sent in SetConfig. Errors
// name the attribute at fault.
func DecodeConfig(msgpack []byte) (Config, error) {
	var c Config
	if err := hclspec.Decode(ConfigSpec(), msgpack, &c); err != nil {
		return Config{}, fmt.Errorf("nomad-device-nvml config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("nomad-device-nvml config: %w", err)
	}
	return c, nil
}

// Validate checks the values the schema cannot, and resolves power_caps'
// defaults that come from the host (node name, token file).
func (c *Config) Validate() error {
	if c.FingerprintPeriod < time.Second {
		return fmt.Errorf("fingerprint_period: %s is too short (minimum 1s)", c.FingerprintPeriod)
	}
	for i, id := range c.IgnoredGPUIDs {
		if id == "" {
			return fmt.Errorf("ignored_gpu_ids[%d]: empty ID", i)
		}
	}
	if m := c.Mock; m != nil {
		if _, ok := mockSystems[m.System]; !ok {
			return fmt.Errorf("mock.system: unknown mock system %q (want one of %v)", m.System, MockSystems())
		}
		if m.GPUs != nil && *m.GPUs < 0 {
			return fmt.Errorf("mock.gpus: must be zero or more, got %d", *m.GPUs)
		}
		if m.PowerWatts != nil && *m.PowerWatts < 0 {
			return fmt.Errorf("mock.power_watts: must be zero or more, got %v", *m.PowerWatts)
		}
		if m.Draw != "" && m.Draw != DrawFixed && m.Draw != DrawLoad {
			return fmt.Errorf("mock.draw: %q is not a draw mode (want %q or %q)", m.Draw, DrawFixed, DrawLoad)
		}
		// Building the mock checks the rest (GPU count, power against the
		// board limit, MIG profiles) with the system's own numbers.
		if _, err := NewMockNVML(*m); err != nil {
			return err
		}
	}
	if pc := c.PowerCaps; pc != nil {
		if err := pc.validate(); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the block and fills in what it leaves to the
// environment: the token from token_file, the node name from the host.
func (pc *PowerCaps) validate() error {
	if pc.Lease < time.Second {
		return fmt.Errorf("power_caps.lease: %s is too short (minimum 1s)", pc.Lease)
	}
	// Zero (a PowerCaps built in code, not decoded) takes the default.
	if pc.ShareInterval == 0 {
		pc.ShareInterval = time.Second
	}
	if pc.ShareHold == 0 {
		pc.ShareHold = 30 * time.Second
	}
	if pc.ShareInterval < 100*time.Millisecond || pc.ShareInterval > time.Minute {
		return fmt.Errorf("power_caps.share_interval: %s is out of range (100ms to 1m)", pc.ShareInterval)
	}
	if pc.ShareHold < time.Second {
		return fmt.Errorf("power_caps.share_hold: %s is too short (minimum 1s)", pc.ShareHold)
	}
	if pc.FallbackWatts != nil && (math.IsNaN(*pc.FallbackWatts) || *pc.FallbackWatts <= 0) {
		return fmt.Errorf("power_caps.fallback_watts: must be above zero, got %v", *pc.FallbackWatts)
	}
	if pc.Namespace == "" {
		pc.Namespace = "default"
	}
	if pc.Prefix == "" {
		pc.Prefix = devicesapi.PowerCapsPrefix
	}
	pc.Prefix = strings.Trim(pc.Prefix, "/")
	if pc.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("power_caps.node_name: not set, and the host name cannot be read: %w", err)
		}
		pc.NodeName = h
	}
	if p := devicesapi.NodeCapsPath(pc.Prefix, pc.NodeName); !validVarPath.MatchString(p) {
		return fmt.Errorf("power_caps: variable path %q (variable_prefix, then node_name escaped) is not a Nomad variable path (letters, digits, - _ ~ /; at most 128)", p)
	}
	if pc.TokenFile != "" {
		b, err := os.ReadFile(pc.TokenFile)
		if err != nil {
			return fmt.Errorf("power_caps.token_file: %w", err)
		}
		pc.token = strings.TrimSpace(string(b))
		if pc.token == "" {
			return fmt.Errorf("power_caps.token_file: %s is empty", pc.TokenFile)
		}
	}
	return nil
}

package devices

import (
	"fmt"
	"time"

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
}

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

// Validate checks the values the schema cannot.
func (c Config) Validate() error {
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
		// Building the mock checks the rest (GPU count, power against the
		// board limit, MIG profiles) with the system's own numbers.
		if _, err := NewMockNVML(*m); err != nil {
			return err
		}
	}
	return nil
}

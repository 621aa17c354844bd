package devices

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/nomadplugin/hclspec"
)

func decodeHCL(t testing.TB, body string) (Config, error) {
	data, err := hclspec.EncodeHCL(ConfigSpec(), "config.hcl", []byte(body), nil)
	if err != nil {
		return Config{}, err
	}
	return DecodeConfig(data)
}

func TestConfigDefaults(t *testing.T) {
	got, err := decodeHCL(t, ``)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		IgnoredGPUIDs:     []string{},
		FingerprintPeriod: time.Minute,
		HealthEvents:      true,
		IgnoredXIDs:       []uint64{13, 31, 43, 45, 68, 109},
		HealthRecovery:    5 * time.Minute,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestConfigMockPower(t *testing.T) {
	got, err := decodeHCL(t, `
mock {
  system           = "dgxh200"
  draw             = "load"
  deny_power_limit = true
}`)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mock.Draw != DrawLoad || !got.Mock.DenyPowerLimit {
		t.Fatalf("draw %q, deny_power_limit %v; want load, true", got.Mock.Draw, got.Mock.DenyPowerLimit)
	}
	_, err = decodeHCL(t, `
mock {
  system = "dgxh200"
  draw   = "loud"
}`)
	if err == nil || !strings.Contains(err.Error(), `mock.draw: "loud" is not a draw mode`) {
		t.Fatalf("bad draw: %v", err)
	}
}

func TestConfigMock(t *testing.T) {
	got, err := decodeHCL(t, `
fingerprint_period = "30s"
health_recovery    = "0s"
mock {
  system      = "dgxb200"
  gpus        = 4
  power_watts = 500.5
  seed        = "node-7"
  mig         = { "1" = ["1g.23gb"] }
}`)
	if err != nil {
		t.Fatal(err)
	}
	four, watts := 4, 500.5
	want := &MockConfig{System: "dgxb200", GPUs: &four, PowerWatts: &watts, Seed: "node-7", MIG: map[string][]string{"1": {"1g.23gb"}}, Draw: DrawFixed}
	if diff := cmp.Diff(want, got.Mock); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if got.FingerprintPeriod != 30*time.Second || got.HealthRecovery != 0 {
		t.Fatalf("durations: %v %v", got.FingerprintPeriod, got.HealthRecovery)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct{ body, want string }{
		{`mock { system = "x" }`, `mock.system`},
		{`mock {}`, `"system" is required`},
		{`fingerprint_period = "1"`, `fingerprint_period`},
		{`health_recovery = "forever"`, `health_recovery`},
		{`ignored_gpu_ids = [""]`, `ignored_gpu_ids[0]: empty ID`},
		{`ignored_xids = [1.5]`, `ignored_xids`},
		{`mock {
  system = "dgxh200"
  mig = { "eight" = ["1g.18gb"] }
}`, `mock.mig: key "eight"`},
	}
	for _, tc := range tests {
		_, err := decodeHCL(t, tc.body)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}

// FuzzDecodeConfig feeds arbitrary config bodies through the same path as
// Nomad (HCL evaluated against the schema, cty msgpack, decode, validate),
// and arbitrary bytes straight to the decoder. Nothing may panic, and an
// accepted config must be valid.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		``,
		`fingerprint_period = "5s"`,
		`ignored_xids = [79, 48]`,
		`mock { system = "dgxh200" }`,
		"mock {\n system = \"dgxa100\"\n gpus = 3\n power_watts = 99\n seed = \"s\"\n mig = { \"0\" = [\"1g.5gb\"] }\n}",
		`health_events = false`,
	} {
		f.Add(s, []byte(nil))
	}
	f.Add("", []byte{0x85, 0xa1, 0x61, 0x01})
	f.Fuzz(func(t *testing.T, body string, raw []byte) {
		if cfg, err := decodeHCL(t, body); err == nil {
			if err := cfg.Validate(); err != nil {
				t.Fatalf("accepted config fails validation: %v", err)
			}
			if cfg.FingerprintPeriod < time.Second {
				t.Fatalf("accepted fingerprint_period %v", cfg.FingerprintPeriod)
			}
		}
		_, _ = DecodeConfig(raw)
	})
}

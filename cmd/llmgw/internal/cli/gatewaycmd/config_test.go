package gatewaycmd

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/gateway/config"
	"github.com/llmgw/llmgw/internal/testing/hostile"
)

// settingsOf runs the command's flag and file handling on args and returns
// the settings it would serve with.
func settingsOf(t *testing.T, args ...string) (settings, error) {
	t.Helper()
	var got settings
	cmd := command(func(_ context.Context, f settings, _ io.Writer) error {
		got = f
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.Execute()
	got.From = nil
	return got, err
}

func writeConfig(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var cmpFlags = cmp.Options{cmpopts.EquateEmpty()}

// Every flag is an attribute of the file, and every attribute a flag.
func TestConfigCoversFlags(t *testing.T) {
	var flagNames []string
	command(nil).Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" {
			flagNames = append(flagNames, strings.ReplaceAll(f.Name, "-", "_"))
		}
	})
	schema, _ := gohcl.ImpliedBodySchema(config.FileHCL{})
	var attrs []string
	for _, a := range schema.Attributes {
		attrs = append(attrs, a.Name)
	}
	sort.Strings(flagNames)
	sort.Strings(attrs)
	if diff := cmp.Diff(flagNames, attrs); diff != "" {
		t.Errorf("flags (-) and file attributes (+) differ:\n%s", diff)
	}
}

// A value in the file means what the same value of the flag means.
func TestConfigMeansWhatTheFlagMeans(t *testing.T) {
	for _, tt := range []struct{ attr, hcl, flag string }{
		{"listen", `"127.0.0.1:9000"`, "127.0.0.1:9000"},
		{"consul", `"127.0.0.1:8501"`, "127.0.0.1:8501"},
		{"nomad", `"http://10.0.0.1:4646"`, "http://10.0.0.1:4646"},
		{"namespace", `"ml"`, "ml"},
		{"advertise", `"gw.example:443"`, "gw.example:443"},
		{"register", `false`, "false"},
		{"register_tags", `["a", "b"]`, "a,b"},
		{"register_check_interval", `"7s"`, "7s"},
		{"consul_wait", `"1m30s"`, "90s"},
		{"max_body_chat_completions", `1024`, "1024"},
		{"max_body_completions", `2048`, "2048"},
		{"max_body_embeddings", `8388608`, "8388608"},
		{"max_json_depth", `32`, "32"},
		{"body_read_timeout", `"1m"`, "1m"},
		{"cors_origins", `["https://a.example", "http://localhost:3000"]`, "https://a.example,http://localhost:3000"},
		{"body_memory", `8388608`, "8388608"},
		{"attempts", `2`, "2"},
		{"no_replica_retry_after", `"9s"`, "9s"},
		{"breaker_failures", `7`, "7"},
		{"breaker_open", `"3s"`, "3s"},
		{"breaker_max_open", `"2m"`, "2m"},
		{"dial_timeout", `"1s"`, "1s"},
		{"response_header_timeout", `"30m"`, "30m"},
		{"check_interval", `"15s"`, "15s"},
		{"check_timeout", `"4s"`, "4s"},
		{"check_parallelism", `16`, "16"},
		{"hold_timeout", `"5m"`, "5m"},
		{"hold_per_model", `10`, "10"},
		{"hold_total", `100`, "100"},
		{"wake_burst", `4`, "4"},
		{"demand_window", `"1m"`, "1m"},
		{"models_variable", `"ops/llmgw-models"`, "ops/llmgw-models"},
		{"models_namespace", `"ml"`, "ml"},
		{"models_nomad", `"http://10.0.0.2:4646"`, "http://10.0.0.2:4646"},
		{"log_level", `"debug"`, "debug"},
		{"keys_file", `"/etc/llmgw/keys.hcl"`, "/etc/llmgw/keys.hcl"},
		{"keys_variable", `"llmgw/keys"`, "llmgw/keys"},
		{"keys_namespace", `"ml"`, "ml"},
		{"routing", `["chat=prefix", "embed=least-outstanding"]`, "chat=prefix,embed=least-outstanding"},
		{"prefix_load_factor", `1.5`, "1.5"},
		{"prefix_history_load_factor", `5`, "5"},
		{"prefix_opening_limit", `3`, "3"},
		{"prefix_opening_wait", `"10s"`, "10s"},
	} {
		t.Run(tt.attr, func(t *testing.T) {
			path := writeConfig(t, tt.attr+" = "+tt.hcl+"\n")
			fromFile, err := settingsOf(t, "--config", path)
			if err != nil {
				t.Fatalf("file: %v", err)
			}
			fromFlag, err := settingsOf(t, "--config", path, "--"+strings.ReplaceAll(tt.attr, "_", "-")+"="+tt.flag)
			if err != nil {
				t.Fatalf("flag: %v", err)
			}
			if diff := cmp.Diff(fromFlag, fromFile, cmpFlags); diff != "" {
				t.Errorf("file and flag differ (-flag +file):\n%s", diff)
			}
			def, err := settingsOf(t)
			if err != nil {
				t.Fatal(err)
			}
			def.Config = path
			if cmp.Equal(def, fromFile, cmpFlags) {
				t.Error("the file's value is the default: the test proves nothing")
			}
		})
	}
}

func TestConfigPrecedence(t *testing.T) {
	path := writeConfig(t, `
listen    = "127.0.0.1:9000"
attempts  = 2
consul    = "127.0.0.1:8500"
namespace = env("LLMGW_TEST_NS")
`)
	t.Setenv("LLMGW_TEST_NS", "from-env")
	got, err := settingsOf(t, "--config", path, "--attempts", "5")
	if err != nil {
		t.Fatal(err)
	}
	if got.Listen != "127.0.0.1:9000" || got.Attempts != 5 || got.Consul != "127.0.0.1:8500" || got.Namespace != "from-env" {
		t.Errorf("file then flags: listen %q attempts %d consul %q namespace %q", got.Listen, got.Attempts, got.Consul, got.Namespace)
	}
	// --nomad on the command line picks Nomad over the file's consul.
	got, err = settingsOf(t, "--config", path, "--nomad", "http://127.0.0.1:4646")
	if err != nil {
		t.Fatal(err)
	}
	if got.Consul != "" || got.Nomad != "http://127.0.0.1:4646" {
		t.Errorf("--nomad over the file's consul: consul %q nomad %q", got.Consul, got.Nomad)
	}
}

// The example spells out the defaults.
func TestExampleConfig(t *testing.T) {
	path := filepath.Join("..", "..", "..", "..", "..", "jobs", "examples", "gateway.hcl")
	got, err := settingsOf(t, "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := settingsOf(t)
	if err != nil {
		t.Fatal(err)
	}
	want.Config = path
	if diff := cmp.Diff(want, got, cmpFlags); diff != "" {
		t.Errorf("example (-defaults +example):\n%s", diff)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		args      []string
		want      []string // each a line of the error
	}{
		{"unknown attribute, with a hint", "\nbreaker_max_opn = \"1m\"\n", nil,
			[]string{`gateway.hcl:2: Unsupported argument: An argument named "breaker_max_opn" is not expected here. Did you mean "breaker_max_open"?`}},
		{"a block", "nomad {\n}\n", nil, []string{`gateway.hcl:1: Unsupported block type: Blocks of type "nomad" are not expected here.`}},
		{"syntax", "listen = \n", nil, []string{"gateway.hcl:1: Invalid expression"}},
		{"type", "attempts = \"many\"\n", nil, []string{"gateway.hcl:1: attempts: Unsuitable value type: a number is required"}},
		{"null", "\nlisten = null\n", nil, []string{"gateway.hcl:2: listen: must not be null"}},
		{"bad duration", "breaker_open = \"soon\"\n", nil, []string{`gateway.hcl:1: breaker_open: "soon" is not a duration (such as "30s", "10m")`}},
		{"duration as a number", "dial_timeout = 2\n", nil, []string{`gateway.hcl:1: dial_timeout: "2" is not a duration`}},
		{"empty consul", "consul = \"\"\n", nil, []string{"gateway.hcl:1: consul: empty address"}},
		{"consul and nomad", "consul = \"a:1\"\nnomad = \"http://b:2\"\n", nil, []string{"gateway.hcl:1: consul and nomad (gateway.hcl:2): discover from one of them"}},
		{"several", "attempts = \"x\"\ncheck_timeout = \"x\"\n", nil, []string{
			"gateway.hcl:1: attempts: Unsuitable value type",
			`gateway.hcl:2: check_timeout: "x" is not a duration`,
		}},
		{"a bad file is refused even where a flag overrides it", "attempts = \"x\"\n", []string{"--attempts", "2"}, []string{"gateway.hcl:1: attempts: Unsuitable value type"}},
		{"log level", "\n\nlog_level = \"loud\"\n", nil, []string{`gateway.hcl:3: log_level: slog: level string "loud": unknown name`}},
		{"body limit over memory", "max_body_chat_completions = 100\nmax_body_completions = 100\nmax_body_embeddings = 100\nbody_memory = 10\n", nil, []string{"gateway.hcl:1: max_body_chat_completions 100, gateway.hcl:4: body_memory 10: want more than 0, and no more than the body memory"}},
		{"body limit over memory, one from a flag", "max_body_chat_completions = 100\n", []string{"--body-memory", "10"}, []string{"gateway.hcl:1: max_body_chat_completions 100, --body-memory 10: want"}},
		{"the old scan limit", "max_model_scan = 100\n", nil, []string{`gateway.hcl:1: Unsupported argument: An argument named "max_model_scan" is not expected here.`}},
		{"json depth", "max_json_depth = 0\n", nil, []string{"gateway.hcl:1: max_json_depth: 0: want 1 to 10000"}},
		{"cors origin with a path", "cors_origins = [\"https://a.example/app\"]\n", nil, []string{`gateway.hcl:1: cors_origins: origin "https://a.example/app": want`}},
		{"attempts", "attempts = 0\n", nil, []string{"gateway.hcl:1: attempts and --breaker-failures must be at least 1"}},
		{"check parallelism", "check_parallelism = 0\n", nil, []string{"gateway.hcl:1: check_parallelism: 0: want at least 1"}},
		{"check timeout", "\ncheck_timeout = \"0s\"\n", nil, []string{"gateway.hcl:2: check_timeout: 0s: want more than 0"}},
		{"register check interval", "register_check_interval = \"100ms\"\n", nil, []string{"gateway.hcl:1: register_check_interval: 100ms: want 1s or more"}},
		{"advertise", "advertise = \"gw.example\"\n", nil, []string{`gateway.hcl:1: advertise: "gw.example": want HOST:PORT`}},
		{"hold timeout", "hold_timeout = \"-1s\"\n", nil, []string{"gateway.hcl:1: hold_timeout: -1s: want 0 (hold nothing) or more"}},
		{"hold per model", "\nhold_per_model = 0\n", nil, []string{"gateway.hcl:2: hold_per_model: 0: want at least 1"}},
		{"wake burst", "wake_burst = -3\n", nil, []string{"gateway.hcl:1: wake_burst: -3: want at least 1"}},
		{"prefix opening limit", "\nprefix_opening_limit = -1\n", nil, []string{"gateway.hcl:2: prefix_opening_limit: -1: want 0 (one more than the engine's slots) or more"}},
		{"prefix opening wait", "prefix_opening_wait = \"-5s\"\n", nil, []string{"gateway.hcl:1: prefix_opening_wait: -5s: want 0 (no waiting) or more"}},
		{"demand window", "demand_window = \"100ms\"\n", nil, []string{"gateway.hcl:1: demand_window: 100ms: want 1s to 1h"}},
		{"models variable", "models_variable = \"llmgw/models!\"\n", nil, []string{`gateway.hcl:1: models_variable: "llmgw/models!": a Nomad variable path is`}},
		{"models namespace", "models_namespace = \"*\"\n", nil, []string{`gateway.hcl:1: models_namespace: the model list is one variable in one namespace, not "*"`}},
		{"keys file and variable", "keys_file = \"k.hcl\"\nkeys_variable = \"llmgw/keys\"\n", nil, []string{"gateway.hcl:1: keys_file and gateway.hcl:2: keys_variable: read the keys from one of them"}},
		{"keys variable", "keys_variable = \"a b\"\n", nil, []string{`gateway.hcl:1: keys_variable: "a b": a Nomad variable path is`}},
		{"share without keys", "share_limits = true\n", nil, []string{"gateway.hcl:1: share_limits: there are no limits to share without keys"}},
		{"tls cert without key", "\ntls_cert_file = \"c.pem\"\n", nil, []string{"gateway.hcl:2: tls_cert_file and --tls-key-file: give both, or neither"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "gateway.hcl")
			if err := os.WriteFile(path, []byte(tt.src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := settingsOf(t, append([]string{"--config", path}, tt.args...)...)
			if err == nil {
				t.Fatal("no error")
			}
			lines := strings.Split(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, l := range lines {
				if !strings.HasPrefix(l, tt.want[i]) {
					t.Errorf("error %d = %q, want it to start %q", i, l, tt.want[i])
				}
			}
		})
	}
	if _, err := settingsOf(t, "--config", filepath.Join(t.TempDir(), "missing.hcl")); err == nil || !strings.Contains(err.Error(), "read config") {
		t.Errorf("missing file: %v", err)
	}
}

// Flags alone, as before the file: the new settings' checks.
func TestNewFlags(t *testing.T) {
	got, err := settingsOf(t, "--check-timeout", "3s", "--check-parallelism", "4", "--consul-wait", "1m",
		"--register-check-interval", "30s", "--register-tags", "edge,eu", "--no-replica-retry-after", "2s")
	if err != nil {
		t.Fatal(err)
	}
	if got.CheckTimeout != 3*time.Second || got.CheckParallelism != 4 || got.ConsulWait != time.Minute ||
		got.RegisterCheckInterval != 30*time.Second || !cmp.Equal(got.RegisterTags, []string{"edge", "eu"}) || got.NoReplicaRetryAfter != 2*time.Second {
		t.Errorf("settings %+v", got)
	}
	for _, args := range [][]string{
		{"--check-parallelism", "0"}, {"--check-timeout", "0s"}, {"--consul-wait", "-1s"},
		{"--no-replica-retry-after", "0s"}, {"--register-check-interval", "10ms"},
		{"--hold-timeout", "-1s"}, {"--hold-per-model", "0"}, {"--hold-total", "0"}, {"--wake-burst", "0"},
		{"--demand-window", "2h"}, {"--models-variable", "a b"}, {"--models-namespace", "*"},
	} {
		if _, err := settingsOf(t, args...); err == nil || !strings.HasPrefix(err.Error(), args[0]+": ") {
			t.Errorf("%v: %v, want an error naming %s", args, err, args[0])
		}
	}
}

// The example in docs/gateway.md parses.
func TestDocExampleConfig(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "..", "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```hcl\n# gateway.hcl\n")
	src, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/gateway.md has no gateway.hcl example")
	}
	got, err := settingsOf(t, "--config", writeConfig(t, src))
	if err != nil {
		t.Fatal(err)
	}
	if got.Consul == "" || len(got.RegisterTags) == 0 {
		t.Errorf("settings %+v", got)
	}
}

// FuzzParseConfig: parseConfig never panics; every problem it reports
// names the file and a line.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "listen = \":8080\"\n", "consul = \"a:1\"\nnomad = \"http://b:2\"\n",
		"register_tags = [\"a\", null]\n", "breaker_open = \"soon\"\nattempts = 1.5\n", "nomad {}\n", "log_level = env(\"X\")\n"} {
		f.Add(s)
	}
	for _, b := range hostile.HCLSeeds() {
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, src string) {
		cf, err := config.Parse("f.hcl", []byte(src), func(string) string { return "" })
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.hcl:") {
					t.Fatalf("problem %q does not name f.hcl:LINE", line)
				}
			}
			return
		}
		for _, s := range cf.Settings {
			if !strings.HasPrefix(s.At, "f.hcl:") || command(nil).Flags().Lookup(flagName(s.Attr)) == nil {
				t.Fatalf("setting %+v", s)
			}
		}
	})
}

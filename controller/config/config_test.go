package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/hcldecode"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParse(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("etc", "llmgw")
	file := filepath.Join(dir, "llmgw.hcl")
	def := Default(dir)
	def.File = file
	with := func(f func(*Config)) Config {
		c := Default(dir)
		c.File = file
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		src  string
		env  map[string]string
		want Config
	}{
		{"empty file", "", nil, def},
		{"nomad from the environment", "", map[string]string{
			"NOMAD_ADDR": "https://nomad.example:4646", "NOMAD_TOKEN": "s3cret", "NOMAD_REGION": "eu",
			"NOMAD_NAMESPACE": "llm", "NOMAD_CACERT": "ca.pem", "NOMAD_CLIENT_CERT": "/c.pem",
			"NOMAD_CLIENT_KEY": "/k.pem", "NOMAD_TLS_SERVER_NAME": "server.eu.nomad", "NOMAD_SKIP_VERIFY": "true",
		}, with(func(c *Config) {
			c.Nomad = Nomad{Address: "https://nomad.example:4646", Token: "s3cret", Region: "eu", Namespace: "llm", EventStream: true,
				Namespaces: []string{"*"},
				// Paths from the environment stay as given (relative to the
				// working directory, as for Nomad's CLI).
				TLS: TLS{CAFile: "ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem", ServerName: "server.eu.nomad", Insecure: true}}
		})},
		{"task API socket", "", map[string]string{
			// A Nomad task with identity { env = true }: the socket and the
			// workload identity's token; NOMAD_ADDR passed through from the
			// client agent's environment loses to the socket.
			"NOMAD_UNIX_ADDR": "unix:///alloc/x/secrets/api.sock", "NOMAD_TOKEN": "wi.jwt",
			"NOMAD_ADDR": "http://127.0.0.1:4646",
		}, with(func(c *Config) {
			c.Nomad.Address, c.Nomad.Token = "unix:///alloc/x/secrets/api.sock", "wi.jwt"
		})},
		{"file's address wins over the socket", "nomad {\n  address = \"https://n:4646\"\n}\n", map[string]string{
			"NOMAD_UNIX_ADDR": "unix:///alloc/x/secrets/api.sock",
		}, with(func(c *Config) { c.Nomad.Address = "https://n:4646" })},
		{"file wins over the environment", `
nomad {
  address   = "http://10.0.0.1:4646"
  token     = "from-file"
  region    = "us"
  namespace = "default"
  tls {
    ca_file     = "tls/ca.pem"
    cert_file   = "/etc/nomad/cli.pem"
    key_file    = "tls/cli-key.pem"
    server_name = "server.us.nomad"
    insecure    = false
  }
}
`, map[string]string{"NOMAD_ADDR": "https://other:4646", "NOMAD_TOKEN": "env", "NOMAD_REGION": "eu",
			"NOMAD_NAMESPACE": "llm", "NOMAD_CACERT": "x", "NOMAD_SKIP_VERIFY": "1"}, with(func(c *Config) {
			c.Nomad = Nomad{Address: "http://10.0.0.1:4646", Token: "from-file", Region: "us", Namespace: "default", EventStream: true,
				Namespaces: []string{"*"},
				TLS: TLS{CAFile: filepath.Join(dir, "tls/ca.pem"), CertFile: "/etc/nomad/cli.pem",
					KeyFile: filepath.Join(dir, "tls/cli-key.pem"), ServerName: "server.us.nomad"}}
		})},
		{"env function", `
api_token = env("LLMGW_API_TOKEN")
nomad { token = env("MY_NOMAD_TOKEN") }
`, map[string]string{"LLMGW_API_TOKEN": "abc", "MY_NOMAD_TOKEN": "def"}, with(func(c *Config) {
			c.APIToken = "abc"
			c.Nomad.Token = "def"
		})},
		{"everything", `
listen           = "0.0.0.0:8080"
api_token        = "t0k3n"
catalog          = "models/catalog.hcl"
facility         = "/srv/llmgw/facility.hcl"
service_provider = "consul"
datacenters      = ["ams1-a", "ams1-b"]
priority         = 70
node_base_watts  = 1200.5
power_interval   = "5s"
power_cap_hold   = "90s"

consul {
  address = "https://consul.example:8501"
  token   = "c0nsul"
}

driver {
  ready_interval = "2s"
  ready_timeout  = "45m"
  kill_timeout   = "90s"
  shutdown_delay = "20s"
  check_interval = "15s"
  check_timeout  = "3s"
  env            = { HF_HOME = "/srv/hf", HF_HUB_OFFLINE = "1" }
  engines        = { vllm = "/opt/vllm/bin/vllm", command = "/usr/local/bin/fake-engine" }
}

reconcile {
  interval          = "1m"
  partial_deadline  = "20m"
  lost_after        = "2m"
  max_stops         = 4
  max_stop_fraction = 0.25
}
`, nil, with(func(c *Config) {
			c.Listen = "0.0.0.0:8080"
			c.APIToken = "t0k3n"
			c.Catalog = filepath.Join(dir, "models/catalog.hcl")
			c.Facility = "/srv/llmgw/facility.hcl"
			c.ServiceProvider = "consul"
			c.Datacenters = []string{"ams1-a", "ams1-b"}
			c.Priority = 70
			c.NodeBaseWatts = 1200.5
			c.PowerInterval, c.PowerCapHold = 5*time.Second, 90*time.Second
			c.Consul = &Consul{Address: "https://consul.example:8501", Token: "c0nsul"}
			c.Driver = Driver{
				ReadyInterval: 2 * time.Second, ReadyTimeout: 45 * time.Minute, KillTimeout: 90 * time.Second,
				ShutdownDelay: 20 * time.Second, CheckInterval: 15 * time.Second, CheckTimeout: 3 * time.Second,
				Env:     map[string]string{"HF_HOME": "/srv/hf", "HF_HUB_OFFLINE": "1"},
				Engines: map[string]string{"vllm": "/opt/vllm/bin/vllm", "command": "/usr/local/bin/fake-engine"},
			}
			c.Reconcile = Reconcile{Interval: time.Minute, PartialDeadline: 20 * time.Minute, LostAfter: 2 * time.Minute, MaxStops: 4, MaxStopFraction: 0.25}
		})},
		{"consul defaults from the environment", "consul {}\n",
			map[string]string{"CONSUL_HTTP_ADDR": "10.0.0.2:8500", "CONSUL_HTTP_TOKEN": "ct"},
			with(func(c *Config) { c.Consul = &Consul{Address: "10.0.0.2:8500", Token: "ct"} })},
		{"consul defaults", "consul {}\nservice_provider = \"consul\"\n", nil,
			with(func(c *Config) {
				c.Consul = &Consul{Address: DefaultConsulAddress}
				c.ServiceProvider = "consul"
			})},
		{"unix socket", `nomad { address = "unix:///var/run/nomad.sock" }`, nil,
			with(func(c *Config) { c.Nomad.Address = "unix:///var/run/nomad.sock" })},
		{"zero shutdown delay", "driver { shutdown_delay = \"0s\" }\n", nil,
			with(func(c *Config) { c.Driver.ShutdownDelay = 0 })},
		{"namespaces list", `
nomad {
  namespace  = "ml-serving"
  namespaces = ["default", "ml-serving", "ml-batch"]
}
`, nil, with(func(c *Config) {
			c.Nomad.Namespace = "ml-serving"
			c.Nomad.Namespaces = []string{"default", "ml-serving", "ml-batch"}
		})},
		{"namespaces list holds the default namespace", `nomad { namespaces = ["ml-batch", "default"] }`, nil,
			with(func(c *Config) { c.Nomad.Namespaces = []string{"ml-batch", "default"} })},
		{"namespaces list holds NOMAD_NAMESPACE", `nomad { namespaces = ["llm"] }`, map[string]string{"NOMAD_NAMESPACE": "llm"},
			with(func(c *Config) {
				c.Nomad.Namespace = "llm"
				c.Nomad.Namespaces = []string{"llm"}
			})},
		{"power source defaults", "power_source {\n  prometheus {\n    address = \"http://prom:9090\"\n  }\n}\n", nil,
			with(func(c *Config) {
				c.PowerSource = &PowerSource{Prometheus: &PowerPrometheus{Address: "http://prom:9090", Selector: "DCGM_FI_DEV_POWER_USAGE",
					UUIDLabel: "UUID", MaxAge: time.Minute, ClientStatsInterval: 10 * time.Minute}}
			})},
		{"power source", `power_source {
  prometheus {
    address               = "https://prom.example"
    selector              = "DCGM_FI_DEV_POWER_USAGE{job=\"dcgm\", cluster=~\"gpu-{a,b}\"}"
    uuid_label            = "uuid"
    max_age               = "45s"
    client_stats_interval = "1h"
  }
}
`, nil, with(func(c *Config) {
			c.PowerSource = &PowerSource{Prometheus: &PowerPrometheus{Address: "https://prom.example", Selector: `DCGM_FI_DEV_POWER_USAGE{job="dcgm", cluster=~"gpu-{a,b}"}`,
				UUIDLabel: "uuid", MaxAge: 45 * time.Second, ClientStatsInterval: time.Hour}}
		})},
		{"insecure writes on loopback", "insecure_writes = true\n", nil,
			with(func(c *Config) { c.InsecureWrites = true })},
		{"insecure writes on ::1", "listen = \"[::1]:9797\"\ninsecure_writes = true\n", nil,
			with(func(c *Config) { c.Listen, c.InsecureWrites = "[::1]:9797", true })},
		{"insecure writes on localhost", "listen = \"localhost:9797\"\ninsecure_writes = true\n", nil,
			with(func(c *Config) { c.Listen, c.InsecureWrites = "localhost:9797", true })},
		{"insecure writes false", "listen = \"0.0.0.0:9797\"\ninsecure_writes = false\n", nil,
			with(func(c *Config) { c.Listen = "0.0.0.0:9797" })},
		{"every namespace spelled out", `nomad {
  namespace  = "llm"
  namespaces = ["*"]
}`, nil, with(func(c *Config) {
			c.Nomad.Namespace = "llm"
			c.Nomad.Namespaces = []string{"*"}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(file, []byte(tc.src), envMap(tc.env))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		src  string
		env  map[string]string
		want []string // each error, in order
	}{
		{"syntax", "listen = \n", nil, []string{"c.hcl:1: Invalid expression"}},
		{"unknown attribute", "\nlisten = \"127.0.0.1:1\"\nport = 9797\n", nil, []string{"c.hcl:3: Unsupported argument"}},
		{"unknown block", "\n\nserver {\n}\n", nil, []string{"c.hcl:3: Unsupported block type"}},
		{"unknown nomad attribute", "nomad {\n  addr = \"x\"\n}\n", nil, []string{"c.hcl:2: Unsupported argument"}},
		{"unknown tls attribute", "nomad {\n  tls {\n    ca = \"x\"\n  }\n}\n", nil, []string{"c.hcl:3: Unsupported argument"}},
		{"unknown driver attribute", "driver {\n  timeout = \"1m\"\n}\n", nil, []string{"c.hcl:2: Unsupported argument"}},
		{"label on block", "nomad \"eu\" {\n}\n", nil, []string{"c.hcl:1: Extraneous label"}},
		{"duplicate block", "driver {}\nreconcile {}\ndriver {}\n", nil, []string{"c.hcl:3: Duplicate driver block: Only one driver block is allowed. Another was defined at c.hcl:1"}},
		{"duplicate attribute", "listen = \"a:1\"\nlisten = \"b:2\"\n", nil, []string{"c.hcl:2: Attribute redefined"}},
		{"bad duration", "driver {\n  ready_timeout = \"30 minutes\"\n}\n", nil, []string{`c.hcl:2: ready_timeout: "30 minutes" is not a duration`}},
		{"duration as number", "reconcile {\n  interval = 30\n}\n", nil, []string{`c.hcl:2: interval: "30" is not a duration`}},
		{"negative duration", "driver {\n  kill_timeout = \"-5s\"\n}\n", nil, []string{"c.hcl:2: kill_timeout: -5s is below the minimum of 1s"}},
		{"ready interval too short", "driver {\n  ready_interval = \"10ms\"\n}\n", nil, []string{"c.hcl:2: ready_interval: 10ms is below the minimum of 100ms"}},
		{"check timeout above interval", "driver {\n  check_interval = \"5s\"\n  check_timeout = \"10s\"\n}\n", nil, []string{"c.hcl:3: check_timeout: 10s is longer than check_interval 5s"}},
		{"zero reconcile interval", "reconcile {\n  partial_deadline = \"0s\"\n}\n", nil, []string{"c.hcl:2: partial_deadline: 0s is below the minimum of 1s"}},
		{"negative lost_after", "reconcile {\n  lost_after = \"-1s\"\n}\n", nil, []string{"c.hcl:2: lost_after: -1s is below the minimum of 0s"}},
		{"lost_after too long", "reconcile {\n\n  lost_after = \"25h\"\n}\n", nil, []string{"c.hcl:3: lost_after: 25h0m0s is above the maximum of 24h0m0s"}},
		{"max_stops zero", "reconcile {\n  max_stops = 0\n}\n", nil, []string{"c.hcl:2: max_stops: want a whole number from 1 to 10000"}},
		{"max_stops fraction", "reconcile {\n  max_stops = 2.5\n}\n", nil, []string{"c.hcl:2: max_stops: want a whole number from 1 to 10000"}},
		{"max_stop_fraction above 1", "reconcile {\n  max_stop_fraction = 1.5\n}\n", nil, []string{"c.hcl:2: max_stop_fraction: want a number above 0 and at most 1"}},
		{"bad listen", "\nlisten = \"localhost\"\n", nil, []string{`c.hcl:2: listen: "localhost" is not host:port`}},
		{"listen port", "listen = \"127.0.0.1:99999\"\n", nil, []string{`c.hcl:1: listen: "127.0.0.1:99999": port "99999" is not 1-65535`}},
		{"listen port name", "listen = \"127.0.0.1:http\"\n", nil, []string{`port "http" is not 1-65535`}},
		{"consul provider without consul", "\n\nservice_provider = \"consul\"\n", nil, []string{`c.hcl:3: service_provider: "consul" needs a consul block`}},
		{"unknown provider", "service_provider = \"etcd\"\n", nil, []string{`c.hcl:1: service_provider: "etcd" is neither "nomad" nor "consul"`}},
		{"negative watts", "\nnode_base_watts = -100\n", nil, []string{"c.hcl:2: node_base_watts: must be a number of watts, 0 or more, got -100"}},
		{"watts as string word", "node_base_watts = \"lots\"\n", nil, []string{"c.hcl:1: node_base_watts: Unsuitable value type: a number is required"}},
		{"power_interval too short", "\npower_interval = \"500ms\"\n", nil, []string{"c.hcl:2: power_interval: 500ms is below the minimum of 1s"}},
		{"power_interval too long", "power_interval = \"11m\"\n", nil, []string{"c.hcl:1: power_interval: 11m0s is above the maximum of 10m0s"}},
		{"power_interval not a duration", "power_interval = 30\n", nil, []string{`c.hcl:1: power_interval: "30" is not a duration`}},
		{"power_cap_hold zero", "\n\npower_cap_hold = \"0s\"\n", nil, []string{"c.hcl:3: power_cap_hold: 0s is below the minimum of 1s"}},
		{"power_cap_hold too long", "power_cap_hold = \"25h\"\n", nil, []string{"c.hcl:1: power_cap_hold: 25h0m0s is above the maximum of 24h0m0s"}},
		{"power source without prometheus", "\npower_source {\n}\n", nil, []string{"c.hcl:2: power_source: give a prometheus block"}},
		{"power source without address", "power_source {\n  prometheus {\n    max_age = \"1m\"\n  }\n}\n", nil, []string{"c.hcl:2: prometheus: address is required"}},
		{"power source bad address", "power_source {\n  prometheus {\n\n    address = \"prom:9090\"\n  }\n}\n", nil, []string{`c.hcl:4: address: "prom:9090": want http:// or https://`}},
		{"power source query, not a selector", "power_source {\n  prometheus {\n    address  = \"http://p:9090\"\n    selector = \"sum by (UUID) (DCGM_FI_DEV_POWER_USAGE)\"\n  }\n}\n", nil,
			[]string{`c.hcl:4: selector: "sum by (UUID) (DCGM_FI_DEV_POWER_USAGE)" is not a series selector`}},
		{"power source selector with a range", "power_source {\n  prometheus {\n    address  = \"http://p:9090\"\n    selector = \"DCGM_FI_DEV_POWER_USAGE[1m]\"\n  }\n}\n", nil,
			[]string{`c.hcl:4: selector: "DCGM_FI_DEV_POWER_USAGE[1m]" is not a series selector`}},
		{"power source empty selector", "power_source {\n  prometheus {\n    address  = \"http://p:9090\"\n    selector = \"\"\n  }\n}\n", nil,
			[]string{`c.hcl:4: selector: "" is not a series selector`}},
		{"power source bad uuid label", "power_source {\n  prometheus {\n    address    = \"http://p:9090\"\n    uuid_label = \"gpu-uuid\"\n  }\n}\n", nil,
			[]string{`c.hcl:4: uuid_label: "gpu-uuid" is not a Prometheus label name`}},
		{"power source max_age too short", "power_source {\n  prometheus {\n    address = \"http://p:9090\"\n    max_age = \"500ms\"\n  }\n}\n", nil,
			[]string{"c.hcl:4: max_age: 500ms is below the minimum of 1s"}},
		{"power source max_age too long", "power_source {\n  prometheus {\n    address = \"http://p:9090\"\n    max_age = \"2h\"\n  }\n}\n", nil,
			[]string{"c.hcl:4: max_age: 2h0m0s is above the maximum of 1h0m0s"}},
		{"power source client_stats_interval", "power_source {\n  prometheus {\n    address = \"http://p:9090\"\n\n    client_stats_interval = \"soon\"\n  }\n}\n", nil,
			[]string{`c.hcl:5: client_stats_interval: "soon" is not a duration`}},
		{"power source unknown attribute", "power_source {\n  prometheus {\n    address = \"http://p:9090\"\n    query   = \"x\"\n  }\n}\n", nil,
			[]string{"c.hcl:4: Unsupported argument"}},
		{"priority", "priority = 0\n", nil, []string{"c.hcl:1: priority: want a whole number from 1 to 32766"}},
		{"fractional priority", "priority = 50.5\n", nil, []string{"c.hcl:1: priority: want a whole number"}},
		{"empty datacenters", "datacenters = []\n", nil, []string{"c.hcl:1: datacenters: want at least one"}},
		{"datacenters not a list", "datacenters = \"dc1\"\n", nil, []string{"c.hcl:1: datacenters: Unsuitable value type: list of string required"}},
		{"empty catalog", "catalog = \"\"\n", nil, []string{"c.hcl:1: catalog: must not be empty"}},
		{"null", "api_token = null\n", nil, []string{"c.hcl:1: api_token: must not be null"}},
		{"insecure writes on every interface", "listen = \":9797\"\ninsecure_writes = true\n", nil,
			[]string{`c.hcl:2: insecure_writes: listen ":9797" is not a loopback address (127.0.0.1, ::1 or localhost)`}},
		{"insecure writes on a LAN address", "listen = \"10.0.0.5:9797\"\ninsecure_writes = true\n", nil,
			[]string{`c.hcl:2: insecure_writes: listen "10.0.0.5:9797" is not a loopback address`}},
		{"insecure writes on a host name", "listen = \"ctl.example:9797\"\ninsecure_writes = true\n", nil,
			[]string{`c.hcl:2: insecure_writes: listen "ctl.example:9797" is not a loopback address`}},
		{"insecure writes with a token", "api_token = \"t\"\ninsecure_writes = true\n", nil,
			[]string{"c.hcl:2: insecure_writes: api_token is set too"}},
		{"insecure writes not a bool", "insecure_writes = \"yes please\"\n", nil,
			[]string{"c.hcl:1: insecure_writes: Unsuitable value type: a bool is required"}},
		{"unknown engine", "driver {\n  engines = { trtllm = \"/bin/x\" }\n}\n", nil, []string{`c.hcl:2: engines: unknown engine "trtllm"`}},
		{"empty engine executable", "driver {\n  engines = { vllm = \"\" }\n}\n", nil, []string{"c.hcl:2: engines.vllm: empty executable"}},
		{"bad env name", "driver {\n  env = { \"A=B\" = \"x\" }\n}\n", nil, []string{`c.hcl:2: env: bad variable "A=B"`}},
		{"env not a map", "driver {\n  env = [\"A\"]\n}\n", nil, []string{"c.hcl:2: env: Unsuitable value type: map of string required"}},
		{"bad nomad address", "nomad {\n  address = \"nomad:4646\"\n}\n", nil, []string{`c.hcl:2: address: "nomad:4646": want http://, https:// or unix://`}},
		{"nomad address without host", "nomad {\n  address = \"http://\"\n}\n", nil, []string{`c.hcl:2: address: "http://" has no host`}},
		{"bad NOMAD_ADDR", "", map[string]string{"NOMAD_ADDR": "ftp://x"}, []string{`c.hcl: NOMAD_ADDR in the environment: "ftp://x": want http://, https:// or unix://`}},
		{"bad NOMAD_UNIX_ADDR", "", map[string]string{"NOMAD_UNIX_ADDR": "/secrets/api.sock"}, []string{`c.hcl: NOMAD_UNIX_ADDR in the environment: "/secrets/api.sock": want http://, https:// or unix://`}},
		{"bad NOMAD_SKIP_VERIFY", "", map[string]string{"NOMAD_SKIP_VERIFY": "maybe"}, []string{`c.hcl: NOMAD_SKIP_VERIFY in the environment: "maybe" is not a boolean`}},
		{"insecure not a bool", "nomad {\n  tls {\n    insecure = \"sometimes\"\n  }\n}\n", nil, []string{"c.hcl:3: insecure: Unsuitable value type: a bool is required"}},
		{"cert without key", "nomad {\n  tls {\n    cert_file = \"c.pem\"\n  }\n}\n", nil, []string{"c.hcl:2: nomad tls: cert_file and key_file go together"}},
		{"bad consul address", "consul {\n  address = \"consul\"\n}\n", nil, []string{`c.hcl:2: address: "consul" is not host:port`}},
		{"unknown function", "api_token = file(\"/etc/token\")\n", nil, []string{"c.hcl:1: api_token: Call to unknown function"}},
		{"namespace not in namespaces", "nomad {\n  namespace  = \"ml-serving\"\n  namespaces = [\"default\", \"ml-batch\"]\n}\n", nil,
			[]string{`c.hcl:3: namespaces: nomad.namespace (line 2) "ml-serving" is not in the list`}},
		{"default namespace not in namespaces", "nomad {\n\n  namespaces = [\"ml-batch\"]\n}\n", nil,
			[]string{`c.hcl:3: namespaces: nomad.namespace (the default) "default" is not in the list`}},
		{"NOMAD_NAMESPACE not in namespaces", "nomad {\n  namespaces = [\"default\"]\n}\n", map[string]string{"NOMAD_NAMESPACE": "llm"},
			[]string{`c.hcl:2: namespaces: nomad.namespace (from NOMAD_NAMESPACE) "llm" is not in the list`}},
		{"empty namespaces", "nomad {\n  namespaces = []\n}\n", nil, []string{"c.hcl:2: namespaces: want at least one namespace"}},
		{"star beside names", "nomad {\n  namespaces = [\"*\", \"default\"]\n}\n", nil, []string{`c.hcl:2: namespaces: "*" (every namespace) goes alone`}},
		{"namespace pattern", "nomad {\n  namespaces = [\"default\", \"ml-*\"]\n}\n", nil, []string{`c.hcl:2: namespaces: "ml-*" is not a Nomad namespace name`}},
		{"namespace twice", "nomad {\n  namespaces = [\"default\", \"default\"]\n}\n", nil, []string{`c.hcl:2: namespaces: "default" is listed twice`}},
		{"namespaces not a list", "nomad {\n  namespaces = \"default\"\n}\n", nil, []string{"c.hcl:2: namespaces: Unsuitable value type: list of string required"}},
		{"unknown attribute, with a hint", "nomad {\n  adddress = \"x\"\n}\n", nil, []string{`c.hcl:2: Unsupported argument: An argument named "adddress" is not expected here. Did you mean "address"?`}},
		{"unknown block, with a hint", "reconcil {\n}\n", nil, []string{`c.hcl:1: Unsupported block type: Blocks of type "reconcil" are not expected here. Did you mean "reconcile"?`}},
		{"unknown attribute set to null", "lisen = null\n", nil, []string{`c.hcl:1: Unsupported argument: An argument named "lisen" is not expected here. Did you mean "listen"?`}},
		{"null list", "\ndatacenters = null\n", nil, []string{"c.hcl:2: datacenters: must not be null"}},
		{"null map", "driver {\n  env = null\n}\n", nil, []string{"c.hcl:2: env: must not be null"}},
		{"null number", "reconcile {\n  max_stops = null\n}\n", nil, []string{"c.hcl:2: max_stops: must not be null"}},
		{"null element", "driver {\n  env = { A = null }\n}\n", nil, []string{"c.hcl:2: env: Unsuitable value type: null value is not allowed"}},
		{"null from a function", "nomad {\n  token = env(null)\n}\n", nil, []string{"c.hcl:2: token: Invalid function argument"}},
		{"one problem per attribute", "listen = file(\"x\")\n", nil, []string{"c.hcl:1: listen: Call to unknown function"}},
		{"several problems", "listen = \"x\"\n\ndriver {\n  ready_timeout = \"soon\"\n}\nnode_base_watts = -1\n", nil, []string{
			`c.hcl:4: ready_timeout: "soon" is not a duration`,
			`c.hcl:1: listen: "x" is not host:port`,
			"c.hcl:6: node_base_watts",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.hcl", []byte(tc.src), envMap(tc.env))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			var errs []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			} else {
				errs = []error{err}
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(errs), len(tc.want), err)
			}
			for i, e := range errs {
				var ce *hcldecode.Problem
				if !errors.As(e, &ce) {
					t.Errorf("error %d (%v) is not a *hcldecode.Problem", i, e)
				}
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("error %d = %q, want it to contain %q", i, e, tc.want[i])
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "llmgw.hcl")
	if err := os.WriteFile(path, []byte("catalog = \"cat.hcl\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Catalog, filepath.Join(dir, "cat.hcl"); got != want {
		t.Errorf("Catalog = %q, want %q", got, want)
	}
	if got, want := c.Facility, filepath.Join(dir, DefaultFacility); got != want {
		t.Errorf("Facility = %q, want %q", got, want)
	}
	if _, err := Load(filepath.Join(dir, "missing.hcl"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want os.ErrNotExist", err)
	}
	if err := os.WriteFile(path, []byte("\nlisten = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, nil)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2: ") {
		t.Errorf("Load error %v, want it to name %s:2", err, path)
	}
}

// The example configuration parses, and points at the example catalog and
// facility, which parse too.
func TestExample(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "jobs", "examples", "llmgw.hcl")
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(c.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := facility.ParseCatalog(c.Catalog, src); err != nil {
		t.Error(err)
	}
	src, err = os.ReadFile(c.Facility)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := facility.ParseFacility(c.Facility, src); err != nil {
		t.Error(err)
	}
	// The example spells out the defaults: it parses to what an empty file
	// gives, apart from what it sets on purpose.
	want := Default(filepath.Dir(path))
	want.File = path
	want.NodeBaseWatts = 1200
	want.Driver.Env = map[string]string{"DO_NOT_TRACK": "1"}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("example (-defaults +example):\n%s", diff)
	}
}

func TestRenderSettings(t *testing.T) {
	t.Parallel()
	c, err := Parse("c.hcl", []byte(`
nomad {
  region    = "eu"
  namespace = "llm"
}
datacenters = ["dc1"]
priority    = 60
driver {
  env     = { A = "1" }
  engines = { vllm = "/bin/vllm" }
}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := c.RenderSettings()
	want := render.Settings{
		Namespace: "llm", Region: "eu", Datacenters: []string{"dc1"}, Priority: 60,
		ServiceProvider: "nomad",
		ReadyInterval:   render.DefaultReadyInterval, ReadyTimeout: render.DefaultReadyTimeout,
		CheckInterval: render.DefaultCheckInterval, CheckTimeout: render.DefaultCheckTimeout,
		KillTimeout: render.DefaultKillTimeout, ShutdownDelay: render.DefaultShutdownDelay,
		Env: map[string]string{"A": "1"}, Commands: map[string]string{"vllm": "/bin/vllm"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RenderSettings (-want +got):\n%s", diff)
	}
	// A copy: the config's maps stay the config's.
	got.Env["B"] = "2"
	if _, ok := c.Driver.Env["B"]; ok {
		t.Error("RenderSettings shares the env map")
	}
	// The defaults are ones render accepts.
	if diff := cmp.Diff(render.DefaultSettings(), Default(".").RenderSettings()); diff != "" {
		t.Errorf("default settings differ from render's (-render +config):\n%s", diff)
	}
}

func TestAPIConfig(t *testing.T) {
	t.Parallel()
	n := Nomad{Address: "https://n:4646", Token: "t", Region: "r", Namespace: "ns",
		TLS: TLS{CAFile: "ca", CertFile: "c", KeyFile: "k", ServerName: "sn", Insecure: true}}
	got := n.APIConfig()
	want := &api.Config{Address: "https://n:4646", SecretID: "t", Region: "r", Namespace: "ns",
		TLSConfig: &api.TLSConfig{CACert: "ca", ClientCert: "c", ClientKey: "k", TLSServerName: "sn", Insecure: true}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(api.Config{})); diff != "" {
		t.Errorf("APIConfig (-want +got):\n%s", diff)
	}
}

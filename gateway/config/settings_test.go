package config

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2/gohcl"
)

func TestRegistration(t *testing.T) {
	tests := []struct {
		name, advertise, listen string
		wantAddr, wantCheck     string
		wantPort                int
		wantErr                 bool
	}{
		{"unspecified listen host", "", "[::]:8080", "", "http://127.0.0.1:8080/healthz", 8080, false},
		{"specific listen host", "", "10.1.2.3:8080", "10.1.2.3", "http://10.1.2.3:8080/healthz", 8080, false},
		{"advertised", "gw.example:443", "[::]:8080", "gw.example", "http://gw.example:443/healthz", 443, false},
		{"bad advertise", "gw.example", "[::]:8080", "", "", 0, true},
		{"bad advertised port", "gw:0", "[::]:8080", "", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.ResolveTCPAddr("tcp", tt.listen)
			if err != nil {
				t.Fatal(err)
			}
			r, err := NewRegistration(tt.advertise, ln)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got := [3]string{r.Address, r.CheckURL, strconv.Itoa(r.Port)}
			want := [3]string{tt.wantAddr, tt.wantCheck, strconv.Itoa(tt.wantPort)}
			if diff := cmp.Diff(want, got); diff != "" || !strings.HasPrefix(r.ID, "llmgw-gateway-") {
				t.Errorf("id %q (-want +got):\n%s", r.ID, diff)
			}
		})
	}
}

// A configuration file nested past the limit is refused with its line,
// before HCL's parser sees it.
func TestParseDeepFile(t *testing.T) {
	src := "register_tags = " + strings.Repeat("[", 100000) + "\n"
	_, err := Parse("gateway.hcl", []byte(src), func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "gateway.hcl:1") || !strings.Contains(err.Error(), "64") {
		t.Errorf("got %v; want the depth limit at gateway.hcl:1", err)
	}
}

// Check names every setting it refuses by the name it is given for the
// setting's attribute, and every name asked for is an attribute of the
// file (which the command turns into a flag or the file's line).
func TestCheckNamesAttributes(t *testing.T) {
	base := Settings{Listen: "127.0.0.1:0", RegisterCheckInterval: 10 * time.Second, ConsulWait: time.Minute,
		MaxBodyChatCompletions: 1 << 20, MaxBodyCompletions: 1 << 20, MaxBodyEmbeddings: 1 << 20, BodyMemory: 1 << 24,
		MaxJSONDepth: 64, BodyReadTimeout: 30 * time.Second, Attempts: 3, BreakerFailures: 5, CheckParallelism: 8,
		NoReplicaRetryAfter: 5 * time.Second, BreakerOpen: 5 * time.Second, BreakerMaxOpen: time.Minute,
		CheckTimeout: 2 * time.Second, DemandWindow: 30 * time.Second, HoldPerModel: 1, HoldTotal: 1, WakeBurst: 1,
		PrefixLoadFactor: 2, PrefixHistoryLoadFactor: 4}
	if err := base.Check(nil); err != nil {
		t.Fatalf("base settings: %v", err)
	}
	schema, _ := gohcl.ImpliedBodySchema(FileHCL{})
	attrs := map[string]bool{}
	for _, a := range schema.Attributes {
		attrs[a.Name] = true
	}
	for _, tt := range []struct {
		want   string // the first setting named
		change func(*Settings)
	}{
		{"max_body_embeddings", func(s *Settings) { s.MaxBodyEmbeddings = 0 }},
		{"max_json_depth", func(s *Settings) { s.MaxJSONDepth = 0 }},
		{"body_read_timeout", func(s *Settings) { s.BodyReadTimeout = 0 }},
		{"cors_origins", func(s *Settings) { s.CORSOrigins = []string{"a.example"} }},
		{"attempts", func(s *Settings) { s.BreakerMaxOpen = time.Second }},
		{"consul_wait", func(s *Settings) { s.ConsulWait = 0 }},
		{"routing", func(s *Settings) { s.Routing = []string{"m=fastest"} }},
		{"prefix_load_factor", func(s *Settings) { s.PrefixLoadFactor = 0.5 }},
		{"prefix_history_load_factor", func(s *Settings) { s.PrefixHistoryLoadFactor = 1 }},
		{"prefix_opening_limit", func(s *Settings) { s.PrefixOpeningLimit = -1 }},
		{"prefix_opening_wait", func(s *Settings) { s.PrefixOpeningWait = -1 }},
		{"register_check_interval", func(s *Settings) { s.RegisterCheckInterval = 0 }},
		{"engine_metrics_interval", func(s *Settings) { s.EngineMetricsInterval = -1 }},
		{"check_parallelism", func(s *Settings) { s.CheckParallelism = 0 }},
		{"hold_timeout", func(s *Settings) { s.HoldTimeout = -1 }},
		{"hold_total", func(s *Settings) { s.HoldTotal = 0 }},
		{"demand_window", func(s *Settings) { s.DemandWindow = 0 }},
		{"models_variable", func(s *Settings) { s.ModelsVariable = "a b" }},
		{"keys_file", func(s *Settings) { s.KeysFile, s.KeysVariable = "k.hcl", "llmgw/keys" }},
		{"keys_variable", func(s *Settings) { s.KeysVariable = "a b" }},
		{"keys_variable", func(s *Settings) { s.KeysVariable, s.Consul = "llmgw/keys", "127.0.0.1:8500" }},
		{"keys_namespace", func(s *Settings) { s.KeysNamespace = "*" }},
		{"share_limits", func(s *Settings) { s.ShareLimits = true }},
		{"tls_cert_file", func(s *Settings) { s.TLSCertFile = "c.pem" }},
		{"models_namespace", func(s *Settings) { s.ModelsNamespace = "*" }},
		{"advertise", func(s *Settings) { s.Advertise = "gw.example" }},
	} {
		s := base
		tt.change(&s)
		var named []string
		err := s.Check(func(attr string) string { named = append(named, attr); return "<" + attr + ">" })
		if err == nil || len(named) == 0 || named[0] != tt.want || !strings.HasPrefix(err.Error(), "<"+tt.want+">") {
			t.Errorf("%s: %v, named %v", tt.want, err, named)
		}
		for _, n := range named {
			if !attrs[n] {
				t.Errorf("%s: Check named %q, not an attribute of the file", tt.want, n)
			}
		}
	}
}

package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/gatewayapi"
)

// Settings are the gateway server's settings (gateway.Open). Each field
// is the configuration file's attribute of the same name (HeaderTimeout is
// response_header_timeout), a flag of `llmgw gateway` too; the command
// resolves them (defaults, then the file, then the flags given) and checks
// them with Check before serving.
type Settings struct {
	Listen, Consul, Nomad, Namespace, Advertise      string
	Register                                         bool
	RegisterTags                                     []string
	RegisterCheckInterval, ConsulWait                time.Duration
	MaxBodyChatCompletions, MaxBodyCompletions       int64
	MaxBodyEmbeddings, BodyMemory                    int64
	MaxJSONDepth                                     int
	BodyReadTimeout                                  time.Duration
	CORSOrigins                                      []string
	Attempts, BreakerFailures, CheckParallelism      int
	NoReplicaRetryAfter, BreakerOpen, BreakerMaxOpen time.Duration
	DialTimeout, HeaderTimeout                       time.Duration
	CheckInterval, CheckTimeout                      time.Duration
	EngineMetricsInterval                            time.Duration
	HoldTimeout, DemandWindow                        time.Duration
	HoldPerModel, HoldTotal, WakeBurst               int
	ModelsVariable, ModelsNamespace, ModelsNomad     string
	KeysFile, KeysVariable, KeysNamespace            string
	ShareLimits                                      bool
	TLSCertFile, TLSKeyFile                          string
	Routing                                          []string // MODEL=POLICY
	PrefixLoadFactor, PrefixHistoryLoadFactor        float64
	PrefixOpeningLimit                               int
	PrefixOpeningWait                                time.Duration
}

// A SettingError is a problem with one setting found only when serving
// with it (an address that cannot be listened on, a certificate that does
// not load). Setting is its attribute ("tls_cert_file"), by which the
// command names it as it names it in Check's errors.
type SettingError struct {
	Setting string
	Err     error
}

func (e *SettingError) Error() string { return e.Setting + ": " + e.Err.Error() }

func (e *SettingError) Unwrap() error { return e.Err }

// Check refuses settings that cannot work. Its errors name each setting
// by name(attribute), "max_body_completions" say: the command names it by
// its flag, or by the file's line where the file gave it. A nil name
// names it by its attribute.
func (f *Settings) Check(name func(setting string) string) error {
	if name == nil {
		name = func(s string) string { return s }
	}
	for _, b := range []struct {
		setting string
		v       int64
	}{{"max_body_chat_completions", f.MaxBodyChatCompletions}, {"max_body_completions", f.MaxBodyCompletions}, {"max_body_embeddings", f.MaxBodyEmbeddings}} {
		if b.v <= 0 || b.v > f.BodyMemory {
			return fmt.Errorf("%s %d, %s %d: want more than 0, and no more than the body memory", name(b.setting), b.v, name("body_memory"), f.BodyMemory)
		}
	}
	if f.MaxJSONDepth < 1 || f.MaxJSONDepth > MaxJSONDepth {
		return fmt.Errorf("%s: %d: want 1 to %d", name("max_json_depth"), f.MaxJSONDepth, MaxJSONDepth)
	}
	if f.BodyReadTimeout <= 0 {
		return fmt.Errorf("%s: %s: want more than 0", name("body_read_timeout"), f.BodyReadTimeout)
	}
	if err := CheckOrigins(f.CORSOrigins); err != nil {
		return fmt.Errorf("%s: %w", name("cors_origins"), err)
	}
	if f.Attempts < 1 || f.BreakerFailures < 1 || f.BreakerOpen <= 0 || f.BreakerMaxOpen < f.BreakerOpen {
		return fmt.Errorf("%s and %s must be at least 1, and 0 < %s <= %s", name("attempts"), name("breaker_failures"), name("breaker_open"), name("breaker_max_open"))
	}
	for _, d := range []struct {
		setting string
		v       time.Duration
	}{{"check_timeout", f.CheckTimeout}, {"consul_wait", f.ConsulWait}, {"no_replica_retry_after", f.NoReplicaRetryAfter}} {
		if d.v <= 0 {
			return fmt.Errorf("%s: %s: want more than 0", name(d.setting), d.v)
		}
	}
	if _, err := RoutingMap(f.Routing); err != nil {
		return fmt.Errorf("%s: %w", name("routing"), err)
	}
	if f.PrefixLoadFactor < 1 {
		return fmt.Errorf("%s: %g: want 1 or more", name("prefix_load_factor"), f.PrefixLoadFactor)
	}
	if f.PrefixHistoryLoadFactor < f.PrefixLoadFactor {
		return fmt.Errorf("%s: %g: want at least %s (%g)", name("prefix_history_load_factor"), f.PrefixHistoryLoadFactor, name("prefix_load_factor"), f.PrefixLoadFactor)
	}
	if f.PrefixOpeningLimit < 0 {
		return fmt.Errorf("%s: %d: want 0 (one more than the engine's slots) or more", name("prefix_opening_limit"), f.PrefixOpeningLimit)
	}
	if f.PrefixOpeningWait < 0 {
		return fmt.Errorf("%s: %s: want 0 (no waiting) or more", name("prefix_opening_wait"), f.PrefixOpeningWait)
	}
	if f.RegisterCheckInterval < time.Second {
		return fmt.Errorf("%s: %s: want 1s or more", name("register_check_interval"), f.RegisterCheckInterval)
	}
	if f.EngineMetricsInterval < 0 {
		return fmt.Errorf("%s: %s: want 0 (off) or more", name("engine_metrics_interval"), f.EngineMetricsInterval)
	}
	if f.CheckParallelism < 1 {
		return fmt.Errorf("%s: %d: want at least 1", name("check_parallelism"), f.CheckParallelism)
	}
	if f.HoldTimeout < 0 {
		return fmt.Errorf("%s: %s: want 0 (hold nothing) or more", name("hold_timeout"), f.HoldTimeout)
	}
	for _, n := range []struct {
		setting string
		v       int
	}{{"hold_per_model", f.HoldPerModel}, {"hold_total", f.HoldTotal}, {"wake_burst", f.WakeBurst}} {
		if n.v < 1 {
			return fmt.Errorf("%s: %d: want at least 1", name(n.setting), n.v)
		}
	}
	if f.DemandWindow < time.Second || f.DemandWindow > time.Hour {
		return fmt.Errorf("%s: %s: want 1s to 1h", name("demand_window"), f.DemandWindow)
	}
	if f.ModelsVariable != "" && !ValidVariablePath(f.ModelsVariable) {
		return fmt.Errorf("%s: %q: a Nomad variable path is 1 to 128 letters, digits and -_~/", name("models_variable"), f.ModelsVariable)
	}
	if f.KeysFile != "" && f.KeysVariable != "" {
		return fmt.Errorf("%s and %s: read the keys from one of them", name("keys_file"), name("keys_variable"))
	}
	if f.KeysVariable != "" && !ValidVariablePath(f.KeysVariable) {
		return fmt.Errorf("%s: %q: a Nomad variable path is 1 to 128 letters, digits and -_~/", name("keys_variable"), f.KeysVariable)
	}
	if f.KeysVariable != "" && f.Consul != "" && f.ModelsNomad == "" {
		return fmt.Errorf("%s: with %s, %s names the Nomad to read the keys from", name("keys_variable"), name("consul"), name("models_nomad"))
	}
	if f.KeysNamespace == "*" {
		return fmt.Errorf("%s: the keys are one variable in one namespace, not %q", name("keys_namespace"), f.KeysNamespace)
	}
	if f.ShareLimits && f.KeysFile == "" && f.KeysVariable == "" {
		return fmt.Errorf("%s: there are no limits to share without keys (%s or %s)", name("share_limits"), name("keys_file"), name("keys_variable"))
	}
	if (f.TLSCertFile == "") != (f.TLSKeyFile == "") {
		return fmt.Errorf("%s and %s: give both, or neither", name("tls_cert_file"), name("tls_key_file"))
	}
	if f.ModelsNamespace == "*" {
		return fmt.Errorf("%s: the model list is one variable in one namespace, not %q", name("models_namespace"), f.ModelsNamespace)
	}
	if f.Advertise != "" {
		if _, err := NewRegistration(f.Advertise, &net.TCPAddr{Port: 1}); err != nil {
			return fmt.Errorf("%s: %w", name("advertise"), err)
		}
	}
	return nil
}

// MaxJSONDepth is the most max_json_depth may be: Go's encoding/json,
// which checks every body, refuses JSON nested deeper than 10,000 levels.
const MaxJSONDepth = 10000

// CheckOrigins checks cors_origins: each "*" (every origin) or an
// origin as browsers send it, scheme://host[:port] with scheme http or
// https and nothing after the authority.
func CheckOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil {
			return fmt.Errorf("origin %q: %w", o, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return fmt.Errorf("origin %q: want \"*\" or scheme://host[:port], scheme http or https, nothing after (such as https://chat.example.com)", o)
		}
	}
	return nil
}

// RoutingMap reads routing's MODEL=POLICY entries.
func RoutingMap(entries []string) (map[string]string, error) {
	m := map[string]string{}
	for _, e := range entries {
		model, policy, ok := strings.Cut(e, "=")
		model, policy = strings.TrimSpace(model), strings.TrimSpace(policy)
		if !ok || model == "" {
			return nil, fmt.Errorf("%q: want MODEL=POLICY", e)
		}
		if _, dup := m[model]; dup {
			return nil, fmt.Errorf("%q: model %q given twice", e, model)
		}
		m[model] = policy
	}
	if err := CheckRouting(m); err != nil {
		return nil, err
	}
	return m, nil
}

// CheckRouting reports an unknown policy in a model → policy map, naming
// the model.
func CheckRouting(m map[string]string) error {
	for model, p := range m {
		if !gatewayapi.ValidRouting(p) {
			return fmt.Errorf("routing for model %q: %q is not a policy (%s or %s)", model, p, gatewayapi.RoutingLeastOutstanding, gatewayapi.RoutingPrefix)
		}
	}
	return nil
}

// ValidVariablePath reports whether p is a path Nomad accepts for a
// variable.
func ValidVariablePath(p string) bool {
	if len(p) < 1 || len(p) > 128 {
		return false
	}
	for _, c := range p {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_~/", c)
		if !ok {
			return false
		}
	}
	return true
}

// NewRegistration is how the gateway registers itself: at advertise, else
// at the listen address (its host left to Consul when unspecified), with
// the check on /healthz at the same address (127.0.0.1 for an unspecified
// host: the agent is local).
func NewRegistration(advertise string, listen net.Addr) (Registration, error) {
	host, portStr, err := net.SplitHostPort(listen.String())
	if err != nil {
		return Registration{}, fmt.Errorf("listen address %s: %w", listen, err)
	}
	if advertise != "" {
		host, portStr, err = net.SplitHostPort(advertise)
		if err != nil {
			return Registration{}, fmt.Errorf("%q: want HOST:PORT: %w", advertise, err)
		}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return Registration{}, fmt.Errorf("advertised port %q: want 1 to 65535", portStr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = ""
	}
	checkHost := host
	if checkHost == "" {
		checkHost = "127.0.0.1"
	}
	name, _ := os.Hostname()
	return Registration{
		ID:       fmt.Sprintf("%s-%s-%d", gatewayapi.GatewayServiceName, name, port),
		Address:  host,
		Port:     port,
		CheckURL: "http://" + net.JoinHostPort(checkHost, strconv.Itoa(port)) + "/healthz",
	}, nil
}

// Registration is where the gateway registers itself in Consul: its
// service ID, the address and port clients reach it at (an empty Address
// is the agent's node address), and its /healthz check's URL.
type Registration struct {
	ID       string
	Address  string
	Port     int
	CheckURL string
}

package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/gatewayapi"
)

// Settings are the gateway's settings: the flags' defaults, then the
// configuration file's values, then the flags given. Each field means
// what the flag of the same name means (HeaderTimeout is
// --response-header-timeout, Config --config).
type Settings struct {
	Config                                                string
	Listen, Consul, Nomad, Namespace, Advertise, LogLevel string
	Register                                              bool
	RegisterTags                                          []string
	RegisterCheckInterval, ConsulWait                     time.Duration
	MaxBodyChatCompletions, MaxBodyCompletions            int64
	MaxBodyEmbeddings, BodyMemory                         int64
	MaxJSONDepth                                          int
	BodyReadTimeout                                       time.Duration
	CORSOrigins                                           []string
	Attempts, BreakerFailures, CheckParallelism           int
	NoReplicaRetryAfter, BreakerOpen, BreakerMaxOpen      time.Duration
	DialTimeout, HeaderTimeout                            time.Duration
	CheckInterval, CheckTimeout                           time.Duration
	EngineMetricsInterval                                 time.Duration
	HoldTimeout, DemandWindow                             time.Duration
	HoldPerModel, HoldTotal, WakeBurst                    int
	ModelsVariable, ModelsNamespace, ModelsNomad          string
	KeysFile, KeysVariable, KeysNamespace                 string
	ShareLimits                                           bool
	TLSCertFile, TLSKeyFile                               string
	Routing                                               []string // MODEL=POLICY
	PrefixLoadFactor, PrefixHistoryLoadFactor             float64
	PrefixOpeningLimit                                    int
	PrefixOpeningWait                                     time.Duration

	// From says where a setting taken from the file came from, by flag
	// name: "file:line: attribute".
	From map[string]string
}

// Where names a setting in an error: the file's line and attribute, or
// the flag.
func (f *Settings) Where(flag string) string {
	if at, ok := f.From[flag]; ok {
		return at
	}
	return "--" + flag
}

// Check refuses settings that cannot work, naming each by where it came
// from.
func (f *Settings) Check() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return fmt.Errorf("%s: %w", f.Where("log-level"), err)
	}
	for _, b := range []struct {
		flag string
		v    int64
	}{{"max-body-chat-completions", f.MaxBodyChatCompletions}, {"max-body-completions", f.MaxBodyCompletions}, {"max-body-embeddings", f.MaxBodyEmbeddings}} {
		if b.v <= 0 || b.v > f.BodyMemory {
			return fmt.Errorf("%s %d, %s %d: want 0 < %s <= body-memory", f.Where(b.flag), b.v, f.Where("body-memory"), f.BodyMemory, b.flag)
		}
	}
	if f.MaxJSONDepth < 1 || f.MaxJSONDepth > MaxJSONDepth {
		return fmt.Errorf("%s: %d: want 1 to %d", f.Where("max-json-depth"), f.MaxJSONDepth, MaxJSONDepth)
	}
	if f.BodyReadTimeout <= 0 {
		return fmt.Errorf("%s: %s: want more than 0", f.Where("body-read-timeout"), f.BodyReadTimeout)
	}
	if err := CheckOrigins(f.CORSOrigins); err != nil {
		return fmt.Errorf("%s: %w", f.Where("cors-origins"), err)
	}
	if f.Attempts < 1 || f.BreakerFailures < 1 || f.BreakerOpen <= 0 || f.BreakerMaxOpen < f.BreakerOpen {
		return fmt.Errorf("%s and %s must be at least 1, and 0 < %s <= %s", f.Where("attempts"), f.Where("breaker-failures"), f.Where("breaker-open"), f.Where("breaker-max-open"))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"check-timeout", f.CheckTimeout}, {"consul-wait", f.ConsulWait}, {"no-replica-retry-after", f.NoReplicaRetryAfter}} {
		if d.v <= 0 {
			return fmt.Errorf("%s: %s: want more than 0", f.Where(d.flag), d.v)
		}
	}
	if _, err := RoutingMap(f.Routing); err != nil {
		return fmt.Errorf("%s: %w", f.Where("routing"), err)
	}
	if f.PrefixLoadFactor < 1 {
		return fmt.Errorf("%s: %g: want 1 or more", f.Where("prefix-load-factor"), f.PrefixLoadFactor)
	}
	if f.PrefixHistoryLoadFactor < f.PrefixLoadFactor {
		return fmt.Errorf("%s: %g: want at least %s (%g)", f.Where("prefix-history-load-factor"), f.PrefixHistoryLoadFactor, f.Where("prefix-load-factor"), f.PrefixLoadFactor)
	}
	if f.PrefixOpeningLimit < 0 {
		return fmt.Errorf("%s: %d: want 0 (one more than the engine's slots) or more", f.Where("prefix-opening-limit"), f.PrefixOpeningLimit)
	}
	if f.PrefixOpeningWait < 0 {
		return fmt.Errorf("%s: %s: want 0 (no waiting) or more", f.Where("prefix-opening-wait"), f.PrefixOpeningWait)
	}
	if f.RegisterCheckInterval < time.Second {
		return fmt.Errorf("%s: %s: want 1s or more", f.Where("register-check-interval"), f.RegisterCheckInterval)
	}
	if f.EngineMetricsInterval < 0 {
		return fmt.Errorf("%s: %s: want 0 (off) or more", f.Where("engine-metrics-interval"), f.EngineMetricsInterval)
	}
	if f.CheckParallelism < 1 {
		return fmt.Errorf("%s: %d: want at least 1", f.Where("check-parallelism"), f.CheckParallelism)
	}
	if f.HoldTimeout < 0 {
		return fmt.Errorf("%s: %s: want 0 (hold nothing) or more", f.Where("hold-timeout"), f.HoldTimeout)
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"hold-per-model", f.HoldPerModel}, {"hold-total", f.HoldTotal}, {"wake-burst", f.WakeBurst}} {
		if n.v < 1 {
			return fmt.Errorf("%s: %d: want at least 1", f.Where(n.flag), n.v)
		}
	}
	if f.DemandWindow < time.Second || f.DemandWindow > time.Hour {
		return fmt.Errorf("%s: %s: want 1s to 1h", f.Where("demand-window"), f.DemandWindow)
	}
	if f.ModelsVariable != "" && !ValidVariablePath(f.ModelsVariable) {
		return fmt.Errorf("%s: %q: a Nomad variable path is 1 to 128 letters, digits and -_~/", f.Where("models-variable"), f.ModelsVariable)
	}
	if f.KeysFile != "" && f.KeysVariable != "" {
		return fmt.Errorf("%s and %s: read the keys from one of them", f.Where("keys-file"), f.Where("keys-variable"))
	}
	if f.KeysVariable != "" && !ValidVariablePath(f.KeysVariable) {
		return fmt.Errorf("%s: %q: a Nomad variable path is 1 to 128 letters, digits and -_~/", f.Where("keys-variable"), f.KeysVariable)
	}
	if f.KeysNamespace == "*" {
		return fmt.Errorf("%s: the keys are one variable in one namespace, not %q", f.Where("keys-namespace"), f.KeysNamespace)
	}
	if f.ShareLimits && f.KeysFile == "" && f.KeysVariable == "" {
		return fmt.Errorf("%s: there are no limits to share without keys (keys-file or keys-variable)", f.Where("share-limits"))
	}
	if (f.TLSCertFile == "") != (f.TLSKeyFile == "") {
		return fmt.Errorf("%s and %s: give both, or neither", f.Where("tls-cert-file"), f.Where("tls-key-file"))
	}
	if f.ModelsNamespace == "*" {
		return fmt.Errorf("%s: the model list is one variable in one namespace, not %q", f.Where("models-namespace"), f.ModelsNamespace)
	}
	if f.Advertise != "" {
		if _, err := NewRegistration(f.Advertise, &net.TCPAddr{Port: 1}); err != nil {
			return fmt.Errorf("%s: %w", f.Where("advertise"), err)
		}
	}
	return nil
}

// MaxJSONDepth is the most --max-json-depth may be: Go's encoding/json,
// which checks every body, refuses JSON nested deeper than 10,000 levels.
const MaxJSONDepth = 10000

// CheckOrigins checks --cors-origins: each "*" (every origin) or an
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

// RoutingMap reads --routing's MODEL=POLICY entries.
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

// NewRegistration is how the gateway registers itself: at --advertise, else
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

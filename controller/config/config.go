// Package config reads the controller's configuration file, llmgw.hcl:
// where Nomad (and optionally Consul) is, where the controller listens,
// which catalog and facility files it serves, and the defaults of every
// job it renders. Parse is pure: it takes the file's name and bytes and the
// environment as a function, and returns a Config or errors naming
// file:line. Load reads the file and calls Parse. docs/controller.md
// ("Configuration") documents every field.
//
// Precedence, for each field: the file, then the environment (NOMAD_ADDR
// and friends, as Nomad's own CLI reads them; for the address, a task's
// API socket NOMAD_UNIX_ADDR before NOMAD_ADDR), then the built-in default.
// Relative paths in the file (catalog, facility, TLS files) are relative to
// the directory of the file, so that a config and its catalog can move
// together.
package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/internal/hcldecode"
	"github.com/llmgw/llmgw/internal/nomadenv"
)

// Defaults of the fields the file may leave out.
const (
	DefaultNomadAddress    = "http://127.0.0.1:4646"
	DefaultConsulAddress   = "127.0.0.1:8500"
	DefaultListen          = "127.0.0.1:9797"
	DefaultCatalog         = "catalog.hcl"
	DefaultFacility        = "facility.hcl"
	DefaultReconcile       = 30 * time.Second
	DefaultPartialDeadline = 10 * time.Minute
	// DefaultLostAfter: a shard counts as failed as soon as Nomad reports
	// its node down (Nomad's own heartbeat grace already took its time).
	DefaultLostAfter = 0
	// DefaultMaxStops caps the stops of one pass.
	DefaultMaxStops = 10
	// DefaultMaxStopFraction is the share of the running replicas a
	// catalog or facility reload may stop without the operator's say-so.
	DefaultMaxStopFraction = 0.5
	maxLostAfter           = 24 * time.Hour
	// DefaultPowerInterval is how often GPU nodes' power is read, and so
	// the longest a budgeted domain's draw goes unseen before a cap
	// decision (docs/power.md, "The bound").
	DefaultPowerInterval = 30 * time.Second
	minPowerInterval     = time.Second
	maxPowerInterval     = 10 * time.Minute
	// DefaultPowerCapHold is how long a capped domain must draw under its
	// lift threshold before its caps lift (facility/powercap's default).
	DefaultPowerCapHold     = 5 * time.Minute
	minPowerCapHold         = time.Second
	maxPowerCapHold         = 24 * time.Hour
	maxMaxStops             = 10000
	DefaultServiceProvider  = render.ProviderNomad
	maxPriority             = 32766 // Nomad's job_max_priority ceiling
	minReconcileInterval    = time.Second
	minReadyInterval        = 100 * time.Millisecond // the driver's minimum
	minCheckIntervalTimeout = time.Second            // Nomad's minimum
)

// Config is the controller's configuration.
type Config struct {
	// File is the name the configuration was parsed from.
	File string

	Nomad Nomad
	// Consul is nil unless the file has a consul block.
	Consul *Consul

	// Listen is the address of the controller's HTTP API, host:port.
	Listen string
	// APIToken, when set, is required (as a bearer token) by every API
	// call but /healthz, /metrics and the console's files. Without it the
	// API refuses every write, unless InsecureWrites.
	APIToken string
	// InsecureWrites lets the API take writes without a token, for
	// development on loopback: Parse refuses it with api_token, and with a
	// listen address that is not loopback.
	InsecureWrites bool

	// Catalog and Facility are the paths of the catalog and facility files,
	// relative ones resolved against the directory of File.
	Catalog  string
	Facility string

	// ServiceProvider registers the replicas' services: "nomad" or "consul".
	ServiceProvider string
	// Datacenters the rendered jobs may run in.
	Datacenters []string
	// Priority of the rendered jobs; 0 is Nomad's default.
	Priority int

	// NodeBaseWatts is the draw of a node without GPU work (CPUs, memory,
	// fans, NICs), for nodes the facility gives no base draw for.
	NodeBaseWatts float64

	// PowerInterval is how often the GPU nodes' power is read (their
	// client stats), for measured admission and the power caps.
	PowerInterval time.Duration
	// PowerCapHold is how long a domain whose caps are engaged must draw
	// under its lift threshold before they lift.
	PowerCapHold time.Duration

	Driver    Driver
	Reconcile Reconcile
	// Autoscale is how the controller reads the autoscaler's signals; nil
	// when the file has no autoscale block (DefaultAutoscale applies).
	Autoscale *Autoscale `json:",omitempty"`
	// PowerSource is where the GPUs' draw is read from besides Nomad's
	// client stats; nil: client stats alone.
	PowerSource *PowerSource `json:",omitempty"`
}

// PowerSource is a source of the GPUs' draw other than Nomad's client
// stats (docs/power.md, "Where the draw is read").
type PowerSource struct {
	// Prometheus reads each GPU's draw from a Prometheus server that
	// scrapes NVIDIA's dcgm-exporter.
	Prometheus *PowerPrometheus
}

// PowerPrometheus is the Prometheus source of GPU draw: every power round
// one instant query, max by (UUIDLabel) (last_over_time(Selector[MaxAge])),
// its answer mapped to the nodes by GPU UUID.
type PowerPrometheus struct {
	// Address is the server's base URL (its /api/v1/query is queried).
	Address string
	// Selector selects the draw series, in watts: a metric name with
	// optional label matchers (dcgm-exporter's DCGM_FI_DEV_POWER_USAGE).
	Selector string
	// UUIDLabel is the label that holds the GPU's UUID ("UUID" in
	// dcgm-exporter's output; "uuid" with its --use-old-namespace).
	UUIDLabel string
	// MaxAge: a GPU whose newest sample is older has no Prometheus
	// reading; its node is read through client stats.
	MaxAge time.Duration
	// ClientStatsInterval is how often a node whose draw Prometheus gives
	// still has its client stats read, for what only they give: its GPUs'
	// power limits and cap state.
	ClientStatsInterval time.Duration
}

// Defaults of the power_source prometheus block.
const (
	DefaultPowerSelector       = "DCGM_FI_DEV_POWER_USAGE"
	DefaultPowerUUIDLabel      = "UUID"
	DefaultPowerMaxAge         = time.Minute
	DefaultClientStatsInterval = 10 * time.Minute
	minPowerMaxAge             = time.Second
	maxPowerMaxAge             = time.Hour
	minClientStatsInterval     = time.Second
	maxClientStatsInterval     = 24 * time.Hour
)

// Autoscale is where the controller reads the signals of the catalog's
// autoscaled models from (docs/controller.md, "Signals").
type Autoscale struct {
	// Interval is how often the signals are read.
	Interval time.Duration
	// Timeout bounds each read (a gateway's demand, the discovery of the
	// gateways, a Prometheus query).
	Timeout time.Duration
	// Gateways are the base URLs of the gateways to read demand from; empty:
	// the gateways registered as llmgw-gateway in the service catalog of
	// service_provider (Nomad's, in nomad.namespace, or Consul's).
	Gateways []string
	// Prometheus, when set, reads the signals it has a query for from a
	// Prometheus server instead of the gateways and engines.
	Prometheus *Prometheus `json:",omitempty"`
}

// Prometheus is an optional signal source: one instant PromQL query per
// signal, each answering a vector with one sample per model.
type Prometheus struct {
	// Address is the server's base URL (its /api/v1/query is queried).
	Address string
	// ModelLabel is the label that names the model in each query's result.
	ModelLabel string
	// Queries holds the PromQL query of each signal it replaces, by
	// signal: the names in PrometheusSignals.
	Queries map[string]string
}

// PrometheusSignals are the signals a prometheus block may give a query
// for, as its attributes name them.
var PrometheusSignals = []string{"outstanding", "queued", "arrivals", "ttft_p90", "waiting", "kv_cache_use"}

// Defaults of the autoscale block.
const (
	DefaultAutoscaleInterval = 5 * time.Second
	DefaultAutoscaleTimeout  = 5 * time.Second
	DefaultModelLabel        = "model"
	minAutoscaleInterval     = time.Second
	maxAutoscaleInterval     = time.Minute
	minAutoscaleTimeout      = 100 * time.Millisecond
)

// DefaultAutoscale is the autoscale block's defaults.
func DefaultAutoscale() Autoscale {
	return Autoscale{Interval: DefaultAutoscaleInterval, Timeout: DefaultAutoscaleTimeout}
}

// AutoscaleSettings returns the autoscale block, or its defaults.
func (c Config) AutoscaleSettings() Autoscale {
	if c.Autoscale == nil {
		return DefaultAutoscale()
	}
	return *c.Autoscale
}

// Nomad is how the controller reaches Nomad; rendered jobs go into its
// region and namespace.
type Nomad struct {
	Address   string
	Token     string
	Region    string
	Namespace string
	// Namespaces are those whose allocations the controller reads to know
	// which GPUs are taken: ["*"] (the default) for every namespace, else
	// a list of names that holds Namespace. GPUs held by allocations in a
	// namespace left out look free to the controller.
	Namespaces []string
	// EventStream follows nodes, allocations and jobs through Nomad's
	// event stream (controller/stream.go), where Nomad serves it, instead
	// of blocking queries, which re-read a whole list for each change. On
	// by default; event_stream = false keeps to blocking queries.
	EventStream bool
	TLS         TLS
}

// AllNamespaces is the namespaces entry that stands for every namespace.
const AllNamespaces = "*"

// TLS is the client side of Nomad's mTLS.
type TLS struct {
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string
	Insecure   bool
}

// Consul is how the controller reaches Consul.
type Consul struct {
	Address string
	Token   string
}

// Driver holds the defaults of every rendered task.
type Driver struct {
	ReadyInterval time.Duration
	ReadyTimeout  time.Duration
	KillTimeout   time.Duration
	ShutdownDelay time.Duration
	CheckInterval time.Duration
	CheckTimeout  time.Duration
	Env           map[string]string
	// Engines maps an engine to the executable its tasks run (task config
	// command), overriding the driver plugin's.
	Engines map[string]string
}

// Reconcile paces the reconciler.
type Reconcile struct {
	// Interval is the longest the controller goes without a full
	// reconcile pass (blocking queries trigger one sooner).
	Interval time.Duration
	// PartialDeadline is how long a replica may stay partly placed (some
	// shards running, others pending) before it is placed anew.
	PartialDeadline time.Duration
	// LostAfter is how long a shard's node may be down or disconnected
	// before its replica counts as failed and is placed elsewhere. It is
	// also the rendered groups' disconnect.lost_after when not 0.
	LostAfter time.Duration
	// MaxStops caps the jobs one pass stops; the rest wait for the next.
	MaxStops int
	// MaxStopFraction: a reload whose first pass would stop more than this
	// share of the running replicas is refused (the old files stay in
	// force) unless confirmed.
	MaxStopFraction float64
}

// Default returns the configuration of an empty file in an empty
// environment, in directory dir.
func Default(dir string) Config {
	def := render.DefaultSettings()
	return Config{
		Nomad:           Nomad{Address: DefaultNomadAddress, Namespaces: []string{AllNamespaces}, EventStream: true},
		Listen:          DefaultListen,
		Catalog:         filepath.Join(dir, DefaultCatalog),
		Facility:        filepath.Join(dir, DefaultFacility),
		ServiceProvider: DefaultServiceProvider,
		Datacenters:     []string{"*"},
		PowerInterval:   DefaultPowerInterval,
		PowerCapHold:    DefaultPowerCapHold,
		Driver: Driver{
			ReadyInterval: def.ReadyInterval,
			ReadyTimeout:  def.ReadyTimeout,
			KillTimeout:   def.KillTimeout,
			ShutdownDelay: def.ShutdownDelay,
			CheckInterval: def.CheckInterval,
			CheckTimeout:  def.CheckTimeout,
			Env:           map[string]string{},
			Engines:       map[string]string{},
		},
		Reconcile: Reconcile{
			Interval: DefaultReconcile, PartialDeadline: DefaultPartialDeadline, LostAfter: DefaultLostAfter,
			MaxStops: DefaultMaxStops, MaxStopFraction: DefaultMaxStopFraction,
		},
	}
}

// Load reads the file at path and parses it. env looks up environment
// variables (os.Getenv in main); nil is an empty environment.
func Load(path string, env func(string) string) (Config, error) {
	src, err := bounded.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, src, env)
}

// The file's schema, for gohcl (internal/hcldecode). Each struct keeps its
// body, so that Parse knows which attributes were given and where; what
// the tags cannot say (durations, enums, limits, one field against
// another, the environment's fallbacks) Parse checks after decoding.
type (
	fileHCL struct {
		Listen          string        `hcl:"listen,optional"`
		APIToken        string        `hcl:"api_token,optional"`
		InsecureWrites  bool          `hcl:"insecure_writes,optional"`
		Catalog         string        `hcl:"catalog,optional"`
		Facility        string        `hcl:"facility,optional"`
		ServiceProvider string        `hcl:"service_provider,optional"`
		Datacenters     []string      `hcl:"datacenters,optional"`
		Priority        float64       `hcl:"priority,optional"`
		NodeBaseWatts   float64       `hcl:"node_base_watts,optional"`
		PowerInterval   string        `hcl:"power_interval,optional"`
		PowerCapHold    string        `hcl:"power_cap_hold,optional"`
		Nomad           *nomadHCL     `hcl:"nomad,block"`
		Consul          *consulHCL    `hcl:"consul,block"`
		Driver          *driverHCL    `hcl:"driver,block"`
		Reconcile       *reconcileHCL `hcl:"reconcile,block"`
		Autoscale       *autoscaleHCL `hcl:"autoscale,block"`
		PowerSource     *powerSrcHCL  `hcl:"power_source,block"`
		Body            hcl.Body      `hcl:",body"`
	}
	powerSrcHCL struct {
		Prometheus *powerPromHCL `hcl:"prometheus,block"`
		DefRange   hcl.Range     `hcl:",def_range"`
		Body       hcl.Body      `hcl:",body"`
	}
	powerPromHCL struct {
		Address             string    `hcl:"address,optional"`
		Selector            string    `hcl:"selector,optional"`
		UUIDLabel           string    `hcl:"uuid_label,optional"`
		MaxAge              string    `hcl:"max_age,optional"`
		ClientStatsInterval string    `hcl:"client_stats_interval,optional"`
		DefRange            hcl.Range `hcl:",def_range"`
		Body                hcl.Body  `hcl:",body"`
	}
	nomadHCL struct {
		Address     string   `hcl:"address,optional"`
		Token       string   `hcl:"token,optional"`
		Region      string   `hcl:"region,optional"`
		Namespace   string   `hcl:"namespace,optional"`
		Namespaces  []string `hcl:"namespaces,optional"`
		EventStream *bool    `hcl:"event_stream,optional"`
		TLS         *tlsHCL  `hcl:"tls,block"`
		Body        hcl.Body `hcl:",body"`
	}
	tlsHCL struct {
		CAFile     string    `hcl:"ca_file,optional"`
		CertFile   string    `hcl:"cert_file,optional"`
		KeyFile    string    `hcl:"key_file,optional"`
		ServerName string    `hcl:"server_name,optional"`
		Insecure   bool      `hcl:"insecure,optional"`
		DefRange   hcl.Range `hcl:",def_range"`
		Body       hcl.Body  `hcl:",body"`
	}
	consulHCL struct {
		Address string   `hcl:"address,optional"`
		Token   string   `hcl:"token,optional"`
		Body    hcl.Body `hcl:",body"`
	}
	driverHCL struct {
		ReadyInterval string            `hcl:"ready_interval,optional"`
		ReadyTimeout  string            `hcl:"ready_timeout,optional"`
		KillTimeout   string            `hcl:"kill_timeout,optional"`
		ShutdownDelay string            `hcl:"shutdown_delay,optional"`
		CheckInterval string            `hcl:"check_interval,optional"`
		CheckTimeout  string            `hcl:"check_timeout,optional"`
		Env           map[string]string `hcl:"env,optional"`
		Engines       map[string]string `hcl:"engines,optional"`
		Body          hcl.Body          `hcl:",body"`
	}
	autoscaleHCL struct {
		Interval   string         `hcl:"interval,optional"`
		Timeout    string         `hcl:"timeout,optional"`
		Gateways   []string       `hcl:"gateways,optional"`
		Prometheus *prometheusHCL `hcl:"prometheus,block"`
		Body       hcl.Body       `hcl:",body"`
	}
	prometheusHCL struct {
		Address     string    `hcl:"address,optional"`
		ModelLabel  string    `hcl:"model_label,optional"`
		Outstanding string    `hcl:"outstanding,optional"`
		Queued      string    `hcl:"queued,optional"`
		Arrivals    string    `hcl:"arrivals,optional"`
		TTFTP90     string    `hcl:"ttft_p90,optional"`
		Waiting     string    `hcl:"waiting,optional"`
		KVCacheUse  string    `hcl:"kv_cache_use,optional"`
		DefRange    hcl.Range `hcl:",def_range"`
		Body        hcl.Body  `hcl:",body"`
	}
	reconcileHCL struct {
		Interval        string   `hcl:"interval,optional"`
		PartialDeadline string   `hcl:"partial_deadline,optional"`
		LostAfter       string   `hcl:"lost_after,optional"`
		MaxStops        float64  `hcl:"max_stops,optional"`
		MaxStopFraction float64  `hcl:"max_stop_fraction,optional"`
		Body            hcl.Body `hcl:",body"`
	}
)

// Parse parses a configuration file's contents. filename names it in
// errors and anchors its relative paths. env looks up environment
// variables (nil: none). Every problem is an *Error naming filename:line;
// they are joined with errors.Join.
func Parse(filename string, src []byte, env func(string) string) (Config, error) {
	if env == nil {
		env = func(string) string { return "" }
	}
	ctx := &hcl.EvalContext{Functions: map[string]function.Function{"env": hcldecode.EnvFunc(env)}}
	var raw fileHCL
	f, ok := hcldecode.Decode(filename, src, ctx, &raw)
	p := &parser{File: f, filename: filename, env: env}
	for _, pr := range f.Problems() {
		p.errs = append(p.errs, &hcldecode.Problem{Filename: pr.Filename, Line: pr.Line, Msg: pr.Msg})
	}
	c := Default(filepath.Dir(filename))
	c.File = filename
	if ok {
		p.root(&raw, &c)
	}
	if len(p.errs) > 0 {
		return Config{}, errors.Join(p.errs...)
	}
	return c, nil
}

// parser checks what Decode decoded and builds the Config.
type parser struct {
	*hcldecode.File
	filename string
	env      func(string) string
	errs     []error
}

func (p *parser) errorf(r hcl.Range, format string, args ...any) {
	p.errs = append(p.errs, &hcldecode.Problem{Filename: p.filename, Line: p.line(r), Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) envErrorf(format string, args ...any) {
	p.errs = append(p.errs, &hcldecode.Problem{Filename: p.filename, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) line(r hcl.Range) int { return max(r.Start.Line, 1) }

// duration sets *dst from the duration attribute name of body, if given,
// when it is lo or more.
func (p *parser) duration(body hcl.Body, name, s string, dst *time.Duration, lo time.Duration) {
	r, ok := p.Given(body, name)
	if !ok {
		return
	}
	d, err := hcldecode.ParseDuration(name, s)
	switch {
	case err != nil:
		p.errorf(r, "%v", err)
	case d < lo:
		p.errorf(r, "%s: %s is below the minimum of %s", name, d, lo)
	default:
		*dst = d
	}
}

// whole checks a number attribute is a whole number from lo to hi.
func whole(v float64, lo, hi int) (int, bool) {
	if v != math.Trunc(v) || v < float64(lo) || v > float64(hi) {
		return 0, false
	}
	return int(v), true
}

// path resolves a file path against the config file's directory.
func (p *parser) path(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(filepath.Dir(p.filename), s)
}

func (p *parser) root(raw *fileHCL, c *Config) {
	nomad := raw.Nomad
	if nomad == nil {
		nomad = &nomadHCL{}
	}
	p.nomad(nomad, raw.Body, &c.Nomad)
	if raw.Consul != nil {
		c.Consul = p.consul(raw.Consul)
	}
	if raw.Driver != nil {
		p.driver(raw.Driver, &c.Driver)
	}
	if raw.Reconcile != nil {
		p.reconcile(raw.Reconcile, &c.Reconcile)
	}
	if raw.Autoscale != nil {
		a := DefaultAutoscale()
		p.autoscale(raw.Autoscale, &a)
		c.Autoscale = &a
	}
	if raw.PowerSource != nil {
		c.PowerSource = p.powerSource(raw.PowerSource)
	}

	b := raw.Body
	if r, ok := p.Given(b, "listen"); ok {
		c.Listen = raw.Listen
		if err := checkListen(c.Listen); err != nil {
			p.errorf(r, "listen: %v", err)
		}
	}
	if _, ok := p.Given(b, "api_token"); ok {
		c.APIToken = raw.APIToken
	}
	if r, ok := p.Given(b, "insecure_writes"); ok && raw.InsecureWrites {
		switch {
		case c.APIToken != "":
			p.errorf(r, "insecure_writes: api_token is set too; drop insecure_writes (writes then need the token)")
		case !LoopbackListen(c.Listen):
			p.errorf(r, "insecure_writes: listen %q is not a loopback address (127.0.0.1, ::1 or localhost): "+
				"writes without a token are for development on this host only; set api_token instead", c.Listen)
		default:
			c.InsecureWrites = true
		}
	}
	for _, f := range []struct {
		name, val string
		dst       *string
	}{{"catalog", raw.Catalog, &c.Catalog}, {"facility", raw.Facility, &c.Facility}} {
		if r, ok := p.Given(b, f.name); ok {
			if f.val == "" {
				p.errorf(r, "%s: must not be empty", f.name)
				continue
			}
			*f.dst = p.path(f.val)
		}
	}
	if r, ok := p.Given(b, "service_provider"); ok {
		c.ServiceProvider = raw.ServiceProvider
		switch c.ServiceProvider {
		case render.ProviderNomad:
		case render.ProviderConsul:
			if c.Consul == nil {
				p.errorf(r, `service_provider: "consul" needs a consul block`)
			}
		default:
			p.errorf(r, "service_provider: %q is neither %q nor %q", c.ServiceProvider, render.ProviderNomad, render.ProviderConsul)
		}
	}
	if r, ok := p.Given(b, "datacenters"); ok {
		if dcs := raw.Datacenters; len(dcs) == 0 || slices.Contains(dcs, "") {
			p.errorf(r, "datacenters: want at least one, none empty (\"*\" for all)")
		} else {
			c.Datacenters = dcs
		}
	}
	if r, ok := p.Given(b, "priority"); ok {
		if n, ok := whole(raw.Priority, 1, maxPriority); !ok {
			p.errorf(r, "priority: want a whole number from 1 to %d (Nomad's job_max_priority, 100 unless raised)", maxPriority)
		} else {
			c.Priority = n
		}
	}
	if r, ok := p.Given(b, "node_base_watts"); ok {
		if w := raw.NodeBaseWatts; w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			p.errorf(r, "node_base_watts: must be a number of watts, 0 or more, got %s", strconv.FormatFloat(w, 'g', -1, 64))
		} else {
			c.NodeBaseWatts = w
		}
	}
	p.durationIn(b, "power_interval", raw.PowerInterval, &c.PowerInterval, minPowerInterval, maxPowerInterval)
	p.durationIn(b, "power_cap_hold", raw.PowerCapHold, &c.PowerCapHold, minPowerCapHold, maxPowerCapHold)
}

// durationIn is duration with an upper bound hi too: a value outside
// lo..hi is an error naming the field, and leaves *dst as it was.
func (p *parser) durationIn(body hcl.Body, name, s string, dst *time.Duration, lo, hi time.Duration) {
	d := *dst
	p.duration(body, name, s, &d, lo)
	if d > hi {
		at, _ := p.Given(body, name)
		p.errorf(at, "%s: %s is above the maximum of %s", name, d, hi)
		return
	}
	*dst = d
}

// orEnv sets *dst from attribute name of body when the file has it (and
// it decoded), else from the environment variable envVar when set. given
// is the attribute's range when the value came from the file.
func (p *parser) orEnv(body hcl.Body, name, val, envVar string, dst *string) (given *hcl.Range, ok bool) {
	if p.Has(body, name) {
		r, ok := p.Given(body, name)
		if ok {
			*dst = val
		}
		return &r, ok
	}
	if v := p.env(envVar); v != "" {
		*dst = v
		return nil, true
	}
	return nil, false
}

func (p *parser) nomad(raw *nomadHCL, root hcl.Body, n *Nomad) {
	b := raw.Body
	// The file's address, else the environment's: the task API socket
	// (NOMAD_UNIX_ADDR) in a Nomad task with its workload identity, else
	// NOMAD_ADDR (nomadenv.Address says why in that order).
	if p.Has(b, "address") {
		if r, ok := p.Given(b, "address"); ok {
			n.Address = raw.Address
			if err := checkNomadAddress(n.Address); err != nil {
				p.errorf(r, "address: %v", err)
			}
		}
	} else if addr, from := nomadenv.Address(p.env); from != "" {
		n.Address = addr
		if err := checkNomadAddress(addr); err != nil {
			p.envErrorf("%s in the environment: %v", from, err)
		}
	}
	p.orEnv(b, "token", raw.Token, "NOMAD_TOKEN", &n.Token)
	p.orEnv(b, "region", raw.Region, "NOMAD_REGION", &n.Region)
	nsAttr, _ := p.orEnv(b, "namespace", raw.Namespace, "NOMAD_NAMESPACE", &n.Namespace)
	p.namespaces(raw, nsAttr, n)
	n.EventStream = raw.EventStream == nil || *raw.EventStream

	t := raw.TLS
	if t == nil {
		t = &tlsHCL{}
	}
	for _, f := range []struct {
		name, val, env string
		dst            *string
		path           bool
	}{
		{"ca_file", t.CAFile, "NOMAD_CACERT", &n.TLS.CAFile, true},
		{"cert_file", t.CertFile, "NOMAD_CLIENT_CERT", &n.TLS.CertFile, true},
		{"key_file", t.KeyFile, "NOMAD_CLIENT_KEY", &n.TLS.KeyFile, true},
		{"server_name", t.ServerName, "NOMAD_TLS_SERVER_NAME", &n.TLS.ServerName, false},
	} {
		r, ok := p.orEnv(t.Body, f.name, f.val, f.env, f.dst)
		if ok && f.path && r != nil {
			*f.dst = p.path(*f.dst)
		}
	}
	if p.Has(t.Body, "insecure") {
		if _, ok := p.Given(t.Body, "insecure"); ok {
			n.TLS.Insecure = t.Insecure
		}
	} else if v := p.env("NOMAD_SKIP_VERIFY"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			p.envErrorf("NOMAD_SKIP_VERIFY in the environment: %q is not a boolean", v)
		}
		n.TLS.Insecure = b
	}
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		r := hcldecode.Missing(root)
		switch {
		case raw.TLS != nil:
			r = raw.TLS.DefRange
		case b != nil:
			r = hcldecode.Missing(b)
		}
		p.errorf(r, "nomad tls: cert_file and key_file go together (NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY)")
	}
}

// validNamespace is Nomad's rule for namespace names.
var validNamespace = regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`)

// namespaces reads nomad.namespaces: "*" alone, or distinct namespace
// names among which the namespace of the managed jobs (nsAttr, nil when it
// came from the environment or the default).
func (p *parser) namespaces(raw *nomadHCL, nsAttr *hcl.Range, n *Nomad) {
	r, ok := p.Given(raw.Body, "namespaces")
	if !ok {
		return
	}
	list := raw.Namespaces
	if len(list) == 1 && list[0] == AllNamespaces {
		n.Namespaces = list
		return
	}
	if len(list) == 0 {
		p.errorf(r, `namespaces: want at least one namespace (["*"] for every namespace)`)
		return
	}
	seen := map[string]bool{}
	for _, ns := range list {
		switch {
		case ns == AllNamespaces:
			p.errorf(r, `namespaces: "*" (every namespace) goes alone, not beside names`)
			return
		case !validNamespace.MatchString(ns):
			p.errorf(r, "namespaces: %q is not a Nomad namespace name (letters, digits and dashes, 1 to 128)", ns)
			return
		case seen[ns]:
			p.errorf(r, "namespaces: %q is listed twice", ns)
			return
		}
		seen[ns] = true
	}
	own := n.Namespace
	if own == "" {
		own = api.DefaultNamespace
	}
	if !seen[own] {
		from := "nomad.namespace"
		switch {
		case nsAttr != nil:
			from += fmt.Sprintf(" (line %d)", p.line(*nsAttr))
		case n.Namespace != "":
			from += " (from NOMAD_NAMESPACE)"
		default:
			from += " (the default)"
		}
		p.errorf(r, "namespaces: %s %q is not in the list: the controller must read the allocations of the jobs it manages; add it, or use [\"*\"]", from, own)
		return
	}
	n.Namespaces = list
}

func (p *parser) consul(raw *consulHCL) *Consul {
	out := &Consul{Address: DefaultConsulAddress}
	if r, ok := p.orEnv(raw.Body, "address", raw.Address, "CONSUL_HTTP_ADDR", &out.Address); ok {
		if err := checkConsulAddress(out.Address); err != nil {
			if r != nil {
				p.errorf(*r, "address: %v", err)
			} else {
				p.envErrorf("CONSUL_HTTP_ADDR in the environment: %v", err)
			}
		}
	}
	p.orEnv(raw.Body, "token", raw.Token, "CONSUL_HTTP_TOKEN", &out.Token)
	return out
}

func (p *parser) driver(raw *driverHCL, d *Driver) {
	b := raw.Body
	p.duration(b, "ready_interval", raw.ReadyInterval, &d.ReadyInterval, minReadyInterval)
	p.duration(b, "ready_timeout", raw.ReadyTimeout, &d.ReadyTimeout, time.Second)
	p.duration(b, "kill_timeout", raw.KillTimeout, &d.KillTimeout, time.Second)
	p.duration(b, "shutdown_delay", raw.ShutdownDelay, &d.ShutdownDelay, 0)
	p.duration(b, "check_interval", raw.CheckInterval, &d.CheckInterval, minCheckIntervalTimeout)
	p.duration(b, "check_timeout", raw.CheckTimeout, &d.CheckTimeout, minCheckIntervalTimeout)
	if d.CheckTimeout > d.CheckInterval {
		r, ok := p.Given(b, "check_timeout")
		if !ok {
			r, ok = p.Given(b, "check_interval")
		}
		if ok {
			p.errorf(r, "check_timeout: %s is longer than check_interval %s", d.CheckTimeout, d.CheckInterval)
		}
	}
	if r, ok := p.Given(b, "env"); ok {
		env := raw.Env
		for _, k := range slices.Sorted(maps.Keys(env)) {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(env[k], 0) {
				p.errorf(r, "env: bad variable %q", k)
			}
		}
		d.Env = env
	}
	if r, ok := p.Given(b, "engines"); ok {
		eng := raw.Engines
		for _, k := range slices.Sorted(maps.Keys(eng)) {
			switch {
			case !engine.Known(k):
				p.errorf(r, "engines: unknown engine %q (want one of %s)", k, strings.Join(engine.Engines(), ", "))
			case eng[k] == "":
				p.errorf(r, "engines.%s: empty executable", k)
			}
		}
		d.Engines = eng
	}
}

func (p *parser) reconcile(raw *reconcileHCL, r *Reconcile) {
	b := raw.Body
	p.duration(b, "interval", raw.Interval, &r.Interval, minReconcileInterval)
	p.duration(b, "partial_deadline", raw.PartialDeadline, &r.PartialDeadline, time.Second)
	var lost time.Duration = -1
	p.duration(b, "lost_after", raw.LostAfter, &lost, 0)
	if lost > maxLostAfter {
		at, _ := p.Given(b, "lost_after")
		p.errorf(at, "lost_after: %s is above the maximum of %s", lost, maxLostAfter)
	} else if lost >= 0 {
		r.LostAfter = lost
	}
	if at, ok := p.Given(b, "max_stops"); ok {
		if n, ok := whole(raw.MaxStops, 1, maxMaxStops); !ok {
			p.errorf(at, "max_stops: want a whole number from 1 to %d", maxMaxStops)
		} else {
			r.MaxStops = n
		}
	}
	if at, ok := p.Given(b, "max_stop_fraction"); ok {
		if f := raw.MaxStopFraction; !(f > 0 && f <= 1) {
			p.errorf(at, "max_stop_fraction: want a number above 0 and at most 1 (1 never refuses a reload)")
		} else {
			r.MaxStopFraction = f
		}
	}
}

func (p *parser) autoscale(raw *autoscaleHCL, a *Autoscale) {
	b := raw.Body
	p.duration(b, "interval", raw.Interval, &a.Interval, minAutoscaleInterval)
	if a.Interval > maxAutoscaleInterval {
		at, _ := p.Given(b, "interval")
		p.errorf(at, "interval: %s is above the maximum of %s (the scaler counts a reading older than a minute as stale)", a.Interval, maxAutoscaleInterval)
	}
	p.duration(b, "timeout", raw.Timeout, &a.Timeout, minAutoscaleTimeout)
	if a.Timeout > maxAutoscaleInterval {
		at, _ := p.Given(b, "timeout")
		p.errorf(at, "timeout: %s is above the maximum of %s", a.Timeout, maxAutoscaleInterval)
	}
	if at, ok := p.Given(b, "gateways"); ok {
		seen := map[string]bool{}
		for _, g := range raw.Gateways {
			if err := checkHTTPURL(g); err != nil {
				p.errorf(at, "gateways: %v", err)
				continue
			}
			if seen[g] {
				p.errorf(at, "gateways: %q is listed twice", g)
			}
			seen[g] = true
		}
		if len(raw.Gateways) == 0 {
			p.errorf(at, "gateways: want at least one URL, or leave it out to discover the llmgw-gateway services")
		}
		a.Gateways = raw.Gateways
	}
	if raw.Prometheus != nil {
		a.Prometheus = p.prometheus(raw.Prometheus)
	}
}

func (p *parser) prometheus(raw *prometheusHCL) *Prometheus {
	b := raw.Body
	out := &Prometheus{ModelLabel: DefaultModelLabel, Queries: map[string]string{}}
	out.Address = p.prometheusAddress(b, raw.Address, raw.DefRange)
	if at, ok := p.Given(b, "model_label"); ok {
		if !validLabel.MatchString(raw.ModelLabel) {
			p.errorf(at, "model_label: %q is not a Prometheus label name", raw.ModelLabel)
		}
		out.ModelLabel = raw.ModelLabel
	}
	for i, q := range []string{raw.Outstanding, raw.Queued, raw.Arrivals, raw.TTFTP90, raw.Waiting, raw.KVCacheUse} {
		name := PrometheusSignals[i]
		at, ok := p.Given(b, name)
		if !ok {
			continue
		}
		if strings.TrimSpace(q) == "" {
			p.errorf(at, "%s: empty query", name)
			continue
		}
		out.Queries[name] = q
	}
	if len(out.Queries) == 0 {
		p.errorf(raw.DefRange, "prometheus: give a query for at least one signal (%s)", strings.Join(PrometheusSignals, ", "))
	}
	return out
}

// prometheusAddress checks a prometheus block's required address (def is
// the block's range, for the error when it is missing).
func (p *parser) prometheusAddress(b hcl.Body, addr string, def hcl.Range) string {
	at, ok := p.Given(b, "address")
	if !ok {
		p.errorf(def, "prometheus: address is required (the server's base URL, such as \"http://prometheus:9090\")")
		return ""
	}
	if err := checkHTTPURL(addr); err != nil {
		p.errorf(at, "address: %v", err)
	}
	return addr
}

func (p *parser) powerSource(raw *powerSrcHCL) *PowerSource {
	if raw.Prometheus == nil {
		p.errorf(raw.DefRange, "power_source: give a prometheus block (the one source of draw besides Nomad's client stats), or leave power_source out")
		return nil
	}
	pr := raw.Prometheus
	b := pr.Body
	out := &PowerPrometheus{Selector: DefaultPowerSelector, UUIDLabel: DefaultPowerUUIDLabel, MaxAge: DefaultPowerMaxAge, ClientStatsInterval: DefaultClientStatsInterval}
	out.Address = p.prometheusAddress(b, pr.Address, pr.DefRange)
	if at, ok := p.Given(b, "selector"); ok {
		if !validSelector.MatchString(pr.Selector) {
			p.errorf(at, "selector: %q is not a series selector: want a metric name with optional {label matchers}, "+
				"such as %q (the controller reads max by (uuid_label) (last_over_time(<selector>[max_age])))", pr.Selector, DefaultPowerSelector+`{job="dcgm"}`)
		}
		out.Selector = strings.TrimSpace(pr.Selector)
	}
	if at, ok := p.Given(b, "uuid_label"); ok {
		if !validLabel.MatchString(pr.UUIDLabel) {
			p.errorf(at, "uuid_label: %q is not a Prometheus label name", pr.UUIDLabel)
		}
		out.UUIDLabel = pr.UUIDLabel
	}
	p.durationIn(b, "max_age", pr.MaxAge, &out.MaxAge, minPowerMaxAge, maxPowerMaxAge)
	p.durationIn(b, "client_stats_interval", pr.ClientStatsInterval, &out.ClientStatsInterval, minClientStatsInterval, maxClientStatsInterval)
	return &PowerSource{Prometheus: out}
}

// validSelector is a PromQL series selector's shape: a metric name, label
// matchers in braces, or both. The matchers themselves are Prometheus's to
// check (a bad one fails the query, and the round reads client stats).
var validSelector = regexp.MustCompile(`^\s*(?:[a-zA-Z_:][a-zA-Z0-9_:]*\s*(?:` + matchersRE + `)?|` + matchersRE + `)\s*$`)

// matchersRE is label matchers in braces, whose quoted values ("…", '…',
// `…`) may hold anything.
const matchersRE = "\\{(?:[^{}\"'`]|\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`)*\\}"

// validLabel is Prometheus's rule for label names.
var validLabel = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// checkHTTPURL checks an http:// or https:// base URL with a host.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want http:// or https://", s)
	case u.Host == "":
		return fmt.Errorf("%q has no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q: want a base URL, without a query or fragment", s)
	}
	return nil
}

func checkListen(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not 1-65535", s, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: bad host %q", s, host)
	}
	return nil
}

// LoopbackListen reports whether the listen address s (host:port) accepts
// connections from this host only: its host is localhost or a loopback IP.
// An empty host (every interface) is not.
func LoopbackListen(s string) bool {
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkNomadAddress(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL", s)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return fmt.Errorf("%q has no host", s)
		}
	case "unix":
		if u.Path == "" && u.Host == "" {
			return fmt.Errorf("%q has no socket path", s)
		}
	default:
		return fmt.Errorf("%q: want http://, https:// or unix://", s)
	}
	return nil
}

func checkConsulAddress(s string) error {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "unix") {
			return fmt.Errorf("%q: want host:port, http://, https:// or unix://", s)
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	return nil
}

// RenderSettings returns the settings of every job the controller renders.
func (c Config) RenderSettings() render.Settings {
	var env, cmds map[string]string
	if len(c.Driver.Env) > 0 {
		env = maps.Clone(c.Driver.Env)
	}
	if len(c.Driver.Engines) > 0 {
		cmds = maps.Clone(c.Driver.Engines)
	}
	return render.Settings{
		Namespace:       c.Nomad.Namespace,
		Region:          c.Nomad.Region,
		Datacenters:     slices.Clone(c.Datacenters),
		Priority:        c.Priority,
		ServiceProvider: c.ServiceProvider,
		ReadyInterval:   c.Driver.ReadyInterval,
		ReadyTimeout:    c.Driver.ReadyTimeout,
		CheckInterval:   c.Driver.CheckInterval,
		CheckTimeout:    c.Driver.CheckTimeout,
		KillTimeout:     c.Driver.KillTimeout,
		ShutdownDelay:   c.Driver.ShutdownDelay,
		Env:             env,
		Commands:        cmds,
		LostAfter:       c.Reconcile.LostAfter,
	}
}

// APIConfig returns the configuration of a nomad/api client. It sets every
// field it knows of, so that api.NewClient takes nothing from the process
// environment behind the file's back.
func (n Nomad) APIConfig() *api.Config {
	return &api.Config{
		Address:   n.Address,
		Region:    n.Region,
		Namespace: n.Namespace,
		SecretID:  n.Token,
		TLSConfig: &api.TLSConfig{
			CACert:        n.TLS.CAFile,
			ClientCert:    n.TLS.CertFile,
			ClientKey:     n.TLS.KeyFile,
			TLSServerName: n.TLS.ServerName,
			Insecure:      n.TLS.Insecure,
		},
	}
}

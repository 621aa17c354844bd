// Package config reads the controller's configuration file, llmgw.hcl:
// where Nomad (and optionally Consul) is, where the controller listens,
// which catalog and facility files it serves, and the defaults of every
// job it renders. Parse is pure: it takes the file's name and bytes and the
// environment as a function, and returns a Config or errors naming
// file:line. Load reads the file and calls Parse. docs/controller.md
// ("Configuration") documents every field.
//
// Precedence, for each field: the file, then the environment (NOMAD_ADDR
// and friends, as Nomad's own CLI reads them), then the built-in default.
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
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/engine"
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
	DefaultMaxStopFraction  = 0.5
	maxLostAfter            = 24 * time.Hour
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
	// APIToken, when set, is required (as a bearer token) by every
	// mutating API call.
	APIToken string

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

	Driver    Driver
	Reconcile Reconcile
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
	TLS        TLS
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

// Error is one problem with a configuration file, at a line.
type Error struct {
	Filename string
	Line     int // 0: not from the file (the environment)
	Msg      string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Filename + ": " + e.Msg
	}
	return e.Filename + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
}

// Default returns the configuration of an empty file in an empty
// environment, in directory dir.
func Default(dir string) Config {
	def := render.DefaultSettings()
	return Config{
		Nomad:           Nomad{Address: DefaultNomadAddress, Namespaces: []string{AllNamespaces}},
		Listen:          DefaultListen,
		Catalog:         filepath.Join(dir, DefaultCatalog),
		Facility:        filepath.Join(dir, DefaultFacility),
		ServiceProvider: DefaultServiceProvider,
		Datacenters:     []string{"*"},
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
	src, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, src, env)
}

// Parse parses a configuration file's contents. filename names it in
// errors and anchors its relative paths. env looks up environment
// variables (nil: none). Every problem is an *Error naming filename:line;
// they are joined with errors.Join.
func Parse(filename string, src []byte, env func(string) string) (Config, error) {
	if env == nil {
		env = func(string) string { return "" }
	}
	p := &parser{filename: filename, env: env}
	c := Default(filepath.Dir(filename))
	c.File = filename
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if p.diags(diags); f == nil || len(p.errs) > 0 {
		return Config{}, errors.Join(p.errs...)
	}
	p.ctx = &hcl.EvalContext{Functions: map[string]function.Function{"env": envFunc(env)}}
	p.root(f.Body, &c)
	if len(p.errs) > 0 {
		return Config{}, errors.Join(p.errs...)
	}
	return c, nil
}

// envFunc is env("NAME") in the file: the variable's value, "" when unset.
func envFunc(env func(string) string) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "name", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.StringVal(env(args[0].AsString())), nil
		},
	})
}

type parser struct {
	filename string
	env      func(string) string
	ctx      *hcl.EvalContext
	errs     []error
}

func (p *parser) line(r hcl.Range) int { return max(r.Start.Line, 1) }

func (p *parser) errorf(r hcl.Range, format string, args ...any) {
	p.errs = append(p.errs, &Error{Filename: p.filename, Line: p.line(r), Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) envErrorf(format string, args ...any) {
	p.errs = append(p.errs, &Error{Filename: p.filename, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) diags(ds hcl.Diagnostics) bool {
	ok := true
	for _, d := range ds {
		if d.Severity != hcl.DiagError {
			continue
		}
		ok = false
		line := 1
		if d.Subject != nil {
			line = p.line(*d.Subject)
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		p.errs = append(p.errs, &Error{Filename: p.filename, Line: line, Msg: msg})
	}
	return ok
}

// content decodes body against schema, refusing unknown attributes and
// blocks, and a block given twice.
func (p *parser) content(body hcl.Body, schema *hcl.BodySchema) *hcl.BodyContent {
	c, ds := body.Content(schema)
	p.diags(ds)
	if c == nil {
		return &hcl.BodyContent{Attributes: hcl.Attributes{}}
	}
	seen := map[string]hcl.Range{}
	for _, b := range c.Blocks {
		if first, ok := seen[b.Type]; ok {
			p.errorf(b.DefRange, "duplicate %s block (first at line %d)", b.Type, p.line(first))
			continue
		}
		seen[b.Type] = b.DefRange
	}
	return c
}

// block returns the first block of a type, or nil.
func block(c *hcl.BodyContent, typ string) *hcl.Block {
	for _, b := range c.Blocks {
		if b.Type == typ {
			return b
		}
	}
	return nil
}

// value evaluates attribute name to type ty; ok is false when it is absent
// or bad (reported).
func (p *parser) value(c *hcl.BodyContent, name string, ty cty.Type) (cty.Value, *hcl.Attribute, bool) {
	a, ok := c.Attributes[name]
	if !ok {
		return cty.NilVal, nil, false
	}
	v, ds := a.Expr.Value(p.ctx)
	if !p.diags(ds) {
		return cty.NilVal, a, false
	}
	if v.IsNull() {
		p.errorf(a.Range, "%s: must not be null", name)
		return cty.NilVal, a, false
	}
	if !v.IsWhollyKnown() {
		p.errorf(a.Range, "%s: value not known", name)
		return cty.NilVal, a, false
	}
	out, err := convert.Convert(v, ty)
	if err != nil {
		p.errorf(a.Range, "%s: want %s: %v", name, ty.FriendlyName(), err)
		return cty.NilVal, a, false
	}
	if out.ContainsMarked() || !out.IsWhollyKnown() {
		p.errorf(a.Range, "%s: bad value", name)
		return cty.NilVal, a, false
	}
	if ty.IsMapType() || ty.IsListType() {
		for it := out.ElementIterator(); it.Next(); {
			if _, e := it.Element(); e.IsNull() {
				p.errorf(a.Range, "%s: elements must not be null", name)
				return cty.NilVal, a, false
			}
		}
	}
	return out, a, true
}

func (p *parser) str(c *hcl.BodyContent, name string, dst *string) (*hcl.Attribute, bool) {
	v, a, ok := p.value(c, name, cty.String)
	if ok {
		*dst = v.AsString()
	}
	return a, ok
}

func (p *parser) boolean(c *hcl.BodyContent, name string, dst *bool) bool {
	v, _, ok := p.value(c, name, cty.Bool)
	if ok {
		*dst = v.True()
	}
	return ok
}

func (p *parser) duration(c *hcl.BodyContent, name string, dst *time.Duration, lo time.Duration) {
	var s string
	a, ok := p.str(c, name, &s)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.errorf(a.Range, "%s: %q is not a duration (such as \"30s\", \"10m\")", name, s)
	case d < lo:
		p.errorf(a.Range, "%s: %s is below the minimum of %s", name, d, lo)
	default:
		*dst = d
	}
}

func (p *parser) stringList(c *hcl.BodyContent, name string) ([]string, *hcl.Attribute, bool) {
	v, a, ok := p.value(c, name, cty.List(cty.String))
	if !ok {
		return nil, a, false
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		out = append(out, e.AsString())
	}
	return out, a, true
}

func (p *parser) stringMap(c *hcl.BodyContent, name string) (map[string]string, *hcl.Attribute, bool) {
	v, a, ok := p.value(c, name, cty.Map(cty.String))
	if !ok {
		return nil, a, false
	}
	out := map[string]string{}
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		out[k.AsString()] = e.AsString()
	}
	return out, a, true
}

// path resolves a file path against the config file's directory.
func (p *parser) path(s string) string {
	if s == "" || filepath.IsAbs(s) {
		return s
	}
	return filepath.Join(filepath.Dir(p.filename), s)
}

var rootSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "listen"}, {Name: "api_token"}, {Name: "catalog"}, {Name: "facility"},
		{Name: "service_provider"}, {Name: "datacenters"}, {Name: "priority"},
		{Name: "node_base_watts"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "nomad"}, {Type: "consul"}, {Type: "driver"}, {Type: "reconcile"}},
}

func (p *parser) root(body hcl.Body, c *Config) {
	ct := p.content(body, rootSchema)

	nomadBody := hcl.EmptyBody()
	if b := block(ct, "nomad"); b != nil {
		nomadBody = b.Body
	}
	p.nomad(nomadBody, &c.Nomad)
	if b := block(ct, "consul"); b != nil {
		c.Consul = p.consul(b.Body)
	}
	if b := block(ct, "driver"); b != nil {
		p.driver(b.Body, &c.Driver)
	}
	if b := block(ct, "reconcile"); b != nil {
		p.reconcile(b.Body, &c.Reconcile)
	}

	if a, ok := p.str(ct, "listen", &c.Listen); ok {
		if err := checkListen(c.Listen); err != nil {
			p.errorf(a.Range, "listen: %v", err)
		}
	}
	p.str(ct, "api_token", &c.APIToken)
	for _, f := range []struct {
		name string
		dst  *string
	}{{"catalog", &c.Catalog}, {"facility", &c.Facility}} {
		var s string
		if a, ok := p.str(ct, f.name, &s); ok {
			if s == "" {
				p.errorf(a.Range, "%s: must not be empty", f.name)
				continue
			}
			*f.dst = p.path(s)
		}
	}
	if a, ok := p.str(ct, "service_provider", &c.ServiceProvider); ok {
		switch c.ServiceProvider {
		case render.ProviderNomad:
		case render.ProviderConsul:
			if c.Consul == nil {
				p.errorf(a.Range, `service_provider: "consul" needs a consul block`)
			}
		default:
			p.errorf(a.Range, "service_provider: %q is neither %q nor %q", c.ServiceProvider, render.ProviderNomad, render.ProviderConsul)
		}
	}
	if dcs, a, ok := p.stringList(ct, "datacenters"); ok {
		if len(dcs) == 0 || slices.Contains(dcs, "") {
			p.errorf(a.Range, "datacenters: want at least one, none empty (\"*\" for all)")
		} else {
			c.Datacenters = dcs
		}
	}
	if v, a, ok := p.value(ct, "priority", cty.Number); ok {
		n, acc := v.AsBigFloat().Int64()
		if acc != 0 || n < 1 || n > maxPriority {
			p.errorf(a.Range, "priority: want a whole number from 1 to %d (Nomad's job_max_priority, 100 unless raised)", maxPriority)
		} else {
			c.Priority = int(n)
		}
	}
	if v, a, ok := p.value(ct, "node_base_watts", cty.Number); ok {
		w, _ := v.AsBigFloat().Float64()
		if w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			p.errorf(a.Range, "node_base_watts: must be a number of watts, 0 or more, got %s", v.AsBigFloat().String())
		} else {
			c.NodeBaseWatts = w
		}
	}
}

var nomadSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "address"}, {Name: "token"}, {Name: "region"}, {Name: "namespace"}, {Name: "namespaces"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "tls"}},
}

var tlsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "ca_file"}, {Name: "cert_file"}, {Name: "key_file"}, {Name: "server_name"}, {Name: "insecure"}},
}

// orEnv sets *dst from the file's attribute, else from the environment.
func (p *parser) orEnv(c *hcl.BodyContent, name, envVar string, dst *string) (*hcl.Attribute, bool) {
	if _, present := c.Attributes[name]; present {
		return p.str(c, name, dst)
	}
	if v := p.env(envVar); v != "" {
		*dst = v
		return nil, true
	}
	return nil, false
}

func (p *parser) nomad(body hcl.Body, n *Nomad) {
	c := p.content(body, nomadSchema)
	if a, ok := p.orEnv(c, "address", "NOMAD_ADDR", &n.Address); ok {
		if err := checkNomadAddress(n.Address); err != nil {
			if a != nil {
				p.errorf(a.Range, "address: %v", err)
			} else {
				p.envErrorf("NOMAD_ADDR in the environment: %v", err)
			}
		}
	}
	p.orEnv(c, "token", "NOMAD_TOKEN", &n.Token)
	p.orEnv(c, "region", "NOMAD_REGION", &n.Region)
	nsAttr, _ := p.orEnv(c, "namespace", "NOMAD_NAMESPACE", &n.Namespace)
	p.namespaces(c, nsAttr, n)

	tlsBody := hcl.EmptyBody()
	if b := block(c, "tls"); b != nil {
		tlsBody = b.Body
	}
	t := p.content(tlsBody, tlsSchema)
	for _, f := range []struct {
		name, env string
		dst       *string
		path      bool
	}{
		{"ca_file", "NOMAD_CACERT", &n.TLS.CAFile, true},
		{"cert_file", "NOMAD_CLIENT_CERT", &n.TLS.CertFile, true},
		{"key_file", "NOMAD_CLIENT_KEY", &n.TLS.KeyFile, true},
		{"server_name", "NOMAD_TLS_SERVER_NAME", &n.TLS.ServerName, false},
	} {
		a, ok := p.orEnv(t, f.name, f.env, f.dst)
		if ok && f.path && a != nil {
			*f.dst = p.path(*f.dst)
		}
	}
	if _, present := t.Attributes["insecure"]; present {
		p.boolean(t, "insecure", &n.TLS.Insecure)
	} else if v := p.env("NOMAD_SKIP_VERIFY"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			p.envErrorf("NOMAD_SKIP_VERIFY in the environment: %q is not a boolean", v)
		}
		n.TLS.Insecure = b
	}
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		r := body.MissingItemRange()
		if b := block(c, "tls"); b != nil {
			r = b.DefRange
		}
		p.errorf(r, "nomad tls: cert_file and key_file go together (NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY)")
	}
}

// validNamespace is Nomad's rule for namespace names.
var validNamespace = regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`)

// namespaces reads nomad.namespaces: "*" alone, or distinct namespace
// names among which the namespace of the managed jobs (nsAttr, nil when it
// came from the environment or the default).
func (p *parser) namespaces(c *hcl.BodyContent, nsAttr *hcl.Attribute, n *Nomad) {
	list, a, ok := p.stringList(c, "namespaces")
	if !ok {
		return
	}
	if len(list) == 1 && list[0] == AllNamespaces {
		n.Namespaces = list
		return
	}
	if len(list) == 0 {
		p.errorf(a.Range, `namespaces: want at least one namespace (["*"] for every namespace)`)
		return
	}
	seen := map[string]bool{}
	for _, ns := range list {
		switch {
		case ns == AllNamespaces:
			p.errorf(a.Range, `namespaces: "*" (every namespace) goes alone, not beside names`)
			return
		case !validNamespace.MatchString(ns):
			p.errorf(a.Range, "namespaces: %q is not a Nomad namespace name (letters, digits and dashes, 1 to 128)", ns)
			return
		case seen[ns]:
			p.errorf(a.Range, "namespaces: %q is listed twice", ns)
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
			from += fmt.Sprintf(" (line %d)", p.line(nsAttr.Range))
		case n.Namespace != "":
			from += " (from NOMAD_NAMESPACE)"
		default:
			from += " (the default)"
		}
		p.errorf(a.Range, "namespaces: %s %q is not in the list: the controller must read the allocations of the jobs it manages; add it, or use [\"*\"]", from, own)
		return
	}
	n.Namespaces = list
}

var consulSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "address"}, {Name: "token"}}}

func (p *parser) consul(body hcl.Body) *Consul {
	c := p.content(body, consulSchema)
	out := &Consul{Address: DefaultConsulAddress}
	if a, ok := p.orEnv(c, "address", "CONSUL_HTTP_ADDR", &out.Address); ok {
		if err := checkConsulAddress(out.Address); err != nil {
			if a != nil {
				p.errorf(a.Range, "address: %v", err)
			} else {
				p.envErrorf("CONSUL_HTTP_ADDR in the environment: %v", err)
			}
		}
	}
	p.orEnv(c, "token", "CONSUL_HTTP_TOKEN", &out.Token)
	return out
}

var driverSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "ready_interval"}, {Name: "ready_timeout"}, {Name: "kill_timeout"}, {Name: "shutdown_delay"},
		{Name: "check_interval"}, {Name: "check_timeout"}, {Name: "env"}, {Name: "engines"},
	},
}

func (p *parser) driver(body hcl.Body, d *Driver) {
	c := p.content(body, driverSchema)
	p.duration(c, "ready_interval", &d.ReadyInterval, minReadyInterval)
	p.duration(c, "ready_timeout", &d.ReadyTimeout, time.Second)
	p.duration(c, "kill_timeout", &d.KillTimeout, time.Second)
	p.duration(c, "shutdown_delay", &d.ShutdownDelay, 0)
	p.duration(c, "check_interval", &d.CheckInterval, minCheckIntervalTimeout)
	p.duration(c, "check_timeout", &d.CheckTimeout, minCheckIntervalTimeout)
	if d.CheckTimeout > d.CheckInterval {
		a, ok := c.Attributes["check_timeout"]
		if !ok {
			a = c.Attributes["check_interval"]
		}
		if a != nil {
			p.errorf(a.Range, "check_timeout: %s is longer than check_interval %s", d.CheckTimeout, d.CheckInterval)
		}
	}
	if env, a, ok := p.stringMap(c, "env"); ok {
		for _, k := range sortedKeys(env) {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(env[k], 0) {
				p.errorf(a.Range, "env: bad variable %q", k)
			}
		}
		d.Env = env
	}
	if eng, a, ok := p.stringMap(c, "engines"); ok {
		for _, k := range sortedKeys(eng) {
			switch {
			case !engine.Known(k):
				p.errorf(a.Range, "engines: unknown engine %q (want one of %s)", k, strings.Join(engine.Engines(), ", "))
			case eng[k] == "":
				p.errorf(a.Range, "engines.%s: empty executable", k)
			}
		}
		d.Engines = eng
	}
}

var reconcileSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "interval"}, {Name: "partial_deadline"}, {Name: "lost_after"}, {Name: "max_stops"}, {Name: "max_stop_fraction"},
}}

func (p *parser) reconcile(body hcl.Body, r *Reconcile) {
	c := p.content(body, reconcileSchema)
	p.duration(c, "interval", &r.Interval, minReconcileInterval)
	p.duration(c, "partial_deadline", &r.PartialDeadline, time.Second)
	var lost time.Duration = -1
	p.duration(c, "lost_after", &lost, 0)
	if lost > maxLostAfter {
		p.errorf(c.Attributes["lost_after"].Range, "lost_after: %s is above the maximum of %s", lost, maxLostAfter)
	} else if lost >= 0 {
		r.LostAfter = lost
	}
	if v, a, ok := p.value(c, "max_stops", cty.Number); ok {
		n, acc := v.AsBigFloat().Int64()
		if acc != 0 || n < 1 || n > maxMaxStops {
			p.errorf(a.Range, "max_stops: want a whole number from 1 to %d", maxMaxStops)
		} else {
			r.MaxStops = int(n)
		}
	}
	if v, a, ok := p.value(c, "max_stop_fraction", cty.Number); ok {
		f, _ := v.AsBigFloat().Float64()
		if !(f > 0 && f <= 1) {
			p.errorf(a.Range, "max_stop_fraction: want a number above 0 and at most 1 (1 never refuses a reload)")
		} else {
			r.MaxStopFraction = f
		}
	}
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

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
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

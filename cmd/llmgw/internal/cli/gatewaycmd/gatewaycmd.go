// Package gatewaycmd is `llmgw gateway`: it discovers the replicas from
// Consul or Nomad, serves the OpenAI-compatible API over them with the
// gateway package, serves /metrics and /healthz, registers itself in Consul
// when discovering from Consul, and stops on SIGINT/SIGTERM (the context).
package gatewaycmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/nomadenv"
)

// flags are the command's settings: the flags' defaults, then the
// configuration file's values, then the flags given.
type flags struct {
	config                                                string
	listen, consul, nomad, namespace, advertise, logLevel string
	register                                              bool
	registerTags                                          []string
	registerCheckInterval, consulWait                     time.Duration
	maxModelScan, bodyMemory                              int64
	attempts, breakerFailures, checkParallelism           int
	noReplicaRetryAfter, breakerOpen, breakerMaxOpen      time.Duration
	dialTimeout, headerTimeout                            time.Duration
	checkInterval, checkTimeout                           time.Duration
	engineMetricsInterval                                 time.Duration
	holdTimeout, demandWindow                             time.Duration
	holdPerModel, holdTotal, wakeBurst                    int
	modelsVariable, modelsNamespace, modelsNomad          string
	keysFile, keysVariable, keysNamespace                 string
	shareLimits                                           bool
	tlsCertFile, tlsKeyFile                               string
	routing                                               []string // MODEL=POLICY
	prefixLoadFactor                                      float64

	// from says where a setting taken from the file came from, by flag
	// name: "file:line: attribute".
	from map[string]string
}

// where names a setting in an error: the file's line and attribute, or
// the flag.
func (f *flags) where(flag string) string {
	if at, ok := f.from[flag]; ok {
		return at
	}
	return "--" + flag
}

// resolve reads the configuration file, if any, into the settings the
// command line left alone.
func (f *flags) resolve(fl *pflag.FlagSet, env func(string) string) error {
	if fl.Changed("consul") && f.consul == "" {
		return errors.New("--consul: empty address")
	}
	if f.config == "" {
		return nil
	}
	src, err := os.ReadFile(f.config)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	cf, err := parseConfig(f.config, src, env)
	if err != nil {
		return err
	}
	f.from, err = cf.apply(fl)
	return err
}

// check refuses settings that cannot work, naming each by where it came
// from.
func (f *flags) check() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("%s: %w", f.where("log-level"), err)
	}
	if f.maxModelScan <= 0 || f.bodyMemory < f.maxModelScan {
		return fmt.Errorf("%s %d, %s %d: want 0 < max-model-scan <= body-memory", f.where("max-model-scan"), f.maxModelScan, f.where("body-memory"), f.bodyMemory)
	}
	if f.attempts < 1 || f.breakerFailures < 1 || f.breakerOpen <= 0 || f.breakerMaxOpen < f.breakerOpen {
		return fmt.Errorf("%s and %s must be at least 1, and 0 < %s <= %s", f.where("attempts"), f.where("breaker-failures"), f.where("breaker-open"), f.where("breaker-max-open"))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"check-timeout", f.checkTimeout}, {"consul-wait", f.consulWait}, {"no-replica-retry-after", f.noReplicaRetryAfter}} {
		if d.v <= 0 {
			return fmt.Errorf("%s: %s: want more than 0", f.where(d.flag), d.v)
		}
	}
	if _, err := routingMap(f.routing); err != nil {
		return fmt.Errorf("%s: %w", f.where("routing"), err)
	}
	if f.prefixLoadFactor < 1 {
		return fmt.Errorf("%s: %g: want 1 or more", f.where("prefix-load-factor"), f.prefixLoadFactor)
	}
	if f.registerCheckInterval < time.Second {
		return fmt.Errorf("%s: %s: want 1s or more", f.where("register-check-interval"), f.registerCheckInterval)
	}
	if f.engineMetricsInterval < 0 {
		return fmt.Errorf("%s: %s: want 0 (off) or more", f.where("engine-metrics-interval"), f.engineMetricsInterval)
	}
	if f.checkParallelism < 1 {
		return fmt.Errorf("%s: %d: want at least 1", f.where("check-parallelism"), f.checkParallelism)
	}
	if f.holdTimeout < 0 {
		return fmt.Errorf("%s: %s: want 0 (hold nothing) or more", f.where("hold-timeout"), f.holdTimeout)
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"hold-per-model", f.holdPerModel}, {"hold-total", f.holdTotal}, {"wake-burst", f.wakeBurst}} {
		if n.v < 1 {
			return fmt.Errorf("%s: %d: want at least 1", f.where(n.flag), n.v)
		}
	}
	if f.demandWindow < time.Second || f.demandWindow > time.Hour {
		return fmt.Errorf("%s: %s: want 1s to 1h", f.where("demand-window"), f.demandWindow)
	}
	if f.modelsVariable != "" && !validVariablePath(f.modelsVariable) {
		return fmt.Errorf("%s: %q: a Nomad variable path is 1 to 128 letters, digits and -_~/", f.where("models-variable"), f.modelsVariable)
	}
	if f.keysFile != "" && f.keysVariable != "" {
		return fmt.Errorf("%s and %s: read the keys from one of them", f.where("keys-file"), f.where("keys-variable"))
	}
	if f.keysVariable != "" && !validVariablePath(f.keysVariable) {
		return fmt.Errorf("%s: %q: a Nomad variable path is 1 to 128 letters, digits and -_~/", f.where("keys-variable"), f.keysVariable)
	}
	if f.keysNamespace == "*" {
		return fmt.Errorf("%s: the keys are one variable in one namespace, not %q", f.where("keys-namespace"), f.keysNamespace)
	}
	if f.shareLimits && f.keysFile == "" && f.keysVariable == "" {
		return fmt.Errorf("%s: there are no limits to share without keys (keys-file or keys-variable)", f.where("share-limits"))
	}
	if (f.tlsCertFile == "") != (f.tlsKeyFile == "") {
		return fmt.Errorf("%s and %s: give both, or neither", f.where("tls-cert-file"), f.where("tls-key-file"))
	}
	if f.modelsNamespace == "*" {
		return fmt.Errorf("%s: the model list is one variable in one namespace, not %q", f.where("models-namespace"), f.modelsNamespace)
	}
	if f.advertise != "" {
		if _, err := registration(f.advertise, &net.TCPAddr{Port: 1}); err != nil {
			return fmt.Errorf("%s: %w", f.where("advertise"), err)
		}
	}
	return nil
}

// DefaultListen is --listen's default: loopback only, so that a gateway
// started without settings is not open to the network.
const DefaultListen = "127.0.0.1:8080"

// NewCommand returns the gateway subcommand.
func NewCommand() *cobra.Command { return newCommand(nil) }

// newCommand is NewCommand; ready, when not nil, is called with the
// address served on once listening.
func newCommand(ready func(addr string)) *cobra.Command {
	return command(func(ctx context.Context, f flags, stderr io.Writer) error { return run(ctx, f, stderr, ready) })
}

// command is the command, running serve with the settings resolved
// (flags, file, defaults) and checked.
func command(serve func(ctx context.Context, f flags, stderr io.Writer) error) *cobra.Command {
	var f flags
	cmd := &cobra.Command{
		Use:   "gateway [--config gateway.hcl] [--listen 127.0.0.1:8080] [--consul ADDR | --nomad ADDR]",
		Short: "Serve one OpenAI-compatible endpoint over the healthy replicas of every model",
		Long: `Run the llmgw gateway. It discovers the replica services the controller
registers (named llmgw-<model>, tagged llmgw and model=<model>) from Consul's
health API (--consul: passing instances only) or from Nomad's service
registrations and their allocations' checks (--nomad, the default, with
NOMAD_UNIX_ADDR, the task API socket of a Nomad task with identity { env =
true }, else NOMAD_ADDR, else http://127.0.0.1:4646), and routes /v1/chat/completions,
/v1/completions and /v1/embeddings by the body's "model" to the replica with
the fewest requests in flight per unit of weight, behind a circuit breaker per
replica. /v1/models lists the models served, /llmgw/v1/demand each model's
demand (outstanding, held, arrivals, TTFT) for the controller, /metrics
serves Prometheus text, /healthz answers 200 once discovery has synced.

The controller writes the catalog's models into the Nomad variable
llmgw/models (--models-variable), read from the Nomad discovered from (or
--models-nomad): a model that may be at zero is listed with no replica, and
its requests are held (--hold-timeout, bounded by --hold-per-model and
--hold-total) until a replica is ready, then sent in arrival order, at most
--wake-burst at once per replica; past the deadline or the bound, 503 with
Retry-After.

With --consul it registers
itself as llmgw-gateway with an HTTP check on /healthz. Tokens and TLS come
from the usual environment (CONSUL_HTTP_TOKEN, NOMAD_TOKEN, ...).

--config FILE reads the settings from an HCL file: each flag is an
attribute named like it with "_" for "-" (breaker_max_open = "2m"). A flag
given on the command line wins over the file, the file over the
environment (NOMAD_ADDR, NOMAD_NAMESPACE), that over the flag's default;
--consul or --nomad on the command line picks the source whatever the file
says. See docs/gateway.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.resolve(cmd.Flags(), os.Getenv); err != nil {
				return err
			}
			if err := f.check(); err != nil {
				return err
			}
			return serve(cmd.Context(), f, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "read settings from this HCL file (flags given win over it; see docs/gateway.md)")
	fl.StringVar(&f.listen, "listen", DefaultListen, `address to serve on (loopback by default: ":8080" or "0.0.0.0:8080" for every interface)`)
	fl.StringVar(&f.consul, "consul", "", "discover from the Consul agent at ADDR (host:port or URL) and register there")
	fl.StringVar(&f.nomad, "nomad", "", "discover from Nomad at ADDR (default: NOMAD_UNIX_ADDR, else NOMAD_ADDR, else http://127.0.0.1:4646)")
	cmd.MarkFlagsMutuallyExclusive("consul", "nomad")
	fl.StringVar(&f.namespace, "namespace", "", `Nomad namespace to discover in, "*" for all (default: NOMAD_NAMESPACE, else "default")`)
	fl.StringVar(&f.advertise, "advertise", "", "HOST:PORT clients and Consul's check reach this gateway at (default: the listen address; its host, when unspecified, left to Consul: the agent's node address)")
	fl.BoolVar(&f.register, "register", true, "with --consul, register as llmgw-gateway with an HTTP check")
	fl.StringSliceVar(&f.registerTags, "register-tags", nil, "with --consul, tags of the registration besides llmgw-gateway (comma-separated)")
	fl.DurationVar(&f.registerCheckInterval, "register-check-interval", gateway.DefaultRegisterCheckInterval, "with --consul, the interval of the registration's HTTP check (its timeout is a fifth of it, at least 1s)")
	fl.DurationVar(&f.consulWait, "consul-wait", gateway.DefaultConsulWait, "with --consul, the longest one blocking query waits for a change")
	fl.Int64Var(&f.maxModelScan, "max-model-scan", gateway.DefaultMaxModelScan, `bytes of a request body read, at most, to find "model" (413 past them)`)
	fl.Int64Var(&f.bodyMemory, "body-memory", gateway.DefaultBodyMemory, "bytes all requests together may hold while finding their model (503 past them)")
	fl.IntVar(&f.attempts, "attempts", gateway.DefaultAttempts, "replicas one request may be tried on, before the first byte reaches the client")
	fl.DurationVar(&f.noReplicaRetryAfter, "no-replica-retry-after", gateway.DefaultNoReplicaRetryAfter, "the Retry-After of a 503 for a model with no healthy replica")
	fl.IntVar(&f.breakerFailures, "breaker-failures", gateway.DefaultBreakerFailures, "failures or timeouts in a row that open a replica's circuit breaker")
	fl.DurationVar(&f.breakerOpen, "breaker-open", gateway.DefaultBreakerOpen, "how long an open breaker waits before its half-open probe")
	fl.DurationVar(&f.breakerMaxOpen, "breaker-max-open", gateway.DefaultBreakerMaxOpen, "the longest open time, which doubles with each failed probe")
	fl.DurationVar(&f.dialTimeout, "dial-timeout", gateway.DefaultDialTimeout, "timeout to connect to a replica")
	fl.DurationVar(&f.headerTimeout, "response-header-timeout", gateway.DefaultHeaderTimeout, "timeout from sending a request to a replica's response headers (a non-streamed completion sends them when done)")
	fl.DurationVar(&f.checkInterval, "check-interval", gateway.DefaultCheckInterval, "with Nomad, how often allocations' checks are read")
	fl.DurationVar(&f.checkTimeout, "check-timeout", gateway.DefaultCheckTimeout, "with Nomad, the longest one allocation's check read may take")
	fl.IntVar(&f.checkParallelism, "check-parallelism", gateway.DefaultCheckParallelism, "with Nomad, the most check reads in flight at once, all services together")
	fl.DurationVar(&f.engineMetricsInterval, "engine-metrics-interval", gateway.DefaultEngineMetricsInterval, "how often each replica engine's /metrics is read, to weigh replicas by every gateway's load (0: off)")
	fl.DurationVar(&f.holdTimeout, "hold-timeout", gateway.DefaultHoldTimeout, "the longest a request for a model at zero is held for a replica (0: not held, 503 at once)")
	fl.IntVar(&f.holdPerModel, "hold-per-model", gateway.DefaultHoldPerModel, "the most requests held for one model (503 past it)")
	fl.IntVar(&f.holdTotal, "hold-total", gateway.DefaultHoldTotal, "the most requests held for all models together (503 past it)")
	fl.IntVar(&f.wakeBurst, "wake-burst", gateway.DefaultWakeBurst, "held requests in flight at once per ready replica while a model wakes")
	fl.DurationVar(&f.demandWindow, "demand-window", gateway.DefaultDemandWindow, "the span of the demand's arrival rate and TTFT p90 ("+gatewayapi.DemandPath+")")
	fl.StringVar(&f.modelsVariable, "models-variable", gatewayapi.ModelsVariable, `the Nomad variable the controller writes the model list to ("": read none, no model is known at zero)`)
	fl.StringVar(&f.modelsNamespace, "models-namespace", "", `the model list variable's namespace (default: --namespace, "default" when that is "*")`)
	fl.StringVar(&f.modelsNomad, "models-nomad", "", "read the model list from Nomad at ADDR (default: the Nomad discovered from; with --consul, none unless given)")
	fl.StringVar(&f.keysFile, "keys-file", "", "read API keys (hashed, with model allowlists and limits) from this HCL file, again when it changes or on SIGHUP; without keys, anyone who reaches the gateway may use it")
	fl.StringVar(&f.keysVariable, "keys-variable", "", `read the API keys' file from item "keys" of this Nomad variable, watched (instead of --keys-file)`)
	fl.StringVar(&f.keysNamespace, "keys-namespace", "", `the keys variable's namespace (default: --namespace, "default" when that is "*")`)
	fl.BoolVar(&f.shareLimits, "share-limits", false, "enforce 1/N of every key's limits, N the llmgw-gateway registrations discovery lists (see docs/gateway.md)")
	fl.StringVar(&f.tlsCertFile, "tls-cert-file", "", "serve HTTPS with this certificate (PEM; reloaded when it changes, or on SIGHUP)")
	fl.StringVar(&f.tlsKeyFile, "tls-key-file", "", "the certificate's private key (PEM)")
	fl.StringSliceVar(&f.routing, "routing", nil, `routing policy per model, MODEL=POLICY (comma-separated): "prefix" or "least-outstanding", over the model list's (default: the list's, else least-outstanding)`)
	fl.Float64Var(&f.prefixLoadFactor, "prefix-load-factor", gateway.DefaultPrefixLoadFactor, "with the prefix policy, a replica with more than this times its share of the requests in flight is passed over (1 or more)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.AddCommand(hashKeyCommand())
	return cmd
}

// routingMap reads --routing's MODEL=POLICY entries.
func routingMap(entries []string) (map[string]string, error) {
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
	if err := gateway.CheckRouting(m); err != nil {
		return nil, err
	}
	return m, nil
}

// engineInterval is --engine-metrics-interval as gateway.Options takes
// it: 0 (off) is negative there.
func engineInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// validVariablePath reports whether p is a path Nomad accepts for a
// variable.
func validVariablePath(p string) bool {
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

// run serves until ctx ends. ready, when not nil, receives the address
// served on once listening (for tests).
// It takes settings check accepted.
func run(ctx context.Context, f flags, stderr io.Writer, ready func(addr string)) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("%s: %w", f.where("log-level"), err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	var src gateway.Source
	var consul *consulapi.Client
	var nomad *nomadapi.Client // the one discovered from
	var where string
	if f.consul != "" {
		cfg := consulapi.DefaultConfig()
		cfg.Address = f.consul
		c, err := consulapi.NewClient(cfg)
		if err != nil {
			return fmt.Errorf("consul client %s: %w", f.consul, err)
		}
		consul, where = c, "consul "+f.consul
		src = &gateway.ConsulSource{Client: c, Logger: log, Wait: f.consulWait}
	} else {
		cfg := nomadapi.DefaultConfig() // NOMAD_ADDR, NOMAD_TOKEN, TLS, ...
		if f.nomad != "" {
			cfg.Address = f.nomad
		} else if addr, from := nomadenv.Address(os.Getenv); from == nomadenv.UnixAddr {
			// In a Nomad task with its workload identity: the task API
			// socket, which nomad/api's DefaultConfig does not read.
			cfg.Address = addr
		}
		ns := f.namespace
		if ns == "" {
			ns = cfg.Namespace
		}
		addr := cfg.Address // NewClient turns a unix:// address into http://127.0.0.1
		c, err := nomadapi.NewClient(cfg)
		if err != nil {
			return fmt.Errorf("nomad client %s: %w", addr, err)
		}
		defer c.Close()
		nomad, where = c, "nomad "+addr
		src = &gateway.NomadSource{Client: c, Logger: log, Namespace: ns, CheckInterval: f.checkInterval,
			CheckTimeout: f.checkTimeout, CheckParallelism: f.checkParallelism}
	}

	models, modelsFrom, err := modelSource(f, nomad, log)
	if err != nil {
		return err
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	keysReload, certReload := make(chan struct{}, 1), make(chan struct{}, 1)

	keys, keysFrom, err := keySource(f, nomad, keysReload, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var certs *certReloader
	if f.tlsCertFile != "" {
		if certs, err = newCertReloader(f.tlsCertFile, f.tlsKeyFile, log, reg); err != nil {
			return fmt.Errorf("%s: %w", f.where("tls-cert-file"), err)
		}
	}
	routing, err := routingMap(f.routing)
	if err != nil {
		return fmt.Errorf("%s: %w", f.where("routing"), err)
	}
	g := gateway.New(gateway.Options{
		Keys:         keys,
		Source:       src,
		Logger:       log,
		Registerer:   reg,
		Transport:    gateway.NewTransport(f.dialTimeout, f.headerTimeout),
		MaxModelScan: f.maxModelScan,
		BodyMemory:   f.bodyMemory,
		Attempts:     f.attempts,
		Breaker:      gateway.BreakerConfig{Failures: f.breakerFailures, OpenFor: f.breakerOpen, MaxOpenFor: f.breakerMaxOpen},

		NoReplicaRetryAfter:   f.noReplicaRetryAfter,
		EngineMetricsInterval: engineInterval(f.engineMetricsInterval),
		Models:                models,
		Hold:                  gateway.HoldConfig{Timeout: f.holdTimeout, PerModel: f.holdPerModel, Total: f.holdTotal, Burst: f.wakeBurst},
		DemandWindow:          f.demandWindow,
		Routing:               routing,
		PrefixLoadFactor:      f.prefixLoadFactor,
	})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", g.Handler())

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.where("listen"), f.listen, err)
	}
	srv, scheme := gateway.NewServer(mux, log), "http://"
	serve := srv.Serve
	if certs != nil {
		srv.TLSConfig, scheme = certs.config(), "https://"
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	log.Info("llmgw gateway", "api", scheme+ln.Addr().String(), "discovery", where, "models", modelsFrom, "keys", keysFrom, "config", f.config)
	if keys == nil && !loopback(ln.Addr()) {
		log.Warn("no API keys and not on loopback only: anyone who reaches "+ln.Addr().String()+" may use every model (give --keys-file or --keys-variable)", "listen", ln.Addr().String())
	}
	if ready != nil {
		ready(ln.Addr().String())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Go(func() {
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
			cancel()
		}
	})
	wg.Go(func() {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reading the keys and the TLS certificate again")
				for _, c := range []chan struct{}{keysReload, certReload} {
					select {
					case c <- struct{}{}:
					default:
					}
				}
			}
		}
	})
	if certs != nil {
		wg.Go(func() { certs.run(ctx, certCheckInterval, certReload) })
	}
	if f.shareLimits {
		count := func(ctx context.Context) ([]string, error) { return gatewayapi.ConsulGateways(ctx, consul) }
		if consul == nil {
			ns := f.namespace
			if ns == "" || ns == "*" {
				ns = nomadapi.DefaultNamespace
			}
			count = func(ctx context.Context) ([]string, error) { return gatewayapi.NomadGateways(ctx, nomad, ns) }
		}
		wg.Go(func() { shareLimits(ctx, g, count, shareInterval, log) })
	}
	if consul != nil && f.register {
		r, err := registration(f.advertise, ln.Addr())
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		r.CheckInterval, r.Tags = f.registerCheckInterval, f.registerTags
		if certs != nil {
			r.CheckURL = "https://" + strings.TrimPrefix(r.CheckURL, "http://")
			r.CheckTLSSkipVerify = true
			// The controller reads this gateway's demand over HTTPS.
			r.Tags = append(slices.Clone(r.Tags), gatewayapi.TLSTag)
		}
		wg.Go(func() {
			if err := r.Register(ctx, consul, log); err != nil {
				log.Warn("consul", "error", err)
			}
		})
	}
	err = g.Run(ctx)
	cancel()
	wg.Wait()
	select {
	case e := <-errc:
		return e
	default:
	}
	return err
}

// shareInterval is how often --share-limits counts the gateways.
const shareInterval = 15 * time.Second

// shareLimits sets the gateway's share of every key's limits from the
// gateways count lists (this one among them), every interval, until ctx
// ends. A count that fails keeps the last share.
func shareLimits(ctx context.Context, g *gateway.Gateway, count func(context.Context) ([]string, error), every time.Duration, log *slog.Logger) {
	for {
		qctx, cancel := context.WithTimeout(ctx, every)
		gws, err := count(qctx)
		cancel()
		if err != nil {
			log.Warn("share-limits: counting the gateways failed; the last share stays", "error", err)
		} else {
			g.SetLimitShare(len(gws))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// loopback reports whether a is a loopback address only.
func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// keySource is where the API keys come from: --keys-file (read once here,
// so a bad file stops the command with its file:line errors), or
// --keys-variable in the Nomad discovered from (else --models-nomad's);
// nil without either. from says which, for the log.
func keySource(f flags, discovered *nomadapi.Client, reload <-chan struct{}, log *slog.Logger) (gateway.KeySource, string, error) {
	switch {
	case f.keysFile != "":
		src, err := os.ReadFile(f.keysFile)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", f.where("keys-file"), err)
		}
		if _, err := gateway.ParseKeys(f.keysFile, src); err != nil {
			return nil, "", err
		}
		return &gateway.FileKeys{Path: f.keysFile, Reload: reload}, "file " + f.keysFile, nil
	case f.keysVariable != "":
		c := discovered
		if c == nil {
			if f.modelsNomad == "" {
				return nil, "", fmt.Errorf("%s: with --consul, --models-nomad names the Nomad to read the keys from", f.where("keys-variable"))
			}
			cfg := nomadapi.DefaultConfig()
			cfg.Address = f.modelsNomad
			var err error
			if c, err = nomadapi.NewClient(cfg); err != nil {
				return nil, "", fmt.Errorf("%s: nomad client %s: %w", f.where("models-nomad"), f.modelsNomad, err)
			}
		}
		ns := f.keysNamespace
		if ns == "" {
			ns = f.namespace
		}
		if ns == "" || ns == "*" {
			ns = nomadapi.DefaultNamespace
		}
		return &gateway.NomadKeys{Client: c, Logger: log, Namespace: ns, Path: f.keysVariable},
			fmt.Sprintf("nomad %s variable %s (namespace %s)", c.Address(), f.keysVariable, ns), nil
	}
	return nil, "none: open to every client", nil
}

// modelSource is where the model list is read from: --models-variable in
// the Nomad of --models-nomad, else the one discovered from (nil with
// --consul), in --models-namespace, else the discovery namespace. from
// says which, for the log.
func modelSource(f flags, discovered *nomadapi.Client, log *slog.Logger) (gateway.ModelSource, string, error) {
	if f.modelsVariable == "" {
		return nil, "none (--models-variable is empty)", nil
	}
	c := discovered
	cfg := nomadapi.DefaultConfig()
	if f.modelsNomad != "" {
		cfg.Address = f.modelsNomad
		var err error
		if c, err = nomadapi.NewClient(cfg); err != nil {
			return nil, "", fmt.Errorf("%s: nomad client %s: %w", f.where("models-nomad"), f.modelsNomad, err)
		}
	}
	if c == nil {
		return nil, "none (with --consul, --models-nomad names the Nomad to read it from)", nil
	}
	ns := f.modelsNamespace
	if ns == "" && discovered != nil && f.modelsNomad == "" {
		ns = f.namespace
	}
	if ns == "" {
		ns = cfg.Namespace
	}
	if ns == "" || ns == "*" {
		ns = nomadapi.DefaultNamespace
	}
	from := fmt.Sprintf("nomad %s variable %s (namespace %s)", c.Address(), f.modelsVariable, ns)
	return &gateway.NomadModels{Client: c, Logger: log, Namespace: ns, Path: f.modelsVariable}, from, nil
}

// registration is how the gateway registers itself: at --advertise, else
// at the listen address (its host left to Consul when unspecified), with
// the check on /healthz at the same address (127.0.0.1 for an unspecified
// host: the agent is local).
func registration(advertise string, listen net.Addr) (gateway.ConsulRegistration, error) {
	host, portStr, err := net.SplitHostPort(listen.String())
	if err != nil {
		return gateway.ConsulRegistration{}, fmt.Errorf("listen address %s: %w", listen, err)
	}
	if advertise != "" {
		host, portStr, err = net.SplitHostPort(advertise)
		if err != nil {
			return gateway.ConsulRegistration{}, fmt.Errorf("%q: want HOST:PORT: %w", advertise, err)
		}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return gateway.ConsulRegistration{}, fmt.Errorf("advertised port %q: want 1 to 65535", portStr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = ""
	}
	checkHost := host
	if checkHost == "" {
		checkHost = "127.0.0.1"
	}
	name, _ := os.Hostname()
	return gateway.ConsulRegistration{
		ID:       fmt.Sprintf("%s-%s-%d", gatewayapi.GatewayServiceName, name, port),
		Address:  host,
		Port:     port,
		CheckURL: "http://" + net.JoinHostPort(checkHost, strconv.Itoa(port)) + "/healthz",
	}, nil
}

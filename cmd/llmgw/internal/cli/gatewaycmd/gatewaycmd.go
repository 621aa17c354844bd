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
	"github.com/llmgw/llmgw/gateway/config"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/nomadenv"
)

// resolve reads the configuration file, if any, into the settings the
// command line left alone (f holds the flags' values).
func resolve(f *config.Settings, fl *pflag.FlagSet, env func(string) string) error {
	if fl.Changed("consul") && f.Consul == "" {
		return errors.New("--consul: empty address")
	}
	if f.Config == "" {
		return nil
	}
	src, err := os.ReadFile(f.Config)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	cf, err := config.Parse(f.Config, src, env)
	if err != nil {
		return err
	}
	f.From, err = apply(cf, fl)
	return err
}

// DefaultListen is --listen's default: loopback only, so that a gateway
// started without settings is not open to the network.
const DefaultListen = "127.0.0.1:8080"

// NewCommand returns the gateway subcommand.
func NewCommand() *cobra.Command { return newCommand(nil) }

// newCommand is NewCommand; ready, when not nil, is called with the
// address served on once listening.
func newCommand(ready func(addr string)) *cobra.Command {
	return command(func(ctx context.Context, f config.Settings, stderr io.Writer) error {
		return run(ctx, f, stderr, ready)
	})
}

// command is the command, running serve with the settings resolved
// (flags, file, defaults) and checked.
func command(serve func(ctx context.Context, f config.Settings, stderr io.Writer) error) *cobra.Command {
	var f config.Settings
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
			if err := resolve(&f, cmd.Flags(), os.Getenv); err != nil {
				return err
			}
			if err := f.Check(); err != nil {
				return err
			}
			return serve(cmd.Context(), f, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Config, "config", "", "read settings from this HCL file (flags given win over it; see docs/gateway.md)")
	fl.StringVar(&f.Listen, "listen", DefaultListen, `address to serve on (loopback by default: ":8080" or "0.0.0.0:8080" for every interface)`)
	fl.StringVar(&f.Consul, "consul", "", "discover from the Consul agent at ADDR (host:port or URL) and register there")
	fl.StringVar(&f.Nomad, "nomad", "", "discover from Nomad at ADDR (default: NOMAD_UNIX_ADDR, else NOMAD_ADDR, else http://127.0.0.1:4646)")
	cmd.MarkFlagsMutuallyExclusive("consul", "nomad")
	fl.StringVar(&f.Namespace, "namespace", "", `Nomad namespace to discover in, "*" for all (default: NOMAD_NAMESPACE, else "default")`)
	fl.StringVar(&f.Advertise, "advertise", "", "HOST:PORT clients and Consul's check reach this gateway at (default: the listen address; its host, when unspecified, left to Consul: the agent's node address)")
	fl.BoolVar(&f.Register, "register", true, "with --consul, register as llmgw-gateway with an HTTP check")
	fl.StringSliceVar(&f.RegisterTags, "register-tags", nil, "with --consul, tags of the registration besides llmgw-gateway (comma-separated)")
	fl.DurationVar(&f.RegisterCheckInterval, "register-check-interval", gateway.DefaultRegisterCheckInterval, "with --consul, the interval of the registration's HTTP check (its timeout is a fifth of it, at least 1s)")
	fl.DurationVar(&f.ConsulWait, "consul-wait", gateway.DefaultConsulWait, "with --consul, the longest one blocking query waits for a change")
	fl.Int64Var(&f.MaxModelScan, "max-model-scan", gateway.DefaultMaxModelScan, `bytes of a request body read, at most, to find "model" (413 past them)`)
	fl.Int64Var(&f.BodyMemory, "body-memory", gateway.DefaultBodyMemory, "bytes all requests together may hold while finding their model (503 past them)")
	fl.IntVar(&f.Attempts, "attempts", gateway.DefaultAttempts, "replicas one request may be tried on, before the first byte reaches the client")
	fl.DurationVar(&f.NoReplicaRetryAfter, "no-replica-retry-after", gateway.DefaultNoReplicaRetryAfter, "the Retry-After of a 503 for a model with no healthy replica")
	fl.IntVar(&f.BreakerFailures, "breaker-failures", gateway.DefaultBreakerFailures, "failures or timeouts in a row that open a replica's circuit breaker")
	fl.DurationVar(&f.BreakerOpen, "breaker-open", gateway.DefaultBreakerOpen, "how long an open breaker waits before its half-open probe")
	fl.DurationVar(&f.BreakerMaxOpen, "breaker-max-open", gateway.DefaultBreakerMaxOpen, "the longest open time, which doubles with each failed probe")
	fl.DurationVar(&f.DialTimeout, "dial-timeout", gateway.DefaultDialTimeout, "timeout to connect to a replica")
	fl.DurationVar(&f.HeaderTimeout, "response-header-timeout", gateway.DefaultHeaderTimeout, "timeout from sending a request to a replica's response headers (a non-streamed completion sends them when done)")
	fl.DurationVar(&f.CheckInterval, "check-interval", gateway.DefaultCheckInterval, "with Nomad, how often allocations' checks are read")
	fl.DurationVar(&f.CheckTimeout, "check-timeout", gateway.DefaultCheckTimeout, "with Nomad, the longest one allocation's check read may take")
	fl.IntVar(&f.CheckParallelism, "check-parallelism", gateway.DefaultCheckParallelism, "with Nomad, the most check reads in flight at once, all services together")
	fl.DurationVar(&f.EngineMetricsInterval, "engine-metrics-interval", gateway.DefaultEngineMetricsInterval, "how often each replica engine's /metrics is read, to weigh replicas by every gateway's load (0: off)")
	fl.DurationVar(&f.HoldTimeout, "hold-timeout", gateway.DefaultHoldTimeout, "the longest a request for a model at zero is held for a replica (0: not held, 503 at once)")
	fl.IntVar(&f.HoldPerModel, "hold-per-model", gateway.DefaultHoldPerModel, "the most requests held for one model (503 past it)")
	fl.IntVar(&f.HoldTotal, "hold-total", gateway.DefaultHoldTotal, "the most requests held for all models together (503 past it)")
	fl.IntVar(&f.WakeBurst, "wake-burst", gateway.DefaultWakeBurst, "held requests in flight at once per ready replica while a model wakes")
	fl.DurationVar(&f.DemandWindow, "demand-window", gateway.DefaultDemandWindow, "the span of the demand's arrival rate and TTFT p90 ("+gatewayapi.DemandPath+")")
	fl.StringVar(&f.ModelsVariable, "models-variable", gatewayapi.ModelsVariable, `the Nomad variable the controller writes the model list to ("": read none, no model is known at zero)`)
	fl.StringVar(&f.ModelsNamespace, "models-namespace", "", `the model list variable's namespace (default: --namespace, "default" when that is "*")`)
	fl.StringVar(&f.ModelsNomad, "models-nomad", "", "read the model list from Nomad at ADDR (default: the Nomad discovered from; with --consul, none unless given)")
	fl.StringVar(&f.KeysFile, "keys-file", "", "read API keys (hashed, with model allowlists and limits) from this HCL file, again when it changes or on SIGHUP; without keys, anyone who reaches the gateway may use it")
	fl.StringVar(&f.KeysVariable, "keys-variable", "", `read the API keys' file from item "keys" of this Nomad variable, watched (instead of --keys-file)`)
	fl.StringVar(&f.KeysNamespace, "keys-namespace", "", `the keys variable's namespace (default: --namespace, "default" when that is "*")`)
	fl.BoolVar(&f.ShareLimits, "share-limits", false, "enforce 1/N of every key's limits, N the llmgw-gateway registrations discovery lists (see docs/gateway.md)")
	fl.StringVar(&f.TLSCertFile, "tls-cert-file", "", "serve HTTPS with this certificate (PEM; reloaded when it changes, or on SIGHUP)")
	fl.StringVar(&f.TLSKeyFile, "tls-key-file", "", "the certificate's private key (PEM)")
	fl.StringSliceVar(&f.Routing, "routing", nil, `routing policy per model, MODEL=POLICY (comma-separated): "prefix" or "least-outstanding", over the model list's (default: the list's, else least-outstanding)`)
	fl.Float64Var(&f.PrefixLoadFactor, "prefix-load-factor", gateway.DefaultPrefixLoadFactor, "with the prefix policy, a replica with more than this times its share of the requests in flight is passed over (1 or more)")
	fl.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	cmd.AddCommand(hashKeyCommand())
	return cmd
}

// engineInterval is --engine-metrics-interval as gateway.Options takes
// it: 0 (off) is negative there.
func engineInterval(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// run serves until ctx ends. ready, when not nil, receives the address
// served on once listening (for tests).
// It takes settings check accepted.
func run(ctx context.Context, f config.Settings, stderr io.Writer, ready func(addr string)) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return fmt.Errorf("%s: %w", f.Where("log-level"), err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	var src gateway.Source
	var consul *consulapi.Client
	var nomad *nomadapi.Client // the one discovered from
	var where string
	if f.Consul != "" {
		cfg := consulapi.DefaultConfig()
		cfg.Address = f.Consul
		c, err := consulapi.NewClient(cfg)
		if err != nil {
			return fmt.Errorf("consul client %s: %w", f.Consul, err)
		}
		consul, where = c, "consul "+f.Consul
		src = &gateway.ConsulSource{Client: c, Logger: log, Wait: f.ConsulWait}
	} else {
		cfg := nomadapi.DefaultConfig() // NOMAD_ADDR, NOMAD_TOKEN, TLS, ...
		if f.Nomad != "" {
			cfg.Address = f.Nomad
		} else if addr, from := nomadenv.Address(os.Getenv); from == nomadenv.UnixAddr {
			// In a Nomad task with its workload identity: the task API
			// socket, which nomad/api's DefaultConfig does not read.
			cfg.Address = addr
		}
		ns := f.Namespace
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
		src = &gateway.NomadSource{Client: c, Logger: log, Namespace: ns, CheckInterval: f.CheckInterval,
			CheckTimeout: f.CheckTimeout, CheckParallelism: f.CheckParallelism}
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
	if f.TLSCertFile != "" {
		if certs, err = newCertReloader(f.TLSCertFile, f.TLSKeyFile, log, reg); err != nil {
			return fmt.Errorf("%s: %w", f.Where("tls-cert-file"), err)
		}
	}
	routing, err := config.RoutingMap(f.Routing)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Where("routing"), err)
	}
	g := gateway.New(gateway.Options{
		Keys:         keys,
		Source:       src,
		Logger:       log,
		Registerer:   reg,
		Transport:    gateway.NewTransport(f.DialTimeout, f.HeaderTimeout),
		MaxModelScan: f.MaxModelScan,
		BodyMemory:   f.BodyMemory,
		Attempts:     f.Attempts,
		Breaker:      gateway.BreakerConfig{Failures: f.BreakerFailures, OpenFor: f.BreakerOpen, MaxOpenFor: f.BreakerMaxOpen},

		NoReplicaRetryAfter:   f.NoReplicaRetryAfter,
		EngineMetricsInterval: engineInterval(f.EngineMetricsInterval),
		Models:                models,
		Hold:                  gateway.HoldConfig{Timeout: f.HoldTimeout, PerModel: f.HoldPerModel, Total: f.HoldTotal, Burst: f.WakeBurst},
		DemandWindow:          f.DemandWindow,
		Routing:               routing,
		PrefixLoadFactor:      f.PrefixLoadFactor,
	})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", g.Handler())

	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.Where("listen"), f.Listen, err)
	}
	srv, scheme := gateway.NewServer(mux, log), "http://"
	serve := srv.Serve
	if certs != nil {
		srv.TLSConfig, scheme = certs.config(), "https://"
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	log.Info("llmgw gateway", "api", scheme+ln.Addr().String(), "discovery", where, "models", modelsFrom, "keys", keysFrom, "config", f.Config)
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
	if f.ShareLimits {
		count := func(ctx context.Context) ([]string, error) { return gatewayapi.ConsulGateways(ctx, consul) }
		if consul == nil {
			ns := f.Namespace
			if ns == "" || ns == "*" {
				ns = nomadapi.DefaultNamespace
			}
			count = func(ctx context.Context) ([]string, error) { return gatewayapi.NomadGateways(ctx, nomad, ns) }
		}
		wg.Go(func() { shareLimits(ctx, g, count, shareInterval, log) })
	}
	if consul != nil && f.Register {
		cr, err := config.NewRegistration(f.Advertise, ln.Addr())
		if err != nil {
			cancel()
			wg.Wait()
			return err
		}
		r := gateway.ConsulRegistration{ID: cr.ID, Address: cr.Address, Port: cr.Port, CheckURL: cr.CheckURL}
		r.CheckInterval, r.Tags = f.RegisterCheckInterval, f.RegisterTags
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
func keySource(f config.Settings, discovered *nomadapi.Client, reload <-chan struct{}, log *slog.Logger) (gateway.KeySource, string, error) {
	switch {
	case f.KeysFile != "":
		src, err := os.ReadFile(f.KeysFile)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", f.Where("keys-file"), err)
		}
		if _, err := gateway.ParseKeys(f.KeysFile, src); err != nil {
			return nil, "", err
		}
		return &gateway.FileKeys{Path: f.KeysFile, Reload: reload}, "file " + f.KeysFile, nil
	case f.KeysVariable != "":
		c := discovered
		if c == nil {
			if f.ModelsNomad == "" {
				return nil, "", fmt.Errorf("%s: with --consul, --models-nomad names the Nomad to read the keys from", f.Where("keys-variable"))
			}
			cfg := nomadapi.DefaultConfig()
			cfg.Address = f.ModelsNomad
			var err error
			if c, err = nomadapi.NewClient(cfg); err != nil {
				return nil, "", fmt.Errorf("%s: nomad client %s: %w", f.Where("models-nomad"), f.ModelsNomad, err)
			}
		}
		ns := f.KeysNamespace
		if ns == "" {
			ns = f.Namespace
		}
		if ns == "" || ns == "*" {
			ns = nomadapi.DefaultNamespace
		}
		return &gateway.NomadKeys{Client: c, Logger: log, Namespace: ns, Path: f.KeysVariable},
			fmt.Sprintf("nomad %s variable %s (namespace %s)", c.Address(), f.KeysVariable, ns), nil
	}
	return nil, "none: open to every client", nil
}

// modelSource is where the model list is read from: --models-variable in
// the Nomad of --models-nomad, else the one discovered from (nil with
// --consul), in --models-namespace, else the discovery namespace. from
// says which, for the log.
func modelSource(f config.Settings, discovered *nomadapi.Client, log *slog.Logger) (gateway.ModelSource, string, error) {
	if f.ModelsVariable == "" {
		return nil, "none (--models-variable is empty)", nil
	}
	c := discovered
	cfg := nomadapi.DefaultConfig()
	if f.ModelsNomad != "" {
		cfg.Address = f.ModelsNomad
		var err error
		if c, err = nomadapi.NewClient(cfg); err != nil {
			return nil, "", fmt.Errorf("%s: nomad client %s: %w", f.Where("models-nomad"), f.ModelsNomad, err)
		}
	}
	if c == nil {
		return nil, "none (with --consul, --models-nomad names the Nomad to read it from)", nil
	}
	ns := f.ModelsNamespace
	if ns == "" && discovered != nil && f.ModelsNomad == "" {
		ns = f.Namespace
	}
	if ns == "" {
		ns = cfg.Namespace
	}
	if ns == "" || ns == "*" {
		ns = nomadapi.DefaultNamespace
	}
	from := fmt.Sprintf("nomad %s variable %s (namespace %s)", c.Address(), f.ModelsVariable, ns)
	return &gateway.NomadModels{Client: c, Logger: log, Namespace: ns, Path: f.ModelsVariable}, from, nil
}

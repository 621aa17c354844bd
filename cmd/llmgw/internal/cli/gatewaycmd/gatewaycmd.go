// Package gatewaycmd is `llmgw gateway`: its flags, the configuration
// file (gateway/config) applied to the flags the command line left alone,
// the logger (--log-level), and the gateway's Server (gateway.Open, Run),
// which discovers the replicas from Consul or Nomad, serves the
// OpenAI-compatible API over them, serves /metrics and /healthz, and
// registers itself in Consul when discovering from Consul. SIGHUP reads the
// key file and the TLS certificate again (Server.Reload); SIGINT and
// SIGTERM (the context) stop it.
package gatewaycmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/gateway/config"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/bounded"
)

// settings are the command's: the gateway's (config.Settings), the
// command's own (--config, --log-level), and where each setting the
// configuration file gave came from.
type settings struct {
	config.Settings
	Config, LogLevel string
	// From is where each setting the file gave came from, by attribute:
	// "file:line: attribute".
	From map[string]string
}

// name names a setting (its attribute, "body_memory") in an error: by
// the file's line where the file gave it, else by its flag.
func (f *settings) name(setting string) string {
	if at, ok := f.From[setting]; ok {
		return at
	}
	return "--" + flagName(setting)
}

// flagName is the flag of a setting: its attribute with "-" for "_".
func flagName(setting string) string { return strings.ReplaceAll(setting, "_", "-") }

// check refuses settings that cannot work, naming each by name.
func (f *settings) check() error {
	if _, err := f.level(); err != nil {
		return err
	}
	return f.Check(f.name) // config.Settings
}

// level is --log-level's.
func (f *settings) level() (slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return 0, fmt.Errorf("%s: %w", f.name("log_level"), err)
	}
	return lvl, nil
}

// named is err as the command says it: a setting the server found wrong
// (a *config.SettingError) named by name.
func (f *settings) named(err error) error {
	var se *config.SettingError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %w", f.name(se.Setting), se.Err)
	}
	return err
}

// resolve reads the configuration file, if any, into the settings the
// command line left alone (f holds the flags' values).
func resolve(f *settings, fl *pflag.FlagSet, env func(string) string) error {
	if fl.Changed("consul") && f.Consul == "" {
		return errors.New("--consul: empty address")
	}
	if f.Config == "" {
		return nil
	}
	src, err := bounded.ReadFile(f.Config)
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
	return command(func(ctx context.Context, f settings, stderr io.Writer) error {
		return run(ctx, f, stderr, ready)
	})
}

// run runs the gateway's Server with f, logging JSON to stderr at
// --log-level, until ctx ends; SIGHUP makes it read the key file and the
// TLS certificate again. ready, when not nil, receives the address served
// on once listening.
func run(ctx context.Context, f settings, stderr io.Writer, ready func(addr string)) error {
	lvl, err := f.level()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	if f.Config != "" {
		log.Info("configuration file read", "config", f.Config)
	}
	// From before the key file is read: a SIGHUP is not lost, nor kills.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	srv, err := gateway.Open(f.Settings, log)
	if err != nil {
		return f.named(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reading the keys and the TLS certificate again")
				srv.Reload()
			}
		}
	}()
	if ready != nil {
		ready(srv.Addr().String())
	}
	err = srv.Run(ctx)
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	return f.named(err)
}

// command is the command, running serve with the settings resolved
// (flags, file, defaults) and checked.
func command(serve func(ctx context.Context, f settings, stderr io.Writer) error) *cobra.Command {
	var f settings
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
			if err := f.check(); err != nil {
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
	fl.Int64Var(&f.MaxBodyChatCompletions, "max-body-chat-completions", gateway.DefaultMaxBody, "the largest body of POST /v1/chat/completions, in bytes (413 past it)")
	fl.Int64Var(&f.MaxBodyCompletions, "max-body-completions", gateway.DefaultMaxBody, "the largest body of POST /v1/completions, in bytes (413 past it)")
	fl.Int64Var(&f.MaxBodyEmbeddings, "max-body-embeddings", gateway.DefaultMaxBody, "the largest body of POST /v1/embeddings, in bytes (413 past it)")
	fl.IntVar(&f.MaxJSONDepth, "max-json-depth", gateway.DefaultMaxJSONDepth, "the deepest nesting of objects and arrays a request body may have (400 past it)")
	fl.DurationVar(&f.BodyReadTimeout, "body-read-timeout", gateway.DefaultBodyReadTimeout, "the longest a request body may take to arrive whole (408 past it)")
	fl.Int64Var(&f.BodyMemory, "body-memory", gateway.DefaultBodyMemory, "bytes all request bodies together may hold (503 past them)")
	fl.StringSliceVar(&f.CORSOrigins, "cors-origins", nil, `origins (scheme://host[:port], comma-separated, or "*") whose web pages may use the gateway from a browser; by default none: a request with an Origin header is refused (403)`)
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
	fl.Float64Var(&f.PrefixHistoryLoadFactor, "prefix-history-load-factor", gateway.DefaultPrefixHistoryLoadFactor, "the same for a request that continues a conversation, whose history another replica would compute again (at least --prefix-load-factor)")
	fl.IntVar(&f.PrefixOpeningLimit, "prefix-opening-limit", 0, "with the prefix policy, a chat that opens a conversation waits at the gateway while its replica holds this many requests, so that continuing turns go first (0: one more than the engine's slots, learned from its metrics)")
	fl.DurationVar(&f.PrefixOpeningWait, "prefix-opening-wait", gateway.DefaultPrefixOpeningWait, "the longest such a chat waits before it is sent anyway (0: none waits)")
	fl.StringVar(&f.LogLevel, "log-level", "info", "debug, info, warn or error")
	cmd.AddCommand(hashKeyCommand())
	return cmd
}

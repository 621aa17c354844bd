package gateway

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
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/llmgw/llmgw/gateway/config"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/internal/nomadenv"
)

// offWhenZero is a duration flag whose 0 means off (--engine-metrics-interval,
// --prefix-opening-wait) as Options takes it: negative there, 0 is the default.
func offWhenZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Run is `llmgw gateway`'s runtime: it discovers the replicas from Consul
// or Nomad (the settings' choice), reads the model list and the API keys
// from where the settings say, serves the gateway's API with /metrics on
// one listener (HTTPS with the certificate reloaded when it changes, or
// on SIGHUP), registers itself in Consul when discovering from Consul,
// shares the keys' limits among the gateways with share-limits, and
// serves until ctx ends. It logs JSON to stderr. ready, when not nil,
// receives the address served on once listening (for tests). It takes
// settings config.Settings.Check accepted.
func Run(ctx context.Context, f config.Settings, stderr io.Writer, ready func(addr string)) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return fmt.Errorf("%s: %w", f.Where("log-level"), err)
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	var src Source
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
		src = &ConsulSource{Client: c, Logger: log, Wait: f.ConsulWait}
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
		src = &NomadSource{Client: c, Logger: log, Namespace: ns, CheckInterval: f.CheckInterval,
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
	g := New(Options{
		Keys:       keys,
		Source:     src,
		Logger:     log,
		Registerer: reg,
		Transport:  NewTransport(f.DialTimeout, f.HeaderTimeout),
		MaxBody: BodyLimits{ChatCompletions: f.MaxBodyChatCompletions, Completions: f.MaxBodyCompletions,
			Embeddings: f.MaxBodyEmbeddings},
		MaxJSONDepth:    f.MaxJSONDepth,
		BodyReadTimeout: f.BodyReadTimeout,
		BodyMemory:      f.BodyMemory,
		CORSOrigins:     f.CORSOrigins,
		Attempts:        f.Attempts,
		Breaker:         BreakerConfig{Failures: f.BreakerFailures, OpenFor: f.BreakerOpen, MaxOpenFor: f.BreakerMaxOpen},

		NoReplicaRetryAfter:     f.NoReplicaRetryAfter,
		EngineMetricsInterval:   offWhenZero(f.EngineMetricsInterval),
		Models:                  models,
		Hold:                    HoldConfig{Timeout: f.HoldTimeout, PerModel: f.HoldPerModel, Total: f.HoldTotal, Burst: f.WakeBurst},
		DemandWindow:            f.DemandWindow,
		Routing:                 routing,
		PrefixLoadFactor:        f.PrefixLoadFactor,
		PrefixHistoryLoadFactor: f.PrefixHistoryLoadFactor,
		PrefixOpeningLimit:      f.PrefixOpeningLimit,
		PrefixOpeningWait:       offWhenZero(f.PrefixOpeningWait),
	})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", g.Handler())

	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return fmt.Errorf("%s %s: %w", f.Where("listen"), f.Listen, err)
	}
	srv, scheme := NewServer(mux, log), "http://"
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

	// Every part runs until ctx ends or the gateway's Run returns; the
	// first error (the listener's, the gateway's) ends them all and is
	// what Run returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	grp, ctx := errgroup.WithContext(ctx)
	grp.Go(func() error {
		if err := serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	grp.Go(func() error {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		return nil
	})
	grp.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
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
		grp.Go(func() error { certs.run(ctx, certCheckInterval, certReload); return nil })
	}
	if f.ShareLimits {
		count := func(ctx context.Context) ([]string, error) { return gatewayclient.ConsulGateways(ctx, consul) }
		if consul == nil {
			ns := f.Namespace
			if ns == "" || ns == "*" {
				ns = nomadapi.DefaultNamespace
			}
			count = func(ctx context.Context) ([]string, error) { return gatewayclient.NomadGateways(ctx, nomad, ns) }
		}
		grp.Go(func() error { shareLimits(ctx, g, count, shareInterval, log); return nil })
	}
	if consul != nil && f.Register {
		cr, err := config.NewRegistration(f.Advertise, ln.Addr())
		if err != nil {
			cancel()
			_ = grp.Wait()
			return err
		}
		r := ConsulRegistration{ID: cr.ID, Address: cr.Address, Port: cr.Port, CheckURL: cr.CheckURL}
		r.CheckInterval, r.Tags = f.RegisterCheckInterval, f.RegisterTags
		if certs != nil {
			r.CheckURL = "https://" + strings.TrimPrefix(r.CheckURL, "http://")
			r.CheckTLSSkipVerify = true
			// The controller reads this gateway's demand over HTTPS.
			r.Tags = append(slices.Clone(r.Tags), gatewayapi.TLSTag)
		}
		grp.Go(func() error {
			if err := r.Register(ctx, consul, log); err != nil {
				log.Warn("consul", "error", err)
			}
			return nil
		})
	}
	grp.Go(func() error {
		defer cancel()
		return g.Run(ctx)
	})
	return grp.Wait()
}

// shareInterval is how often --share-limits counts the gateways.
const shareInterval = 15 * time.Second

// shareLimits sets the gateway's share of every key's limits from the
// gateways count lists (this one among them), every interval, until ctx
// ends. A count that fails keeps the last share.
func shareLimits(ctx context.Context, g *Gateway, count func(context.Context) ([]string, error), every time.Duration, log *slog.Logger) {
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
func keySource(f config.Settings, discovered *nomadapi.Client, reload <-chan struct{}, log *slog.Logger) (KeySource, string, error) {
	switch {
	case f.KeysFile != "":
		src, err := bounded.ReadFile(f.KeysFile)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", f.Where("keys-file"), err)
		}
		if _, err := ParseKeys(f.KeysFile, src); err != nil {
			return nil, "", err
		}
		return &FileKeys{Path: f.KeysFile, Reload: reload}, "file " + f.KeysFile, nil
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
		return &NomadKeys{Client: c, Logger: log, Namespace: ns, Path: f.KeysVariable},
			fmt.Sprintf("nomad %s variable %s (namespace %s)", c.Address(), f.KeysVariable, ns), nil
	}
	return nil, "none: open to every client", nil
}

// modelSource is where the model list is read from: --models-variable in
// the Nomad of --models-nomad, else the one discovered from (nil with
// --consul), in --models-namespace, else the discovery namespace. from
// says which, for the log.
func modelSource(f config.Settings, discovered *nomadapi.Client, log *slog.Logger) (ModelSource, string, error) {
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
	return &NomadModels{Client: c, Logger: log, Namespace: ns, Path: f.ModelsVariable}, from, nil
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
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

// Server is the gateway as `llmgw gateway` runs it, from its settings: it
// discovers the replicas from Consul or Nomad (the settings' choice), reads
// the model list and the API keys from where the settings say, serves the
// gateway's API with /metrics on one listener (HTTPS with the certificate
// reloaded when it changes, or on Reload), registers itself in Consul when
// discovering from Consul, and shares the keys' limits among the gateways
// with share_limits.
//
// Open makes one and binds its listener (Addr), Run serves until its
// context ends or Close, and Close stops it gracefully and releases what
// Open took. Signals, flags and the logger's set-up are the command's.
type Server struct {
	set   config.Settings
	log   *slog.Logger
	g     *Gateway
	certs *certReloader // nil without TLS
	// http serves a TLS listener (HTTP/2 and HTTP/1.1), fast a plaintext
	// one; the other is nil.
	http *http.Server
	fast *FastServer
	ln   net.Listener

	consul  *consulapi.Client // discovered from, nil with Nomad
	nomad   *nomadapi.Client  // discovered from, nil with Consul
	clients []*nomadapi.Client
	// modelsNomad is the client of models_nomad's Nomad, once made.
	modelsNomad *nomadapi.Client
	reg         *ConsulRegistration // nil unless registering in Consul
	// For the start's log line: where the replicas, the model list and
	// the keys come from.
	where, modelsFrom, keysFrom string

	keysReload, certReload chan struct{}

	mu     sync.Mutex
	ran    bool
	closed bool
	stop   context.CancelFunc // Run's, while it runs
	done   chan struct{}      // closed when Run returns
}

// Open checks the settings (config.Settings.Check: its errors name each
// setting by its attribute), makes the clients of the Nomad or Consul
// discovered from and of the sources of the model list and the keys, reads
// the key file (its file:line errors returned) and the TLS certificate, and
// binds the listener. A problem with one setting that only this finds (the
// certificate, the listen address) is a *config.SettingError. log takes
// what the gateway logs; nil discards it.
func Open(set config.Settings, log *slog.Logger) (*Server, error) {
	if err := set.Check(nil); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{set: set, log: log, keysReload: make(chan struct{}, 1), certReload: make(chan struct{}, 1)}
	if err := s.open(); err != nil {
		_ = s.release() // the error said is open's
		return nil, err
	}
	return s, nil
}

func (s *Server) open() error {
	f := s.set
	var src Source
	if f.Consul != "" {
		cfg := consulapi.DefaultConfig()
		cfg.Address = f.Consul
		c, err := consulapi.NewClient(cfg)
		if err != nil {
			return &config.SettingError{Setting: "consul", Err: fmt.Errorf("consul client %s: %w", f.Consul, err)}
		}
		s.consul, s.where = c, "consul "+f.Consul
		src = &ConsulSource{Client: c, Logger: s.log, Wait: f.ConsulWait}
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
			return &config.SettingError{Setting: "nomad", Err: fmt.Errorf("nomad client %s: %w", addr, err)}
		}
		s.clients = append(s.clients, c)
		s.nomad, s.where = c, "nomad "+addr
		src = &NomadSource{Client: c, Logger: s.log, Namespace: ns, CheckInterval: f.CheckInterval,
			CheckTimeout: f.CheckTimeout, CheckParallelism: f.CheckParallelism}
	}

	models, err := s.modelSource()
	if err != nil {
		return err
	}
	keys, err := s.keySource()
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if f.TLSCertFile != "" {
		if s.certs, err = newCertReloader(f.TLSCertFile, f.TLSKeyFile, s.log, reg); err != nil {
			return &config.SettingError{Setting: "tls_cert_file", Err: err}
		}
	}
	routing, err := config.RoutingMap(f.Routing)
	if err != nil {
		return &config.SettingError{Setting: "routing", Err: err}
	}
	s.g = New(Options{
		Keys:       keys,
		Source:     src,
		Logger:     s.log,
		Registerer: reg,
		Upstream:   NewUpstream(f.DialTimeout, f.HeaderTimeout),
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
	mux.Handle("/", s.g.Handler())
	if s.certs != nil {
		s.http = NewServer(mux, s.log)
		s.http.TLSConfig = s.certs.config()
	} else {
		s.fast = NewFastServer(mux, s.g.BodyTimeout, s.log)
	}

	if s.ln, err = net.Listen("tcp", f.Listen); err != nil {
		return &config.SettingError{Setting: "listen", Err: fmt.Errorf("%s: %w", f.Listen, err)}
	}
	if s.consul != nil && f.Register {
		cr, err := config.NewRegistration(f.Advertise, s.ln.Addr())
		if err != nil {
			return &config.SettingError{Setting: "advertise", Err: err}
		}
		r := &ConsulRegistration{ID: cr.ID, Address: cr.Address, Port: cr.Port, CheckURL: cr.CheckURL}
		r.CheckInterval, r.Tags = f.RegisterCheckInterval, f.RegisterTags
		if s.certs != nil {
			r.CheckURL = "https://" + strings.TrimPrefix(r.CheckURL, "http://")
			r.CheckTLSSkipVerify = true
			// The controller reads this gateway's demand over HTTPS.
			r.Tags = append(slices.Clone(r.Tags), gatewayapi.TLSTag)
		}
		s.reg = r
	}
	return nil
}

// offWhenZero is a duration setting whose 0 means off
// (engine_metrics_interval, prefix_opening_wait) as Options takes it:
// negative there, 0 is the default.
func offWhenZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Reload reads the key file and the TLS certificate again now, rather
// than at their next look (the command calls it on SIGHUP). It returns at
// once; either is read only while Run runs, and only if the settings name
// it.
func (s *Server) Reload() {
	for _, c := range []chan struct{}{s.keysReload, s.certReload} {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Run serves until ctx ends or Close is called, then stops gracefully:
// requests in flight get up to 10 seconds to finish, and the Consul
// registration is removed. It returns nil then, or the first error of a
// part that failed (the listener's, the gateway's), which ends the others.
// A Server runs once; Run after Close returns http.ErrServerClosed.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.closed || s.ran {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ran, s.stop, s.done = true, cancel, make(chan struct{})
	s.mu.Unlock()
	defer close(s.done)

	f, log, g, ln := s.set, s.log, s.g, s.ln
	scheme := "http://"
	if s.certs != nil {
		scheme = "https://"
	}
	log.Info("llmgw gateway", "api", scheme+ln.Addr().String(), "discovery", s.where, "models", s.modelsFrom, "keys", s.keysFrom)
	if f.KeysFile == "" && f.KeysVariable == "" && !loopback(ln.Addr()) {
		log.Warn("no API keys and not on loopback only: anyone who reaches "+ln.Addr().String()+" may use every model (set keys_file or keys_variable)", "listen", ln.Addr().String())
	}

	// Every part runs until ctx ends or the gateway's Run returns; the
	// first error (the listener's, the gateway's) ends them all and is
	// what Run returns.
	grp, ctx := errgroup.WithContext(ctx)
	grp.Go(func() error {
		var err error
		if s.fast != nil {
			err = s.fast.Serve(ln)
		} else {
			err = s.http.ServeTLS(ln, "", "")
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) && ctx.Err() == nil {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	grp.Go(func() error {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		if s.fast != nil {
			_ = s.fast.ShutdownWithContext(sctx)
		} else {
			_ = s.http.Shutdown(sctx)
		}
		return nil
	})
	if s.certs != nil {
		grp.Go(func() error { s.certs.run(ctx, certCheckInterval, s.certReload); return nil })
	}
	if f.ShareLimits {
		count := func(ctx context.Context) ([]string, error) { return gatewayclient.ConsulGateways(ctx, s.consul) }
		if s.consul == nil {
			ns := f.Namespace
			if ns == "" || ns == "*" {
				ns = nomadapi.DefaultNamespace
			}
			count = func(ctx context.Context) ([]string, error) { return gatewayclient.NomadGateways(ctx, s.nomad, ns) }
		}
		grp.Go(func() error { shareLimits(ctx, g, count, shareInterval, log); return nil })
	}
	if s.reg != nil {
		grp.Go(func() error {
			if err := s.reg.Register(ctx, s.consul, log); err != nil {
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

// Close stops Run as its context's end does and waits for it to return,
// then releases the listener and the clients Open made. Without Run it only
// releases them. It may be called more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	stop, done := s.stop, s.done
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	if !first {
		return nil
	}
	return s.release()
}

// release closes the listener (unless the http server has) and the Nomad
// clients.
func (s *Server) release() error {
	var err error
	if s.ln != nil {
		if e := s.ln.Close(); e != nil && !errors.Is(e, net.ErrClosed) {
			err = e
		}
	}
	for _, c := range s.clients {
		c.Close()
	}
	return err
}

// shareInterval is how often share_limits counts the gateways.
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

// keySource is where the API keys come from: keys_file (read once here,
// so a bad file stops Open with its file:line errors), or keys_variable
// in the Nomad discovered from (else models_nomad's); nil without either.
// It sets s.keysFrom, which says which, for the log.
func (s *Server) keySource() (KeySource, error) {
	f := s.set
	switch {
	case f.KeysFile != "":
		src, err := bounded.ReadFile(f.KeysFile)
		if err != nil {
			return nil, &config.SettingError{Setting: "keys_file", Err: err}
		}
		if _, err := ParseKeys(f.KeysFile, src); err != nil {
			return nil, err
		}
		s.keysFrom = "file " + f.KeysFile
		return &FileKeys{Path: f.KeysFile, Reload: s.keysReload}, nil
	case f.KeysVariable != "":
		c := s.nomad
		if c == nil { // with Consul: Check made sure of models_nomad
			var err error
			if c, err = s.modelsNomadClient(); err != nil {
				return nil, err
			}
		}
		ns := f.KeysNamespace
		if ns == "" {
			ns = f.Namespace
		}
		if ns == "" || ns == "*" {
			ns = nomadapi.DefaultNamespace
		}
		s.keysFrom = fmt.Sprintf("nomad %s variable %s (namespace %s)", c.Address(), f.KeysVariable, ns)
		return &NomadKeys{Client: c, Logger: s.log, Namespace: ns, Path: f.KeysVariable}, nil
	}
	s.keysFrom = "none: open to every client"
	return nil, nil
}

// modelSource is where the model list is read from: models_variable in
// the Nomad of models_nomad, else the one discovered from (none with
// Consul), in models_namespace, else the discovery namespace. It sets
// s.modelsFrom, which says which, for the log.
func (s *Server) modelSource() (ModelSource, error) {
	f := s.set
	if f.ModelsVariable == "" {
		s.modelsFrom = "none (models_variable is empty)"
		return nil, nil
	}
	c := s.nomad
	if f.ModelsNomad != "" {
		var err error
		if c, err = s.modelsNomadClient(); err != nil {
			return nil, err
		}
	}
	if c == nil {
		s.modelsFrom = "none (discovering from Consul, models_nomad names the Nomad to read it from)"
		return nil, nil
	}
	ns := f.ModelsNamespace
	if ns == "" && s.nomad != nil && f.ModelsNomad == "" {
		ns = f.Namespace
	}
	if ns == "" {
		ns = nomadapi.DefaultConfig().Namespace // NOMAD_NAMESPACE
	}
	if ns == "" || ns == "*" {
		ns = nomadapi.DefaultNamespace
	}
	s.modelsFrom = fmt.Sprintf("nomad %s variable %s (namespace %s)", c.Address(), f.ModelsVariable, ns)
	return &NomadModels{Client: c, Logger: s.log, Namespace: ns, Path: f.ModelsVariable}, nil
}

// modelsNomadClient is the client of the Nomad that models_nomad names,
// made once for the key and the model sources both.
func (s *Server) modelsNomadClient() (*nomadapi.Client, error) {
	if s.modelsNomad != nil {
		return s.modelsNomad, nil
	}
	cfg := nomadapi.DefaultConfig()
	cfg.Address = s.set.ModelsNomad
	c, err := nomadapi.NewClient(cfg)
	if err != nil {
		return nil, &config.SettingError{Setting: "models_nomad", Err: fmt.Errorf("nomad client %s: %w", s.set.ModelsNomad, err)}
	}
	s.clients = append(s.clients, c)
	s.modelsNomad = c
	return c, nil
}

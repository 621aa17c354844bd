package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/gateway/routing"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/blockingquery"
	"github.com/llmgw/llmgw/internal/httpjson"
)

// Defaults of Options.
const (
	DefaultMaxBody             = 4 << 20
	DefaultMaxJSONDepth        = 64
	DefaultBodyReadTimeout     = 30 * time.Second
	DefaultBodyMemory          = 256 << 20
	DefaultAttempts            = 3
	DefaultNoReplicaRetryAfter = 5 * time.Second
	DefaultDialTimeout         = 2 * time.Second
	DefaultHeaderTimeout       = 10 * time.Minute
	DefaultDemandWindow        = 30 * time.Second
)

// Defaults of BreakerConfig, NomadSource, ConsulSource and
// ConsulRegistration.
const (
	DefaultBreakerFailures       = 5
	DefaultBreakerOpen           = 5 * time.Second
	DefaultBreakerMaxOpen        = time.Minute
	DefaultCheckInterval         = 5 * time.Second
	DefaultCheckTimeout          = 2 * time.Second
	DefaultCheckParallelism      = 8
	DefaultConsulWait            = blockingquery.DefaultWait
	DefaultRegisterCheckInterval = 10 * time.Second
)

// Source is a discovery source: Run publishes a whole snapshot every time
// what it knows changes, until ctx ends. publish is not called
// concurrently and must not block for long.
type Source interface {
	Run(ctx context.Context, publish func(Snapshot)) error
}

// StaticSource publishes one fixed snapshot: for tests, benchmarks and
// fixed fleets.
type StaticSource Snapshot

// Run publishes the snapshot and waits for ctx.
func (s StaticSource) Run(ctx context.Context, publish func(Snapshot)) error {
	publish(Snapshot(s))
	<-ctx.Done()
	return nil
}

// Options configure a Gateway. Only Source is required.
type Options struct {
	Source Source
	// Models, when set, publishes the controller's model list: the models
	// known even with no replica registered, and which of them may be at
	// zero (their requests are held, see Hold).
	Models     ModelSource
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Upstream sends requests to replicas; NewUpstream's, with
	// DefaultDialTimeout and DefaultHeaderTimeout, by default.
	Upstream Upstream
	// Now is the clock the breakers read; time.Now by default.
	Now func() time.Time
	// MaxBody is the largest request body each OpenAI route takes whole
	// (413 past it); DefaultMaxBody for a route left at 0.
	MaxBody BodyLimits
	// MaxJSONDepth is the deepest nesting of objects and arrays a request
	// body may have (400 past it); DefaultMaxJSONDepth when 0.
	MaxJSONDepth int
	// BodyReadTimeout bounds reading a request's body, from the end of
	// its headers (408 past it); DefaultBodyReadTimeout when 0.
	BodyReadTimeout time.Duration
	// BodyMemory bounds the bytes all requests' bodies together hold;
	// past it requests are answered 503.
	BodyMemory int64
	// CORSOrigins are the origins (scheme://host[:port], or "*" for any)
	// whose web pages may use the gateway from a browser (cors.go); none
	// by default: a request carrying any other Origin is refused.
	CORSOrigins []string
	// Attempts is how many replicas one request may be tried on, the
	// first included; later ones only before the client got a byte.
	Attempts int
	Breaker  BreakerConfig
	// NoReplicaRetryAfter is the Retry-After sent with a 503 for a model
	// that has no healthy replica at all, and for a held request past its
	// deadline or the queue's bound.
	NoReplicaRetryAfter time.Duration
	// EngineMetricsInterval is how often Run reads each replica engine's
	// metrics, to weigh replicas by the load other gateways put on them
	// too (engineload.go); DefaultEngineMetricsInterval when 0, never
	// when negative.
	EngineMetricsInterval time.Duration
	// EngineClient reads them; a direct client (no proxy) by default.
	EngineClient *http.Client
	// Hold is how requests for a model at zero wait for a replica; its
	// zero value holds none.
	Hold HoldConfig
	// DemandWindow is the span the demand's arrival rate and TTFT p90 are
	// over; DefaultDemandWindow when 0.
	DemandWindow time.Duration
	// Keys, when set, publishes the API keys: every OpenAI route then
	// needs one (auth.go). Without it the gateway is open to anyone who
	// reaches it.
	Keys KeySource
	// Routing is the routing policy of the models it names (RoutePrefix,
	// RouteLeastOutstanding), over the model list's (ListedModel.Routing);
	// the others are least-outstanding. gateway/config.CheckRouting checks it.
	Routing map[string]string
	// PrefixLoadFactor bounds the load of the prefix policy's replicas: one
	// whose requests in flight, with the next, would pass this factor
	// times its weight's share of them all is passed over for the next in
	// the key's order. DefaultPrefixLoadFactor when 0; below 1 it is 1.
	PrefixLoadFactor float64
	// PrefixHistoryLoadFactor is the load factor of a request that
	// continues a conversation (a message follows its first user turn):
	// passed over, it costs the next replica the conversation's history
	// to compute again, where a new conversation moves for the price of
	// its first turn. DefaultPrefixHistoryLoadFactor when 0; below
	// PrefixLoadFactor it is PrefixLoadFactor.
	PrefixHistoryLoadFactor float64
	// PrefixOpeningLimit is how many requests a replica may hold (this
	// gateway's in flight plus the others' its engine last reported)
	// before a prefix-routed chat that opens a conversation (its messages
	// end with the first user turn) waits at the gateway for it to have
	// fewer, so that a busy replica finishes its conversations before it
	// takes on new ones (routing.Prefix). When 0, one more than the engine's
	// slots, known once a read of its metrics found requests waiting
	// behind full slots; until then none waits.
	PrefixOpeningLimit int
	// PrefixOpeningWait is the longest such a request waits; then it is
	// sent anyway. DefaultPrefixOpeningWait when 0; none waits when
	// negative.
	PrefixOpeningWait time.Duration
}

// Gateway is the OpenAI-compatible router over discovered replicas.
type Gateway struct {
	src         Source
	log         *slog.Logger
	m           *metrics
	upstream    Upstream
	now         func() time.Time
	maxDepth    int
	bodyTimeout time.Duration
	cors        corsPolicy
	attempts    int
	brCfg       BreakerConfig
	noReplica   time.Duration
	hold        HoldConfig
	span        time.Duration // the demand window
	bud         budget
	started     time.Time
	models      ModelSource
	heldAll     atomic.Int64 // requests held, all models
	auth        *auth        // nil: no keys, open
	routing     map[string]string
	loadFactor  float64
	// historyFactor bounds a request that continues a conversation.
	historyFactor float64
	// openingMax and openingWait: Options.PrefixOpeningLimit and
	// PrefixOpeningWait; openingWait 0: no request waits.
	openingMax  int64
	openingWait time.Duration

	updMu      sync.Mutex
	snap       Snapshot             // the last one discovery published
	list       gatewayapi.ModelList // the last model list
	listErr    string               // why the model list could not be read last, if it could not
	listSynced bool                 // the model source answered or failed at least once
	discovered bool                 // discovery published at least once

	engineEvery  time.Duration // 0: engines are not read
	engineClient *http.Client

	tbl    atomic.Pointer[table]
	synced atomic.Bool
	mux    *http.ServeMux
	openAI map[string]bool // the OpenAI routes' paths
}

// New returns a gateway. It routes nothing until its source has published
// (Run, or Update directly).
func New(o Options) *Gateway {
	g := &Gateway{
		src:           o.Source,
		log:           o.Logger,
		m:             newMetrics(o.Registerer),
		upstream:      o.Upstream,
		now:           o.Now,
		maxDepth:      o.MaxJSONDepth,
		bodyTimeout:   o.BodyReadTimeout,
		cors:          newCORSPolicy(o.CORSOrigins),
		attempts:      o.Attempts,
		brCfg:         o.Breaker.withDefaults(),
		noReplica:     o.NoReplicaRetryAfter,
		hold:          o.Hold.withDefaults(),
		span:          o.DemandWindow,
		models:        o.Models,
		routing:       o.Routing,
		loadFactor:    o.PrefixLoadFactor,
		historyFactor: o.PrefixHistoryLoadFactor,
		openingMax:    int64(max(o.PrefixOpeningLimit, 0)),
		openingWait:   o.PrefixOpeningWait,
	}
	if g.openingWait == 0 {
		g.openingWait = DefaultPrefixOpeningWait
	}
	g.openingWait = max(g.openingWait, 0)
	switch {
	case g.loadFactor == 0:
		g.loadFactor = DefaultPrefixLoadFactor
	case g.loadFactor < 1:
		g.loadFactor = 1
	}
	if g.historyFactor == 0 {
		g.historyFactor = DefaultPrefixHistoryLoadFactor
	}
	g.historyFactor = max(g.historyFactor, g.loadFactor)
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.upstream == nil {
		g.upstream = NewUpstream(DefaultDialTimeout, DefaultHeaderTimeout)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.maxDepth <= 0 {
		g.maxDepth = DefaultMaxJSONDepth
	}
	if g.bodyTimeout <= 0 {
		g.bodyTimeout = DefaultBodyReadTimeout
	}
	g.bud.limit = o.BodyMemory
	if g.bud.limit <= 0 {
		g.bud.limit = DefaultBodyMemory
	}
	if g.attempts <= 0 {
		g.attempts = DefaultAttempts
	}
	if g.noReplica <= 0 {
		g.noReplica = DefaultNoReplicaRetryAfter
	}
	switch {
	case o.EngineMetricsInterval == 0:
		g.engineEvery = DefaultEngineMetricsInterval
	case o.EngineMetricsInterval > 0:
		g.engineEvery = o.EngineMetricsInterval
	}
	g.engineClient = o.EngineClient
	if g.engineClient == nil {
		g.engineClient = defaultEngineClient()
	}
	if g.span <= 0 {
		g.span = DefaultDemandWindow
	}
	g.started = g.now()
	if o.Keys != nil {
		g.auth = &auth{src: o.Keys, log: g.log, now: g.now, m: newAuthMetrics(o.Registerer), share: 1}
	}
	g.tbl.Store(emptyTable())
	if o.Registerer != nil {
		o.Registerer.MustRegister(demandCollector{g})
	}
	mux := http.NewServeMux()
	g.openAI = map[string]bool{}
	for _, rt := range o.MaxBody.routes() {
		g.openAI[rt.path] = true
		mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) { g.proxy(w, r, rt) })
	}
	mux.HandleFunc("/v1/models", g.modelsList)
	mux.HandleFunc(gatewayapi.DemandPath, g.demand)
	mux.HandleFunc("/healthz", g.health)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found", "", "Unknown request URL: "+r.Method+" "+r.URL.Path)
	})
	g.mux = mux
	return g
}

// Handler serves the OpenAI routes, /v1/models, the demand (gatewayapi.DemandPath)
// and /healthz. With keys (Options.Keys) the OpenAI routes and /v1/models
// need one; the demand and /healthz do not. Its CORS policy
// (Options.CORSOrigins) covers them all.
func (g *Gateway) Handler() http.Handler { return g.cors.wrap(g.mux) }

// BodyLimits are the largest request bodies, in bytes, the OpenAI routes
// take; 0: DefaultMaxBody.
type BodyLimits struct {
	ChatCompletions, Completions, Embeddings int64
}

// routes are the OpenAI routes with their limits.
func (l BodyLimits) routes() []*route {
	or := func(v int64) int64 {
		if v <= 0 {
			return DefaultMaxBody
		}
		return v
	}
	return []*route{
		{path: "/v1/chat/completions", maxBody: or(l.ChatCompletions), setting: "max_body_chat_completions"},
		{path: "/v1/completions", maxBody: or(l.Completions), setting: "max_body_completions"},
		{path: "/v1/embeddings", maxBody: or(l.Embeddings), setting: "max_body_embeddings"},
	}
}

// Run runs the discovery source, the model source if any, and reads the
// replicas' engine metrics, until ctx ends.
func (g *Gateway) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if g.engineEvery > 0 {
		wg.Go(func() { g.pollEngines(ctx) })
	}
	var modelsErr, keysErr error
	if g.models != nil {
		wg.Go(func() { modelsErr = g.models.Run(ctx, g.UpdateModels) })
	}
	if g.auth != nil {
		wg.Go(func() { keysErr = g.auth.src.Run(ctx, g.UpdateKeys) })
	}
	var err error
	if g.src == nil {
		<-ctx.Done()
	} else {
		err = g.src.Run(ctx, g.Update)
	}
	cancel()
	wg.Wait()
	return errors.Join(err, modelsErr, keysErr)
}

// Synced reports whether discovery has published at least once and the
// model source, if any, has answered or failed once.
func (g *Gateway) Synced() bool { return g.synced.Load() }

// Update replaces what the gateway routes to. Endpoints that stay keep
// their breakers and in-flight counts.
func (g *Gateway) Update(s Snapshot) {
	g.updMu.Lock()
	defer g.updMu.Unlock()
	g.snap = s
	g.rebuildLocked(true)
}

// UpdateModels replaces the model list (err nil), or records why it could
// not be read (err set: the last list stands).
func (g *Gateway) UpdateModels(l gatewayapi.ModelList, err error) {
	if err == nil {
		if err = l.Check(); err != nil {
			err = fmt.Errorf("model list: %w", err)
			g.log.Warn("model list refused", "error", err)
		}
	}
	g.updMu.Lock()
	defer g.updMu.Unlock()
	g.listSynced = true
	if err != nil {
		g.listErr = err.Error()
		g.rebuildLocked(false)
		return
	}
	g.listErr = ""
	g.list = l
	g.rebuildLocked(false)
}

// rebuildLocked builds the table from the last snapshot and model list;
// discovered says discovery has published.
func (g *Gateway) rebuildLocked(discovered bool) {
	old := g.tbl.Load()
	t, gone := buildTable(old, g.snap, g.list, g.newModel, g.newEndpoint, g.policyOf)
	adapterTables(t, old, g.list, adapterPerReplica, adapterLoadFactor, g.now)
	g.tbl.Store(t)
	if discovered {
		g.discovered = true
	}
	synced := g.discovered && (g.models == nil || g.listSynced)
	if synced && !g.synced.Load() && g.auth != nil {
		// Keys read before the catalog was: their allowlists are checked
		// against it now.
		defer func() { g.auth.warnUnknown(g.tbl.Load()) }()
	}
	g.synced.Store(synced)
	for m, ms := range old.models {
		if t.models[m] == nil {
			if n := ms.q.gone(); n > 0 {
				g.heldAll.Add(-int64(n))
				g.log.Info("held requests answered 404: their model left the catalog", "model", m, "requests", n)
			}
		}
	}
	for _, ms := range t.models {
		g.drainModel(ms)
	}
	for _, ep := range gone {
		if _, still := t.byID[ep.inst.ID]; !still {
			g.log.Info("replica gone", "model", ep.inst.Model, "replica", ep.inst.Replica, "endpoint", ep.inst.Address)
		}
		ep.gone.Store(true)
		ep.Wake() // a request waiting for it chooses again
		g.m.breaker.Delete(breakerLabels(ep.inst))
		g.m.engineLoad.Delete(breakerLabels(ep.inst))
		g.m.promptTokens.Delete(breakerLabels(ep.inst))
		g.m.cachedTokens.Delete(breakerLabels(ep.inst))
		g.m.cacheUnknown.Delete(breakerLabels(ep.inst))
	}
	// After the deletions: a new registration may have the labels of one
	// that went.
	for id, ep := range t.byID {
		if old.byID[id] == nil || old.byID[id].epState != ep.epState {
			g.log.Info("replica added", "model", ep.inst.Model, "replica", ep.inst.Replica, "endpoint", ep.inst.Address, "weight", ep.inst.Weight)
		}
		g.m.breaker.With(breakerLabels(ep.inst)).Set(float64(ep.br.State()))
	}
	for m := range old.models {
		if t.models[m] == nil {
			g.m.endpoints.DeleteLabelValues(m)
			g.m.holdSeconds.DeleteLabelValues(m)
			g.m.held.DeletePartialMatch(prometheus.Labels{"model": m})
		}
	}
	for m := range t.models {
		n := 0
		if p := t.pools[m]; p != nil {
			n = len(p.eps)
		}
		g.m.endpoints.WithLabelValues(m).Set(float64(n))
	}
}

func (g *Gateway) newModel(name string) *modelState { return newModelState(name, g.span) }

func (g *Gateway) newEndpoint(in Instance) *endpoint {
	st := &epState{}
	ep := &endpoint{inst: in, base: "http://" + in.Address, epState: st}
	labels := breakerLabels(in)
	st.br = newBreaker(g.brCfg, func(s BreakerState) {
		g.m.transitions.WithLabelValues(in.Model, s.String()).Inc()
		if st.gone.Load() {
			return
		}
		g.m.breaker.With(labels).Set(float64(s))
		g.log.Info("breaker "+s.String(), "model", in.Model, "replica", in.Replica, "endpoint", in.Address)
	})
	st.State = routing.NewState(in.Address, st.br)
	return ep
}

// state is a known model's state in t.
func (t *table) state(model string) string {
	if t.pools[model] != nil {
		return gatewayapi.StateServing
	}
	lm, ok := t.listed[model]
	switch {
	case !ok || !lm.Holdable():
		return gatewayapi.StateUnavailable
	case lm.Replicas == 0:
		return gatewayapi.StateScaledToZero
	}
	return gatewayapi.StateWaking
}

// modelCard is one model of /v1/models: OpenAI's model object, with the
// replicas serving it and llmgw's state of it.
type modelCard struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Created  int64  `json:"created"`
	OwnedBy  string `json:"owned_by"`
	Replicas int    `json:"replicas"`
	// Parent is a LoRA adapter's base model (vLLM's field); empty for a
	// model.
	Parent string `json:"parent,omitempty"`
	Llmgw  struct {
		State string `json:"state"`
	} `json:"llmgw"`
}

// modelsList answers /v1/models: every model with at least one healthy
// replica, and those that may be at zero (scaled to zero, or waking).
func (g *Gateway) modelsList(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, http.MethodGet)
		return
	}
	var key *Key
	if g.auth != nil {
		if key = g.authenticate(w, r); key == nil {
			return
		}
	}
	t := g.tbl.Load()
	list := struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{Object: "list", Data: []modelCard{}}
	for _, m := range slices.Sorted(maps.Keys(t.models)) {
		st := t.state(m)
		if st == gatewayapi.StateUnavailable {
			continue
		}
		c := modelCard{ID: m, Object: "model", Created: g.started.Unix(), OwnedBy: "llmgw"}
		if p := t.pools[m]; p != nil {
			c.Replicas = len(p.eps)
		}
		c.Llmgw.State = st
		if key == nil || key.Allows(m) {
			list.Data = append(list.Data, c)
		}
		// Its adapters, each as a model of its own whose parent it is
		// (a request names one by its id, or as parent:id), each as the
		// key allows it (adapterRef.allowedBy).
		for _, a := range t.listed[m].Adapters {
			if key != nil && !(&adapterRef{base: m, ad: a}).allowedBy(key, a.Name) {
				continue
			}
			ac := c
			ac.ID, ac.Parent = a.Name, m
			list.Data = append(list.Data, ac)
		}
	}
	httpjson.Write(w, http.StatusOK, list)
}

// health answers /healthz: 200 once discovery has published, 503 before.
func (g *Gateway) health(w http.ResponseWriter, _ *http.Request) {
	if !g.synced.Load() {
		http.Error(w, "discovery not synced", http.StatusServiceUnavailable)
		return
	}
	if g.auth != nil && g.auth.keys.Load() == nil {
		http.Error(w, "API keys not read yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

func methodNotAllowed(w http.ResponseWriter, allow ...string) {
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "", "Method not allowed")
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/bounded"
)

// Options wire a controller.
type Options struct {
	Config config.Config
	// Nomad is the client to use; nil builds one from Config.Nomad.
	Nomad  *api.Client
	Logger *slog.Logger
	// Identity names this controller in the leader lock and in holds it
	// sets; default hostname:pid.
	Identity string
	// PowerInterval is how often GPU nodes' power is read (client stats
	// cannot be watched); default Config.PowerInterval, else 30s.
	PowerInterval time.Duration
	// LockTTL is the leader lock's TTL; default 15s, at least 10s (Nomad's
	// minimum). A standby takes over within about twice the TTL plus the
	// lock delay after the leader dies.
	LockTTL time.Duration
	// Now is the controller's clock; default time.Now. It governs the
	// time a pass plans at (lost_after and the moment a down node's
	// shards pass it, partial_deadline, pins' expiry, the autoscaler's
	// windows and cooldowns, the signal rounds and the history) and the
	// times the API shows (the view's, decisions', holds' and pins' set
	// times, loaded_at). Tests set it to move that time by hand.
	//
	// The wall clock (time.Now) governs what runs against the world
	// outside, and stays on it whatever Now says: the leader lease
	// (Nomad's lock TTL runs in real time), deadlines on calls to Nomad,
	// the gateways, the engines and Prometheus, the wait for the job list
	// (behindLimit), tickers and debounces, the health checks' schedule,
	// the age of engine readings (stamped by the wall clock when scraped),
	// and measured durations (metrics, logs).
	Now func() time.Time
	// EngineMetricsInterval is how often the serving replicas' engines'
	// metrics are read (engines.go); default 10s.
	EngineMetricsInterval time.Duration
	// EngineClient reads them; nil: a direct client (no proxy).
	EngineClient *http.Client
	// Gateways lists the gateways whose demand the autoscaler reads
	// (signals.go); nil: autoscale.gateways, else the llmgw-gateway
	// services of the service provider's catalog.
	Gateways GatewayFinder
	// ReadDemand reads one gateway's demand; nil: gatewayclient.DemandClient.
	ReadDemand DemandReader
}

// Controller is one llmgw controller process.
type Controller struct {
	opts  Options
	cfg   config.Config
	nomad *api.Client
	log   *slog.Logger
	store *store.Store
	now   func() time.Time
	wo    *api.WriteOptions
	qo    *api.QueryOptions

	consul *consulapi.Client // nil unless service_provider is consul

	trigger     chan struct{}
	viewTrigger chan struct{}
	metrics     *metrics
	// wakeAt is when the next pass must run even if nothing changes: the
	// moment, by Options.Now, a down node's shards pass lost_after; nil
	// or zero: none. Written by passes (setWake), read by reconcileLoop.
	wakeAt atomic.Pointer[time.Time]
	wake   chan struct{}

	// The parts, each with its own lock guarding only its own fields.
	files   *filesInForce   // the catalog and facility files in force (files.go)
	obs     *observer       // the snapshot of Nomad and its watches (observer.go)
	lead    *leader         // the leader lock, its lease, the fence on writes (leader.go)
	writes  *writer         // check-and-set job writes and what the next pass waits for (writer.go)
	scale   *scaleState     // the autoscaler's scalers, signals, history, last changes (scalestate.go)
	engines *engineReadings // the last engine scrapes (engines.go)
	views   *viewState      // the read API's view and the write generations (view.go)
	power   *powerState     // learned draw, GPU power caps and their events (power.go)

	// passMu makes passes (and a standby's view refreshes, and plans) one
	// at a time, and guards what only they touch: inputGen, saved and
	// savedModels.
	passMu sync.Mutex
	// planMu lets one POST /v1/plan in at a time (TryLock: another is
	// answered 429), so that plans cannot add up in memory.
	planMu sync.Mutex
	// inputGen is the write generation the last input read before the
	// snapshot; the view built from that input carries it.
	inputGen uint64
	// saved is each replica's last saved decision, to write only changes.
	saved map[string]string
	// savedModels is the model list last written (its item), to write
	// only changes.
	savedModels string
	// planners keeps, from pass to pass, the planner's index of the
	// fleet's layout (reconcile.Input.Planners): a pass after a change of
	// a few nodes or jobs does not sort and hash the whole fleet again.
	// Used under passMu only.
	planners facility.PlannerCache
}

// New builds a controller and loads its catalog and facility files; a bad
// file is an error here (at start there is nothing older to keep).
func New(opts Options) (*Controller, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.EngineMetricsInterval <= 0 {
		opts.EngineMetricsInterval = defaultEngineMetricsInterval
	}
	if opts.PowerInterval <= 0 {
		opts.PowerInterval = opts.Config.PowerInterval
	}
	if opts.PowerInterval <= 0 {
		opts.PowerInterval = config.DefaultPowerInterval
	}
	if opts.LockTTL <= 0 {
		opts.LockTTL = 15 * time.Second
	}
	if opts.LockTTL < 10*time.Second {
		return nil, fmt.Errorf("leader lock TTL %s: Nomad requires at least 10s", opts.LockTTL)
	}
	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if opts.Config.InsecureWrites && opts.Config.APIToken != "" {
		return nil, errors.New("insecure_writes and api_token: choose one (with api_token, writes need the token)")
	}
	client := opts.Nomad
	if client == nil {
		var err error
		client, err = api.NewClient(opts.Config.Nomad.APIConfig())
		if err != nil {
			return nil, fmt.Errorf("nomad client: %w", err)
		}
	}
	ns := opts.Config.Nomad.Namespace
	c := &Controller{
		opts: opts, cfg: opts.Config, nomad: client, log: opts.Logger, now: opts.Now,
		store:       store.New(client.Variables(), ns),
		wo:          &api.WriteOptions{Namespace: ns, Region: opts.Config.Nomad.Region},
		qo:          &api.QueryOptions{Namespace: ns, Region: opts.Config.Nomad.Region},
		trigger:     make(chan struct{}, 1),
		viewTrigger: make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
		files:       &filesInForce{},
		views:       &viewState{changed: make(chan struct{})},
		metrics:     newMetrics(),
		saved:       map[string]string{},
		scale:       newScaleState(),
		engines:     &engineReadings{},
	}
	switch {
	case opts.Config.InsecureWrites:
		c.log.Warn("INSECURE: insecure_writes is on: the API takes writes (holds, labels, reloads, plans, pins) without a token "+
			"from any process on this host; for development on loopback only, never in production", "listen", opts.Config.Listen)
	case opts.Config.APIToken == "":
		c.log.Warn("api_token is not set: the API refuses every write (holds, labels, reloads, plans, pins), and its reads are open "+
			"to whoever reaches it; set api_token", "listen", opts.Config.Listen)
	}
	c.obs = newObserver()
	c.obs.nomad, c.obs.log, c.obs.region, c.obs.namespace = client, c.log, opts.Config.Nomad.Region, ns
	c.obs.namespaces, c.obs.serviceProvider = opts.Config.Nomad.Namespaces, opts.Config.ServiceProvider
	c.obs.eventStream = opts.Config.Nomad.EventStream
	c.obs.checkInterval, c.obs.powerInterval = opts.Config.Driver.CheckInterval, opts.PowerInterval
	c.obs.kick, c.obs.forgetExpect = c.kick, func() { c.writes.forgetExpect() }
	c.obs.metrics = c.metrics
	if ps := opts.Config.PowerSource; ps != nil && ps.Prometheus != nil {
		pp, err := newPromPower(*ps.Prometheus)
		if err != nil {
			return nil, err
		}
		c.obs.promPower = pp
	}
	c.lead = &leader{nomad: client, wo: c.wo, log: c.log, metrics: c.metrics, identity: opts.Identity, ttl: opts.LockTTL}
	c.power = newPowerState(powerDeps{store: c.store, lead: c.lead, log: c.log, metrics: c.metrics,
		baseWatts: opts.Config.NodeBaseWatts, hold: opts.Config.PowerCapHold, interval: opts.PowerInterval,
		wrote: c.obs.capsWrittenTo})
	c.obs.afterPower = func(ctx context.Context) {
		// The power part's round, on the poll's readings and the files in
		// force.
		cat, fac := c.files.get()
		c.power.round(ctx, c.obs.snapshot(), cat, fac, c.now())
	}
	c.writes = &writer{nomad: client, wo: c.wo, qo: c.qo, log: c.log, metrics: c.metrics, lead: c.lead,
		settings: opts.Config.RenderSettings(), unsure: map[string]bool{}}
	if opts.Config.ServiceProvider == render.ProviderConsul {
		cc := consulapi.DefaultNonPooledConfig()
		cc.Address = config.DefaultConsulAddress
		if k := opts.Config.Consul; k != nil {
			if k.Address != "" {
				cc.Address = k.Address
			}
			cc.Token = k.Token
		}
		var err error
		if c.consul, err = consulapi.NewClient(cc); err != nil {
			return nil, fmt.Errorf("consul client: %w", err)
		}
		c.obs.consul = c.consul
	}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the catalog and facility files again. A bad file is refused
// with its error and the files in force stay; the error stays visible in
// the API (/v1/catalog) and the metrics until a good reload. So is a
// reload whose files would stop more than reconcile.max_stop_fraction of
// the running replicas (ErrTooManyStops), unless ReloadConfirmed.
func (c *Controller) Reload() error { return c.reload(false) }

// ReloadConfirmed is Reload with the operator's say-so for a reload that
// stops more than max_stop_fraction of the running replicas.
func (c *Controller) ReloadConfirmed() error { return c.reload(true) }

// ErrTooManyStops is a reload, or a pass of files never confirmed, that
// would stop more than reconcile.max_stop_fraction of the running
// replicas because the catalog no longer has them.
var ErrTooManyStops = errors.New("too many stops")

func (c *Controller) reload(confirm bool) error {
	cat, fac, err := loadFiles(c.cfg)
	if err == nil && !confirm {
		err = c.checkStops(cat, fac)
	}
	if err != nil {
		c.files.refuse(err)
		c.metrics.reloadFailed.Set(1)
		return err
	}
	c.files.put(cat, fac, confirm, c.now())
	for _, w := range cat.Warnings() {
		c.log.Warn("catalog", "warning", w)
	}
	c.metrics.reloadFailed.Set(0)
	c.kick()
	return nil
}

// checkStops plans a pass with the new files on what Nomad holds now and
// refuses them if the catalog's stops go past the threshold. Before every
// list has been read it lets them through: the pass guard (guardStops)
// holds such stops back then.
func (c *Controller) checkStops(cat facility.Catalog, fac facility.Facility) error {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	in, _, _, _, err := c.inputFor(cat, fac, true)
	if err != nil {
		return nil
	}
	res, err := reconcile.Plan(in)
	if err != nil {
		return nil // the pass will say it
	}
	return c.tooManyStops(in, res.Actions, c.cfg.Catalog)
}

// tooManyStops counts the stops the catalog (its file's name: catalog)
// causes against the running replicas (the slots with a job).
func (c *Controller) tooManyStops(in reconcile.Input, acts []reconcile.Action, catalog string) error {
	slots := map[string]bool{}
	for _, j := range in.Jobs {
		slots[j.Replica] = true
	}
	stopped := map[string]bool{}
	for _, a := range acts {
		if a.Kind == reconcile.Stop && a.Catalog {
			stopped[a.Replica] = true
		}
	}
	frac := c.cfg.Reconcile.MaxStopFraction
	if frac <= 0 {
		frac = config.DefaultMaxStopFraction
	}
	if len(stopped) == 0 || frac >= 1 || float64(len(stopped)) <= frac*float64(len(slots)) {
		return nil
	}
	return fmt.Errorf("%w: the catalog %s would stop %d of the %d running replicas, more than reconcile.max_stop_fraction %g: refused, the catalog in force stays; "+
		"confirm with `llmgw ctl reload --confirm` (POST /v1/reload {\"confirm\": true})", ErrTooManyStops, catalog, len(stopped), len(slots), frac)
}

func loadFiles(cfg config.Config) (facility.Catalog, facility.Facility, error) {
	catSrc, err := bounded.ReadFile(cfg.Catalog)
	if err != nil {
		return facility.Catalog{}, facility.Facility{}, fmt.Errorf("catalog: %w", err)
	}
	cat, err := facility.ParseCatalog(cfg.Catalog, catSrc)
	if err != nil {
		return facility.Catalog{}, facility.Facility{}, err
	}
	var fac facility.Facility
	if cfg.Facility != "" {
		facSrc, err := bounded.ReadFile(cfg.Facility)
		if err != nil {
			return facility.Catalog{}, facility.Facility{}, fmt.Errorf("facility: %w", err)
		}
		if fac, err = facility.ParseFacility(cfg.Facility, facSrc); err != nil {
			return facility.Catalog{}, facility.Facility{}, err
		}
	}
	return cat, fac, nil
}

// kick asks for a reconcile pass soon (and, on a standby, for a fresh
// view).
func (c *Controller) kick() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
	select {
	case c.viewTrigger <- struct{}{}:
	default:
	}
}

// Run observes Nomad and, while it leads, reconciles, until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	run(c.obs.observeLists)
	run(c.obs.pollPower)
	run(c.obs.watchHealth)
	run(c.watchEngineMetrics)
	run(c.watchSignals)
	run(func(ctx context.Context) { c.lead.run(ctx, c.reconcileLoop) })
	run(c.viewLoop)
	wg.Wait()
	return nil
}

// reconcileLoop runs a pass on every change (debounced) and at least every
// reconcile interval. One pass at a time: budgets are shared.
func (c *Controller) reconcileLoop(ctx context.Context) {
	interval := c.cfg.Reconcile.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		var wakeAt time.Time
		if p := c.wakeAt.Load(); p != nil {
			wakeAt = *p
		}
		var wake <-chan time.Time
		var timer *time.Timer
		if !wakeAt.IsZero() {
			// wakeAt is by the controller's clock (Options.Now), as the
			// pass that set it planned: wait what is left of it by the
			// same clock.
			timer = time.NewTimer(max(wakeAt.Sub(c.now()), 0))
			wake = timer.C
		}
		rearm := false
		select {
		case <-ctx.Done():
		case <-wake:
		case <-c.wake:
			rearm = true
		case <-c.trigger:
			// Let a burst of changes settle into one pass.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		case <-tick.C:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if rearm {
			continue // the wake moment changed: wait for the new one
		}
		err := c.pass(ctx, true)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, ErrNotSynced) || errors.Is(err, ErrBehind):
			// The watch that is behind kicks again when it catches up.
			c.log.Debug("reconcile pass deferred", "reason", err)
		default:
			c.log.Error("reconcile pass", "error", err)
		}
	}
}

// viewLoop keeps the read API's view current while this controller stands
// by (while it leads, every pass does): a standby serves the read API.
func (c *Controller) viewLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.viewTrigger:
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		if c.lead.isLeading() {
			continue
		}
		if err := c.refreshView(); err != nil && !errors.Is(err, ErrNotSynced) {
			c.log.Warn("refresh view", "error", err)
		}
	}
}

// refreshView plans a pass, without acting on it, for the view alone.
func (c *Controller) refreshView() error {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	in, _, _, info, err := c.input()
	if err != nil {
		return err
	}
	res, err := reconcile.Plan(in)
	if err != nil {
		return err
	}
	c.updateView(in, res, info)
	return nil
}

// ErrNotSynced is returned by Pass before every observer has loaded
// Nomad's state once: nothing is placed before everything is adopted.
var ErrNotSynced = errors.New("not every Nomad list has been read yet")

// ErrBehind is returned by Pass while the job list has not caught up with
// this controller's own last job writes. Acting on a list that misses a
// job it registered would count that job's draw nowhere, and could place
// another replica into the budget the job already uses.
var ErrBehind = errors.New("the job list has not caught up with this controller's writes yet")

// Pass runs one reconcile pass now, whether or not this controller leads:
// for tests and tools that drive a controller by hand. The leader's own
// passes (reconcileLoop) are fenced by its lease.
func (c *Controller) Pass(ctx context.Context) error { return c.pass(ctx, false) }

func (c *Controller) pass(ctx context.Context, fenced bool) error {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	start := time.Now()
	defer func() { c.metrics.reconcileSeconds.Observe(time.Since(start).Seconds()) }()
	if err := c.writes.resolveUnsure(ctx); err != nil {
		return err
	}
	if c.writes.behind(c.obs.snapshot().jobsIndex) {
		return ErrBehind
	}
	in, orphans, nodeInfo, info, err := c.input()
	if err != nil {
		return err
	}
	res, err := reconcile.Plan(in)
	if err != nil {
		return err
	}
	res.Actions = c.guardStops(in, res.Actions)
	if res.DeferredStops > 0 {
		c.metrics.deferredStops.Add(float64(res.DeferredStops))
		c.log.Info("stops left for the next pass by reconcile.max_stops", "deferred", res.DeferredStops, "max_stops", in.MaxStops)
	}
	c.updateView(in, res, info)
	var errs []error
	if in.MaxStops > 0 {
		// Orphans' stops count against max_stops too, after the plan's.
		left := in.MaxStops
		for _, a := range res.Actions {
			if a.Kind == reconcile.Stop {
				left--
			}
		}
		if n := len(orphans) - max(left, 0); n > 0 {
			c.metrics.deferredStops.Add(float64(n))
			orphans = orphans[:max(left, 0)]
		}
	}
	for _, o := range orphans {
		c.log.Warn("stopping job with unreadable llmgw meta", "job", o.JobID, "error", o.Err)
		if err := c.writes.stopJob(ctx, fenced, o.JobID, o.ModifyIndex); err != nil && !errors.Is(err, errConflict) {
			errs = append(errs, err)
		}
	}
	conflict := false
	created := map[string]bool{}
	done := map[string]bool{} // slots whose action was carried out
	for _, a := range res.Actions {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if conflict && a.Kind != reconcile.Stop {
			// The plan counted a job where Nomad has another version of
			// it: the rest of its placements may be over a budget. The next
			// pass plans again from what Nomad holds.
			c.log.Info("placement deferred to the next pass after a conflict", "action", a.String())
			continue
		}
		if a.Kind == reconcile.Stop && a.Yields != "" && !created[a.Yields] {
			// It makes room for a higher priority's new copy, which was
			// not registered: it keeps serving.
			c.log.Info("stop skipped: the create it makes room for was not done", "action", a.String(), "for", a.Yields)
			continue
		}
		err := c.writes.execute(ctx, fenced, a, nodeInfo)
		if errors.Is(err, ErrNotLeading) {
			return err
		}
		if errors.Is(err, errConflict) {
			conflict = true
			continue
		}
		if err != nil {
			c.metrics.actionErrors.WithLabelValues(a.Kind.String()).Inc()
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			continue
		}
		c.metrics.actions.WithLabelValues(a.Kind.String()).Inc()
		done[a.Replica] = true
		if a.Kind == reconcile.Create {
			created[a.Replica] = true
		}
	}
	if err := c.keepSpares(ctx, fenced, in, res.Spares); err != nil {
		if errors.Is(err, ErrNotLeading) {
			return err
		}
		errs = append(errs, err)
	}
	c.scaleEvents(res, info, done, in.Now)
	if info.expired {
		c.dropExpiredPins(in.Now)
	}
	// The pass's records (decisions, the gateways' model list) are the
	// leader's too: written inside its lease, and dropped when it ends.
	rctx, cancel, err := c.lead.writeContext(ctx, fenced)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer cancel()
	c.saveDecisions(rctx, res)
	c.pruneDecisions(rctx, in.Catalog)
	c.saveModels(rctx, in.Catalog, res.Scale)
	return errors.Join(errs...)
}

// saveModels writes the catalog's model list for the gateways
// (gatewayapi.ModelsVariable) when it differs from the last one written: the
// models a gateway knows with no replica registered, and which may be at
// zero (their requests are held).
func (c *Controller) saveModels(ctx context.Context, cat facility.Catalog, scale map[string]reconcile.Scale) {
	if ctx.Err() != nil {
		return
	}
	items, err := modelList(cat, scale).Items()
	if err != nil {
		c.log.Warn("model list for the gateways", "error", err)
		return
	}
	if c.savedModels == items[gatewayapi.ModelsItem] {
		return
	}
	if err := c.store.SaveModels(ctx, items); err != nil {
		c.log.Warn("save the model list for the gateways", "error", err)
		return
	}
	c.savedModels = items[gatewayapi.ModelsItem]
}

// modelList is the catalog as the gateways read it: each model with the
// fewest replicas it may have (a fixed model's replicas, an autoscaled
// one's min) and the count it has now (a fixed model's replicas, an
// autoscaled one's slots after the pass, scale's Has; its min when the
// pass planned none).
func modelList(cat facility.Catalog, scale map[string]reconcile.Scale) gatewayapi.ModelList {
	l := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{}}
	for _, m := range cat.Models {
		lm := gatewayapi.ListedModel{Name: m.Name, Min: m.Floor(), Replicas: m.Replicas, Routing: m.Routing, MaxAdapters: m.MaxAdapters}
		for _, a := range m.Adapters {
			lm.Adapters = append(lm.Adapters, gatewayapi.ListedAdapter{Name: a.Name, Path: a.EnginePath(), Scale: a.Scale})
		}
		if s, ok := scale[m.Name]; ok && m.Autoscale != nil {
			lm.Replicas = s.Has
		}
		l.Models = append(l.Models, lm)
	}
	sort.Slice(l.Models, func(i, j int) bool { return l.Models[i].Name < l.Models[j].Name })
	return l
}

// guardStops holds back the catalog's stops when they go past
// max_stop_fraction and the files in force were not confirmed (a
// controller started on a truncated catalog, say): the error shows in
// /v1/catalog until a confirmed reload.
func (c *Controller) guardStops(in reconcile.Input, acts []reconcile.Action) []reconcile.Action {
	if c.files.isConfirmed() {
		return acts
	}
	err := c.tooManyStops(in, acts, c.cfg.Catalog)
	newly, failed := c.files.holdBack(err)
	if newly {
		c.log.Error("catalog stops held back", "error", err)
	}
	if failed {
		c.metrics.reloadFailed.Set(1)
	} else {
		c.metrics.reloadFailed.Set(0)
	}
	if err == nil {
		return acts
	}
	out := acts[:0:0]
	for _, a := range acts {
		if a.Kind != reconcile.Stop || !a.Catalog {
			out = append(out, a)
		}
	}
	return out
}

// pruneDecisions deletes, once after each load of the catalog, the stored
// decisions of slots that are no longer in it.
func (c *Controller) pruneDecisions(ctx context.Context, cat facility.Catalog) {
	if !c.files.toPrune() || ctx.Err() != nil {
		return
	}
	var keep []string
	for _, m := range cat.Models {
		for i := 0; i < m.SlotLimit(); i++ {
			keep = append(keep, facility.ReplicaID(m.Name, i))
		}
	}
	n, err := c.store.PruneDecisions(ctx, keep)
	if err != nil {
		c.log.Warn("delete decisions of removed replicas", "error", err)
		return
	}
	kept := map[string]bool{}
	for _, k := range keep {
		kept[k] = true
	}
	c.files.pruned()
	for slot := range c.saved {
		if !kept[slot] {
			delete(c.saved, slot)
		}
	}
	if n > 0 {
		c.log.Info("deleted the decisions of replicas that left the catalog", "count", n)
	}
}

// input assembles one pass's view of the world.
func (c *Controller) input() (reconcile.Input, []observe.Orphan, map[string]render.NodeInfo, scaleInfo, error) {
	cat, fac := c.files.get()
	return c.inputFor(cat, fac, false)
}

// inputFor (called with passMu held) is input with the given catalog and facility file in place of
// the ones in force (a reload's dry run, llmgw ctl plan: dry, which
// decides autoscaled counts on copies of the scalers). With autoscaled
// models in the catalog it also decides their counts (scaling.go).
func (c *Controller) inputFor(cat facility.Catalog, fac facility.Facility, dry bool) (reconcile.Input, []observe.Orphan, map[string]render.NodeInfo, scaleInfo, error) {
	// The generation first, then the snapshot: an API write takes its
	// generation once Nomad shows it (a label: once the snapshot's node
	// does), so a snapshot read after the generation shows every write up
	// to it.
	gen := c.views.gen()
	snap := c.obs.snapshot()
	c.inputGen = gen
	if !snap.synced() {
		return reconcile.Input{}, nil, nil, scaleInfo{}, ErrNotSynced
	}
	holds, err := c.store.Holds()
	if err != nil {
		return reconcile.Input{}, nil, nil, scaleInfo{}, fmt.Errorf("read holds: %w", err)
	}
	fac = withHolds(fac, holds)
	nodes := make([]*api.Node, 0, len(snap.nodes))
	info := map[string]render.NodeInfo{}
	for _, n := range snap.nodes {
		nodes = append(nodes, n)
		info[n.Name] = render.NodeInfo{Fabric: n.Meta[observe.MetaFabric]}
	}
	now := c.now()
	jobs, orphans := observe.Jobs(snap.jobs, snap.allocs, observe.Health{
		Now: now, LostAfter: c.cfg.Reconcile.LostAfter, Nodes: snap.nodes, Checks: snap.checks,
	})
	c.setWake(observe.NextLost(snap.nodes, c.cfg.Reconcile.LostAfter, now))
	fleet := observe.Fleet(nodes, snap.allocs, snap.power, c.cfg.NodeBaseWatts)
	fleet = observe.ReservePending(fleet, jobs, snap.allocs)
	fleet.Learned = c.power.learned(fac, now)
	fac = c.power.withRefusals(fac)
	in := reconcile.Input{
		Now: now, Catalog: cat, Fleet: fleet, Facility: fac, Jobs: jobs,
		PartialDeadline: c.cfg.Reconcile.PartialDeadline, Gens: observe.Generations(snap.jobs),
		MaxStops: c.cfg.Reconcile.MaxStops, Asleep: c.asleepSlots(jobs), Planners: &c.planners,
	}
	var si scaleInfo
	if autoscales(cat) {
		pins, err := c.store.Pins()
		if err != nil {
			// A pin that cannot be read is not dropped in silence: nothing
			// is decided on a partial view.
			return reconcile.Input{}, nil, nil, scaleInfo{}, fmt.Errorf("read pins: %w", err)
		}
		in.Want, si = c.scale.decideCounts(cat, jobs, pins, now, dry)
	}
	return in, orphans, info, si, nil
}

// autoscales reports whether any model of the catalog autoscales.
func autoscales(cat facility.Catalog) bool {
	for _, m := range cat.Models {
		if m.Autoscale != nil {
			return true
		}
	}
	return false
}

// dropExpiredPins removes the pins that have expired from Nomad.
func (c *Controller) dropExpiredPins(now time.Time) {
	gone, err := c.store.DropExpiredPins(now)
	if err != nil {
		c.log.Warn("remove expired pins", "error", err)
		return
	}
	for _, p := range gone {
		c.log.Info("pin expired; the autoscaler decides again", "model", p.Model, "replicas", p.Replicas, "until", p.Until)
	}
}

// setWake arms the next pass for t (zero: none).
func (c *Controller) setWake(t time.Time) {
	var prev time.Time
	if old := c.wakeAt.Swap(&t); old != nil {
		prev = *old
	}
	if !t.Equal(prev) {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// withHolds adds the run-time holds to the facility file's.
func withHolds(fac facility.Facility, holds []store.Hold) facility.Facility {
	out := fac
	out.Holds = append([]facility.Hold(nil), fac.Holds...)
	for _, h := range holds {
		d, err := facility.ParseDomain(h.Domain)
		if err != nil {
			continue // refused when set; ignore a hand-edited bad one
		}
		replaced := false
		for i := range out.Holds {
			if out.Holds[i].Domain == d {
				out.Holds[i].Reason, out.Holds[i].Drain, replaced = h.Reason, h.Drain, true
			}
		}
		if !replaced {
			out.Holds = append(out.Holds, facility.Hold{Domain: d, Reason: h.Reason, Drain: h.Drain})
		}
	}
	return out
}

package controller

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/llmgw/llmgw/controller/autoscale"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
)

// Signals. Every autoscale.interval each controller, leading or standing
// by, reads the signals of the catalog's autoscaled models and gives each
// model's Scaler one Sample (autoscale.Scaler.Observe): a standby that
// takes over has the history the down window needs. The sources:
//
//   - the gateways (GatewayFinder: autoscale.gateways, else the
//     llmgw-gateway services of the service provider's catalog), each read
//     with gatewayclient.DemandClient within autoscale.timeout, eight at a time:
//     per model the sum over the gateways of outstanding and queued
//     requests and of the arrival rate, and the TTFT p90 as the mean of
//     the gateways' p90s weighted by their samples;
//   - the engines of the serving replicas (Controller.EngineMetrics):
//     requests waiting summed, KV-cache use averaged;
//   - optionally Prometheus (prometheus.go), whose query for a signal
//     replaces the built-in source of that signal.
//
// Missing data never reads as zero. A gateway that does not answer makes
// every gateway signal of every model missing (the others' sum would read
// low); so does finding no gateway at all. A serving replica whose engine
// has no fresh reading of a quantity makes that engine signal of its
// model missing. A missing signal is a Signal with OK false and the reason,
// which the scaler turns into "holds at N: …" (autoscale: counts never move
// on missing data); each source's state is in GET /v1/signals and each
// change of it in the log.

// GatewayFinder lists the base URLs ("http://host:port") of the gateways
// to read demand from.
type GatewayFinder func(ctx context.Context) ([]string, error)

// DemandReader reads the demand of the gateway at base.
type DemandReader func(ctx context.Context, base string) (gatewayapi.Demand, error)

// gatewayReaders is how many gateways are read at once.
const gatewayReaders = 8

// engineMaxAge is how old (by the wall clock, which engine readings are
// taken by) an engine reading may be and still count.
const engineMaxAge = autoscale.DefaultMaxAge

// signalOf is v as the scaler reads it, taken at at.
func signalOf(v controllerapi.SignalView, at time.Time) autoscale.Signal {
	if v.Value == nil {
		return autoscale.Missing(v.Error)
	}
	return autoscale.Reading(*v.Value, at)
}

func reading(source string, v float64) controllerapi.SignalView {
	return controllerapi.SignalView{Value: &v, Source: source}
}

func missing(source, format string, args ...any) controllerapi.SignalView {
	return controllerapi.SignalView{Source: source, Error: fmt.Sprintf(format, args...)}
}

// sampleOf is the round s as the scaler reads it.
func sampleOf(s controllerapi.ModelSignals) autoscale.Sample {
	return autoscale.Sample{
		At: s.At, Serving: s.Serving,
		Outstanding: signalOf(s.Outstanding, s.At), Queued: signalOf(s.Queued, s.At), Arrivals: signalOf(s.Arrivals, s.At),
		TTFT: signalOf(s.TTFTP90, s.At), Waiting: signalOf(s.Waiting, s.At), KVCache: signalOf(s.KVCache, s.At),
	}
}

// signalByName returns s's signal named name (the Signal* constants).
func signalByName(s *controllerapi.ModelSignals, name string) *controllerapi.SignalView {
	switch name {
	case controllerapi.SignalOutstanding:
		return &s.Outstanding
	case controllerapi.SignalQueued:
		return &s.Queued
	case controllerapi.SignalArrivals:
		return &s.Arrivals
	case controllerapi.SignalTTFT:
		return &s.TTFTP90
	case controllerapi.SignalWaiting:
		return &s.Waiting
	case controllerapi.SignalKVCache:
		return &s.KVCache
	}
	return nil
}

// gatewayRound is what one round read from the gateways.
type gatewayRound struct {
	// err is why the gateway signals are missing this round; empty when
	// every gateway answered.
	err    string
	models map[string]*gatewaySum
}

type gatewaySum struct {
	outstanding, queued, arrivals float64
	ttftSum                       float64 // p90 × samples, summed
	ttftN                         uint64
}

// findGateways returns the configured gateways, or those registered in the
// service provider's catalog.
func (c *Controller) findGateways(ctx context.Context) ([]string, error) {
	if c.opts.Gateways != nil {
		return c.opts.Gateways(ctx)
	}
	if gws := c.cfg.AutoscaleSettings().Gateways; len(gws) > 0 {
		return gws, nil
	}
	if c.consul != nil {
		return gatewayclient.ConsulGateways(ctx, c.consul)
	}
	return gatewayclient.NomadGateways(ctx, c.nomad, c.cfg.Nomad.Namespace)
}

// readGateways reads every gateway's demand.
func (c *Controller) readGateways(ctx context.Context, at time.Time, timeout time.Duration, read DemandReader) (gatewayRound, []controllerapi.SourceView) {
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, timeout)
	urls, err := c.findGateways(dctx)
	cancel()
	where := "llmgw-gateway services in Nomad's service catalog"
	switch {
	case c.opts.Gateways != nil:
		where = "the gateways"
	case len(c.cfg.AutoscaleSettings().Gateways) > 0:
		where = "autoscale.gateways"
	case c.consul != nil:
		where = "llmgw-gateway services in Consul"
	}
	if err != nil {
		msg := fmt.Sprintf("finding the gateways (%s): %s", where, oneLine(err.Error()))
		return gatewayRound{err: msg}, []controllerapi.SourceView{{Source: controllerapi.SourceGateways, Name: "discovery", Error: msg, At: at, Took: time.Since(start).Seconds()}}
	}
	if len(urls) == 0 {
		msg := "no gateway to read demand from: no " + where
		if where == "autoscale.gateways" || where == "the gateways" {
			msg = "no gateway to read demand from"
		}
		return gatewayRound{err: msg}, []controllerapi.SourceView{{Source: controllerapi.SourceGateways, Name: "discovery", Error: msg, At: at, Took: time.Since(start).Seconds()}}
	}
	demands := make([]gatewayapi.Demand, len(urls))
	errs := make([]error, len(urls))
	took := make([]time.Duration, len(urls))
	forEach(ctx, len(urls), gatewayReaders, func(i int) {
		t0 := time.Now()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		demands[i], errs[i] = read(rctx, urls[i])
		took[i] = time.Since(t0)
	})
	round := gatewayRound{models: map[string]*gatewaySum{}}
	sources := make([]controllerapi.SourceView, 0, len(urls))
	var failed []string
	for i, u := range urls {
		if errs[i] == nil && ctx.Err() != nil {
			errs[i] = ctx.Err()
		}
		sv := controllerapi.SourceView{Source: controllerapi.SourceGateways, Name: u, OK: errs[i] == nil, At: at, Took: took[i].Seconds()}
		if errs[i] != nil {
			sv.OK, sv.Error = false, oneLine(errs[i].Error())
			failed = append(failed, fmt.Sprintf("gateway %s: %s", u, sv.Error))
			sources = append(sources, sv)
			continue
		}
		sources = append(sources, sv)
		for _, m := range demands[i].Models {
			s := round.models[m.Model]
			if s == nil {
				s = &gatewaySum{}
				round.models[m.Model] = s
			}
			s.outstanding += float64(m.Outstanding)
			s.queued += float64(m.Queued)
			s.arrivals += m.ArrivalRate
			if m.TTFTP90Seconds != nil && m.TTFTSamples > 0 {
				s.ttftSum += *m.TTFTP90Seconds * float64(m.TTFTSamples)
				s.ttftN += m.TTFTSamples
			}
		}
	}
	if len(failed) > 0 {
		round.err = strings.Join(failed, "; ")
	}
	return round, sources
}

// gatewaySignals fills the gateway signals of one model.
func (r gatewayRound) fill(model string, s *controllerapi.ModelSignals) {
	set := func(name string, v controllerapi.SignalView) { *signalByName(s, name) = v }
	if r.err != "" {
		for _, n := range []string{controllerapi.SignalOutstanding, controllerapi.SignalQueued, controllerapi.SignalArrivals, controllerapi.SignalTTFT} {
			set(n, missing(controllerapi.SourceGateways, "%s", r.err))
		}
		return
	}
	g, ok := r.models[model]
	if !ok {
		for _, n := range []string{controllerapi.SignalOutstanding, controllerapi.SignalQueued, controllerapi.SignalArrivals, controllerapi.SignalTTFT} {
			set(n, missing(controllerapi.SourceGateways, "no gateway knows model %s (it has no replica registered and is not in the gateways' model list yet)", model))
		}
		return
	}
	set(controllerapi.SignalOutstanding, reading(controllerapi.SourceGateways, g.outstanding))
	set(controllerapi.SignalQueued, reading(controllerapi.SourceGateways, g.queued))
	set(controllerapi.SignalArrivals, reading(controllerapi.SourceGateways, g.arrivals))
	if g.ttftN > 0 {
		set(controllerapi.SignalTTFT, reading(controllerapi.SourceGateways, g.ttftSum/float64(g.ttftN)))
	} else {
		set(controllerapi.SignalTTFT, missing(controllerapi.SourceGateways, "no answer of model %s reached its first byte within the gateways' demand window", model))
	}
}

// servingJobs returns, by model, the job IDs of the serving replicas in
// the last pass's view.
func servingJobs(v controllerapi.View) map[string][]string {
	out := map[string][]string{}
	for _, r := range v.Replicas {
		if r.State == "serving" && r.JobID != "" {
			out[r.Model] = append(out[r.Model], r.JobID)
		}
	}
	return out
}

// engineSignals fills the engine signals of one model from the last
// readings of its serving replicas' engines.
func engineSignals(model string, jobs []string, replicaOf map[string]string, obs map[string]controllerapi.EngineMetrics, wall time.Time, s *controllerapi.ModelSignals) {
	if len(jobs) == 0 {
		why := fmt.Sprintf("no replica of %s serves yet, so no engine to read", model)
		s.Waiting, s.KVCache = missing(controllerapi.SourceEngines, "%s", why), missing(controllerapi.SourceEngines, "%s", why)
		return
	}
	var waiting, kv float64
	var waitErr, kvErr string
	for _, id := range jobs {
		rep := replicaOf[id]
		m, ok := obs[id]
		var r *enginemetrics.Reading
		switch {
		case !ok || (m.Reading == nil && m.Error == ""):
			why := fmt.Sprintf("replica %s: no engine reading yet", rep)
			waitErr, kvErr = firstErr(waitErr, why), firstErr(kvErr, why)
			continue
		case m.Error != "":
			why := fmt.Sprintf("replica %s: engine metrics: %s", rep, m.Error)
			waitErr, kvErr = firstErr(waitErr, why), firstErr(kvErr, why)
			continue
		case wall.Sub(m.Reading.At) > engineMaxAge:
			why := fmt.Sprintf("replica %s: engine reading is %s old (at most %s counts)", rep, wall.Sub(m.Reading.At).Round(time.Second), engineMaxAge)
			waitErr, kvErr = firstErr(waitErr, why), firstErr(kvErr, why)
			continue
		default:
			r = m.Reading
		}
		if v, ok := r.RequestsWaiting.Get(); ok {
			waiting += v
		} else {
			waitErr = firstErr(waitErr, fmt.Sprintf("replica %s: its engine (%s) %s requests waiting", rep, m.Engine, unknownWhy(r, enginemetrics.FieldRequestsWaiting)))
		}
		if v, ok := r.KVCacheUsage.Get(); ok {
			kv += v
		} else {
			kvErr = firstErr(kvErr, fmt.Sprintf("replica %s: its engine (%s) %s KV-cache use", rep, m.Engine, unknownWhy(r, enginemetrics.FieldKVCacheUsage)))
		}
	}
	if waitErr != "" {
		s.Waiting = missing(controllerapi.SourceEngines, "%s", waitErr)
	} else {
		s.Waiting = reading(controllerapi.SourceEngines, waiting)
	}
	if kvErr != "" {
		s.KVCache = missing(controllerapi.SourceEngines, "%s", kvErr)
	} else {
		s.KVCache = reading(controllerapi.SourceEngines, kv/float64(len(jobs)))
	}
}

// engineSources reports the engine reads of the autoscaled models' serving
// replicas: one entry for each replica whose last read failed or is stale,
// else one saying they answer. A replica not read yet (it has just begun
// to serve) is no failure; its model's engine signals are missing
// meanwhile all the same.
func engineSources(models []facility.Model, serving map[string][]string, replicaOf map[string]string, obs map[string]controllerapi.EngineMetrics, wall, at time.Time) []controllerapi.SourceView {
	var out []controllerapi.SourceView
	for _, m := range models {
		for _, id := range serving[m.Name] {
			o, ok := obs[id]
			switch {
			case ok && o.Error != "":
				out = append(out, controllerapi.SourceView{Source: controllerapi.SourceEngines, Name: replicaOf[id], Error: o.Error, At: at})
			case ok && o.Reading != nil && wall.Sub(o.Reading.At) > engineMaxAge:
				out = append(out, controllerapi.SourceView{Source: controllerapi.SourceEngines, Name: replicaOf[id], At: at,
					Error: fmt.Sprintf("last read %s ago (at most %s counts)", wall.Sub(o.Reading.At).Round(time.Second), engineMaxAge)})
			}
		}
	}
	if len(out) == 0 {
		out = append(out, controllerapi.SourceView{Source: controllerapi.SourceEngines, Name: "serving replicas", OK: true, At: at})
	}
	return out
}

func unknownWhy(r *enginemetrics.Reading, field string) string {
	for _, f := range r.Absent {
		if f == field {
			return "does not export"
		}
	}
	return "gave no value of"
}

func firstErr(have, next string) string {
	if have != "" {
		return have
	}
	return next
}

// signalState is what the signal loop keeps between rounds.
type signalState struct {
	read    DemandReader
	prom    *promSource
	lastErr map[string]string // by source key: the error last logged, "" when it was fine
}

// watchSignals reads the autoscaled models' signals every
// autoscale.interval until ctx ends, the first round one interval after
// the start (the watches have read Nomad by then).
func (c *Controller) watchSignals(ctx context.Context) {
	st := c.newSignalState()
	tick := time.NewTicker(c.cfg.AutoscaleSettings().Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.signalRound(ctx, st)
	}
}

// newSignalState sets up the readers of the signals.
func (c *Controller) newSignalState() *signalState {
	set := c.cfg.AutoscaleSettings()
	st := &signalState{read: c.opts.ReadDemand, lastErr: map[string]string{}}
	if st.read == nil {
		dc := gatewayclient.DemandClient{HTTP: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}}
		st.read = dc.Read
	}
	if set.Prometheus != nil {
		p, err := newPromSource(*set.Prometheus, set.Timeout)
		if err != nil {
			c.log.Error("autoscale prometheus source", "error", err)
		}
		st.prom = p
	}
	return st
}

// signalRound reads one round of signals and observes it.
func (c *Controller) signalRound(ctx context.Context, st *signalState) {
	obs := c.engines.all()
	cat, _ := c.files.get()
	view := c.views.get()
	var models []facility.Model
	for _, m := range cat.Models {
		if m.Autoscale != nil {
			models = append(models, m)
		}
	}
	if len(models) == 0 {
		c.scale.clearSignals()
		return
	}
	set := c.cfg.AutoscaleSettings()
	at, wall := c.now(), time.Now()

	// Which signals come from where.
	fromProm := map[string]bool{}
	if st.prom != nil {
		for name := range st.prom.queries {
			fromProm[name] = true
		}
	}
	needGateways := !fromProm[controllerapi.SignalOutstanding] || !fromProm[controllerapi.SignalQueued] || !fromProm[controllerapi.SignalArrivals] || !fromProm[controllerapi.SignalTTFT]

	var sources []controllerapi.SourceView
	var gw gatewayRound
	if needGateways {
		var srcs []controllerapi.SourceView
		gw, srcs = c.readGateways(ctx, at, set.Timeout, st.read)
		sources = append(sources, srcs...)
	}
	var prom map[string]promResult
	if st.prom != nil {
		var srcs []controllerapi.SourceView
		prom, srcs = st.prom.query(ctx, at)
		sources = append(sources, srcs...)
	} else if set.Prometheus != nil {
		// The source could not be built (a bad address): its signals are
		// missing, never read elsewhere.
		prom = map[string]promResult{}
		for name := range set.Prometheus.Queries {
			fromProm[name] = true
			prom[name] = promResult{err: "the prometheus source could not be set up: see the controller's log"}
		}
	}
	if ctx.Err() != nil {
		return
	}
	serving := servingJobs(view)
	replicaOf := map[string]string{}
	for _, r := range view.Replicas {
		replicaOf[r.JobID] = r.ID
	}
	signals := make(map[string]controllerapi.ModelSignals, len(models))
	for _, m := range models {
		s := controllerapi.ModelSignals{At: at, Serving: len(serving[m.Name])}
		if needGateways {
			gw.fill(m.Name, &s)
		}
		engineSignals(m.Name, serving[m.Name], replicaOf, obs, wall, &s)
		for name, r := range prom {
			if fromProm[name] {
				*signalByName(&s, name) = r.forModel(m.Name)
			}
		}
		signals[m.Name] = s
	}
	sources = append(sources, engineSources(models, serving, replicaOf, obs, wall, at)...)

	c.scale.observe(signals, sources, at)
	models2 := c.views.get().Models
	c.scale.recordHistory(at, signals, models2, set.Interval)
	c.metrics.setSignals(signals)
	c.logSources(st, sources)
	if c.lead.isLeading() {
		c.kick() // the next pass decides with this round
	}
}

// logSources logs each source whose state changed since the last round.
func (c *Controller) logSources(st *signalState, sources []controllerapi.SourceView) {
	seen := map[string]bool{}
	for _, s := range sources {
		key := s.Source + " " + s.Name
		seen[key] = true
		last, known := st.lastErr[key]
		switch {
		case s.Error != "" && s.Error != last:
			c.log.Warn("autoscale signal source failed; the signals it gives are missing, and the counts they drive hold",
				"source", s.Source, "name", s.Name, "error", s.Error)
		case s.Error == "" && known && last != "":
			c.log.Info("autoscale signal source answers again", "source", s.Source, "name", s.Name)
		}
		st.lastErr[key] = s.Error
	}
	for key := range st.lastErr {
		if !seen[key] {
			delete(st.lastErr, key)
		}
	}
}

// Signals returns the last round of signals.
func (c *Controller) Signals() controllerapi.SignalsView {
	return c.scale.view(c.cfg.AutoscaleSettings().Interval)
}

// finite reports whether v is a usable reading.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// ReadSignals runs one round of the autoscaler's signals now, whether or
// not this controller leads: for tests and tools that drive a controller
// by hand, as Pass does.
func (c *Controller) ReadSignals(ctx context.Context) { c.signalRound(ctx, c.newSignalState()) }

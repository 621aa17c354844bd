package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/enginemetrics"
)

// metrics are the controller's Prometheus metrics, on its own registry
// (served at /metrics) so that tests can run several controllers.
type metrics struct {
	reg *prometheus.Registry
	// collectors are every collector registered on reg (add), for the
	// dashboard's test (docs/grafana).
	collectors       []prometheus.Collector
	leader           prometheus.Gauge
	reloadFailed     prometheus.Gauge
	replicas         *prometheus.GaugeVec
	domainCap        *prometheus.GaugeVec
	domainDraw       *prometheus.GaugeVec
	domainMeasured   *prometheus.GaugeVec
	placements       *prometheus.CounterVec
	rejections       *prometheus.GaugeVec
	actions          *prometheus.CounterVec
	actionErrors     *prometheus.CounterVec
	casConflicts     prometheus.Counter
	leaseLost        prometheus.Counter
	fencedWrites     prometheus.Counter
	deferredStops    prometheus.Counter
	reconcileSeconds prometheus.Histogram
	adopted          *prometheus.GaugeVec
	engineGauges     map[string]*prometheus.GaugeVec // by enginemetrics field
	engineErrors     *prometheus.CounterVec
	adapterLoaded    *prometheus.GaugeVec
	modelDesired     *prometheus.GaugeVec
	modelServing     *prometheus.GaugeVec
	scaleEvents      *prometheus.CounterVec
	modelSignal      *prometheus.GaugeVec
	powerCapEvents   *prometheus.CounterVec
	// The power poll's sources (observer.go, powerRound).
	powerSourceFailures prometheus.Counter
	powerStatsReads     *prometheus.CounterVec
	powerGPUDraws       *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmgw_leader", Help: "1 while this controller holds the leader lock.",
		}),
		reloadFailed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmgw_config_reload_failed", Help: "1 when the last reload of the catalog or facility was refused; the previous files stay in force.",
		}),
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_replicas", Help: "Replica jobs by model and state (serving, starting, partial, pending, failed, unplaced).",
		}, []string{"model", "state"}),
		domainCap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_domain_cap_watts", Help: "Budget of a domain (before headroom).",
		}, []string{"domain"}),
		domainDraw: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_domain_draw_watts", Help: "Committed draw of a budgeted domain: per node the larger of measured and promised.",
		}, []string{"domain"}),
		domainMeasured: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_domain_measured_watts", Help: "Measured draw of a budgeted domain's nodes (base plus GPU power from device stats).",
		}, []string{"domain"}),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_placements_total", Help: "Jobs registered (created or placed again) by model.",
		}, []string{"model"}),
		rejections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_rejections", Help: "Rejections in the last pass's decisions, by reason.",
		}, []string{"reason"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_actions_total", Help: "Actions carried out, by kind (create, replace, stop).",
		}, []string{"kind"}),
		actionErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_action_errors_total", Help: "Actions that failed, by kind.",
		}, []string{"kind"}),
		casConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_register_conflicts_total", Help: "Check-and-set job writes (create, replace, stop) refused because another writer changed the job first.",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_leader_lease_lost_total", Help: "Leaderships ended by a renewal of the leader lock that failed or timed out.",
		}),
		fencedWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_fenced_writes_total", Help: "Job writes refused because the leader lease had lapsed.",
		}),
		deferredStops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llmgw_deferred_stops_total", Help: "Stops left for a later pass by reconcile.max_stops.",
		}),
		reconcileSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llmgw_reconcile_seconds", Help: "Duration of reconcile passes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}),
		adopted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_adopted", Help: "What the last pass rebuilt from Nomad: jobs, allocations, orphans.",
		}, []string{"kind"}),
	}
	m.add(m.leader, m.reloadFailed, m.replicas, m.domainCap, m.domainDraw, m.domainMeasured,
		m.placements, m.rejections, m.actions, m.actionErrors, m.casConflicts, m.leaseLost, m.fencedWrites, m.deferredStops, m.reconcileSeconds, m.adopted)
	m.engineGauges = map[string]*prometheus.GaugeVec{}
	for field, help := range engineGaugeHelp {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llmgw_engine_" + field, Help: help}, []string{"model", "replica"})
		m.engineGauges[field] = g
		m.add(g)
	}
	m.engineErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmgw_engine_scrape_errors_total", Help: "Scrapes of a serving replica's engine metrics that failed, by model.",
	}, []string{"model"})
	m.add(m.engineErrors)
	m.adapterLoaded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmgw_replica_adapter_loaded", Help: "1 when a serving replica's engine lists the LoRA adapter as served, 0 when its list lacks it; absent while the list cannot be read.",
	}, []string{"model", "replica", "adapter"})
	m.add(m.adapterLoaded)
	m.modelDesired = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmgw_model_replicas_desired", Help: "Replicas the model is to have: its fixed replicas, or the count the last pass asked for (the autoscaler's or a pin's, within min and max).",
	}, []string{"model"})
	m.modelServing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmgw_model_replicas_serving", Help: "The model's replicas serving at the last pass.",
	}, []string{"model"})
	m.scaleEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmgw_scale_events_total", Help: "Changes of an autoscaled model's count carried out, by the rule that asked for them (up, panic, down, wake, idle, min, max), pin, or yield (slots taken by a model of higher priority).",
	}, []string{"model", "reason"})
	m.modelSignal = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmgw_model_signal", Help: "The last reading of an autoscaled model's signal (outstanding, queued, arrivals per second, ttft_p90 seconds, waiting, kv_cache_use 0-1); absent while it is missing.",
	}, []string{"model", "signal"})
	m.powerCapEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmgw_power_cap_events_total", Help: "GPU power cap decisions, by budgeted domain and kind: cap, change, lift (one per GPU), refused (a GPU in the domain could not be capped).",
	}, []string{"domain", "kind"})
	m.add(m.modelDesired, m.modelServing, m.scaleEvents, m.modelSignal, m.powerCapEvents)
	m.powerSourceFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "llmgw_power_source_failures_total", Help: "Power rounds whose Prometheus query (power_source) failed: every GPU node's client stats were read instead.",
	})
	m.powerStatsReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmgw_power_client_stats_reads_total", Help: "GPU nodes' client stats read by the power poll, by why: no_source (no Prometheus source, or it failed), missing (Prometheus lacks a GPU of the node within max_age, or the node was not read yet), refresh (older than client_stats_interval), written (its caps variable was written).",
	}, []string{"reason"})
	m.powerGPUDraws = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "llmgw_power_gpu_draws", Help: "GPUs whose draw the last power round read, by source: prometheus or client_stats.",
	}, []string{"source"})
	m.add(m.powerSourceFailures, m.powerStatsReads, m.powerGPUDraws)
	return m
}

// add registers collectors on the controller's registry.
func (m *metrics) add(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.collectors = append(m.collectors, cs...)
}

// setSignals replaces the llmgw_model_signal series with a round's.
func (m *metrics) setSignals(signals map[string]controllerapi.ModelSignals) {
	m.modelSignal.Reset()
	for model, s := range signals {
		for _, name := range []string{controllerapi.SignalOutstanding, controllerapi.SignalQueued, controllerapi.SignalArrivals, controllerapi.SignalTTFT, controllerapi.SignalWaiting, controllerapi.SignalKVCache} {
			if v := signalByName(&s, name).Value; v != nil {
				m.modelSignal.WithLabelValues(model, name).Set(*v)
			}
		}
	}
}

// setModels replaces the per-model replica gauges with a pass's.
func (m *metrics) setModels(models []controllerapi.ModelView) {
	m.modelDesired.Reset()
	m.modelServing.Reset()
	for _, mv := range models {
		m.modelDesired.WithLabelValues(mv.Name).Set(float64(mv.Wanted))
		m.modelServing.WithLabelValues(mv.Name).Set(float64(mv.Serving))
	}
}

// setView replaces the gauges of the last pass's view with bv's.
func (m *metrics) setView(bv builtView) {
	m.setModels(bv.view.Models)
	m.replicas.Reset()
	for k, n := range bv.replicas {
		m.replicas.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
	m.domainCap.Reset()
	m.domainDraw.Reset()
	m.domainMeasured.Reset()
	for _, g := range bv.budgets {
		m.domainCap.WithLabelValues(g.domain).Set(g.capWatts)
		m.domainDraw.WithLabelValues(g.domain).Set(g.drawWatts)
		m.domainMeasured.WithLabelValues(g.domain).Set(g.measuredWatts)
	}
	m.rejections.Reset()
	for k, n := range bv.rejections {
		m.rejections.WithLabelValues(k).Set(float64(n))
	}
	m.adopted.WithLabelValues("jobs").Set(float64(bv.adoptedJobs))
}

// engineGaugeHelp are the llmgw_engine_* gauges, one series per serving
// replica, from the last reading of its engine's metrics; a series is
// absent while the value is unknown (not exported by the engine, not in
// the scrape, or no rate yet).
var engineGaugeHelp = map[string]string{
	"requests_waiting":  "Requests the replica's engine has queued.",
	"asleep":            "1 while the replica's engine sleeps (its model freed until the next request; llama.cpp's --sleep-idle-seconds), 0 while awake; absent for engines without a sleep llmgw reads.",
	"requests_running":  "Requests the replica's engine is generating for.",
	"kv_cache_usage":    "Fraction (0-1) of the replica's engine's KV cache in use.",
	"tokens_per_second": "Tokens the replica's engine generated per second between its last two scrapes.",
	"ttft_p90_seconds":  "90th percentile time to first token of the requests that got their first token between the engine's last two scrapes (estimated from its histogram buckets).",
}

// setEngines replaces the llmgw_engine_* series with a scrape round's.
func (m *metrics) setEngines(targets []engineTarget, obs []controllerapi.EngineMetrics) {
	for _, g := range m.engineGauges {
		g.Reset()
	}
	m.adapterLoaded.Reset()
	for i, t := range targets {
		o := obs[i]
		if o.AdaptersError == "" {
			for _, a := range o.Adapters {
				v := 0.0
				if a.Loaded {
					v = 1
				}
				m.adapterLoaded.WithLabelValues(t.model, t.replica, a.Name).Set(v)
			}
		}
		if o.Error != "" {
			m.engineErrors.WithLabelValues(t.model).Inc()
		}
		if o.Reading == nil || o.Error != "" {
			continue
		}
		if o.Asleep != nil {
			v := 0.0
			if *o.Asleep {
				v = 1
			}
			m.engineGauges["asleep"].WithLabelValues(t.model, t.replica).Set(v)
		}
		r := o.Reading
		for field, v := range map[string]enginemetrics.Value{
			"requests_waiting": r.RequestsWaiting, "requests_running": r.RequestsRunning, "kv_cache_usage": r.KVCacheUsage,
			"tokens_per_second": r.TokensPerSecond, "ttft_p90_seconds": r.TTFT.P90,
		} {
			if x, ok := v.Get(); ok {
				m.engineGauges[field].WithLabelValues(t.model, t.replica).Set(x)
			}
		}
	}
}

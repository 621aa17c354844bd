package gateway

import (
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus series. Model labels are only ever
// models the catalog knows (or "" for a request that named none or an
// unknown one), so clients cannot grow the series without bound.
type metrics struct {
	requests    *prometheus.CounterVec
	upstream    *prometheus.HistogramVec
	ttfb        *prometheus.HistogramVec
	duration    *prometheus.HistogramVec
	attempts    *prometheus.CounterVec
	breaker     *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	endpoints   *prometheus.GaugeVec
	inFlight    prometheus.Gauge
	engineLoad  *prometheus.GaugeVec
	held        *prometheus.CounterVec
	holdSeconds *prometheus.HistogramVec
	// Conversations' first turns that waited for their replica (opening.go).
	openingWaits *prometheus.CounterVec
	openingWait  *prometheus.HistogramVec
	// Requests after which their replica failed (proxy.go, poison).
	poison *prometheus.CounterVec
	// The engines' prompt caches, per replica endpoint.
	promptTokens, cachedTokens, cacheUnknown *prometheus.CounterVec
}

// latencyBuckets run from 250 µs to about 4 minutes: a proxied embedding
// answers in milliseconds, a long non-streamed completion in minutes.
var latencyBuckets = prometheus.ExponentialBuckets(0.00025, 2.5, 16)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_requests_total",
			Help: "Requests answered, by model and HTTP status sent to the client (499: the client went away first).",
		}, []string{"model", "code"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmgw_gateway_upstream_latency_seconds",
			Help:    "Time from sending a request to a replica to its response headers, per attempt.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmgw_gateway_time_to_first_byte_seconds",
			Help:    "Time from the request's arrival to the first response byte written to the client, retries included.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmgw_gateway_request_duration_seconds",
			Help:    "Time from the request's arrival to the end of its response.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_upstream_attempts_total",
			Help: "Attempts sent to replicas, by outcome: ok, status (a 5xx answer), error (no answer: refused, reset, timeout), broken (failed mid-response), cancelled (the client went away).",
		}, []string{"model", "outcome"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_gateway_breaker_state",
			Help: "Circuit breaker state per replica endpoint: 0 closed, 1 half-open, 2 open.",
		}, []string{"model", "replica", "endpoint"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_breaker_transitions_total",
			Help: "Circuit breaker state changes, by model and the state entered.",
		}, []string{"model", "state"}),
		endpoints: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_gateway_endpoints",
			Help: "Healthy replica endpoints discovery reports, per model.",
		}, []string{"model"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmgw_gateway_requests_in_flight",
			Help: "Requests being proxied or held now.",
		}),
		engineLoad: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "llmgw_gateway_engine_requests",
			Help: "Requests a replica's engine held (waiting plus running, from all gateways) at its last metrics read; absent while unread.",
		}, []string{"model", "replica", "endpoint"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_held_total",
			Help: "Requests held for a model with no serving replica, by outcome: released (a replica took it), timeout and full (answered 503), cancelled (the client went away), gone (the model left the catalog: 404).",
		}, []string{"model", "outcome"}),
		holdSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmgw_gateway_hold_seconds",
			Help:    "Time a held request waited, from its arrival to its release to a replica.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		openingWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_prefix_opening_waits_total",
			Help: "Prefix-routed requests opening a conversation that waited at the gateway because their replica held its opening limit, by outcome: sent (it had room), expired (sent anyway after the opening wait), cancelled (the client went away).",
		}, []string{"model", "outcome"}),
		openingWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "llmgw_gateway_prefix_opening_wait_seconds",
			Help:    "Time a request opening a conversation waited at the gateway for its replica to have room.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		poison: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_poison_requests_total",
			Help: "Requests after which their replica failed (the connection dropped, was reset or the engine died) once the request had reached it, by model, API key (\"\" without keys) and stage: before_answer (not retried on another replica: answered 502) or mid_answer (the answer broke off).",
		}, []string{"model", "key", "stage"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_prompt_tokens_total",
			Help: "Prompt tokens of the completions a replica answered that said how many of them its engine's cache held (usage.prompt_tokens_details.cached_tokens, or llama.cpp's timings).",
		}, []string{"model", "replica", "endpoint"}),
		cachedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_cached_prompt_tokens_total",
			Help: "Of llmgw_gateway_prompt_tokens_total, those the engine took from its prompt cache: the hit ratio is this over that.",
		}, []string{"model", "replica", "endpoint"}),
		cacheUnknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_cache_unknown_answers_total",
			Help: "Completions a replica answered (2xx) that did not say how many prompt tokens its engine's cache held: an engine that does not report it, or a stream without usage. Neither hits nor misses.",
		}, []string{"model", "replica", "endpoint"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.upstream, m.ttfb, m.duration, m.attempts, m.breaker, m.transitions, m.endpoints, m.inFlight,
			m.engineLoad, m.held, m.holdSeconds, m.poison, m.openingWaits, m.openingWait, m.promptTokens, m.cachedTokens, m.cacheUnknown)
	}
	return m
}

func (m *metrics) request(model string, code int) {
	m.requests.WithLabelValues(model, strconv.Itoa(code)).Inc()
}

func breakerLabels(in Instance) prometheus.Labels {
	return prometheus.Labels{"model": in.Model, "replica": in.Replica, "endpoint": in.Address}
}

// modelMetrics are a model's series of the metrics every request it
// serves counts, each looked up once (on its first use, so that no series
// shows before a request counts in it) rather than by its labels on every
// request.
type modelMetrics struct {
	upstream, duration, ttfb atomic.Pointer[prometheus.Observer]
	attemptOK, answeredOK    atomic.Pointer[prometheus.Counter]
}

func observerOf(p *atomic.Pointer[prometheus.Observer], vec *prometheus.HistogramVec, model string) prometheus.Observer {
	if o := p.Load(); o != nil {
		return *o
	}
	o := vec.WithLabelValues(model)
	p.Store(&o)
	return o
}

func counterOf(p *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, model, label string) prometheus.Counter {
	if c := p.Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(model, label)
	p.Store(&c)
	return c
}

// upstreamOf is llmgw_gateway_upstream_latency_seconds's series of ms.
func (m *metrics) upstreamOf(ms *modelState) prometheus.Observer {
	return observerOf(&ms.mm.upstream, m.upstream, ms.name)
}

// durationOf is llmgw_gateway_request_duration_seconds's series of ms.
func (m *metrics) durationOf(ms *modelState) prometheus.Observer {
	return observerOf(&ms.mm.duration, m.duration, ms.name)
}

// ttfbOf is llmgw_gateway_time_to_first_byte_seconds's series of ms.
func (m *metrics) ttfbOf(ms *modelState) prometheus.Observer {
	return observerOf(&ms.mm.ttfb, m.ttfb, ms.name)
}

// attemptOK counts an attempt for ms that the replica answered.
func (m *metrics) attemptOK(ms *modelState) {
	counterOf(&ms.mm.attemptOK, m.attempts, ms.name, "ok").Inc()
}

// answered counts a request for ms answered with code.
func (m *metrics) answered(ms *modelState, code int) {
	if code != http.StatusOK {
		m.request(ms.name, code)
		return
	}
	counterOf(&ms.mm.answeredOK, m.requests, ms.name, "200").Inc()
}

package fakeengine

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// load is what the engine is doing now, as its metrics report it.
type load struct {
	waiting, running atomic.Int64
	// held are the KV-cache tokens the running requests hold (prompt and
	// generated so far); reserved what they may grow to (prompt and
	// planned completion), which is what TGI reports.
	held, reserved atomic.Int64
}

// metrics are what /metrics serves, on a registry of the server's own:
// fake-engine's own families, and the engine it impersonates under that
// engine's real names (docs/engines/<engine>.md cites where each is
// defined). The names here are spelled out independently of the engine
// package's table, so that a test reading this output with that table
// checks both.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	promptTokens prometheus.Counter
	genTokens    prometheus.Counter
	inFlight     prometheus.Gauge
	load         *load
	engine       engineSeries
	// serve is false when the impersonated engine serves no /metrics
	// without its switch; status and body are its answer then.
	serve  bool
	status int
	body   string
}

// engineSeries records into the impersonated engine's own families.
type engineSeries struct {
	prompt    func(tokens int, stream bool)
	token     func(stream bool)
	firstTok  func(d time.Duration, stream bool)
	finished  func(generated int)
	requested func()
}

func newMetrics(cfg Config, ready func() bool) *metrics {
	model := cfg.ModelID()
	labels := prometheus.Labels{"model_name": model}
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "fake_engine_requests_total",
			Help:        "HTTP requests served, by route and status code.",
			ConstLabels: labels,
		}, []string{"route", "code"}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fake_engine_prompt_tokens_total",
			Help:        "Prompt tokens read by completion and embedding requests.",
			ConstLabels: labels,
		}),
		genTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "fake_engine_generation_tokens_total",
			Help:        "Tokens generated.",
			ConstLabels: labels,
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "fake_engine_requests_in_flight",
			Help:        "Completion and embedding requests being served.",
			ConstLabels: labels,
		}),
		load:  &load{},
		serve: true,
	}
	readyGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "fake_engine_ready",
		Help:        "1 once the model has loaded and /health answers 200.",
		ConstLabels: labels,
	}, func() float64 {
		if ready() {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(m.requests, m.promptTokens, m.genTokens, m.inFlight, readyGauge)
	switch cfg.Engine {
	case EngineSGLang:
		m.engine = m.sglang(cfg, model)
		if !cfg.MetricsEnabled {
			// No /metrics route at all without --enable-metrics: FastAPI's
			// 404.
			m.serve, m.status, m.body = false, http.StatusNotFound, `{"detail":"Not Found"}`
		}
	case EngineTGI:
		m.engine = m.tgi(cfg)
	case EngineLlamaCpp:
		m.engine = m.llamacpp(cfg)
		if !cfg.MetricsEnabled {
			// tools/server/server-context.cpp:4652-4655 at llama.cpp 80fb11a.
			m.serve, m.status = false, http.StatusNotImplemented
			m.body = "{\"error\":{\"code\":501,\"message\":\"This server does not support metrics endpoint. Start it with `--metrics`\",\"type\":\"not_supported_error\"}}"
		}
	default:
		m.engine = m.vllm(cfg, model)
	}
	return m
}

func (m *metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.serve {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(m.status)
			_, _ = w.Write([]byte(m.body + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (m *metrics) gauge(name, help string, labels prometheus.Labels, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
}

func (m *metrics) counter(name, help string, labels prometheus.Labels) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	m.reg.MustRegister(c)
	return c
}

// kvFraction is the share of the KV cache n tokens take.
func kvFraction(n int64, size int) float64 {
	return min(float64(n)/float64(max(size, 1)), 1)
}

// vllm: vllm/v1/metrics/loggers.py at v0.28.0; labels model_name and
// engine (one engine core here); TTFT buckets as loggers.py sets them.
func (m *metrics) vllm(cfg Config, model string) engineSeries {
	l := prometheus.Labels{"model_name": model, "engine": "0"}
	m.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", l, func() float64 { return float64(m.load.running.Load()) })
	m.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, func() float64 { return float64(m.load.waiting.Load()) })
	m.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, func() float64 { return kvFraction(m.load.held.Load(), cfg.KVCacheTokens) })
	prompt := m.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", l)
	gen := m.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", l)
	ttft := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds.", ConstLabels: l,
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
	})
	m.reg.MustRegister(ttft)
	return engineSeries{
		prompt:   func(n int, _ bool) { prompt.Add(float64(n)) },
		token:    func(bool) { gen.Inc() },
		firstTok: func(d time.Duration, _ bool) { ttft.Observe(d.Seconds()) },
	}
}

// sglang: python/sglang/srt/observability/metrics_collector.py at
// v0.5.18. Scheduler gauges carry the scheduler's ranks; the tokenizer's
// counters and histogram carry is_streaming.
func (m *metrics) sglang(cfg Config, model string) engineSeries {
	sched := prometheus.Labels{"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
	m.gauge("sglang:num_running_reqs", "The number of running requests.", sched, func() float64 { return float64(m.load.running.Load()) })
	m.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sched, func() float64 { return float64(m.load.waiting.Load()) })
	m.gauge("sglang:token_usage", "The token usage.", sched, func() float64 { return kvFraction(m.load.held.Load(), cfg.KVCacheTokens) })
	m.gauge("sglang:num_used_tokens", "The number of used tokens.", sched, func() float64 { return float64(m.load.held.Load()) })
	tok := prometheus.Labels{"model_name": model, "engine_type": "unified"}
	prompt := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sglang:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: tok}, []string{"is_streaming"})
	gen := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sglang:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: tok}, []string{"is_streaming"})
	ttft := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sglang:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds.", ConstLabels: tok,
		Buckets: []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400},
	}, []string{"is_streaming"})
	m.reg.MustRegister(prompt, gen, ttft)
	streaming := func(s bool) string { return strconv.FormatBool(s) }
	return engineSeries{
		prompt:   func(n int, s bool) { prompt.WithLabelValues(streaming(s)).Add(float64(n)) },
		token:    func(s bool) { gen.WithLabelValues(streaming(s)).Inc() },
		firstTok: func(d time.Duration, s bool) { ttft.WithLabelValues(streaming(s)).Observe(d.Seconds()) },
	}
}

// tgi: backends/v3/src/{queue,backend,lib}.rs and router/src/server.rs at
// v3.3.7: no labels, no time to first token; generated tokens are recorded
// per finished request, in buckets of max_total_tokens/100.
func (m *metrics) tgi(cfg Config) engineSeries {
	m.gauge("tgi_queue_size", "Current queue size", nil, func() float64 { return float64(m.load.waiting.Load()) })
	m.gauge("tgi_batch_current_size", "Current batch size", nil, func() float64 { return float64(m.load.running.Load()) })
	m.gauge("tgi_batch_current_max_tokens", "Maximum tokens for the current batch", nil, func() float64 { return float64(m.load.reserved.Load()) })
	m.gauge("tgi_batch_max_total_tokens", "Maximum amount of tokens in total.", nil, func() float64 { return float64(cfg.KVCacheTokens) })
	count := prometheus.NewCounter(prometheus.CounterOpts{Name: "tgi_request_count", Help: "Total number of requests"})
	success := prometheus.NewCounter(prometheus.CounterOpts{Name: "tgi_request_success", Help: "Number of successful requests"})
	buckets := make([]float64, 100)
	for i := range buckets {
		buckets[i] = float64(cfg.MaxModelLen) / 100 * float64(i+1)
	}
	gen := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tgi_request_generated_tokens", Help: "Generated tokens per request", Buckets: buckets})
	m.reg.MustRegister(count, success, gen)
	return engineSeries{
		requested: count.Inc,
		finished:  func(n int) { success.Inc(); gen.Observe(float64(n)) },
	}
}

// llamacpp: tools/server/server-task.cpp to_metrics at llama.cpp 0.4.0
// (80fb11a): exactly its 15 families, no labels, in its order, with its help
// texts; no KV-cache gauge and no time to first token. "deferred" are
// requests waiting for a slot. internal/testing/realengine's
// TestFakeEngineServesTheRealMetricNames holds this list to the real
// server's.
func (m *metrics) llamacpp(Config) engineSeries {
	const p = "llamacpp:"
	prompt := m.counter(p+"prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", nil)
	m.counter(p+"prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", nil)
	m.counter(p+"prompt_seconds_total", "Total time spent processing prompts", nil)
	gen := m.counter(p+"tokens_predicted_total", "Number of generation tokens processed", nil)
	m.counter(p+"tokens_predicted_seconds_total", "Total time spent generating tokens", nil)
	decode := m.counter(p+"n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding", nil)
	m.counter(p+"n_tokens_max", "Largest observed sequence length (prompt + generation)", nil)
	m.counter(p+"spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", nil)
	m.counter(p+"spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model", nil)
	m.counter(p+"spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps", nil)
	m.gauge(p+"prompt_tokens_seconds", "Average prompt throughput in tokens/s", nil, func() float64 { return 0 })
	m.gauge(p+"predicted_tokens_seconds", "Average generation throughput in tokens/s", nil, func() float64 { return 0 })
	m.gauge(p+"requests_processing", "Number of requests processing", nil, func() float64 { return float64(m.load.running.Load()) })
	m.gauge(p+"requests_deferred", "Number of requests deferred", nil, func() float64 { return float64(m.load.waiting.Load()) })
	m.gauge(p+"n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", nil, func() float64 { return 0 })
	// Only the families llmgw reads, and the prompt and decode counts,
	// move; the timings stay 0.
	return engineSeries{
		prompt: func(n int, _ bool) { prompt.Add(float64(n)) },
		token:  func(bool) { gen.Inc(); decode.Inc() },
	}
}

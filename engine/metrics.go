package engine

// The Prometheus metrics each engine exports, and the names of the
// quantities llmgw reads from them: waiting and running requests, KV-cache
// use, time to first token, generated tokens. Each engine's names were read
// from its source at the version docs/engines/<engine>.md pins, which cites
// the file and line of each. The enginemetrics package turns a scrape into
// one shape with these names; fake-engine spells them independently, so a
// test that parses its output with these names checks both.
//
// This table is the per-engine metrics part of the engine descriptor (issue
// 12, "one place per engine"): when each engine becomes one descriptor,
// each entry below moves into its descriptor's Metrics field as is.

// MetricType is the Prometheus type of a metric family.
type MetricType string

// Metric types.
const (
	Gauge     MetricType = "gauge"
	Counter   MetricType = "counter"
	Histogram MetricType = "histogram"
)

// Metric names one metric family an engine exports.
type Metric struct {
	// Name is the family's name as scraped ("vllm:num_requests_waiting");
	// "" when the engine exports nothing for the quantity.
	Name string
	Type MetricType
	// Per, when set, names a second gauge that Name is divided by to give
	// the quantity (a used/total pair where the engine has no ratio).
	Per string
	// Sum: the quantity is the histogram's _sum, a running total (an
	// engine that counts generated tokens only per finished request).
	Sum bool
	// Match keeps only the series whose labels have these values, where
	// they have the label at all: for an engine that repeats a gauge once
	// per pipeline stage.
	Match map[string]string
}

// Metrics is where an engine serves Prometheus text and the names of the
// quantities llmgw reads.
type Metrics struct {
	// Path is served on the engine's HTTP port.
	Path string
	// Enable are arguments that turn the endpoint on, for an engine that
	// serves it only when asked; the recipe passes them. Empty when the
	// engine always serves it.
	Enable []string
	// RequestsWaiting and RequestsRunning are gauges of requests queued
	// and being served.
	RequestsWaiting, RequestsRunning Metric
	// KVCacheUsage is the fraction (0–1) of the KV cache in use.
	KVCacheUsage Metric
	// TimeToFirstToken is a histogram in seconds.
	TimeToFirstToken Metric
	// GeneratedTokens is a running total of tokens generated.
	GeneratedTokens Metric
}

// Known reports whether the engine exports any of the quantities.
func (m Metrics) Known() bool { return m.Path != "" }

var metricsByEngine = map[string]Metrics{
	// vLLM v0.28.0: vllm/v1/metrics/loggers.py. Every engine metric carries
	// model_name and engine (the engine core's index; one series per
	// data-parallel engine). Counters are exposed with _total.
	VLLM: {
		Path:             "/metrics",
		RequestsWaiting:  Metric{Name: "vllm:num_requests_waiting", Type: Gauge},
		RequestsRunning:  Metric{Name: "vllm:num_requests_running", Type: Gauge},
		KVCacheUsage:     Metric{Name: "vllm:kv_cache_usage_perc", Type: Gauge},
		TimeToFirstToken: Metric{Name: "vllm:time_to_first_token_seconds", Type: Histogram},
		GeneratedTokens:  Metric{Name: "vllm:generation_tokens_total", Type: Counter},
	},
	// SGLang v0.5.18: python/sglang/srt/observability/metrics_collector.py.
	// /metrics exists only with --enable-metrics (server_args.py:1547).
	// Scheduler gauges come from attention-TP rank 0 of each DP group and
	// pipeline stage (metrics_collector.py:1081-1084), labelled tp_rank,
	// pp_rank, dp_rank: the first stage's count each request once.
	SGLang: {
		Path:             "/metrics",
		Enable:           []string{"--enable-metrics"},
		RequestsWaiting:  Metric{Name: "sglang:num_queue_reqs", Type: Gauge, Match: map[string]string{"pp_rank": "0"}},
		RequestsRunning:  Metric{Name: "sglang:num_running_reqs", Type: Gauge, Match: map[string]string{"pp_rank": "0"}},
		KVCacheUsage:     Metric{Name: "sglang:token_usage", Type: Gauge, Match: map[string]string{"pp_rank": "0"}},
		TimeToFirstToken: Metric{Name: "sglang:time_to_first_token_seconds", Type: Histogram},
		GeneratedTokens:  Metric{Name: "sglang:generation_tokens_total", Type: Counter},
	},
	// TGI v3.3.7: backends/v3/src/{queue,backend,lib}.rs, router/src/server.rs
	// (metrics-exporter-prometheus, no labels, counters without _total).
	// There is no time-to-first-token metric. KV-cache use is the tokens
	// the running batch may grow to over the batch token budget found at
	// warm-up: what is reserved, not what is filled. Generated tokens are
	// recorded per finished request, as a histogram.
	TGI: {
		Path:            "/metrics",
		RequestsWaiting: Metric{Name: "tgi_queue_size", Type: Gauge},
		RequestsRunning: Metric{Name: "tgi_batch_current_size", Type: Gauge},
		KVCacheUsage:    Metric{Name: "tgi_batch_current_max_tokens", Type: Gauge, Per: "tgi_batch_max_total_tokens"},
		GeneratedTokens: Metric{Name: "tgi_request_generated_tokens", Type: Histogram, Sum: true},
	},
	// llama.cpp b4747: examples/server/server.cpp handle_metrics. /metrics
	// answers 501 unless --metrics (common/arg.cpp:2057-2063). No labels, no
	// time-to-first-token metric; "deferred" are requests waiting for a
	// free slot.
	LlamaCpp: {
		Path:            "/metrics",
		Enable:          []string{"--metrics"},
		RequestsWaiting: Metric{Name: "llamacpp:requests_deferred", Type: Gauge},
		RequestsRunning: Metric{Name: "llamacpp:requests_processing", Type: Gauge},
		KVCacheUsage:    Metric{Name: "llamacpp:kv_cache_usage_ratio", Type: Gauge},
		GeneratedTokens: Metric{Name: "llamacpp:tokens_predicted_total", Type: Counter},
	},
	// The command engine runs anything: no metrics are known.
	Command: {},
}

// MetricsOf returns the metrics engine exports; ok is false for an engine
// no recipe knows. A known engine without metrics (the command engine)
// has Known() false.
func MetricsOf(engine string) (Metrics, bool) {
	if !Known(engine) {
		return Metrics{}, false
	}
	m := metricsByEngine[engine]
	m.Enable = append([]string(nil), m.Enable...)
	return m, true
}

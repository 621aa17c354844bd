package engine

// The Prometheus metrics each engine exports, and the names of the
// quantities llmgw reads from them: waiting and running requests, KV-cache
// use, time to first token, generated tokens. Each engine's names were read
// from its source at the version docs/engines/<engine>.md pins, which cites
// the file and line of each. The enginemetrics package turns a scrape into
// one shape with these names; fake-engine spells them independently, so a
// test that parses its output with these names checks both.
//
// Each engine's names are its descriptor's Metrics field (vllm.go,
// sglang.go, tgi.go, llamacpp.go; the command engine has none).

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
	// AdapterRequests is the engine's info gauge of its LoRA adapters in
	// use, where it has one (vLLM's vllm:lora_requests_info).
	AdapterRequests AdapterRequestsMetric
}

// AdapterRequestsMetric is an info gauge whose labels name the LoRA
// adapters with requests in flight and the engine's adapter slots: a new
// series each time the set changes, each valued the time (seconds since
// the epoch) it was last current, so the greatest value is the engine's
// state now. vLLM's (vllm/v1/metrics/loggers.py:1049-1074, 1167-1179 at
// the v0.28.0 merge-base 53e211d): labels max_lora (--max-loras),
// waiting_lora_adapters and running_lora_adapters, each adapter names
// joined by ',', set with set_to_current_time at every stats round; no
// model_name or engine label. Both lists hold every adapter with a request
// waiting or running (LoRARequestStates.update_scheduler_stats,
// vllm/v1/metrics/stats.py:558-563, fills both from one loop), so they are
// the adapters in use, not those loaded: an adapter loaded and idle is in
// neither.
type AdapterRequestsMetric struct {
	// Name is the family's name; "" where the engine has none.
	Name string
	// Running, Waiting and Slots are the label names.
	Running, Waiting, Slots string
}

// Known reports whether the engine exports any of the quantities.
func (m Metrics) Known() bool { return m.Path != "" }

// MetricsOf returns the metrics engine exports; ok is false for an engine
// no recipe knows. A known engine without metrics (the command engine)
// has Known() false.
func MetricsOf(engine string) (Metrics, bool) {
	d, ok := registry[engine]
	if !ok {
		return Metrics{}, false
	}
	m := d.Metrics
	m.Enable = append([]string(nil), m.Enable...)
	return m, true
}

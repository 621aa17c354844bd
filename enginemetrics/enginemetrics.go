// Package enginemetrics reads an inference engine's Prometheus metrics in
// one shape, whatever the engine: requests waiting and running, KV-cache
// use (0–1), time to first token and generated tokens per second, with the
// time of the scrape and which of these the engine does not export.
//
// It is in three parts:
//
//   - Parse (parse.go) turns one scrape's text exposition into a Sample,
//     with the engine's names (engine.MetricsOf). It does no I/O beyond
//     the reader it is given and reads no clock.
//   - Between and Tracker (reading.go) turn two Samples of one engine into
//     a Reading: the gauges of the later one and the rates over the
//     interval between them, counter resets included. Also pure.
//   - Scrape (scrape.go) fetches a Sample over HTTP, with a bounded time
//     and body size.
//
// The driver (task stats), the controller (per-replica observation, for
// the autoscaler) and the gateway (least-loaded routing) all read engines
// through this package. docs/architecture.md lists who uses which field.
package enginemetrics

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// The quantities, as Reading's JSON names them and Absent and Missing list
// them.
const (
	FieldRequestsWaiting = "requests_waiting"
	FieldRequestsRunning = "requests_running"
	FieldKVCacheUsage    = "kv_cache_usage"
	FieldTTFT            = "ttft"
	FieldTokensPerSecond = "tokens_per_second"
)

// Quantities lists every quantity, in Reading's order.
func Quantities() []string {
	return []string{FieldRequestsWaiting, FieldRequestsRunning, FieldKVCacheUsage, FieldTTFT, FieldTokensPerSecond}
}

// Value is a number that may be unknown. An unknown value is not zero: the
// engine does not export it, the scrape lacked it, or (for the rates) there
// is no earlier scrape or nothing happened to measure. In JSON a known
// value is a number and an unknown one null (or left out, with omitzero).
type Value struct {
	V     float64
	Known bool
}

// Known returns the known value v.
func Known(v float64) Value { return Value{V: v, Known: true} }

// Get returns the value and whether it is known.
func (v Value) Get() (float64, bool) { return v.V, v.Known }

// String is the number, or "-" when unknown.
func (v Value) String() string {
	if !v.Known {
		return "-"
	}
	return strconv.FormatFloat(v.V, 'g', -1, 64)
}

// MarshalJSON writes the number, or null.
func (v Value) MarshalJSON() ([]byte, error) {
	if !v.Known || math.IsNaN(v.V) || math.IsInf(v.V, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v.V)
}

// UnmarshalJSON reads a number, or null.
func (v *Value) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*v = Value{}
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*v = Known(f)
	return nil
}

// Sample is one scrape of one engine, reduced to what llmgw reads: the
// gauges and the running totals, not yet turned into rates.
type Sample struct {
	// At is when the scrape was answered, by the reader's clock (rates
	// are measured by it).
	At time.Time
	// Waiting and Running are request counts, summed over the engine's
	// series (one per data-parallel engine or group).
	Waiting, Running Value
	// KVCache is the fraction of the KV cache in use: the mean over the
	// engine's series, or for a used/total pair the sums' quotient.
	KVCache Value
	// Tokens is the running total of generated tokens.
	Tokens Value
	// TTFT is the time-to-first-token histogram, merged over the series;
	// nil when the engine exports none or the scrape lacked it.
	TTFT *Histogram
	// Adapters is the engine's LoRA adapters in use, from its info gauge
	// (engine.AdapterRequestsMetric); nil where it has none or the scrape
	// lacked it.
	Adapters *AdapterRequests
	// Absent lists the quantities the engine does not export at all
	// (TGI and llama.cpp have no time to first token). Missing lists those
	// it exports at its pinned version but this scrape lacked (or gave as
	// NaN). Both use the quantity names above.
	Absent, Missing []string
}

// Histogram is a cumulative histogram: Count observations summing to Sum,
// Buckets[i].Count of them at most Buckets[i].UpperBound. The last bucket
// is +Inf. Buckets is nil when the series merged had different bounds
// (Sum and Count still hold).
type Histogram struct {
	Count, Sum float64
	Buckets    []Bucket
}

// Bucket is one cumulative bucket of a Histogram.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Reading is an engine's metrics in the one shape every part of llmgw
// reads: the gauges of the latest scrape and, over the interval since the
// one before (Since to At), the time to first token of the requests that
// got their first token in it and the generated tokens per second.
type Reading struct {
	// At is the latest scrape; Since the one before, the start of the
	// interval the rates cover (zero on the first scrape).
	At    time.Time `json:"at"`
	Since time.Time `json:"since,omitzero"`

	RequestsWaiting Value `json:"requests_waiting"`
	RequestsRunning Value `json:"requests_running"`
	// KVCacheUsage is 0–1.
	KVCacheUsage Value `json:"kv_cache_usage"`
	// TTFT is the time to first token over the interval.
	TTFT TTFT `json:"ttft"`
	// TokensPerSecond is generated tokens over the interval, per second.
	TokensPerSecond Value `json:"tokens_per_second"`

	// Adapters is the LoRA adapters with requests in flight, as the
	// latest scrape says; absent where the engine exports no such gauge
	// (only vLLM does) or serves no adapters.
	Adapters *AdapterRequests `json:"adapter_requests,omitempty"`

	// Absent: quantities the engine does not export (always unknown).
	// Missing: quantities the engine exports but the latest scrape lacked.
	Absent  []string `json:"absent,omitempty"`
	Missing []string `json:"missing,omitempty"`
	// Reset: a running total went down between the two scrapes (the
	// engine restarted); the rates count what the later scrape holds, the
	// least that can have happened.
	Reset bool `json:"reset,omitempty"`
}

// TTFT is time to first token, in seconds, of the requests that got their
// first token in a reading's interval.
type TTFT struct {
	// Count is how many requests got their first token in the interval:
	// known and 0 when none did, unknown on the first scrape or when the
	// engine exports no histogram.
	Count Value `json:"count"`
	// Mean is the histogram's sum over its count in the interval: exact.
	Mean Value `json:"mean_seconds"`
	// P50 and P90 are estimated from the buckets, interpolating linearly
	// within one (as Prometheus's histogram_quantile does): only as fine as
	// the engine's bucket bounds.
	P50 Value `json:"p50_seconds"`
	P90 Value `json:"p90_seconds"`
}

// AdapterRequests is an engine's LoRA adapters in use at a scrape, from
// its info gauge (engine.AdapterRequestsMetric; vLLM's
// vllm:lora_requests_info): the series the engine set last.
type AdapterRequests struct {
	// Running and Waiting name the adapters with requests running and
	// waiting. vLLM fills both with every adapter that has a request in
	// flight, waiting or running (engine.AdapterRequestsMetric).
	Running []string `json:"running,omitempty"`
	Waiting []string `json:"waiting,omitempty"`
	// Slots is the adapters the engine batches at once (vLLM's max_lora,
	// its --max-loras); 0 when the label is not a number.
	Slots int `json:"slots,omitempty"`
	// Set is when the engine last set the series, by its clock.
	Set time.Time `json:"set"`
}

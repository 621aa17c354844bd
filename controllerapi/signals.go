package controllerapi

import (
	"time"
)

// The signals, as the API names them (controller/config.PrometheusSignals).
const (
	SignalOutstanding = "outstanding"
	SignalQueued      = "queued"
	SignalArrivals    = "arrivals"
	SignalTTFT        = "ttft_p90"
	SignalWaiting     = "waiting"
	SignalKVCache     = "kv_cache_use"
)

// Signal sources, as SignalView.Source names them.
const (
	SourceGateways   = "gateways"
	SourceEngines    = "engines"
	SourcePrometheus = "prometheus"
)

// SignalView is one signal of one model at one round.
type SignalView struct {
	// Value is nil when there is no reading; Error then says why.
	Value  *float64 `json:"value"`
	Source string   `json:"source"`
	Error  string   `json:"error,omitempty"`
}

// ModelSignals is one round of an autoscaled model's signals.
type ModelSignals struct {
	At time.Time `json:"at"`
	// Serving is how many of the model's replicas served at the round.
	Serving     int        `json:"serving"`
	Outstanding SignalView `json:"outstanding"`
	Queued      SignalView `json:"queued"`
	// Arrivals is requests per second.
	Arrivals SignalView `json:"arrivals"`
	// TTFTP90 is seconds.
	TTFTP90 SignalView `json:"ttft_p90"`
	Waiting SignalView `json:"waiting"`
	// KVCache is 0–1.
	KVCache SignalView `json:"kv_cache_use"`
}

// SourceView is one signal source's state at the last round.
type SourceView struct {
	// Source is gateways, engines or prometheus; Name the gateway's URL,
	// the Prometheus query's signal, or what was read.
	Source string `json:"source"`
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	// At is when the round began; Took how long this read took.
	At   time.Time `json:"at"`
	Took float64   `json:"took_seconds"`
}

// SignalsView is GET /v1/signals: where the last round read from, and
// what it read of each autoscaled model.
type SignalsView struct {
	At       time.Time               `json:"at,omitzero"`
	Interval float64                 `json:"interval_seconds"`
	Sources  []SourceView            `json:"sources"`
	Models   map[string]ModelSignals `json:"models"`
}

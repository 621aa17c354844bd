package controllerapi

import (
	"time"
)

// HistoryPoint is one round of a model: its signals (nil where missing)
// and its counts as the last pass left them.
type HistoryPoint struct {
	At          time.Time `json:"at"`
	Outstanding *float64  `json:"outstanding"`
	Queued      *float64  `json:"queued"`
	Arrivals    *float64  `json:"arrivals"`
	TTFTP90     *float64  `json:"ttft_p90"`
	Waiting     *float64  `json:"waiting"`
	KVCache     *float64  `json:"kv_cache_use"`
	Wanted      int       `json:"wanted"`
	Has         int       `json:"has"`
	Serving     int       `json:"serving"`
}

// HistoryView is GET /v1/models/{model}/history.
type HistoryView struct {
	Model string `json:"model"`
	// At is the controller's time of the answer: the end of the span.
	At       time.Time      `json:"at"`
	Interval float64        `json:"interval_seconds"`
	Span     float64        `json:"span_seconds"`
	Points   []HistoryPoint `json:"points"`
}

package controllerapi

import (
	"time"

	"github.com/llmgw/llmgw/enginemetrics"
)

// EngineMetrics is what the controller last read from a replica's engine.
type EngineMetrics struct {
	// AllocID is the allocation read (the replica's shard 0), URL where.
	AllocID string `json:"alloc_id"`
	URL     string `json:"url"`
	Engine  string `json:"engine"`
	// Reading is the last good scrape; nil before the first.
	Reading *enginemetrics.Reading `json:"reading,omitempty"`
	// Error is why the last scrape failed (then Reading, if any, is
	// older: see its At); empty after a good one.
	Error   string    `json:"error,omitempty"`
	ErrorAt time.Time `json:"error_at,omitzero"`
	// Asleep is whether the engine sleeps (its model freed, to be loaded
	// again by the next request), as its own state says, for engines
	// with a sleep llmgw reads (llama.cpp's /props is_sleeping); nil where
	// unknown.
	Asleep *bool `json:"asleep,omitempty"`
}

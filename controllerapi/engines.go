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
	// Adapters are, for a replica of a model with LoRA adapters, each of
	// the catalog's adapters as the engine itself lists what it serves
	// (llama.cpp's GET /lora-adapters, vLLM's GET /v1/models), in the
	// catalog's order; an adapter the engine does not list, or whose list
	// could not be read, is not loaded. AdaptersError is why the last
	// read of the list failed.
	Adapters      []AdapterState `json:"adapters,omitempty"`
	AdaptersError string         `json:"adapters_error,omitempty"`
	// AdapterEvents are the last changes of the adapters' states on this
	// allocation, oldest first: an adapter the engine does not serve
	// ("not loaded"), or serves again ("loaded").
	AdapterEvents []AdapterEvent `json:"adapter_events,omitempty"`
}

// AdapterState is one of a model's LoRA adapters on one replica.
type AdapterState struct {
	Name string `json:"name"`
	// Loaded: the engine's own list holds it (by path for llama.cpp, by
	// name and path for vLLM). Never true unless the engine said so.
	Loaded bool `json:"loaded"`
	// ID is llama.cpp's id of the adapter (a request's "lora" list
	// names it): its index among those the replica loaded.
	ID *int `json:"id,omitempty"`
	// Note says why it is not loaded, or that it could not be verified.
	Note string `json:"note,omitempty"`
}

// AdapterEvent is a change of an adapter's state on a replica.
type AdapterEvent struct {
	At      time.Time `json:"at"`
	Adapter string    `json:"adapter"`
	// Event is "not loaded" or "loaded".
	Event  string `json:"event"`
	Detail string `json:"detail,omitempty"`
}

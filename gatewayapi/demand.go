package gatewayapi

import "time"

// DemandPath is where a gateway serves its demand (GET, JSON): outside
// OpenAI's /v1, so that no OpenAI route can ever take it.
const DemandPath = "/llmgw/v1/demand"

// Demand is what one gateway sees of each known model's demand, as
// DemandPath serves it. Counts are this gateway's only: a controller
// reading several gateways sums them.
type Demand struct {
	// SampledAt is when the gateway took the numbers; StartedAt when it
	// started counting.
	SampledAt time.Time `json:"sampled_at"`
	StartedAt time.Time `json:"started_at"`
	// WindowSeconds is the span the rates and TTFT quantiles are over:
	// the gateway's demand window, less in the first window after it
	// started.
	WindowSeconds float64 `json:"window_seconds"`
	// ModelListError says why the model list could not be read last; the
	// models at zero are then those of the last list read.
	ModelListError string        `json:"model_list_error,omitempty"`
	Models         []ModelDemand `json:"models"`
}

// ModelDemand is one model's demand at one gateway.
type ModelDemand struct {
	Model string `json:"model"`
	// State is StateServing, StateScaledToZero, StateWaking or
	// StateUnavailable.
	State string `json:"state"`
	// Replicas is how many healthy replicas the gateway routes to.
	Replicas int `json:"replicas"`
	// Listed is the model's entry in the model list, if it has one.
	Listed *ListedModel `json:"listed,omitempty"`
	// Outstanding is the model's requests in the gateway now, being
	// proxied or held; Queued those of them held for want of a replica.
	Outstanding int64 `json:"outstanding"`
	Queued      int   `json:"queued"`
	// OldestQueuedSeconds is how long the longest-held request has waited.
	OldestQueuedSeconds float64 `json:"oldest_queued_seconds"`
	// ArrivalsTotal counts the requests for the model that arrived since
	// the gateway started (answered or not yet, held, refused): a counter,
	// so a reader can take the rate over any interval between two reads.
	ArrivalsTotal uint64 `json:"arrivals_total"`
	// ArrivalRate is the requests per second that arrived over the window.
	ArrivalRate float64 `json:"arrival_rate"`
	// TTFTP90Seconds is the p90 of the time from sending a request to a
	// replica to the first byte of its 2xx answer to the client (for a
	// stream, the first token; for a whole answer, all of it), over the
	// requests whose first byte went out in the window; nil when there was
	// none, which is no reading, not a fast one.
	TTFTP90Seconds *float64 `json:"ttft_p90_seconds"`
	TTFTSamples    uint64   `json:"ttft_samples"`
	// Routing is the policy the gateway routes the model by
	// (RoutingLeastOutstanding, RoutingPrefix).
	Routing string `json:"routing,omitempty"`
	// Cache is what each replica's answers said of its engine's prompt
	// cache, counted since the replica joined this gateway's view.
	Cache []ReplicaCache `json:"cache,omitempty"`
}

// ReplicaCache is what one replica's completion answers said of its
// engine's prompt cache, at one gateway: counters, summed over gateways by
// a reader. The hit ratio is CachedTokens / PromptTokens; answers that did
// not say count in UnknownAnswers only (neither hits nor misses).
type ReplicaCache struct {
	Replica        string `json:"replica"`
	Endpoint       string `json:"endpoint"`
	PromptTokens   int64  `json:"prompt_tokens"`
	CachedTokens   int64  `json:"cached_prompt_tokens"`
	UnknownAnswers int64  `json:"unknown_answers"`
}

// Model states, in /v1/models and the demand.
const (
	StateServing      = "serving"        // at least one healthy replica
	StateScaledToZero = "scaled_to_zero" // none, and the controller wants none
	StateWaking       = "waking"         // none healthy yet; requests held for it wait for one
	StateUnavailable  = "no_healthy_replica"
)

// The name gateways register themselves under, in Consul, and in Nomad when they run as a job.
const (
	// GatewayServiceName is the name the gateway registers itself under
	// in Consul.
	GatewayServiceName = "llmgw-gateway"
)

// TLSTag, among a gateway registration's tags, says it serves HTTPS
// (--tls-cert-file): internal/gatewayclient then gives its URL as
// https://.
const TLSTag = "tls"

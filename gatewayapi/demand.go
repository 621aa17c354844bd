package gatewayapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

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

// DemandClient reads gateways' demand: the controller's side of
// DemandPath.
type DemandClient struct {
	// HTTP sends the requests; a client with a 5 s timeout when nil.
	HTTP *http.Client
}

// maxDemandBody bounds a demand answer read.
const maxDemandBody = 8 << 20

var defaultDemandHTTP = &http.Client{Timeout: 5 * time.Second}

// Read returns the demand of the gateway at base ("http://host:port").
// Any answer but a 200 with a JSON Demand is an error naming the URL.
func (c DemandClient) Read(ctx context.Context, base string) (Demand, error) {
	hc := c.HTTP
	if hc == nil {
		hc = defaultDemandHTTP
	}
	u := strings.TrimSuffix(base, "/") + DemandPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Demand{}, fmt.Errorf("demand %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return Demand{}, fmt.Errorf("demand: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDemandBody+1))
	if err != nil {
		return Demand{}, fmt.Errorf("demand %s: reading the answer: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Demand{}, fmt.Errorf("demand %s: %s: %.200s", u, resp.Status, body)
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
		return Demand{}, fmt.Errorf("demand %s: Content-Type %q, want application/json", u, resp.Header.Get("Content-Type"))
	}
	if len(body) > maxDemandBody {
		return Demand{}, fmt.Errorf("demand %s: answer over %d bytes", u, maxDemandBody)
	}
	var d Demand
	if err := json.Unmarshal(body, &d); err != nil {
		return Demand{}, fmt.Errorf("demand %s: %w", u, err)
	}
	if d.SampledAt.IsZero() || d.Models == nil {
		return Demand{}, fmt.Errorf("demand %s: not a demand answer (no sampled_at or models)", u)
	}
	return d, nil
}

// TLSTag, among a gateway registration's tags, says it serves HTTPS
// (--tls-cert-file): NomadGateways and ConsulGateways then give its URL
// as https://.
const TLSTag = "tls"

// gatewayURL is a gateway registration's base URL.
func gatewayURL(host string, port int, tags []string) string {
	scheme := "http://"
	if slices.Contains(tags, TLSTag) {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, strconv.Itoa(port))
}

// NomadGateways returns the base URLs ("http://host:port", "https://" for a
// registration tagged TLSTag) of the gateways
// registered in Nomad as GatewayServiceName in namespace ns ("" is
// "default"), sorted: the gateways that run as Nomad jobs with
// jobs/llmgw-gateway.nomad.hcl's service block. Nomad keeps no health on a
// registration, so a gateway listed may not answer: its demand is then
// missing, never zero.
func NomadGateways(ctx context.Context, c *nomadapi.Client, ns string) ([]string, error) {
	if ns == "" {
		ns = nomadapi.DefaultNamespace
	}
	regs, _, err := c.Services().Get(GatewayServiceName, (&nomadapi.QueryOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("nomad service %s: %w", GatewayServiceName, err)
	}
	var out []string
	for _, r := range regs {
		if r.Address != "" && r.Port > 0 {
			out = append(out, gatewayURL(r.Address, r.Port, r.Tags))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ConsulGateways returns the base URLs of the gateways registered in
// Consul as GatewayServiceName whose checks pass (ConsulRegistration's),
// sorted.
func ConsulGateways(ctx context.Context, c *consulapi.Client) ([]string, error) {
	entries, _, err := c.Health().Service(GatewayServiceName, "", true, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul service %s: %w", GatewayServiceName, err)
	}
	var out []string
	for _, e := range entries {
		if e == nil || e.Service == nil || e.Service.Port <= 0 {
			continue
		}
		host := e.Service.Address
		if host == "" && e.Node != nil {
			host = e.Node.Address
		}
		if host != "" {
			out = append(out, gatewayURL(host, e.Service.Port, e.Service.Tags))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Package gateway is `llmgw gateway`: one OpenAI-compatible endpoint over
// the replicas the controller runs, each request sent to a healthy replica
// of the model its body names. docs/gateway.md is the operator's page.
//
// # Discovery
//
// A Source publishes Snapshots: the models the catalog knows and the
// healthy replica instances. Replica services are named llmgw-<model> (an
// RFC 1123 label, see controller/render.ServiceName) and tagged llmgw,
// model=<model>, profile=<profile>, replica=<id>; the model comes from the
// tag, never from the name. ConsulSource reads Consul's catalog and health
// API (passing instances only); NomadSource reads Nomad's service
// registrations and, as Nomad keeps no health on them, each allocation's
// check results. Both use blocking queries, one per service, and keep the
// last answer through registry errors. A model in the catalog with no
// healthy replica is answered 503 with Retry-After; a model not in it 404.
//
// # Scale to zero
//
// A ModelSource (NomadModels: the controller's Nomad Variable
// gatewayapi.ModelsVariable) publishes the catalog's models with their min and wanted
// counts (gatewayapi.ModelList), so a model with no replica registered is still known.
// A request for a listed model that may be at zero (gatewayapi.ListedModel.Holdable)
// with no serving replica is held (Gateway.holdFor) in that model's queue,
// bounded per model and in all (HoldConfig), until its own deadline: 503
// with Retry-After past it or past a bound. When discovery reports a
// replica ready the queue drains in arrival order, at most HoldConfig.Burst
// released requests in flight per replica, the next released as one
// finishes; requests arriving while some are held queue behind them.
//
// # gatewayapi.Demand
//
// Each known model's modelState counts its outstanding requests (held
// ones included), its arrivals (on arrival: a counter, and over a window
// of ten slots) and its TTFT (dispatch to the first byte of a 2xx answer,
// in log-spaced buckets per slot). Gateway.Demand, served at gatewayapi.DemandPath,
// is what the controller reads (gatewayclient.DemandClient; gateways found by
// gatewayclient.NomadGateways or gatewayclient.ConsulGateways).
//
// # A request
//
// The body is read whole, at most its route's limit (Options.MaxBody; 413
// past it, before reading when Content-Length says so), within
// Options.BodyReadTimeout (408), from a buffer budget shared by all
// requests (Options.BodyMemory; 503 when spent), and checked before any
// replica sees it (internal/jsonscan's Check): nesting at most
// Options.MaxJSONDepth levels (bounded.JSONDepth, an iterative scan),
// well-formed (fastjson's validator, recursive only as deep as that
// allows, with control characters in strings refused as encoding/json
// refuses them), an object with a string top-level "model". What else the gateway reads of a body or an answer (the
// prefix key's messages, max_tokens, usage) it reads with jsonscan too,
// without decoding. A query string on an OpenAI route is refused (400).
//
// The replica is the one the model's routing policy chooses
// (gateway/routing; pool.policy, chosen as buildTable builds the table:
// Options.Routing, else the model list's). By default that is the one
// with the fewest requests in flight per unit of weight,
// (outstanding+1)/weight, ties rotating; weight comes from a weight=<n>
// tag, else the registry's (Consul's passing weight), else 1; a weight of
// 0 is used only when no other replica can take the request. The prefix
// policy routes by a key read from the body. The policy counts the
// request in flight on the replica it chose; exchange.send releases it.
//
// A request is tried on another replica (up to Options.Attempts in all)
// when it never reached the replica (the connection was refused or could
// not be made: the transport read none of the body) or the replica
// answered 502, 503 or 504, and only while nothing has been sent to the
// client. A request after which the replica failed without answering (the
// connection dropped or was reset once the request was written) is not
// retried: it may be what made the replica fail, and would make the next
// fail too (502, logged and counted in _poison_requests_total); after a
// response-header timeout it is answered 504. Other answers, 4xx and 500
// included, go to the client as they are. Once the response has started,
// a replica failing mid-body makes the gateway abort the client's
// connection (a cut-off stream must not look whole). Event streams, and
// bodies of unknown length, are flushed after every read from the
// replica. The upstream request carries the client's context, so a client
// that goes away cancels it.
//
// # The servers
//
// The handler (Gateway.Handler) is a net/http one. A plaintext listener
// is served by fasthttp's server (NewFastServer, fastserve.go): the
// handler runs on the connection's goroutine with an *http.Request and an
// http.ResponseWriter made over fasthttp's request and response, and its
// answer, held whole, is sent when it returns. A request that asks to
// stream hands the rest of its exchange to a pooled worker goroutine
// (Gateway.proxy, fastWriter.Detach), so that the connection's goroutine
// can write the answer as it comes. From watchAfter after the body is
// read, the connection is watched for the client going away (clientGone),
// which cancels the request's context. A TLS listener is served by
// net/http's (NewServer), which speaks HTTP/2 too.
//
// Requests go to replicas through an Upstream (NewUpstream's by default):
// the exchange builds a fasthttp request (Gateway.outRequest), and a body
// of at most 64 KiB is sent by upstreamClient: fasthttp writes the
// request and parses the answer, its body streamed, on the request's own
// goroutine, over kept-alive connections the gateway pools itself (dialed
// under the request's context, peeked before reuse, sent once more on a
// fresh connection if the replica had closed the pooled one, swept every
// 10 s). Larger bodies go through net/http's Transport. On fasthttp's
// server the answer's head goes from the replica's to the client's as
// bytes (fastWriter.AddHeader).
//
// # Access control
//
// With Options.Keys (a KeySource: FileKeys, NomadKeys, StaticKeys) every
// OpenAI route needs an API key (auth.go): Authorization: Bearer, or
// api-key. Keys are stored as HashKey's "sha256:<hex>" in an HCL key file
// (ParseKeys, errors at file:line); the presented secret is hashed and
// looked up in a map. A set that fails to load leaves the keys in force.
// Each key has a model allowlist (403, and /v1/models filtered) and a
// keyLimiter (limits.go): a bucket of requests and one of tokens, each a
// minute's limit, and a count in flight. Gateway.admit reserves one
// request, one slot and the estimated tokens before the request is sent
// (429 with Retry-After, nothing taken, when any is short); account.settle
// replaces the estimate with the answer's usage (usage.go: a JSON answer's
// "usage", or an event stream's usage chunk, include_usage added to the
// upstream body when the client did not ask, and its chunk then kept from
// the client). SetLimitShare makes a gateway enforce 1/N of every limit.
// Without Options.Keys none of it runs.
//
// # Circuit breakers
//
// Each endpoint has a breaker, kept across discovery updates while its
// registration stays at one address:
//
//	closed ──Failures in a row──▶ open ──OpenFor passed, next request──▶ half-open
//	   ▲                           ▲                                       │
//	   └──────probe succeeded──────┼───────────────────────────────────────┤
//	                               └──probe failed (OpenFor doubles, to MaxOpenFor)
//
// A failure is the replica's: no connection, no answer (a reset, a
// timeout), a 502, 503 or 504 answer, or an answer that broke off. Any
// other answer, a 4xx or a 500 included, is the engine answering: a
// success, which resets the count, so that no client can open a breaker
// with requests the engine refuses. Half-open lets
// exactly one request through, the probe; the others go elsewhere. A probe
// whose client went away gives its slot back without a verdict. Outcomes of
// requests sent before the breaker opened are ignored. With every replica's
// breaker open the answer is 503 with Retry-After until the first may
// probe.
//
// # Metrics
//
// llmgw_gateway_requests_total{model,code}, _upstream_latency_seconds
// (to response headers, per attempt), _time_to_first_byte_seconds (arrival
// to the first byte written, retries included), _request_duration_seconds,
// _upstream_attempts_total{model,outcome}, _breaker_state{model,replica,
// endpoint} (0 closed, 1 half-open, 2 open), _breaker_transitions_total,
// _endpoints{model}, _requests_in_flight, _outstanding_requests{model},
// _queued_requests{model}, _arrivals_total{model}, _held_total{model,
// outcome}, _hold_seconds{model}, _poison_requests_total{model,key,stage};
// with keys _key_requests_total{key},
// _key_tokens_total{key,kind}, _key_rejections_total{key,reason}, _keys,
// _key_reloads_total{outcome}, _key_reload_failing, _key_limit_share.
package gateway

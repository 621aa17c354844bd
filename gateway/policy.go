package gateway

import (
	"time"

	"github.com/llmgw/llmgw/gateway/routing"
)

// Routing policies (gatewayapi.ListedModel.Routing, Options.Routing), and
// the routes of RouteHeader (gateway/routing chooses).
const (
	RouteLeastOutstanding = routing.RouteLeastOutstanding
	RoutePrefix           = routing.RoutePrefix
	// RouteSpill is the route of a prefix-routed request whose first
	// choice was over the load bound.
	RouteSpill = routing.RouteSpill
)

// RouteHeader says, on every proxied answer, why its replica was chosen:
// RoutePrefix, RouteSpill or RouteLeastOutstanding.
const RouteHeader = "X-Llmgw-Route"

// DefaultPrefixLoadFactor is Options.PrefixLoadFactor's default: a replica
// with more than twice its share of the requests in flight is passed over
// by the prefix policy (on real llama.cpp replicas, 2 kept more of the
// cache than 1.25 in three rounds of three: docs/perf.md).
const DefaultPrefixLoadFactor = 2.0

// DefaultPrefixHistoryLoadFactor is Options.PrefixHistoryLoadFactor's
// default: a turn that continues a conversation is passed over only past
// four times its replica's share, twice a new conversation's bound. On
// real llama.cpp replicas it cut the spills from 51 to 9 and the engines'
// prompt time by a fifth at the same load (docs/perf.md).
const DefaultPrefixHistoryLoadFactor = 2 * DefaultPrefixLoadFactor

// DefaultPrefixOpeningWait is Options.PrefixOpeningWait's default: the
// longest a new conversation's first turn waits at the gateway for its
// replica to have room before it is sent anyway.
const DefaultPrefixOpeningWait = 30 * time.Second

// policyOf is the routing policy of model, listed the model list's routing
// of it (empty when unlisted or unset): the gateway's own setting for it
// (Options.Routing), else the model list's, else least-outstanding.
// buildTable asks it once per model and table.
func (g *Gateway) policyOf(model, listed string) routing.Policy {
	name := listed
	if p, ok := g.routing[model]; ok {
		name = p
	}
	if name != RoutePrefix {
		return &routing.LeastOutstanding{Now: g.now}
	}
	return &routing.Prefix{
		LoadFactor:        g.loadFactor,
		HistoryLoadFactor: g.historyFactor,
		OpeningLimit:      g.openingMax,
		OpeningWait:       g.openingWait,
		Now:               g.now,
		Waited: func(outcome string, d time.Duration) {
			g.m.openingWaits.WithLabelValues(model, outcome).Inc()
			if outcome != routing.WaitCancelled {
				g.m.openingWait.WithLabelValues(model).Observe(d.Seconds())
			}
		},
	}
}

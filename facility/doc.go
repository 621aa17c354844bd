// Package facility models the data centre a GPU fleet runs in — where every
// node sits, what each domain may draw, which domains are held — and places
// inference replicas on it. It is pure: no I/O, no logging, no goroutines,
// no clock. Parsers take a file name and its bytes and return values, or
// errors that name file:line; the planner takes values and returns
// decisions. The controller and `llmgw plan` run the same code.
//
// It also holds the model catalog (catalog.hcl: models, profiles, their
// engines and arguments, checked against the engines' contracts) and each
// model's autoscale policy, parsed here because placement reads them; the
// autoscaler that acts on a policy is controller/autoscale.
//
// # Locations and domains
//
// A node's location has five levels, coarse to fine: site, room, row, rack,
// pdu. A domain is one level and value, written "rack=r01-k01". Values are
// global (two racks called k01 are one domain), so name them uniquely; the
// fleet parser rejects a rack found in two rows, a row in two rooms, a room
// in two sites. A PDU may feed nodes of several racks. A node with no value
// at a level is in no domain of that level.
//
// # Power
//
// All draws are in watts.
//
//	shard draw   = profile.watts                     when declared
//	             = profile.gpus × gpu.power_limit    otherwise (the node's GPU of the profile's model)
//	node draw    = max(measured_watts, base_watts + Σ draw of the node's shards)
//	domain draw  = Σ node draw over the nodes in the domain
//	domain limit = budget.watts × (1 − headroom)
//
// A node's measured draw can raise its count, never lower it below what was
// promised to its shards; a node not measured counts base_watts + its shards.
// A new shard on node n grows every domain holding n by
//
//	Δ = max(measured, base + Σ shards + w) − max(measured, base + Σ shards)
//
// which is w, or less when the measured draw already covers part of it. The
// shard fits only if every budgeted domain holding n stays within its limit:
// draw + Δ ≤ limit. A domain already over its limit (say, by measured draw)
// takes nothing more, not even a shard with Δ = 0. For a multi-node replica
// the Δ of all its shards in a domain add up before the check.
//
// # Placement
//
// A replica is placed on its model's first profile that fits. For a profile,
// each node is checked in this order, and a node that fails is refused for
// the first reason: pool (the profile's pool, "default" unless set, "all"
// for any); GPU model; fabric (the node's fabric must start with the
// profile's fabric); for a multi-node profile, a value at its keep_within
// level; holds (no node in a held domain at any level); free GPUs; free CPU
// cores; free memory; budgets, as above.
//
// A single-node replica goes to the best node that passes; a multi-node
// replica (nodes > 1, one shard per node) goes whole into one domain of its
// keep_within level, every shard on the same fabric. Inside each such
// domain and fabric, nodes are taken greedily — fewest replicas of the
// model at the spread levels, then soonest ready (below), then least Δ,
// then fewest GPUs left free, then name — skipping any node whose shard
// would break a budget given the shards already taken. A single-node
// replica's node is, within the nodes sharing one location, the soonest
// ready its budgets admit, then least Δ, fewest GPUs left, name.
//
// Places that fit are ranked, best first, by:
//
//  1. spread: for each level of the profile's spread list, in order, the
//     number of the model's replicas the place's domain at that level
//     already holds (for a multi-node place, the most any of its domains
//     there holds) — fewest first, compared level by level. So no domain
//     gets a second replica while one that fits has none, and so on.
//  2. readiness, for a model whose weights a node fetches (Model.Weights,
//     a hub repository or URLs): the estimated time before the replica
//     could load there — 0 on a node whose store holds the weights
//     (Node.Weights has their key), else their size over the node's fetch
//     rate (weights.go) — soonest first; for a multi-node place, the
//     slowest of its nodes, then fewer nodes to fetch, then less fetching
//     in all. After spread, because spread is the availability promise a
//     replica must keep wherever its weights are; before headroom, because
//     a replica that serves minutes sooner beats watts kept free.
//  3. power headroom: the least any budgeted domain of the place could
//     still take after the replica, min(limit − draw after), in watts —
//     most first; a place with no budget has unlimited headroom.
//  4. GPU fit: GPUs left free on the chosen nodes — fewest first, so whole
//     nodes stay free for bigger replicas.
//  5. the node's name (single-node) or the domain's value, then fabric
//     (multi-node) — for determinism.
//
// Same input, same output: nothing depends on map order or input order.
//
// # Decisions and rejections
//
// A Decision holds the chosen Scope — every level of the place, coarse to
// fine, down to the level it was pinned at (the node's full location for a
// single-node replica, down to keep_within for a multi-node one, levels the
// shards do not share left out) — the shards with their draw, the total
// draw, and every Rejection: per profile tried, per Kind. Node-level
// reasons are summed over the fleet ("too few free NVIDIA H200 (needs 4,
// best node has 2)"); domain-level reasons name the domain ("held:
// rack=r01-k03 (PDU swap)", "over budget: pdu=p01-a would draw 17.6 kW of
// 16.4 kW", "spread: rack=r01-k01 already holds 1"), at most MaxListed per
// kind and then one "and N more" line. Places that fit, as well spread as
// the chosen one, that lost only because the chosen node holds the model's
// weights and they do not are KindWeights ("weights elsewhere: 3 other
// nodes fit but do not hold the weights (16.1 GB to fetch); the chosen node
// holds them"); the rest that lost on rank are KindRanked. Each shard of a
// decision for a model whose weights a node fetches carries its node's
// estimate (Shard.Fetch, Decision.Readiness). Kind's String is a stable
// label for metrics.
//
// # Cost
//
// A Planner indexes nodes into cells (nodes sharing one full location) and
// keeps domain draws and per-model spread counts incrementally. Per profile
// it caches, per cell, the cell's best node; a commit only invalidates the
// cells it touched. A single-node decision then costs one pass over the
// cells that hold a node of the profile's pool, GPU model and fabric —
// linear in the number of domains, not in nodes × replicas.
//
// Building a planner sorts the nodes by location and by name and hashes
// every node and domain. A PlannerCache keeps that index of the layout
// (the nodes' names, locations, pools, fabrics and GPU models, the
// budgets and holds), the profiles' static checks (pool, GPU model,
// fabric, keep_within, holds) and the last planner it returned. While the
// layout does not change, the next planner is that one brought up to
// date: what its caller committed, removed or took out of service undone,
// the nodes whose free resources, draws, weights or fetch rate changed
// and the replicas that came or went applied, and the draw of every
// domain holding one of those nodes summed again; the per-profile indexes
// catch up with the cells that reaches. Finding what changed compares
// every node with what the planner took of it and aligns the replicas
// with its own. The planner is the one NewPlanner builds, bit for bit:
// every sum is taken in the same order. See docs/power.md for the rules
// in operator terms.
package facility

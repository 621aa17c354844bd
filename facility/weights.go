package facility

import (
	"math"
	"slices"

	"github.com/llmgw/llmgw/weightsapi"
)

// Weights-aware placement: for a model whose weights a node fetches (a hub
// repository or URLs, Model.Weights with a key), every candidate node has
// an estimated time before a replica there could start loading:
//
//	fetch = 0                           the node's store holds the weights (Node.Weights has the key)
//	      = bytes / rate                otherwise, bytes known
//	      = unknown (+Inf)              otherwise
//
// bytes is the largest size any node of the fleet reports for the key,
// else the catalog's (Model.WeightsBytes); rate is the node's
// FetchBytesPerSecond, else DefaultFetchBytesPerSecond. The engine's load
// is the same for every node of a profile, so it ranks nothing and is left
// out. Places that fit rank by it after spread and before power headroom
// (doc.go, docs/controller.md "Weights-aware placement").

// DefaultFetchBytesPerSecond is the rate a fetch is estimated at on a
// node that does not say its own (Node.FetchBytesPerSecond): 100 MB/s.
const DefaultFetchBytesPerSecond = 100e6

// weightsKey is w's key (weightsapi's Key hashes the source: a few
// allocations that every decision of the model would otherwise pay),
// remembered by the source's address while what it points at is the same.
func (p *Planner) weightsKey(w *weightsapi.Source) string {
	if w == nil {
		return ""
	}
	if c, ok := p.wkeys[w]; ok && sameSource(&c.src, w) {
		return c.key
	}
	if p.wkeys == nil {
		p.wkeys = map[*weightsapi.Source]keyed{}
	}
	c := keyed{src: *w, key: w.Key()}
	if w.Hub != nil {
		h := *w.Hub
		h.Files = slices.Clone(h.Files)
		c.src.Hub = &h
	}
	c.src.URLs = slices.Clone(w.URLs)
	p.wkeys[w] = c
	return c.key
}

// keyed is a source's copy and its key.
type keyed struct {
	src weightsapi.Source
	key string
}

func sameSource(a, b *weightsapi.Source) bool {
	if a.Path != b.Path || !slices.Equal(a.URLs, b.URLs) || (a.Hub == nil) != (b.Hub == nil) {
		return false
	}
	return a.Hub == nil || a.Hub.Repo == b.Hub.Repo && a.Hub.Revision == b.Hub.Revision && slices.Equal(a.Hub.Files, b.Hub.Files)
}

// weightsOf returns the model's weights key and the size the estimates
// take: "" when the model has no weights a node fetches.
func (p *Planner) weightsOf(m *Model) (key string, bytes int64) {
	key = p.weightsKey(m.Weights)
	if key == "" {
		return "", 0
	}
	for i := range p.nodes {
		bytes = max(bytes, p.nodes[i].weights[key])
	}
	if bytes <= 0 {
		bytes = max(m.WeightsBytes, 0)
	}
	return key, bytes
}

// fetchRate is the rate node n fetches at, as the estimates take it.
func (n *pnode) fetchRate() float64 {
	if n.fetchBPS > 0 {
		return n.fetchBPS
	}
	return DefaultFetchBytesPerSecond
}

// fetchSeconds estimates how long node n needs before a replica of the
// weights key (of bytes, 0 unknown) could load there: 0 when it holds
// them, +Inf when they must be fetched and their size is not known.
func (n *pnode) fetchSeconds(key string, bytes int64) float64 {
	if _, ok := n.weights[key]; ok {
		return 0
	}
	if bytes <= 0 {
		return math.Inf(1)
	}
	return float64(bytes) / n.fetchRate()
}

// setWeights fills in the shape's readiness: per node its fetch estimate,
// and warm when the nodes that pass the static checks do not all have the
// same (a term that is the same everywhere ranks nothing, so the shape
// then places exactly as one without weights, at no cost).
func (p *Planner) setWeights(sh *shape, key string, bytes int64) {
	sh.wkey, sh.wbytes = key, bytes
	if key == "" || sh.fail == nil {
		return
	}
	sh.fetch = make([]float64, len(p.nodes))
	first, seen := 0.0, false
	for n := range p.nodes {
		f := p.nodes[n].fetchSeconds(key, bytes)
		sh.fetch[n] = f
		if sh.fail[n] != 0 {
			continue
		}
		if !seen {
			first, seen = f, true
		} else if f != first {
			sh.warm = true
		}
	}
	if sh.warm && sh.prof.Nodes == 1 {
		sh.lists = make([][]centry, len(sh.cells))
	}
}

// warmLess orders nodes of one cell for a warm single-node shape: fastest
// to ready first, then as entryLess.
func (p *Planner) warmLess(sh *shape, a, b *centry, budgeted bool) bool {
	if fa, fb := sh.fetch[a.node], sh.fetch[b.node]; fa != fb {
		return fa < fb
	}
	return p.entryLess(a, b, budgeted)
}

// sortWarm sorts a cell's nodes with room by warmLess.
func (p *Planner) sortWarm(sh *shape, list []centry, budgeted bool) {
	slices.SortFunc(list, func(a, b centry) int {
		if p.warmLess(sh, &a, &b, budgeted) {
			return -1
		}
		if p.warmLess(sh, &b, &a, budgeted) {
			return 1
		}
		return 0
	})
}

// warmPick finds the node cell sc (index i of a warm single-node shape)
// offers: the first of its nodes with room, fastest to ready first, whose
// shard every budget holding the cell admits. It returns its index in the
// cell's list and the least headroom its budgets keep; or -1 with the
// first budget (coarse to fine) the cell's best node (least growth of
// draw) would take over its limit and what it would draw, as a cell of a
// shape without weights reports.
func (p *Planner) warmPick(sh *shape, sc *scell, i int32) (pick int32, head float64, over int32, after float64) {
	bud := sc.bud[:sc.nb]
	for k := range sh.lists[i] {
		delta := &sh.lists[i][k].delta
		head = math.Inf(1)
		ok := true
		for _, bd := range bud {
			a := p.draw[bd] + delta[p.mode[bd]]
			if lim := p.limit[bd]; a > lim {
				ok = false
				break
			} else if lim-a < head {
				head = lim - a
			}
		}
		if ok {
			return int32(k), head, -1, 0
		}
	}
	delta := &sc.best.delta
	for _, bd := range bud {
		if a := p.draw[bd] + delta[p.mode[bd]]; a > p.limit[bd] {
			return -1, 0, bd, a
		}
	}
	// Unreachable: the best node is in the list, and none fitted.
	return -1, 0, bud[0], p.draw[bud[0]] + delta[p.mode[bud[0]]]
}

// gangReady measures a multi-node place's readiness: the slowest of its
// nodes' fetches (the replica starts when its last shard can), how many
// of its nodes must fetch, and their fetches' sum.
func gangReady(sh *shape, picked []centry) (ready float64, absent int, sum float64) {
	if !sh.warm {
		return 0, 0, 0
	}
	for _, e := range picked {
		f := sh.fetch[e.node]
		ready = max(ready, f)
		sum += f
		if f > 0 {
			absent++
		}
	}
	return ready, absent, sum
}

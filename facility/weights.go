package facility

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

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
		bytes = max(bytes, p.weights[i][key])
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
func (p *Planner) fetchSeconds(n int32, key string, bytes int64) float64 {
	if _, ok := p.weights[n][key]; ok {
		return 0
	}
	if bytes <= 0 {
		return math.Inf(1)
	}
	return float64(bytes) / p.nodes[n].fetchRate()
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
		f := p.fetchSeconds(int32(n), key, bytes)
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

// Fetch is what a shard's node has to fetch of the model's weights before
// its engine can load them, as the planner estimated it when it chose the
// node (Shard.Fetch; explain and `llmgw plan` show its String).
type Fetch struct {
	// Key is the weights' key (weightsapi's Key), as the node's store and
	// its attributes driver.llmgw.weights.<key> name them.
	Key string
	// Present: the node's store holds them whole; nothing to fetch.
	Present bool `json:",omitempty"`
	// Bytes to fetch, when known: the largest size a node reports for the
	// key, else the catalog's weights { bytes }; 0 present or unknown.
	Bytes int64 `json:",omitempty"`
	// BytesPerSecond is the rate the estimate takes: the node's
	// FetchBytesPerSecond, else DefaultFetchBytesPerSecond (DefaultRate).
	BytesPerSecond float64 `json:",omitempty"`
	DefaultRate    bool    `json:",omitempty"`
	// Seconds is Bytes / BytesPerSecond; 0 present or unknown.
	Seconds float64 `json:",omitempty"`
}

// String says it in a line: "weights present, nothing to fetch",
// "16.1 GB to fetch, ~2 m 41 s at 100 MB/s", or "weights to fetch, size
// unknown, at 100 MB/s".
func (f Fetch) String() string {
	switch {
	case f.Present:
		return "weights present, nothing to fetch"
	case f.Bytes > 0:
		return fmtBytes(float64(f.Bytes)) + " to fetch, ~" + fmtSeconds(f.Seconds) + " at " + fmtBytes(f.BytesPerSecond) + "/s"
	default:
		return "weights to fetch, size unknown, at " + fmtBytes(f.BytesPerSecond) + "/s"
	}
}

// fetchOf is the estimate for a shard of sh's model on node n; nil when
// the model has no weights a node fetches.
func (p *Planner) fetchOf(sh *shape, n int32) *Fetch {
	if sh.wkey == "" {
		return nil
	}
	nd := &p.nodes[n]
	f := &Fetch{Key: sh.wkey}
	if _, ok := p.weights[n][sh.wkey]; ok {
		f.Present = true
		return f
	}
	f.BytesPerSecond, f.DefaultRate = nd.fetchRate(), nd.fetchBPS <= 0
	if sh.wbytes > 0 {
		f.Bytes = sh.wbytes
		f.Seconds = float64(sh.wbytes) / f.BytesPerSecond
	}
	return f
}

// Readiness says, per shard of a placed decision whose model has weights
// a node fetches, what its node has to fetch first: "n3: weights present,
// nothing to fetch", "n7: 16.1 GB to fetch, ~2 m 41 s at 100 MB/s". Empty
// for a model without such weights.
func (d Decision) Readiness() []string {
	var out []string
	for _, s := range d.Shards {
		if s.Fetch != nil {
			out = append(out, s.Node+": "+s.Fetch.String())
		}
	}
	return out
}

// fmtBytes writes a size in decimal units with at most one decimal:
// "16.1 GB", "100 MB", "512 B".
func fmtBytes(b float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	i := 0
	for b >= 999.95 && i < len(units)-1 {
		b /= 1000
		i++
	}
	s := strconv.FormatFloat(b, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + units[i]
}

// fmtSeconds writes a duration, rounded up to the second: "41 s",
// "2 m 41 s", "1 h 5 m" (whole minutes past an hour).
func fmtSeconds(sec float64) string {
	if math.IsInf(sec, 0) || math.IsNaN(sec) {
		return "unknown"
	}
	s := int64(math.Ceil(sec))
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		return fmt.Sprintf("%d m %d s", s/60, s%60)
	default:
		m := (s + 59) / 60
		return fmt.Sprintf("%d h %d m", m/60, m%60)
	}
}

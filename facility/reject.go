package facility

import (
	"fmt"
	"strconv"
)

// Kind is why a place was refused. Its String is a stable, short name for
// metrics labels.
type Kind uint8

// The kinds of rejection, in the order placement checks them.
const (
	KindInvalid    Kind = iota + 1 // the profile itself is invalid (see Catalog.Validate)
	KindPool                       // node not in the profile's pool
	KindGPUModel                   // node has no GPU of the profile's model
	KindFabric                     // node not on a fabric of the profile's prefix
	KindKeepWithin                 // no keep_within domain can hold the whole replica
	KindHeld                       // node inside a held domain
	KindGPUs                       // too few free GPUs
	KindCPU                        // too few free CPU cores
	KindMemory                     // too little free memory
	KindOverBudget                 // a budgeted domain would draw more than its limit
	KindSpread                     // the domain already holds more of the model than another that fits
	KindRanked                     // fits, but another place ranked higher (power headroom, GPU fit, name)
	// KindWeights: fits, as well spread as the place chosen, whose nodes
	// hold the model's weights, but does not hold them itself. Ranked
	// after spread and before power headroom; numbered last so that the
	// kinds before keep their numbers (stored decisions carry them).
	KindWeights
)

var kindNames = [...]string{
	KindInvalid:    "invalid",
	KindPool:       "pool",
	KindGPUModel:   "gpu_model",
	KindFabric:     "fabric",
	KindKeepWithin: "keep_within",
	KindHeld:       "held",
	KindGPUs:       "gpus",
	KindCPU:        "cpu",
	KindMemory:     "memory",
	KindOverBudget: "over_budget",
	KindSpread:     "spread",
	KindRanked:     "ranked",
	KindWeights:    "weights",
}

// Kinds returns every kind, in check order but for KindWeights, last.
func Kinds() []Kind {
	ks := make([]Kind, 0, len(kindNames)-1)
	for k := KindInvalid; int(k) < len(kindNames); k++ {
		ks = append(ks, k)
	}
	return ks
}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// MaxListed is how many domains a decision lists one by one for each
// domain-level kind (held, over budget, keep_within, spread); the rest are
// summed up in one more rejection with an empty Domain ("… and 40 more
// domains").
const MaxListed = 8

// Rejection is one reason a place was refused.
type Rejection struct {
	Profile string // the profile that was being tried
	Kind    Kind
	// Domain is the refused domain's key, such as "rack=r01-k03"; "" when the
	// rejection sums up nodes (free GPUs, pool, …) or domains past MaxListed.
	Domain string
	// Nodes is how many nodes the rejection covers.
	Nodes   int
	Message string
}

// kW formats a pair of wattages for a message, in kW with one decimal, or in
// W when the two would read the same.
func kWPair(a, b float64) (string, string) {
	sa, sb := fmt.Sprintf("%.1f kW", a/1000), fmt.Sprintf("%.1f kW", b/1000)
	if sa == sb && a != b {
		return strconv.FormatFloat(a, 'f', -1, 64) + " W", strconv.FormatFloat(b, 'f', -1, 64) + " W"
	}
	return sa, sb
}

// collector gathers one attempt's rejections. Domain-level kinds are deduped
// by domain through the planner's marks.
type collector struct {
	shortNodes [3]int // gpus, cpu, memory
	shortBest  [3]int
	lists      [numDynKinds][]pending
	more       [numDynKinds]struct{ domains, nodes int }
	ranked     struct{ places, nodes int }
	// weights: places as well spread as the winner that lost only because
	// the winner's nodes hold the weights and theirs do not; slower: the
	// winner must fetch them too, so ranked places may have lost on a
	// slower fetch.
	weights struct{ places, nodes int }
	slower  bool
}

// The dynamic domain-level kinds, indexes into collector.lists.
const (
	dynOverBudget = iota
	dynKeepWithin
	dynSpread
	numDynKinds
)

var dynKind = [numDynKinds]Kind{KindOverBudget, KindKeepWithin, KindSpread}

type pending struct {
	dom   int32
	nodes int
	a, b  float64 // over budget: would draw, limit; spread: count; keep_within: fit, best run
}

func (c *collector) reset() {
	c.shortNodes = [3]int{}
	c.shortBest = [3]int{-1, -1, -1}
	for i := range c.lists {
		c.lists[i] = c.lists[i][:0]
		c.more[i].domains, c.more[i].nodes = 0, 0
	}
	c.ranked.places, c.ranked.nodes = 0, 0
	c.weights.places, c.weights.nodes = 0, 0
	c.slower = false
}

func (c *collector) short(ce *cellHot) {
	for i := range 3 {
		if ce.short[i] > 0 {
			c.shortNodes[i] += int(ce.short[i])
			c.shortBest[i] = max(c.shortBest[i], int(ce.shortBest[i]))
		}
	}
}

// record notes a domain-level rejection; for over budget it keeps the least
// would-draw seen for the domain.
func (p *Planner) record(c *collector, k int, dom int32, nodes int, a, b float64) {
	if p.mark[k][dom] == p.stamp {
		s := p.slot[k][dom]
		if s < 0 {
			c.more[k].nodes += nodes
			return
		}
		e := &c.lists[k][s]
		e.nodes += nodes
		if k == dynOverBudget && a < e.a {
			e.a = a
		}
		return
	}
	p.mark[k][dom] = p.stamp
	if len(c.lists[k]) < MaxListed {
		p.slot[k][dom] = int32(len(c.lists[k]))
		c.lists[k] = append(c.lists[k], pending{dom: dom, nodes: nodes, a: a, b: b})
		return
	}
	p.slot[k][dom] = -1
	c.more[k].domains++
	c.more[k].nodes += nodes
}

// finish turns what an attempt collected into rejections, in kind order.
func (p *Planner) finish(c *collector, sh *shape, placedGang bool, out []Rejection) []Rejection {
	pr := &sh.prof
	name := pr.Name
	out = append(out, sh.static...)
	for i, k := range [3]Kind{KindGPUs, KindCPU, KindMemory} {
		if c.shortNodes[i] == 0 {
			continue
		}
		var msg string
		switch k {
		case KindGPUs:
			msg = fmt.Sprintf("too few free %s (needs %d, best node has %d)", pr.GPU, pr.GPUs, c.shortBest[i])
		case KindCPU:
			msg = fmt.Sprintf("too few free CPU cores (needs %d, best node has %d)", pr.CPUCores, c.shortBest[i])
		case KindMemory:
			msg = fmt.Sprintf("too little free memory (needs %d GB, best node has %d GB)", pr.MemoryGB, c.shortBest[i])
		}
		out = append(out, Rejection{Profile: name, Kind: k, Nodes: c.shortNodes[i], Message: msg})
	}
	for k := range numDynKinds {
		for _, e := range c.lists[k] {
			key := p.doms[e.dom].key
			var msg string
			switch k {
			case dynOverBudget:
				a, b := kWPair(e.a, e.b)
				msg = "over budget: " + key + " would draw " + a + " of " + b
				if p.mode[e.dom] == modeMeasured {
					msg += ", counted measured"
				}
			case dynKeepWithin:
				msg = fmt.Sprintf("keep_within: %s has %d %s, needs %d",
					key, int(e.a), plural(int(e.a), "node that fits", "nodes that fit"), pr.Nodes)
				if int(e.b) < int(e.a) {
					msg = fmt.Sprintf("keep_within: %s has %d nodes that fit but at most %d on one fabric, needs %d",
						key, int(e.a), int(e.b), pr.Nodes)
				}
			case dynSpread:
				msg = fmt.Sprintf("spread: %s already holds %d", key, int(e.a))
			}
			out = append(out, Rejection{Profile: name, Kind: dynKind[k], Domain: key, Nodes: e.nodes, Message: msg})
		}
		if m := c.more[k]; m.domains > 0 {
			prefix := [numDynKinds]string{"over budget", "keep_within", "spread"}[k]
			out = append(out, Rejection{
				Profile: name, Kind: dynKind[k], Nodes: m.nodes,
				Message: fmt.Sprintf("%s: and %d more %s", prefix, m.domains, plural(m.domains, "domain", "domains")),
			})
		}
	}
	if n := c.weights.places; n > 0 {
		size := ""
		if sh.wbytes > 0 {
			size = " (" + fmtBytes(float64(sh.wbytes)) + " to fetch)"
		}
		msg := fmt.Sprintf("weights elsewhere: %d other %s but %s the weights%s; the chosen node holds them",
			n, plural(n, "node fits", "nodes fit"), plural(n, "does not hold", "do not hold"), size)
		if placedGang {
			l := pr.KeepWithin.String()
			msg = fmt.Sprintf("weights elsewhere: %d other %s but some of %s nodes do not hold the weights%s; the chosen nodes hold them",
				n, plural(n, l+" fits", l+"s fit"), plural(n, "its", "their"), size)
		}
		out = append(out, Rejection{Profile: name, Kind: KindWeights, Nodes: c.weights.nodes, Message: msg})
	}
	if c.ranked.places > 0 {
		what := "nodes"
		if placedGang {
			what = pr.KeepWithin.String() + "s"
		}
		format := "ranked lower: %d other %s fit, with less power headroom or a worse GPU fit"
		if c.slower {
			format = "ranked lower: %d other %s fit, with a slower fetch of the weights, less power headroom or a worse GPU fit"
		}
		out = append(out, Rejection{
			Profile: name, Kind: KindRanked, Nodes: c.ranked.nodes,
			Message: fmt.Sprintf(format, c.ranked.places, what),
		})
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

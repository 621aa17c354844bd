package facility

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// WarmSpare is a node picked to keep a model's weights fetched without
// serving it: where a replacement or a scale-up of the model would land,
// so that it need not wait for a fetch. The controller turns each into a
// fetch on the node (not a replica: a spare takes no GPU and draws
// nothing).
type WarmSpare struct {
	Model string
	Node  string
	// Profile is the model's first profile a replica of which the node
	// could take now.
	Profile string
	// Fetch is what the node still has to fetch (Present: nothing).
	Fetch Fetch
	// Reason says why the node, in words: "profile p fits here (its
	// replicas: rack=k2 0, pdu=p3 0; its spares: rack=k2 1, pdu=p3 0);
	// weights present, nothing to fetch".
	Reason string
}

// WarmSpares picks, for every model of models with WarmSpares > 0 and
// weights a node fetches (a hub repository or URLs), up to WarmSpares
// nodes that do not serve it (no shard of a replica of it in running),
// each one a replacement or a scale-up of the model could land on now:
//
//   - eligible for one of its profiles as placement checks a shard: pool,
//     GPU model, fabric, a keep_within domain for a multi-node profile, no
//     hold, free GPUs, CPU cores and memory, and every budget holding the
//     node admitting the shard's draw on top of what runs. Spares are not
//     counted as draw (they only hold disk), nor as taking resources, so a
//     node may be a spare of several models;
//
// and of those, in order:
//
//  1. the model's earlier profile first (a replacement takes the first
//     profile that fits);
//  2. spread: fewest of the model's replicas in the node's domain at each
//     of the model's first profile's spread levels, in order (a spare in a
//     rack or PDU apart from the serving replicas is there when theirs
//     fails); then, as well, fewest of the spares already picked for it,
//     so that spares stand apart from each other too;
//  3. a node whose store holds the weights already, then the soonest to
//     fetch them (its rate, the size as placement estimates it);
//  4. the node's name.
//
// Fewer are returned when fewer nodes qualify. The result lists models in
// the order given and each model's spares best first; same input, same
// output. It fails only as NewPlanner does (an invalid facility, a
// replica on an unknown node). Pure: it changes none of its inputs.
func WarmSpares(fleet Fleet, fac Facility, models []Model, running []Replica) ([]WarmSpare, error) {
	return (*PlannerCache)(nil).WarmSpares(fleet, fac, models, running)
}

// WarmSpares is WarmSpares(fleet, fac, models, running) on a planner
// from the cache: one it keeps for WarmSpares alone, so that the planner
// NewPlanner keeps is not brought to another list of replicas between
// two passes.
func (c *PlannerCache) WarmSpares(fleet Fleet, fac Facility, models []Model, running []Replica) ([]WarmSpare, error) {
	var p *Planner
	var err error
	if c == nil {
		p, err = NewPlanner(fleet, fac, running)
	} else {
		p, err = c.planner(&c.slots[1], fleet, fac, running)
	}
	if err != nil {
		return nil, err
	}
	p.shapeCap = 1 << 30
	byName := make([]int32, len(p.nodes))
	for i := range p.nodes {
		byName[p.nodes[i].rank] = int32(i)
	}
	var out []WarmSpare
	for mi := range models {
		m := &models[mi]
		if m.WarmSpares <= 0 || len(m.Profiles) == 0 || p.weightsKey(m.Weights) == "" {
			continue
		}
		out = append(out, p.warmSpares(m, byName)...)
	}
	return out, nil
}

// spareCand is a node that could be a spare of the model being picked for.
type spareCand struct {
	node    int32
	profile int // index into the model's profiles
	sh      *shape
	fetch   float64
	taken   bool
}

func (p *Planner) warmSpares(m *Model, byName []int32) []WarmSpare {
	serving := map[int32]bool{}
	for _, r := range p.running {
		if r.Model != m.Name {
			continue
		}
		for _, s := range r.Shards {
			serving[p.nodeIndex[s.Node]] = true
		}
	}
	shapes := make([]*shape, len(m.Profiles))
	for i := range m.Profiles {
		shapes[i] = p.shape(m, &m.Profiles[i])
	}
	var cands []spareCand
	for _, n := range byName {
		if serving[n] {
			continue
		}
		for pi, sh := range shapes {
			if sh.invalid == nil && p.spareFits(sh, n) {
				cands = append(cands, spareCand{node: n, profile: pi, sh: sh, fetch: p.fetchSeconds(n, sh.wkey, sh.wbytes)})
				break
			}
		}
	}
	spread := m.Profiles[0].Spread
	counts := p.countsOf(m.Name)
	spares := map[int32]int32{} // domain → spares picked for the model
	// vec is, per spread level, the replicas (or spares) in n's domain.
	vec := func(n int32, of func(int32) int32) (v [NumLevels]int32) {
		c := &p.cells[p.nodes[n].cell]
		for i, l := range spread {
			if d := c.dom[l]; d >= 0 {
				v[i] = of(d)
			}
		}
		return v
	}
	ofReplicas := func(d int32) int32 { return counts[d] }
	ofSpares := func(d int32) int32 { return spares[d] }
	var out []WarmSpare
	for len(out) < m.WarmSpares {
		best := -1
		var brv, bsv [NumLevels]int32
		for k := range cands {
			c := &cands[k]
			if c.taken {
				continue
			}
			rv, sv := vec(c.node, ofReplicas), vec(c.node, ofSpares)
			if best >= 0 {
				b := &cands[best]
				if cmp.Or(cmp.Compare(c.profile, b.profile), slices.Compare(rv[:], brv[:]), slices.Compare(sv[:], bsv[:]),
					cmp.Compare(c.fetch, b.fetch)) >= 0 {
					continue // on a full tie the earlier, by name, stays
				}
			}
			best, brv, bsv = k, rv, sv
		}
		if best < 0 {
			break
		}
		c := &cands[best]
		c.taken = true
		f := p.fetchOf(c.sh, c.node)
		out = append(out, WarmSpare{Model: m.Name, Node: p.names[c.node], Profile: c.sh.prof.Name, Fetch: *f,
			Reason: p.spareReason(c, spread, &brv, &bsv, f)})
		cl := &p.cells[p.nodes[c.node].cell]
		for _, l := range Levels() {
			if d := cl.dom[l]; d >= 0 {
				spares[d]++
			}
		}
	}
	return out
}

// spareFits reports whether node n could take a shard of sh's profile
// now: the static checks (pool, GPU model, fabric, keep_within, holds),
// free GPUs, CPU cores and memory, and every budget holding it.
func (p *Planner) spareFits(sh *shape, n int32) bool {
	if sh.fail[n] != 0 {
		return false
	}
	pr := &sh.prof
	nd := &p.nodes[n]
	g := p.gpu(nd, sh.gpu)
	if g == nil || g.free < pr.GPUs || nd.cpu < pr.CPUCores || nd.mem < pr.MemoryGB {
		return false
	}
	w := pr.ShardWatts(g.power)
	wm := w
	if sh.learnedOK {
		wm = sh.learned
	}
	delta := [2]float64{nd.delta(modeDeclared, w), nd.delta(modeMeasured, wm)}
	over, _, _ := p.budgets(p.cells[nd.cell].budgeted, &delta)
	return over < 0
}

// spareReason says why a spare was picked: its replicas (rv) and spares
// (sv) in the node's domains at the spread levels.
func (p *Planner) spareReason(c *spareCand, spread []Level, rv, sv *[NumLevels]int32, f *Fetch) string {
	var reps, spares []string
	cl := &p.cells[p.nodes[c.node].cell]
	for i, l := range spread {
		if d := cl.dom[l]; d >= 0 {
			reps = append(reps, fmt.Sprintf("%s %d", p.doms[d].key, rv[i]))
			spares = append(spares, fmt.Sprintf("%s %d", p.doms[d].key, sv[i]))
		}
	}
	where := "no spread level"
	if len(reps) > 0 {
		where = "its replicas: " + strings.Join(reps, ", ") + "; its spares: " + strings.Join(spares, ", ")
	}
	return fmt.Sprintf("profile %s fits here (%s); %s", c.sh.prof.Name, where, f)
}

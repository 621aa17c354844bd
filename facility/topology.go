package facility

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// topology is what a planner derives from the layout of a fleet — its
// nodes' names, pools, fabrics, locations and GPU models — and from a
// facility's budgets and holds: the domains, the cells, the nodes in
// location order. Building it sorts and hashes every node and domain; it
// does not change while the layout does not, so a PlannerCache keeps it.
// It is read-only once built: every planner built on it shares it, and
// takes from each fleet only what changes from pass to pass (free GPUs,
// cores and memory, base and measured draw, weights, fetch rate) and the
// replicas that run.
type topology struct {
	fac       Facility // a copy of the facility it was built for
	nodes     []pnode  // in location order; what changes from pass to pass is zero
	names     []string // per node
	pools     []string // per node, DefaultPool for none
	fabrics   []string // per node
	gpus      []pgpu   // the nodes' GPUs, node after node (pnode.g0, gn), none free
	gpuNames  []string // per gpus, its model
	loc       []Location
	nodeIndex map[string]int32
	gpuIndex  map[string]int32
	cells     []cell
	doms      []pdomain
	limit     []float64
	mode      []uint8
	nodeCount []int32
	domIndex  map[Domain]int32
	levelDoms [NumLevels][]int32
	budgeted  int // domains with a budget

	// skeletons are the profiles' static checks (place.go): the one part
	// its planners add to, which is why a PlannerCache and its planners
	// are used by one goroutine at a time.
	skeletons map[skeletonKey]*skeleton
}

// newTopology indexes a fleet's layout and a valid facility's budgets and
// holds. pos[i] is where fleet.Nodes[i] sits in location order. It refuses
// duplicate node names. A topology to keep (PlannerCache) also keeps what
// fill compares: the facility's budgets and holds and the nodes'
// locations.
func newTopology(fleet Fleet, fac Facility, keep bool) (*topology, []int32, error) {
	t := &topology{
		nodeIndex: make(map[string]int32, len(fleet.Nodes)),
		gpuIndex:  map[string]int32{},
		domIndex:  map[Domain]int32{},
	}
	for _, n := range fleet.Nodes {
		if _, dup := t.nodeIndex[n.Name]; dup {
			return nil, nil, errAt(n.Pos, fmt.Sprintf("node %q: duplicate node name", n.Name))
		}
		t.nodeIndex[n.Name] = 0
	}

	// Domains: from the nodes, budgets and holds; indexed in (level, value) order.
	var all []Domain
	seen := map[Domain]bool{}
	addDom := func(d Domain) {
		if !seen[d] {
			seen[d] = true
			all = append(all, d)
		}
	}
	for _, n := range fleet.Nodes {
		for _, l := range Levels() {
			if v := n.Location.Get(l); v != "" {
				addDom(Domain{l, v})
			}
		}
	}
	for _, b := range fac.Budgets {
		addDom(b.Domain)
	}
	for _, h := range fac.Holds {
		addDom(h.Domain)
	}
	slices.SortFunc(all, func(a, b Domain) int {
		return cmp.Or(cmp.Compare(a.Level, b.Level), strings.Compare(a.Value, b.Value))
	})
	t.doms = make([]pdomain, len(all))
	t.limit = make([]float64, len(all))
	t.mode = make([]uint8, len(all))
	t.nodeCount = make([]int32, len(all))
	for i, d := range all {
		t.domIndex[d] = int32(i)
		t.doms[i] = pdomain{dom: d, key: d.String(), hold: -1}
		t.limit[i] = math.Inf(1)
		t.mode[i] = modeIndex(fac.countDefault())
		t.levelDoms[d.Level] = append(t.levelDoms[d.Level], int32(i))
	}
	for _, b := range fac.Budgets {
		i := t.domIndex[b.Domain]
		if !t.doms[i].budgeted {
			t.budgeted++
		}
		t.doms[i].budgeted, t.doms[i].cap, t.limit[i] = true, b.Watts, fac.Limit(b)
		t.mode[i] = modeIndex(fac.CountOf(b))
	}
	for i, h := range fac.Holds {
		t.doms[t.domIndex[h.Domain]].hold = int32(i)
	}

	// Nodes, sorted by location then name, so that each cell (nodes sharing
	// one location) is a run.
	order := make([]int, len(fleet.Nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := &fleet.Nodes[a], &fleet.Nodes[b]
		for _, l := range Levels() {
			if c := strings.Compare(x.Location.Get(l), y.Location.Get(l)); c != 0 {
				return c
			}
		}
		return strings.Compare(x.Name, y.Name)
	})
	byName := make([]int, len(fleet.Nodes))
	for i := range byName {
		byName[i] = i
	}
	slices.SortFunc(byName, func(a, b int) int { return strings.Compare(fleet.Nodes[a].Name, fleet.Nodes[b].Name) })
	nameRank := make([]int32, len(fleet.Nodes))
	for r, i := range byName {
		nameRank[i] = int32(r)
	}
	var fabrics []string
	for _, n := range fleet.Nodes {
		fabrics = append(fabrics, n.Fabric)
	}
	slices.Sort(fabrics)
	fabrics = slices.Compact(fabrics)
	if keep {
		// Its own copy: the caller may change its facility's slices in
		// place before the next pass.
		t.fac = Facility{Headroom: fac.Headroom, Count: fac.Count, Budgets: slices.Clone(fac.Budgets), Holds: slices.Clone(fac.Holds)}
		if fac.Measured != nil {
			m := *fac.Measured
			t.fac.Measured = &m
		}
		t.loc = make([]Location, len(fleet.Nodes))
	}
	t.nodes = make([]pnode, len(fleet.Nodes))
	t.names = make([]string, len(fleet.Nodes))
	t.pools = make([]string, len(fleet.Nodes))
	t.fabrics = make([]string, len(fleet.Nodes))
	t.loc = make([]Location, len(fleet.Nodes))
	pos := make([]int32, len(fleet.Nodes))
	for i, oi := range order {
		n := &fleet.Nodes[oi]
		pos[oi] = int32(i)
		fr, _ := slices.BinarySearch(fabrics, n.Fabric)
		pn := pnode{fabricRank: int32(fr), rank: nameRank[oi], g0: int32(len(t.gpus)), gn: int32(len(n.GPUs))}
		t.names[i], t.pools[i], t.fabrics[i] = n.Name, poolOf(n), n.Fabric
		for _, g := range n.GPUs {
			id, ok := t.gpuIndex[g.Model]
			if !ok {
				id = int32(len(t.gpuIndex))
				t.gpuIndex[g.Model] = id
			}
			t.gpus = append(t.gpus, pgpu{model: id})
			t.gpuNames = append(t.gpuNames, g.Model)
		}
		t.nodeIndex[n.Name] = int32(i)
		if keep {
			t.loc[i] = n.Location
		}
		if i == 0 || n.Location != fleet.Nodes[order[i-1]].Location {
			c := cell{start: int32(i), hold: -1}
			for _, l := range Levels() {
				c.dom[l] = -1
				if v := n.Location.Get(l); v != "" {
					d := t.domIndex[Domain{l, v}]
					c.dom[l] = d
					if t.doms[d].budgeted {
						c.budgeted = append(c.budgeted, d)
					}
					if c.hold < 0 && t.doms[d].hold >= 0 {
						c.hold = d
					}
					t.doms[d].cells = append(t.doms[d].cells, int32(len(t.cells)))
				}
			}
			t.cells = append(t.cells, c)
		}
		pn.cell = int32(len(t.cells) - 1)
		t.cells[pn.cell].end = int32(i + 1)
		t.nodes[i] = pn
		for _, d := range t.cells[pn.cell].dom {
			if d >= 0 {
				t.nodeCount[d]++
			}
		}
	}
	return t, pos, nil
}

func poolOf(n *Node) string {
	if n.Pool == "" {
		return DefaultPool
	}
	return n.Pool
}

// fill builds a planner on the topology for fleet and fac, when the
// topology is theirs: fac has the budgets and holds it was built for
// (valid, then, as they were; holds may differ in reason and drain, which
// the planner reads from fac), and fleet the same nodes, locations, pools,
// fabrics and GPU models, in any order. Otherwise it returns nil. at[i]
// is set to where fleet.Nodes[i] sits in location order.
func (t *topology) fill(fleet Fleet, fac Facility, seen []bool, at []int32) *Planner {
	if !sameLayout(t.fac, fac) || len(fleet.Nodes) != len(t.nodes) {
		return nil
	}
	clear(seen)
	p := t.newPlanner(fleet, fac, false)
	for i := range fleet.Nodes {
		n := &fleet.Nodes[i]
		j, ok := t.nodeIndex[n.Name]
		if !ok || seen[j] {
			return nil
		}
		seen[j] = true
		at[i] = j
		pn := &p.nodes[j]
		if t.pools[j] != poolOf(n) || t.fabrics[j] != n.Fabric || t.loc[j] != n.Location || int(pn.gn) != len(n.GPUs) {
			return nil
		}
		for k, name := range t.gpuNames[pn.g0 : pn.g0+pn.gn] {
			if n.GPUs[k].Model != name {
				return nil
			}
		}
		p.setNode(j, n)
	}
	return p
}

// sameLayout reports whether two facilities index alike and validate
// alike: the same headroom, count modes and measured rule, the same
// budgets in the same order, holds on the same domains in the same order.
func sameLayout(a, b Facility) bool {
	if a.Headroom != b.Headroom || a.Count != b.Count || len(a.Budgets) != len(b.Budgets) || len(a.Holds) != len(b.Holds) ||
		(a.Measured == nil) != (b.Measured == nil) || a.Measured != nil && *a.Measured != *b.Measured {
		return false
	}
	for i := range a.Budgets {
		x, y := &a.Budgets[i], &b.Budgets[i]
		if x.Domain != y.Domain || x.Watts != y.Watts || x.Count != y.Count {
			return false
		}
	}
	for i := range a.Holds {
		if a.Holds[i].Domain != b.Holds[i].Domain {
			return false
		}
	}
	return true
}

// planner builds a planner on the topology for fleet, whose node i sits
// at pos[i], and fac (see fill), and adds running. A planner that owns the
// topology (NewPlanner's) takes its nodes and GPUs rather than copies.
func (t *topology) planner(fleet Fleet, fac Facility, pos []int32, running []Replica, own bool) (*Planner, error) {
	p := t.newPlanner(fleet, fac, own)
	for i := range fleet.Nodes {
		p.setNode(pos[i], &fleet.Nodes[i])
	}
	return p.start(running)
}

// newPlanner is a planner on the topology, its nodes still to be set
// (setNode) from what changes from pass to pass: each node's free GPUs,
// cores and memory, draws, weights and fetch rate.
func (t *topology) newPlanner(fleet Fleet, fac Facility, own bool) *Planner {
	nd := len(t.doms)
	p := &Planner{
		topo:      t,
		fac:       fac,
		nodeIndex: t.nodeIndex,
		gpuIndex:  t.gpuIndex,
		cells:     t.cells,
		doms:      t.doms,
		limit:     t.limit,
		mode:      t.mode,
		nodeCount: t.nodeCount,
		domIndex:  t.domIndex,
		levelDoms: t.levelDoms,
		budgeted:  t.budgeted,
		draw:      make([]float64, nd),
		declDraw:  make([]float64, nd),
		now:       make([]float64, nd),
		counted:   countedTable(fleet.Learned, fac.MeasuredRule()),

		measuredCount: make([]int32, nd),
		cellVer:       make([]uint32, len(t.cells)),
		counts:        map[string][]int32{},
		shapes:        map[shapeKey]*shape{},
		shapeCap:      maxShapes,
		modelIDs:      map[string]int32{},
		addW:          make([]float64, nd),
		touched:       make([]bool, nd),
	}
	for k := range numDynKinds {
		p.mark[k] = make([]uint32, nd)
		p.slot[k] = make([]int32, nd)
	}
	for i := range p.cellVer {
		p.cellVer[i] = 1
	}
	p.nodes, p.gpus, p.names, p.ownsTopo = t.nodes, t.gpus, t.names, own
	if !own {
		p.nodes, p.gpus = slices.Clone(t.nodes), slices.Clone(t.gpus)
	}
	p.weights = make([]map[string]int64, len(t.nodes))
	return p
}

// setNode sets what changes from pass to pass of node j from n.
func (p *Planner) setNode(j int32, n *Node) {
	pn := &p.nodes[j]
	pn.cpu, pn.mem, pn.base, pn.measured = n.CPUCores, n.MemoryGB, n.BaseWatts, n.MeasuredWatts
	pn.fetchBPS = n.FetchBytesPerSecond
	p.weights[j] = n.Weights
	gs := p.gpus[pn.g0 : pn.g0+pn.gn]
	for k := range gs {
		gs[k].free, gs[k].power = n.GPUs[k].Free, n.GPUs[k].PowerLimitWatts
	}
}

// start sums, once every node is set, the domains' draws from their
// nodes in location order, as NewPlanner always did, and adds running.
func (p *Planner) start(running []Replica) (*Planner, error) {
	for j := range p.nodes {
		pn := &p.nodes[j]
		for _, d := range p.cells[pn.cell].dom {
			if d >= 0 {
				p.draw[d] += pn.draw(int(p.mode[d]))
				p.declDraw[d] += pn.draw(modeDeclared)
				p.now[d] += pn.measured
				if pn.measured > 0 {
					p.measuredCount[d]++
				}
			}
		}
	}
	if len(running) > 0 {
		p.running, p.runAt = make([]Replica, 0, len(running)), make([][]shardAt, 0, len(running))
	}
	for _, r := range running {
		if err := p.Add(r); err != nil {
			return nil, err
		}
	}
	return p, nil
}

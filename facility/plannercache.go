package facility

import (
	"maps"
	"math"
	"slices"
)

// PlannerCache builds planners as NewPlanner does, keeping what it built
// for the next call:
//
//   - the index of the last fleet's layout and facility (topology): while
//     the nodes, their locations, pools, fabrics and GPU models and the
//     facility's budgets and holds stay as they were, nothing is sorted or
//     hashed again;
//   - the last planner it returned, as its caller left it (Add, Commit,
//     Remove, NotServing, Place), and the nodes' inputs it was built from.
//     The next call brings that planner up to date rather than building
//     one (refit): it compares each node's free GPUs, cores, memory,
//     draws, weights and fetch rate with what the planner took, aligns
//     the replicas that run with the planner's, takes back what its
//     caller did, and sums again the draw of every domain holding a node
//     that changed, gained or lost a shard — its nodes in location order,
//     then its shards in running's order, as NewPlanner sums it, so that
//     every sum and every tie comes out bit for bit. The placement
//     indexes the planner keeps per profile catch up through its change
//     log with the cells those nodes and domains reach.
//
// The planner it returns is the one NewPlanner returns for the same
// arguments (TestPlannerCacheMatchesNewPlanner, TestPlannerCacheRefits),
// and stays valid until the cache's next NewPlanner, which brings the
// same planner up to date for its own arguments. WarmSpares keeps a
// planner of its own apart (its replicas come in another order than a
// pass's). It is not
// safe for concurrent use, nor are the planners it returns, which share
// its index: use the cache and its planners from one goroutine at a time.
// The zero value is ready.
type PlannerCache struct {
	t      *topology
	seen   []bool
	at     []int32 // at[i]: where the last fleet's node i sat in t
	built  int     // topologies built
	refits int     // planners brought up to date rather than built

	slots [2]slot // NewPlanner's, WarmSpares'

	// refit's scratch
	stamp   uint32
	dstamp  []uint32     // per domain: stamp while its draw is summed again
	nstamp  []uint32     // per node: stamp while acc sums its shards
	acc     [][2]float64 // per node: its shards so far, declared and measured
	touched []int32
	changed []changedNode
	keepA   []bool
	fromA   []int32
	runBuf  []Replica
	atBuf   [][]shardAt
	diff    differ
}

// slot is a planner the cache keeps: the one it returned last, nil for
// none; in and gin are, per node and per GPU of the topology it was built
// on, the inputs it was built or brought up to date with; prev[i] is the
// fleet's node i as last given (its GPUs and weights copies), at pos[i]
// in the topology; reasons, the holds' reasons.
type slot struct {
	last    *Planner
	in      []nodeInput
	gin     []gpuInput
	prev    []Node
	pos     []int32
	reasons []string
}

// nodeInput is what a planner takes of a node from pass to pass, but its
// GPUs (gpuInput).
type nodeInput struct {
	cpu, mem                 int
	base, measured, fetchBPS float64
	weights                  map[string]int64 // a copy
}

type gpuInput struct {
	free  int
	power float64
}

// changedNode is a node whose inputs changed: j in the topology, i in the
// fleet.
type changedNode struct{ j, i int32 }

// Builds returns how many times the cache built the index of a layout:
// once, and again after each change of the fleet's layout or the
// facility's budgets and holds.
func (c *PlannerCache) Builds() int { return c.built }

// Refits returns how many planners the cache brought up to date from the
// one it returned before, rather than building one.
func (c *PlannerCache) Refits() int { return c.refits }

// NewPlanner is NewPlanner(fleet, fac, running), bringing the cache's last
// planner up to date where it can, else reusing the cache's index of the
// fleet's layout where it still fits. A nil cache builds every planner
// from scratch.
func (c *PlannerCache) NewPlanner(fleet Fleet, fac Facility, running []Replica) (*Planner, error) {
	if c == nil {
		return NewPlanner(fleet, fac, running)
	}
	return c.planner(&c.slots[0], fleet, fac, running)
}

// planner is NewPlanner(fleet, fac, running), brought up to date from the
// slot's planner where it can be, and kept in the slot.
func (c *PlannerCache) planner(sl *slot, fleet Fleet, fac Facility, running []Replica) (*Planner, error) {
	if p := c.refit(sl, fleet, fac, running); p != nil {
		c.refits++
		return p, nil
	}
	sl.last = nil
	if c.t != nil && len(c.seen) == len(c.t.nodes) {
		if p := c.t.fill(fleet, fac, c.seen, c.at); p != nil {
			return c.keep(sl, fleet, fac, p, running)
		}
	}
	c.t = nil
	c.slots = [2]slot{} // on another topology
	if err := fac.Validate(); err != nil {
		return nil, err
	}
	t, pos, err := newTopology(fleet, fac, true)
	if err != nil {
		return nil, err
	}
	c.t, c.seen, c.at, c.built = t, make([]bool, len(t.nodes)), pos, c.built+1
	return c.keep(sl, fleet, fac, t.newPlannerAt(fleet, fac, pos), running)
}

// newPlannerAt is a planner on the topology with fleet's nodes set, node i
// at pos[i], its running replicas still to add (start).
func (t *topology) newPlannerAt(fleet Fleet, fac Facility, pos []int32) *Planner {
	p := t.newPlanner(fleet, fac, false)
	for i := range fleet.Nodes {
		p.setNode(pos[i], &fleet.Nodes[i])
	}
	return p
}

// keep adds running to a planner built on c.t for fleet (whose node i sits
// at c.at[i]) and keeps it in the slot, with what it was built from, for
// the next call.
func (c *PlannerCache) keep(sl *slot, fleet Fleet, fac Facility, p *Planner, running []Replica) (*Planner, error) {
	p, err := p.start(running)
	if err != nil {
		return nil, err
	}
	t := c.t
	sl.in, sl.gin = make([]nodeInput, len(t.nodes)), make([]gpuInput, len(t.gpus))
	sl.prev, sl.pos = make([]Node, len(t.nodes)), slices.Clone(c.at)
	gpus := make([]GPU, 0, len(t.gpus))
	for i := range fleet.Nodes {
		n := &fleet.Nodes[i]
		sl.record(p, c.at[i], n)
		k := len(gpus)
		gpus = append(gpus, n.GPUs...)
		sl.prev[i] = Node{Name: n.Name, Pool: n.Pool, Location: n.Location, CPUCores: n.CPUCores, MemoryGB: n.MemoryGB,
			BaseWatts: n.BaseWatts, MeasuredWatts: n.MeasuredWatts, Fabric: n.Fabric, GPUs: gpus[k:len(gpus):len(gpus)],
			Weights: sl.in[c.at[i]].weights, FetchBytesPerSecond: n.FetchBytesPerSecond}
	}
	sl.reasons = sl.reasons[:0]
	for _, h := range fac.Holds {
		sl.reasons = append(sl.reasons, h.Reason)
	}
	if len(c.nstamp) != len(t.nodes) || len(c.dstamp) != len(t.doms) {
		c.dstamp, c.nstamp, c.acc, c.stamp = make([]uint32, len(t.doms)), make([]uint32, len(t.nodes)), make([][2]float64, len(t.nodes)), 0
	}
	p.isDirty = make([]bool, len(t.nodes))
	sl.last = p
	return p, nil
}

// record notes node n's inputs as node j of planner p took them. The
// planner reads the weights from the slot's copy, which nothing changes.
func (sl *slot) record(p *Planner, j int32, n *Node) {
	sl.in[j] = nodeInput{cpu: n.CPUCores, mem: n.MemoryGB, base: n.BaseWatts, measured: n.MeasuredWatts,
		fetchBPS: n.FetchBytesPerSecond, weights: maps.Clone(n.Weights)}
	p.weights[j] = sl.in[j].weights
	g0 := p.nodes[j].g0
	for k := range n.GPUs {
		sl.gin[int(g0)+k] = gpuInput{free: n.GPUs[k].Free, power: n.GPUs[k].PowerLimitWatts}
	}
}

func sameFloat(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

// sameNode reports whether node n is as q was given, in all a planner
// takes of it.
func sameNode(q, n *Node) bool {
	if q.Name != n.Name || q.Pool != n.Pool || q.Location != n.Location || q.Fabric != n.Fabric ||
		q.CPUCores != n.CPUCores || q.MemoryGB != n.MemoryGB || !sameFloat(q.BaseWatts, n.BaseWatts) ||
		!sameFloat(q.MeasuredWatts, n.MeasuredWatts) || !sameFloat(q.FetchBytesPerSecond, n.FetchBytesPerSecond) ||
		len(q.GPUs) != len(n.GPUs) || len(q.Weights) != len(n.Weights) || len(n.Weights) > 0 && !maps.Equal(q.Weights, n.Weights) {
		return false
	}
	for k := range q.GPUs {
		a, b := &q.GPUs[k], &n.GPUs[k]
		if a.Model != b.Model || a.Free != b.Free || !sameFloat(a.PowerLimitWatts, b.PowerLimitWatts) {
			return false
		}
	}
	return true
}

// refit brings the cache's last planner up to date for fleet, fac and
// running, or returns nil where it cannot: no planner kept, the layout
// or the facility's budgets and holds changed, the learned draws
// changed, the replicas differ by more than maxEdits, or a replica new to
// it is refused (the planner built from scratch then says why). A nil
// return leaves no planner kept.
func (c *PlannerCache) refit(sl *slot, fleet Fleet, fac Facility, running []Replica) *Planner {
	p, t := sl.last, c.t
	if p == nil || p.topo != t || !sameLayout(t.fac, fac) || len(fleet.Nodes) != len(t.nodes) {
		return nil
	}
	sl.last = nil // until it is up to date
	counted := countedTable(fleet.Learned, fac.MeasuredRule())
	if !maps.Equal(counted, p.counted) {
		return nil
	}

	// The nodes: the layout as the topology has it, and which changed.
	clear(c.seen)
	c.changed = c.changed[:0]
	rates := false // a node's weights or fetch rate changed
	for i := range fleet.Nodes {
		n := &fleet.Nodes[i]
		q := &sl.prev[i]
		if sameNode(q, n) { // as the node here was last: nothing to see
			j := sl.pos[i]
			if c.seen[j] {
				return nil
			}
			c.seen[j] = true
			continue
		}
		j := sl.pos[i]
		if t.names[j] != n.Name {
			k, ok := t.nodeIndex[n.Name]
			if !ok {
				return nil
			}
			j, sl.pos[i] = k, k
		}
		if c.seen[j] {
			return nil
		}
		c.seen[j] = true
		pn := &p.nodes[j]
		if t.pools[j] != poolOf(n) || t.fabrics[j] != n.Fabric || t.loc[j] != n.Location || int(pn.gn) != len(n.GPUs) {
			return nil
		}
		gin := sl.gin[pn.g0 : pn.g0+pn.gn]
		same := true
		for k, name := range t.gpuNames[pn.g0 : pn.g0+pn.gn] {
			g := &n.GPUs[k]
			if g.Model != name {
				return nil
			}
			same = same && gin[k].free == g.Free && sameFloat(gin[k].power, g.PowerLimitWatts)
		}
		in := &sl.in[j]
		rate := !sameFloat(in.fetchBPS, n.FetchBytesPerSecond) || !maps.Equal(in.weights, n.Weights)
		if rate || !same || in.cpu != n.CPUCores || in.mem != n.MemoryGB ||
			!sameFloat(in.base, n.BaseWatts) || !sameFloat(in.measured, n.MeasuredWatts) {
			c.changed = append(c.changed, changedNode{j: j, i: int32(i)})
			rates = rates || rate
		}
		gpus := q.GPUs
		if len(gpus) != len(n.GPUs) {
			gpus = make([]GPU, len(n.GPUs))
		}
		copy(gpus, n.GPUs)
		*q = Node{Name: n.Name, Pool: n.Pool, Location: n.Location, CPUCores: n.CPUCores, MemoryGB: n.MemoryGB,
			BaseWatts: n.BaseWatts, MeasuredWatts: n.MeasuredWatts, Fabric: n.Fabric, GPUs: gpus,
			FetchBytesPerSecond: n.FetchBytesPerSecond}
		if rate {
			q.Weights = maps.Clone(n.Weights)
		} else {
			q.Weights = in.weights
		}
	}
	reasons := false // a hold's reason changed: the shapes' rejections name it
	for i, h := range fac.Holds {
		reasons = reasons || sl.reasons[i] != h.Reason
	}

	// The replicas: those kept in the order they ran, those that left,
	// those new.
	a := p.running
	if !c.diff.align(a, running, &c.keepA, &c.fromA) {
		return nil
	}
	newRun, newAt := c.runBuf[:0], c.atBuf[:0]
	for k := range running {
		if i := c.fromA[k]; i >= 0 {
			newRun, newAt = append(newRun, a[i]), append(newAt, p.runAt[i])
			continue
		}
		r := &running[k]
		at, err := p.shardsAt(*r)
		if err != nil {
			return nil
		}
		newRun = append(newRun, Replica{ID: r.ID, Model: r.Model, Profile: r.Profile, Shards: slices.Clone(r.Shards)})
		newAt = append(newAt, at)
	}

	// From here on it cannot fail. The spread counts: what NotServing took
	// out back in, what left out, what is new in.
	for id := range p.notServing {
		if i := slices.IndexFunc(a, func(r Replica) bool { return r.ID == id }); i >= 0 {
			p.count(a[i].Model, p.runAt[i])
		}
	}
	p.notServing = nil
	for i := range a {
		if !c.keepA[i] {
			p.uncount(a[i].Model, p.runAt[i])
			for _, s := range p.runAt[i] {
				p.markDirty(s.node)
			}
		}
	}
	for k := range running {
		if c.fromA[k] < 0 {
			p.count(running[k].Model, newAt[k])
			for _, s := range newAt[k] {
				p.markDirty(s.node)
			}
		}
	}
	clear(a) // the old list is the next one's buffer
	c.runBuf, c.atBuf = a[:0], p.runAt[:0]
	clear(c.atBuf[:cap(c.atBuf)])
	p.running, p.runAt = newRun, newAt
	if len(newRun) == 0 {
		p.running, p.runAt = nil, nil // as NewPlanner's without
	}

	// The nodes whose inputs changed.
	for _, ch := range c.changed {
		n := &fleet.Nodes[ch.i]
		p.setNode(ch.j, n)
		sl.record(p, ch.j, n)
		sl.prev[ch.i].Weights = sl.in[ch.j].weights
		p.markDirty(ch.j)
	}

	// Every node whose accounting changed (here or since the planner was
	// returned) takes its resources from the fleet again, and its shards'
	// draw from running; every domain holding one is summed again.
	c.stamp++
	if c.stamp == 0 {
		clear(c.dstamp)
		clear(c.nstamp)
		c.stamp = 1
	}
	touched := c.touched[:0]
	for _, j := range p.dirty {
		pn := &p.nodes[j]
		in := &sl.in[j]
		pn.cpu, pn.mem, pn.promised = in.cpu, in.mem, [2]float64{}
		for k := pn.g0; k < pn.g0+pn.gn; k++ {
			p.gpus[k].free, p.gpus[k].power = sl.gin[k].free, sl.gin[k].power
		}
		c.nstamp[j], c.acc[j] = c.stamp, [2]float64{}
		for _, d := range p.cells[pn.cell].dom {
			if d >= 0 && c.dstamp[d] != c.stamp {
				c.dstamp[d] = c.stamp
				touched = append(touched, d)
			}
		}
	}
	c.touched = touched
	c.resum(p, touched)
	for _, j := range p.dirty {
		pn := &p.nodes[j]
		pn.promised = c.acc[j]
		p.cellVer[pn.cell]++
		p.logChange(pn.cell, -1)
		p.isDirty[j] = false
	}
	p.dirty = p.dirty[:0]

	// The shapes that read what changed.
	if reasons {
		p.shapes, p.shapeOrder = map[shapeKey]*shape{}, nil
	} else if rates {
		for k, sh := range p.shapes {
			if sh.wkey != "" {
				delete(p.shapes, k)
			}
		}
		p.shapeOrder = slices.DeleteFunc(p.shapeOrder, func(k shapeKey) bool { return p.shapes[k] == nil })
	}
	for i, h := range fac.Holds {
		sl.reasons[i] = h.Reason
	}
	p.fac, p.shapeCap, p.scanOnly = fac, maxShapes, false
	sl.last = p
	return p
}

// markDirty notes that node j's accounting changed.
func (p *Planner) markDirty(j int32) {
	if p.isDirty != nil && !p.isDirty[j] {
		p.isDirty[j] = true
		p.dirty = append(p.dirty, j)
	}
}

// resum sums the draw of the touched domains (c.dstamp) again as start and
// Add sum it: their nodes' own draw in location order, then each shard on
// their nodes in running's order, by how much it grows its node's draw.
// It leaves in c.acc each dirty node's shards summed (its promised).
func (c *PlannerCache) resum(p *Planner, touched []int32) {
	if len(touched) == 0 {
		return
	}
	for _, d := range touched {
		m := int(p.mode[d])
		var draw, decl, now float64
		var measured int32
		for _, ci := range p.doms[d].cells {
			cl := &p.cells[ci]
			for j := cl.start; j < cl.end; j++ {
				pn := &p.nodes[j]
				z := pnode{base: pn.base, measured: pn.measured} // nothing promised yet
				draw += z.draw(m)
				decl += z.draw(modeDeclared)
				now += pn.measured
				if pn.measured > 0 {
					measured++
				}
			}
		}
		p.draw[d], p.declDraw[d], p.now[d], p.measuredCount[d] = draw, decl, now, measured
	}
	stamp := c.stamp
	for _, at := range p.runAt {
		for _, s := range at {
			j := s.node
			pn := &p.nodes[j]
			cl := &p.cells[pn.cell]
			if !p.isDirty[j] {
				hit := false
				for _, d := range cl.dom {
					if d >= 0 && c.dstamp[d] == stamp {
						hit = true
						break
					}
				}
				if !hit {
					continue
				}
			}
			if c.nstamp[j] != stamp {
				c.nstamp[j], c.acc[j] = stamp, [2]float64{}
			}
			acc := &c.acc[j]
			var delta [2]float64
			for m := range delta { // as addDraw
				old := max(pn.measured, pn.base+acc[m])
				acc[m] += s.w[m]
				delta[m] = max(pn.measured, pn.base+acc[m]) - old
			}
			for _, d := range cl.dom {
				if d >= 0 && c.dstamp[d] == stamp {
					p.draw[d] += delta[p.mode[d]]
					p.declDraw[d] += delta[modeDeclared]
				}
			}
		}
	}
}

// sameReplica reports whether two replicas are the same to a planner.
func sameReplica(a, b *Replica) bool {
	if a.ID != b.ID || a.Model != b.Model || a.Profile != b.Profile || len(a.Shards) != len(b.Shards) {
		return false
	}
	for i := range a.Shards {
		x, y := &a.Shards[i], &b.Shards[i]
		if x.Node != y.Node || !sameFloat(x.Watts, y.Watts) || x.GPU != y.GPU || x.GPUs != y.GPUs ||
			x.CPUCores != y.CPUCores || x.MemoryGB != y.MemoryGB ||
			(x.Fetch == nil) != (y.Fetch == nil) || x.Fetch != nil && *x.Fetch != *y.Fetch {
			return false
		}
	}
	return true
}

// maxEdits bounds the replicas a planner brought up to date may gain and
// lose (together); past it the cache builds the planner.
const maxEdits = 128

// differ aligns two lists of replicas: the longest common subsequence of
// the same replicas (Myers' O((N+M)·D) difference algorithm, D the edits),
// so that the replicas kept run in the order they ran.
type differ struct {
	v      []int32 // per diagonal k: the furthest x reached, at v[k+off]
	trace  []int32 // v's diagonals [-d, d] before each step d, one after another
	starts []int   // per step d: where its part of trace starts
}

// align sets keepA[i] for each of a kept, and fromA[k] to the index in a
// of b[k] kept, or -1 for one new. It reports false when the lists differ
// by more than maxEdits.
func (df *differ) align(a, b []Replica, keepA *[]bool, fromA *[]int32) bool {
	n, m := len(a), len(b)
	ka, fa := slices.Grow((*keepA)[:0], n)[:n], slices.Grow((*fromA)[:0], m)[:m]
	clear(ka)
	for k := range fa {
		fa[k] = -1
	}
	*keepA, *fromA = ka, fa
	maxD := min(n+m, maxEdits)
	off := maxD + 1
	df.v = slices.Grow(df.v[:0], 2*maxD+3)[:2*maxD+3]
	v := df.v
	v[off+1] = 0
	df.trace, df.starts = df.trace[:0], df.starts[:0]
	for d := 0; d <= maxD; d++ {
		df.starts = append(df.starts, len(df.trace))
		df.trace = append(df.trace, v[off-d:off+d+1]...)
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = int(v[off+k+1])
			} else {
				x = int(v[off+k-1]) + 1
			}
			y := x - k
			for x < n && y < m && sameReplica(&a[x], &b[y]) {
				x, y = x+1, y+1
			}
			v[off+k] = int32(x)
			if x >= n && y >= m {
				df.backtrack(d, n, m, ka, fa)
				return true
			}
		}
	}
	return false
}

// backtrack walks the edits of align's D-path back from (n, m), marking
// the diagonal moves: the replicas kept.
func (df *differ) backtrack(steps, x, y int, ka []bool, fa []int32) {
	for d := steps; d > 0; d-- {
		k := x - y
		tr := df.trace[df.starts[d]:]
		at := func(kk int) int { return int(tr[kk+d]) }
		prevK := k - 1
		if k == -d || k != d && at(k-1) < at(k+1) {
			prevK = k + 1
		}
		prevX := at(prevK)
		sx := prevX + 1 // after a move right: a[prevX] left
		if prevK == k+1 {
			sx = prevX // after a move down: b[prevX-prevK] is new
		}
		for x > sx {
			x, y = x-1, y-1
			ka[x], fa[y] = true, int32(x)
		}
		x, y = prevX, prevX-prevK
	}
	for x > 0 {
		x, y = x-1, y-1
		ka[x], fa[y] = true, int32(x)
	}
}

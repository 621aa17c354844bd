package facility

import (
	"math"
	"math/bits"
)

// The index of a single-node shape: placeOne without visiting every cell.
//
// A cell's part in a decision (over which budget, its spread counts, its
// power headroom, the short counts) depends only on its own nodes, the draw
// of its budgeted domains and the model's counts in its spread domains. The
// planner logs every change of those (chg); a shape re-evaluates only the
// cells a logged change reaches, keeps the results in a tournament tree
// (the best place, the short counts and the nodes that can only lose by
// rank, summed) and in two sets (the cells over a budget, the cells holding
// some of the model at a spread level), and files the rejections from
// those: the same decisions and rejections as the scan over every cell
// (placeOneScan), which TestIndexedPlaceMatchesScan holds it to.

// change is one entry of the planner's change log: the nodes of a cell, and
// the draw of its domains, changed (model < 0), or the model's counts in
// the cell's domains did.
type change struct {
	cell  int32
	model int32
}

// maxChangeLog bounds the log; past it the log starts again and every
// shape re-evaluates all its cells once.
const maxChangeLog = 1 << 14

// logChange notes a change for the shapes' indexes.
func (p *Planner) logChange(cell, model int32) {
	if len(p.chg) >= maxChangeLog {
		p.chg = p.chg[:0]
		p.chgGen++
	}
	p.chg = append(p.chg, change{cell: cell, model: model})
}

// modelIndex numbers model names for the change log.
func (p *Planner) modelIndex(name string) int32 {
	id, ok := p.modelIDs[name]
	if !ok {
		id = int32(len(p.modelIDs))
		p.modelIDs[name] = id
	}
	return id
}

// The categories of a cell in a single-node decision.
const (
	oneNone   = iota // no node with room
	oneOver          // its best node would take a budget over its limit
	oneZero          // fits, and holds none of the model at any spread level
	oneSpread        // fits, and holds some of the model at a spread level
)

// oneEval is what a cell brings to a single-node decision.
type oneEval struct {
	cat   uint8
	over  int32   // oneOver: the first budgeted domain over, coarse to fine
	after float64 // oneOver: what it would draw
	head  float64 // oneZero, oneSpread: the least headroom its budgets keep
	sv    [NumLevels]int32
	// pick is, for a warm shape's cell (weights.go), the node it offers:
	// its index in the cell's list plus one (0: the cell's best).
	pick int32
}

// oneAgg sums a range of cells of the tree.
type oneAgg struct {
	best      int32    // the best cell that fits, or -1
	zeroNodes int32    // Σ nodes with room of the oneZero cells
	short     [3]int32 // Σ nodes short of GPUs, CPU, memory
	shortBest [3]int32 // the most any of those has, -1 for none
}

// watch is a shape's reading of the change log: which of its cells
// changed since it last looked.
type watch struct {
	model int32
	gen   uint32   // the change log's generation it has read
	read  int      // how much of the log it has read
	pos   []int32  // per planner cell: its index in shape.cells, or -1 (shape.pos, shared)
	dirty []uint64 // per shape cell: to be evaluated again
}

func (p *Planner) newWatch(sh *shape) watch {
	return watch{model: p.modelIndex(sh.model), gen: p.chgGen, read: len(p.chg), pos: sh.pos,
		dirty: make([]uint64, (len(sh.cells)+63)/64)}
}

// catchUp reads the log's new entries and marks the shape's cells they
// reach dirty. It reports false, marking nothing, when the shape has to
// evaluate every cell again (the log started again, or it holds more
// changes than the shape has cells).
func (p *Planner) catchUp(sh *shape, w *watch) bool {
	if w.gen != p.chgGen || len(p.chg)-w.read > len(sh.cells) {
		w.gen, w.read = p.chgGen, len(p.chg)
		return false
	}
	for _, c := range p.chg[w.read:] {
		if c.model < 0 {
			w.markCell(c.cell)
			for _, d := range p.cells[c.cell].budgeted {
				w.markDomain(p, d)
			}
		} else if c.model == w.model {
			for _, l := range sh.prof.Spread {
				if d := p.cells[c.cell].dom[l]; d >= 0 {
					w.markDomain(p, d)
				}
			}
		}
	}
	w.read = len(p.chg)
	return true
}

func (w *watch) markCell(c int32) {
	if i := w.pos[c]; i >= 0 {
		bitSet(w.dirty, i)
	}
}

func (w *watch) markDomain(p *Planner, d int32) {
	for _, c := range p.doms[d].cells {
		w.markCell(c)
	}
}

type oneIndex struct {
	watch
	eval    []oneEval
	size    int // leaves of the tree, a power of two
	tree    []oneAgg
	over    []uint64 // per shape cell: oneOver
	spread  []uint64 // per shape cell: oneSpread
	pending []int32  // scratch: tree nodes to recompute
	// absent is, for a warm shape, a second tree over the cells: of the
	// nodes with room of the oneZero cells, those without the weights,
	// summed (kept apart so that a shape without weights pays nothing).
	absent []int32
}

func bitSet(b []uint64, i int32)   { b[i>>6] |= 1 << (uint(i) & 63) }
func bitClear(b []uint64, i int32) { b[i>>6] &^= 1 << (uint(i) & 63) }
func bitSetTo(b []uint64, i int32, v bool) {
	if v {
		bitSet(b, i)
	} else {
		bitClear(b, i)
	}
}

// eachBit calls f for every set bit, in order.
func eachBit(b []uint64, f func(i int32)) {
	for w, x := range b {
		for x != 0 {
			t := bits.TrailingZeros64(x)
			f(int32(w<<6 + t))
			x &= x - 1
		}
	}
}

// index returns the shape's index, built on first use and brought up to
// date with the change log.
func (p *Planner) index(sh *shape) *oneIndex {
	ix := sh.one
	if ix == nil {
		n := len(sh.cells)
		ix = &oneIndex{watch: p.newWatch(sh), eval: make([]oneEval, n)}
		ix.size = 1
		for ix.size < n {
			ix.size *= 2
		}
		ix.tree = make([]oneAgg, 2*ix.size)
		ix.over, ix.spread = make([]uint64, len(ix.dirty)), make([]uint64, len(ix.dirty))
		if sh.warm {
			ix.absent = make([]int32, 2*ix.size)
		}
		sh.one = ix
		p.rebuildOne(sh, ix)
		return ix
	}
	if !p.catchUp(sh, &ix.watch) {
		p.rebuildOne(sh, ix)
		return ix
	}
	p.updateOne(sh, ix)
	return ix
}

// rebuildOne evaluates every cell and builds the tree.
func (p *Planner) rebuildOne(sh *shape, ix *oneIndex) {
	counts := p.countsOf(sh.model)
	for i := range sh.cells {
		p.evalOne(sh, ix, int32(i), counts)
		ix.tree[ix.size+i] = ix.leaf(sh, int32(i))
	}
	for i := len(sh.cells); i < ix.size; i++ {
		ix.tree[ix.size+i] = oneAgg{best: -1, shortBest: [3]int32{-1, -1, -1}}
	}
	for k := ix.size - 1; k >= 1; k-- {
		ix.tree[k] = p.mergeOne(sh, ix, &ix.tree[2*k], &ix.tree[2*k+1])
	}
	if ix.absent != nil {
		clear(ix.absent)
		for i := range sh.cells {
			ix.absent[ix.size+i] = ix.leafAbsent(sh, int32(i))
		}
		for k := ix.size - 1; k >= 1; k-- {
			ix.absent[k] = ix.absent[2*k] + ix.absent[2*k+1]
		}
	}
	clear(ix.dirty)
}

// leafAbsent is cell i's part of the absent tree.
func (ix *oneIndex) leafAbsent(sh *shape, i int32) int32 {
	if ix.eval[i].cat == oneZero {
		return sh.cells[i].absent
	}
	return 0
}

// updateOne evaluates the dirty cells again and recomputes the tree above
// them.
func (p *Planner) updateOne(sh *shape, ix *oneIndex) {
	counts := p.countsOf(sh.model)
	pend := ix.pending[:0]
	for w, x := range ix.dirty {
		for x != 0 {
			i := int32(w<<6 + bits.TrailingZeros64(x))
			x &= x - 1
			p.evalOne(sh, ix, i, counts)
			ix.tree[ix.size+int(i)] = ix.leaf(sh, i)
			if ix.absent != nil {
				ix.absent[ix.size+int(i)] = ix.leafAbsent(sh, i)
			}
			// (With one cell its leaf is the root: nothing above.)
			if k := int32(ix.size+int(i)) >> 1; k >= 1 && (len(pend) == 0 || pend[len(pend)-1] != k) {
				pend = append(pend, k)
			}
		}
		ix.dirty[w] = 0
	}
	// pend is ascending; so are the parents of its nodes.
	for len(pend) > 0 {
		next := pend[:0]
		for _, k := range pend {
			ix.tree[k] = p.mergeOne(sh, ix, &ix.tree[2*k], &ix.tree[2*k+1])
			if ix.absent != nil {
				ix.absent[k] = ix.absent[2*k] + ix.absent[2*k+1]
			}
			if k == 1 {
				continue
			}
			if q := k >> 1; len(next) == 0 || next[len(next)-1] != q {
				next = append(next, q)
			}
		}
		pend = next
	}
	ix.pending = pend
}

// evalOne evaluates cell i as placeOneScan does.
func (p *Planner) evalOne(sh *shape, ix *oneIndex, i int32, counts []int32) {
	sc := &sh.cells[i]
	if sc.version != p.cellVer[sc.cell] {
		p.recache(sh, i)
	}
	e := &ix.eval[i]
	*e = oneEval{}
	if sc.feasible > 0 {
		p.evalFits(sh, sc, i, e, counts)
	}
	bitSetTo(ix.over, i, e.cat == oneOver)
	bitSetTo(ix.spread, i, e.cat == oneSpread)
}

// evalFits evaluates cell i, which has a node with room.
func (p *Planner) evalFits(sh *shape, sc *scell, i int32, e *oneEval, counts []int32) {
	head := math.Inf(1)
	if sh.warm {
		k, h, over, after := p.warmPick(sh, sc, i)
		if k < 0 {
			e.cat, e.over, e.after = oneOver, over, after
			return
		}
		head, e.pick = h, k+1
	} else {
		delta := &sc.best.delta
		for _, bd := range sc.bud[:sc.nb] {
			a := p.draw[bd] + delta[p.mode[bd]]
			if lim := p.limit[bd]; a > lim {
				e.cat, e.over, e.after = oneOver, bd, a
				return
			} else if lim-a < head {
				head = lim - a
			}
		}
	}
	e.head = head
	e.sv = spreadVec(counts, sc, len(sh.prof.Spread))
	if zero(&e.sv) {
		e.cat = oneZero
	} else {
		e.cat = oneSpread
	}
}

func (ix *oneIndex) leaf(sh *shape, i int32) oneAgg {
	sc := &sh.cells[i]
	a := oneAgg{best: -1, short: sc.short, shortBest: sc.shortBest}
	for k := range a.short {
		if a.short[k] == 0 {
			a.shortBest[k] = -1
		}
	}
	switch ix.eval[i].cat {
	case oneZero:
		a.best, a.zeroNodes = i, sc.feasible
	case oneSpread:
		a.best = i
	}
	return a
}

func (p *Planner) mergeOne(sh *shape, ix *oneIndex, l, r *oneAgg) oneAgg {
	a := oneAgg{best: l.best, zeroNodes: l.zeroNodes + r.zeroNodes}
	for k := range a.short {
		a.short[k] = l.short[k] + r.short[k]
		a.shortBest[k] = max(l.shortBest[k], r.shortBest[k])
	}
	if r.best >= 0 {
		if a.best < 0 {
			a.best = r.best
		} else if sh.warm {
			if p.oneBeforeWarm(sh, ix, r.best, a.best) {
				a.best = r.best
			}
		} else if p.oneBefore(sh, ix, r.best, a.best) {
			a.best = r.best
		}
	}
	return a
}

// oneBefore reports whether cell a ranks above cell b: fewer of the model
// at the spread levels in order, then more power headroom, then fewer GPUs
// left free, then name (placeOneScan's order).
func (p *Planner) oneBefore(sh *shape, ix *oneIndex, a, b int32) bool {
	ea, eb := &ix.eval[a], &ix.eval[b]
	for k := range len(sh.prof.Spread) {
		if v, w := ea.sv[k], eb.sv[k]; v != w {
			return v < w
		}
	}
	if ea.head != eb.head {
		return ea.head > eb.head
	}
	ba, bb := &sh.cells[a].best, &sh.cells[b].best
	if ba.free != bb.free {
		return ba.free < bb.free
	}
	return ba.rank < bb.rank
}

// oneBeforeWarm is oneBefore for a warm shape: sooner ready after spread,
// and the nodes the cells offer.
func (p *Planner) oneBeforeWarm(sh *shape, ix *oneIndex, a, b int32) bool {
	ea, eb := &ix.eval[a], &ix.eval[b]
	for k := range len(sh.prof.Spread) {
		if v, w := ea.sv[k], eb.sv[k]; v != w {
			return v < w
		}
	}
	ba, bb := ix.offer(sh, a), ix.offer(sh, b)
	if fa, fb := sh.fetch[ba.node], sh.fetch[bb.node]; fa != fb {
		return fa < fb
	}
	if ea.head != eb.head {
		return ea.head > eb.head
	}
	if ba.free != bb.free {
		return ba.free < bb.free
	}
	return ba.rank < bb.rank
}

// offer is the node cell i offers: its best, or for a warm shape the one
// evalFits picked.
func (ix *oneIndex) offer(sh *shape, i int32) *centry {
	if k := ix.eval[i].pick; k > 0 {
		return &sh.lists[i][k-1]
	}
	return &sh.cells[i].best
}

// placeOne places a single-node replica: every cell offers its best node
// (cached), and the best of those wins. It files the same rejections as
// placeOneScan, from the shape's index.
func (p *Planner) placeOne(sh *shape, d *Decision) bool {
	if p.scanOnly {
		return p.placeOneScan(sh, d)
	}
	ix := p.index(sh)
	col := &p.col
	root := &ix.tree[1]
	for k := range root.short {
		if root.short[k] > 0 {
			col.shortNodes[k] += int(root.short[k])
			col.shortBest[k] = max(col.shortBest[k], int(root.shortBest[k]))
		}
	}
	cells := sh.cells
	eachBit(ix.over, func(i int32) {
		e := &ix.eval[i]
		p.record(col, dynOverBudget, e.over, int(cells[i].feasible), e.after, p.limit[e.over])
	})
	best := root.best
	if best < 0 {
		return false
	}
	// Where the winner holds the weights, the places as well spread that
	// do not lost on them alone (placeOneScan).
	held := sh.warm && sh.fetch[ix.offer(sh, best).node] == 0
	col.slower = sh.warm && !held
	zeroAbsent := 0
	if held {
		zeroAbsent = int(ix.absent[1])
	}
	col.ranked.places += int(root.zeroNodes) - zeroAbsent
	col.ranked.nodes += int(root.zeroNodes) - zeroAbsent
	col.weights.places += zeroAbsent
	col.weights.nodes += zeroAbsent
	ns := len(sh.prof.Spread)
	bsv := ix.eval[best].sv
	eachBit(ix.spread, func(i int32) {
		nodes := int(cells[i].feasible)
		if i == best {
			nodes--
		}
		if held {
			absent := int(cells[i].absent)
			p.spreadOrRanked(col, &ix.eval[i].sv, &bsv, &cells[i].spread, ns, nodes, nodes, absent, absent)
		} else {
			p.spreadOrRanked(col, &ix.eval[i].sv, &bsv, &cells[i].spread, ns, nodes, nodes, 0, 0)
		}
	})
	if zero(&bsv) {
		col.ranked.places-- // the winner
		col.ranked.nodes--
	}
	p.oneShard(sh, d, *ix.offer(sh, best))
	return true
}

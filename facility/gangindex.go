package facility

import "math/bits"

// gangIndex keeps, per keep_within domain of a multi-node shape, what the
// domain brings to a decision (evalGangDom), evaluated again only when the
// change log reaches one of its cells: its nodes, the draw of their
// budgeted domains or the model's counts in their spread domains.
type gangIndex struct {
	watch
	cellGang []int32 // per shape cell: its index in shape.gangDoms, or -1
	evals    []gangEval
	stale    []bool // per gang domain, scratch
}

// gangIndex returns the shape's index, built on first use and brought up
// to date with the change log.
func (p *Planner) gangIndex(sh *shape) *gangIndex {
	gx := sh.gang
	counts := p.countsOf(sh.model)
	if gx == nil {
		gx = &gangIndex{watch: p.newWatch(sh), cellGang: make([]int32, len(sh.cells)),
			evals: make([]gangEval, len(sh.gangDoms)), stale: make([]bool, len(sh.gangDoms))}
		for i := range gx.cellGang {
			gx.cellGang[i] = -1
		}
		for gi, g := range sh.gangDoms {
			for _, c := range g.cells {
				gx.cellGang[c] = int32(gi)
			}
		}
		sh.gang = gx
		for gi := range sh.gangDoms {
			p.evalGangDom(sh, &sh.gangDoms[gi], counts, &gx.evals[gi])
		}
		return gx
	}
	if !p.catchUp(sh, &gx.watch) {
		for gi := range sh.gangDoms {
			p.evalGangDom(sh, &sh.gangDoms[gi], counts, &gx.evals[gi])
		}
		return gx
	}
	for w, x := range gx.dirty {
		for x != 0 {
			i := w<<6 + bits.TrailingZeros64(x)
			x &= x - 1
			if gi := gx.cellGang[i]; gi >= 0 {
				gx.stale[gi] = true
			}
		}
		gx.dirty[w] = 0
	}
	for gi, s := range gx.stale {
		if s {
			p.evalGangDom(sh, &sh.gangDoms[gi], counts, &gx.evals[gi])
			gx.stale[gi] = false
		}
	}
	return gx
}

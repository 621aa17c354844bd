package facility

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

type shapeKey struct{ model, profile string }

// shape is what a planner keeps per profile: which nodes it could ever use
// (pool, GPU model, fabric and holds do not change while the planner
// lives), the static rejections, and per cell the best node for it, cached
// until a node of the cell changes.
type shape struct {
	prof    Profile
	invalid error // why the profile cannot be placed at all, or nil
	gpu     int32
	// learned: what a measured domain counts a shard at, when learnedOK
	// (else at its declared draw).
	learned   float64
	learnedOK bool
	fail      []Kind      // per node: the static check it fails, or 0
	static    []Rejection // rejections from the static checks
	cells     []scell     // the cells with a node passing the static checks, and their cache
	lists     [][]centry  // per cells[i], multi-node only: its nodes with room, best first
	gangDoms  []gangDom   // multi-node: keep_within domains with such cells
	pos       []int32     // per planner cell: its index in cells, or -1
	model     string      // the model it places
	one       *oneIndex   // single-node: the index placeOne reads, built on first use
	gang      *gangIndex  // multi-node: the index placeGang reads, built on first use

	// Readiness (weights.go): the model's weights key ("" when it has no
	// weights a node fetches) and the size the estimates take (0
	// unknown); wcat, the catalog's size it was built with; per node, the
	// estimated seconds before a replica there could load (nil without a
	// key); warm when those differ among the nodes that pass the static
	// checks. Only a warm shape ranks by them; a warm single-node shape
	// keeps every cell's nodes with room in lists, fastest first.
	wkey   string
	wbytes int64
	wcat   int64
	fetch  []float64
	warm   bool
}

// scell is a cell as a shape scans it, with what the scan reads inline and
// its cache.
type scell struct {
	cellHot
	cell   int32
	rmode  uint8            // the count mode nodes of the cell are ordered by: its finest budget's
	nb     int32            // budgeted domains in bud
	bud    [NumLevels]int32 // budgeted domains holding the cell, coarse to fine
	spread [NumLevels]int32 // the cell's domain per spread level, -1 for none
}

type gangDom struct {
	dom   int32
	cells []int32 // indexes into shape.cells
}

// cellHot is a cell's cache for a shape.
type cellHot struct {
	version   uint32
	feasible  int32    // nodes with room for a shard
	absent    int32    // a warm shape's: of them, those whose store does not hold the weights
	short     [3]int32 // nodes short of GPUs, CPU, memory
	shortBest [3]int32 // the most any of those has
	best      centry   // the best node with room
}

// centry is a node with room for a shard.
type centry struct {
	node  int32
	rank  int32      // the node's place in name order
	free  int32      // GPUs free after the shard
	w     float64    // the shard's declared draw there
	delta [2]float64 // how much the node's draw grows, counted declared and measured
	rd    float64    // delta in the cell's rmode: what orders nodes of one cell
}

// samePlacement reports whether two profiles place alike.
func samePlacement(a, b *Profile) bool {
	return a.Name == b.Name && a.GPU == b.GPU && a.GPUs == b.GPUs && a.Nodes == b.Nodes &&
		a.Watts == b.Watts && a.CPUCores == b.CPUCores && a.MemoryGB == b.MemoryGB &&
		(a.Nodes == 1 || a.KeepWithin == b.KeepWithin) && slices.Equal(a.Spread, b.Spread) &&
		a.Fabric == b.Fabric && a.pool() == b.pool()
}

// maxShapes bounds the shapes a planner keeps. Each holds a few hundred
// bytes per cell of the fleet (its static checks, its index), so a planner
// placing many models at once (a controller's first pass, POST /v1/plan of
// a whole catalog) would otherwise keep one per model and profile: 1,000
// of them over 500 cells held some 150 MB. A model's slots are placed one
// after another, so the oldest shape goes first; a shape dropped is built
// again from the planner's state when it is next asked for, and decides
// as it would have (a shape is a cache: TestShapeCacheBound).
const maxShapes = 16

func (p *Planner) shape(m *Model, prof *Profile) *shape {
	model := m.Name
	key := shapeKey{model, prof.Name}
	wkey, wbytes := p.weightsKey(m.Weights), int64(0)
	old, had := p.shapes[key]
	if had && samePlacement(&old.prof, prof) && old.wkey == wkey && (wkey == "" || old.wcat == m.WeightsBytes) {
		return old
	}
	if wkey != "" {
		wkey, wbytes = p.weightsOf(m)
	}
	sh := &shape{prof: *prof, gpu: p.gpuID(prof.GPU), model: model, wcat: m.WeightsBytes}
	sh.learned, sh.learnedOK = p.counted[LearnedKey{Model: model, Profile: prof.Name, GPU: prof.GPU}]
	sh.prof.Spread = slices.Clone(prof.Spread)
	if !had {
		for len(p.shapes) >= p.shapeCap && len(p.shapeOrder) > 0 {
			delete(p.shapes, p.shapeOrder[0])
			p.shapeOrder = p.shapeOrder[1:]
		}
		p.shapeOrder = append(p.shapeOrder, key)
	}
	p.shapes[key] = sh
	if err := prof.validate(model); err != nil {
		sh.invalid = err
		return sh
	}
	var sk *skeleton
	if p.ownsTopo {
		// No other planner reads this topology: the skeleton is built for
		// this shape alone, its cells taken rather than copied.
		sk = p.topo.buildSkeleton(prof)
		sh.cells = sk.cells
	} else {
		sk = p.topo.skeleton(prof)
		sh.cells = slices.Clone(sk.cells)
	}
	sh.fail, sh.gangDoms, sh.pos = sk.fail, sk.gangDoms, sk.pos
	pool := prof.pool()
	add := func(k Kind, msg string) {
		sh.static = append(sh.static, Rejection{Profile: prof.Name, Kind: k, Nodes: sk.nodeFails[k], Message: msg})
	}
	if sk.nodeFails[KindPool] > 0 {
		add(KindPool, "not in pool "+pool)
	}
	if sk.nodeFails[KindGPUModel] > 0 {
		add(KindGPUModel, "no "+prof.GPU)
	}
	if sk.nodeFails[KindFabric] > 0 {
		add(KindFabric, "not on a "+prof.Fabric+"* fabric")
	}
	if sk.nodeFails[KindKeepWithin] > 0 {
		add(KindKeepWithin, "keep_within: no "+prof.KeepWithin.String())
	}
	for i, d := range sk.heldOrder {
		if i == MaxListed {
			rest := 0
			for _, n := range sk.heldNodes[i:] {
				rest += n
			}
			sh.static = append(sh.static, Rejection{Profile: prof.Name, Kind: KindHeld, Nodes: rest,
				Message: fmt.Sprintf("held: and %d more %s", len(sk.heldOrder)-i, plural(len(sk.heldOrder)-i, "domain", "domains"))})
			break
		}
		dom := &p.doms[d]
		msg := "held: " + dom.key
		if r := p.fac.Holds[dom.hold].Reason; r != "" {
			msg += " (" + r + ")"
		}
		sh.static = append(sh.static, Rejection{Profile: prof.Name, Kind: KindHeld, Domain: dom.key, Nodes: sk.heldNodes[i], Message: msg})
	}
	if prof.Nodes > 1 {
		sh.lists = make([][]centry, len(sh.cells))
	}
	p.setWeights(sh, wkey, wbytes)
	return sh
}

// skeletonKey is what a shape's static checks read of its profile.
type skeletonKey struct {
	pool, gpu, fabric string
	keepWithin        Level // of a multi-node profile; 0 for a single-node one
	gang              bool
	spread            [NumLevels]Level
	nspread           int
}

// skeleton is the part of a shape that depends only on the topology and
// the profile's static checks: which nodes fail which, the cells with a
// node that passes (their caches empty), the held domains' node counts,
// the multi-node keep_within domains. A topology keeps the skeletons it
// built (maxSkeletons), so that the next pass's planner does not check
// every node again; a planner's shape copies the cells and shares the
// rest, which nothing changes.
type skeleton struct {
	fail      []Kind  // per node: the static check it fails, or 0
	cells     []scell // the cells with a node passing the static checks
	pos       []int32 // per cell of the topology: its index in cells, or -1
	nodeFails [KindHeld + 1]int
	heldOrder []int32 // held domains with nodes that pass the other checks, in cell order
	heldNodes []int   // per heldOrder: those nodes
	gangDoms  []gangDom
}

// maxSkeletons bounds the skeletons a topology keeps (a byte per node and
// about 150 per cell each), as maxShapes bounds a planner's shapes; past it
// they are all dropped and built again as needed.
const maxSkeletons = 16

// skeleton returns prof's skeleton, building it on first use.
func (t *topology) skeleton(prof *Profile) *skeleton {
	gang := prof.Nodes > 1
	key := skeletonKey{pool: prof.pool(), gpu: prof.GPU, fabric: prof.Fabric, gang: gang, nspread: len(prof.Spread)}
	if gang {
		key.keepWithin = prof.KeepWithin
	}
	copy(key.spread[:], prof.Spread)
	if sk, ok := t.skeletons[key]; ok {
		return sk
	}
	if len(t.skeletons) >= maxSkeletons || t.skeletons == nil {
		t.skeletons = map[skeletonKey]*skeleton{}
	}
	sk := t.buildSkeleton(prof)
	t.skeletons[key] = sk
	return sk
}

func (t *topology) buildSkeleton(prof *Profile) *skeleton {
	sk := &skeleton{fail: make([]Kind, len(t.nodes)), pos: make([]int32, len(t.cells))}
	gpu, ok := t.gpuIndex[prof.GPU]
	if !ok {
		gpu = -1
	}
	gang := prof.Nodes > 1
	pool := prof.pool()
	held := map[int32]int{} // held domain → its index in heldOrder
	for ci := range t.cells {
		c := &t.cells[ci]
		sk.pos[ci] = -1
		active := false
		for n := c.start; n < c.end; n++ {
			var k Kind
			switch {
			case pool != AllPools && t.pools[n] != pool:
				k = KindPool
			case gpu < 0 || gpuIn(t.gpus, &t.nodes[n], gpu) == nil:
				k = KindGPUModel
			case !strings.HasPrefix(t.fabrics[n], prof.Fabric):
				k = KindFabric
			case gang && c.dom[prof.KeepWithin] < 0:
				k = KindKeepWithin
			case c.hold >= 0:
				k = KindHeld
				i, ok := held[c.hold]
				if !ok {
					i = len(sk.heldOrder)
					held[c.hold] = i
					sk.heldOrder = append(sk.heldOrder, c.hold)
					sk.heldNodes = append(sk.heldNodes, 0)
				}
				sk.heldNodes[i]++
			}
			sk.fail[n] = k
			sk.nodeFails[k]++
			if k == 0 {
				active = true
			}
		}
		if active {
			sc := scell{cell: int32(ci)}
			for _, d := range c.budgeted {
				sc.bud[sc.nb] = d
				sc.nb++
				sc.rmode = t.mode[d]
			}
			for i := range sc.spread {
				sc.spread[i] = -1
			}
			for i, l := range prof.Spread {
				sc.spread[i] = c.dom[l]
			}
			sk.pos[ci] = int32(len(sk.cells))
			sk.cells = append(sk.cells, sc)
		}
	}
	if gang {
		for _, d := range t.levelDoms[prof.KeepWithin] {
			var cells []int32
			for _, c := range t.doms[d].cells {
				if i := sk.pos[c]; i >= 0 {
					cells = append(cells, i)
				}
			}
			if len(cells) > 0 {
				sk.gangDoms = append(sk.gangDoms, gangDom{dom: d, cells: cells})
			}
		}
	}
	return sk
}

// entryLess orders nodes of one cell: least growth of draw first, as the
// cell's finest budget counts (the most power headroom left, when the cell
// has a budget), then fewest GPUs left free (best fit), then name.
func (p *Planner) entryLess(a, b *centry, budgeted bool) bool {
	if budgeted && a.rd != b.rd {
		return a.rd < b.rd
	}
	if a.free != b.free {
		return a.free < b.free
	}
	return a.rank < b.rank
}

// refresh brings the cache of sh.cells[i] up to date.
func (p *Planner) refresh(sh *shape, i int32) *scell {
	ce := &sh.cells[i]
	if ce.version != p.cellVer[ce.cell] {
		p.recache(sh, i)
	}
	return ce
}

// recache recomputes the cache of sh.cells[i].
func (p *Planner) recache(sh *shape, i int32) {
	ce := &sh.cells[i]
	c := ce.cell
	ce.version = p.cellVer[c]
	ce.feasible, ce.absent = 0, 0
	ce.short = [3]int32{}
	ce.shortBest = [3]int32{-1, -1, -1}
	pr := &sh.prof
	budgeted := ce.nb > 0
	gang := pr.Nodes > 1
	var list []centry
	keep := gang || sh.warm // keep every node with room, not only the best
	if keep {
		list = sh.lists[i][:0]
	}
	cl := &p.cells[c]
	for n := cl.start; n < cl.end; n++ {
		if sh.fail[n] != 0 {
			continue
		}
		nd := &p.nodes[n]
		g := p.gpu(nd, sh.gpu)
		switch {
		case g.free < pr.GPUs:
			ce.short[0]++
			ce.shortBest[0] = max(ce.shortBest[0], int32(g.free))
			continue
		case nd.cpu < pr.CPUCores:
			ce.short[1]++
			ce.shortBest[1] = max(ce.shortBest[1], int32(nd.cpu))
			continue
		case nd.mem < pr.MemoryGB:
			ce.short[2]++
			ce.shortBest[2] = max(ce.shortBest[2], int32(nd.mem))
			continue
		}
		w := pr.ShardWatts(g.power)
		wm := w
		if sh.learnedOK {
			wm = sh.learned
		}
		e := centry{node: n, rank: nd.rank, free: int32(g.free - pr.GPUs), w: w,
			delta: [2]float64{nd.delta(modeDeclared, w), nd.delta(modeMeasured, wm)}}
		e.rd = e.delta[ce.rmode]
		if ce.feasible == 0 || p.entryLess(&e, &ce.best, budgeted) {
			ce.best = e
		}
		ce.feasible++
		if sh.warm && sh.fetch[n] > 0 {
			ce.absent++
		}
		if keep {
			list = append(list, e)
		}
	}
	if sh.warm && !gang {
		p.sortWarm(sh, list, budgeted)
		sh.lists[i] = list
	}
	if gang {
		slices.SortFunc(list, func(a, b centry) int {
			if p.entryLess(&a, &b, budgeted) {
				return -1
			}
			if p.entryLess(&b, &a, budgeted) {
				return 1
			}
			return 0
		})
		sh.lists[i] = list
	}
}

// budgets checks budgeted domains bud against growing by delta (on top of
// what p.addW holds). It returns the first of them (coarse to fine) that
// would go over its limit and what it would draw, or -1; and the least
// headroom any of them keeps, min(limit − draw after), +Inf for none.
func (p *Planner) budgets(bud []int32, delta *[2]float64) (over int32, after, head float64) {
	head = math.Inf(1)
	for _, d := range bud {
		a := p.draw[d] + p.addW[d] + delta[p.mode[d]]
		if a > p.limit[d] {
			return d, a, 0
		}
		head = min(head, p.limit[d]-a)
	}
	return -1, 0, head
}

// spreadVec is how many replicas of the model the cell's domain at each
// spread level holds.
func spreadVec(counts []int32, sc *scell, n int) (v [NumLevels]int32) {
	for i := range n {
		if d := sc.spread[i]; d >= 0 {
			v[i] = counts[d]
		}
	}
	return v
}

// zero reports whether a spread vector is all zero (an explicit loop: an
// array comparison would call memequal).
func zero(v *[NumLevels]int32) bool {
	return v[0]|v[1]|v[2]|v[3]|v[4] == 0
}

func sameVec(a, b *[NumLevels]int32) bool {
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4]
}

// rankCmp orders places that fit: fewest replicas of the model at the spread
// levels in order, then soonest ready (ready: the estimate of a single
// node, or a multi-node place's readiness compared with readyCmp), then
// most power headroom, then best GPU fit.
func rankCmp(asv, bsv *[NumLevels]int32, ready int, ahead, bhead float64, afree, bfree int) int {
	for i := range asv {
		if c := cmp.Compare(asv[i], bsv[i]); c != 0 {
			return c
		}
	}
	if ready != 0 {
		return ready
	}
	if c := cmp.Compare(bhead, ahead); c != 0 {
		return c
	}
	return cmp.Compare(afree, bfree)
}

// cand is a cell whose best node fits a single-node replica.
type cand struct {
	cell   int32 // index into shape.cells
	nodes  int32 // its nodes with room
	absent int32 // of them, those without the weights (a warm shape's)
	sv     [NumLevels]int32
}

// placeOneScan places a single-node replica by visiting every cell: every
// cell offers its best node (cached), and the best of those wins. placeOne
// decides the same from the shape's index; this is what it is held to.
func (p *Planner) placeOneScan(sh *shape, d *Decision) bool {
	pr := &sh.prof
	ns := len(pr.Spread)
	counts := p.countsOf(d.Model)
	col := &p.col
	cands := p.cands[:0]
	best := int32(-1) // index into cells
	var bsv [NumLevels]int32
	var bhead, bfetch float64
	var bent centry // the node the best cell offers
	cells := sh.cells
	warm := sh.warm
	zeroAbsent := 0 // nodes of the cells below that lack the weights
	for i := range cells {
		sc := &cells[i]
		if sc.version != p.cellVer[sc.cell] {
			p.recache(sh, int32(i))
		}
		if sc.short[0]|sc.short[1]|sc.short[2] != 0 {
			col.short(&sc.cellHot)
		}
		if sc.feasible == 0 {
			continue
		}
		// Budgets: the first over its limit, else the least headroom.
		ent := &sc.best
		head := math.Inf(1)
		over := int32(-1)
		var after, fetch float64
		if warm {
			// The fastest node to ready that the budgets admit.
			var k int32
			if k, head, over, after = p.warmPick(sh, sc, int32(i)); k >= 0 {
				ent = &sh.lists[i][k]
				fetch = sh.fetch[ent.node]
			}
		} else {
			delta := &ent.delta
			for _, bd := range sc.bud[:sc.nb] {
				a := p.draw[bd] + delta[p.mode[bd]]
				if lim := p.limit[bd]; a > lim {
					over, after = bd, a
					break
				} else if lim-a < head {
					head = lim - a
				}
			}
		}
		if over >= 0 {
			p.record(col, dynOverBudget, over, int(sc.feasible), after, p.limit[over])
			continue
		}
		sv := spreadVec(counts, sc, ns)
		// Places holding none of the model at any spread level can only lose
		// by rank; the others are kept to be filed against the winner.
		if zero(&sv) {
			col.ranked.places += int(sc.feasible)
			col.ranked.nodes += int(sc.feasible)
			zeroAbsent += int(sc.absent)
		} else {
			cands = append(cands, cand{cell: int32(i), nodes: sc.feasible, absent: sc.absent, sv: sv})
		}
		// Rank against the best so far: spread, readiness, headroom, fit,
		// name.
		if best >= 0 {
			c := 0
			for k := range ns {
				if v, b := sv[k], bsv[k]; v != b {
					c = cmp.Compare(v, b)
					break
				}
			}
			if c == 0 {
				switch {
				case fetch != bfetch:
					c = cmp.Compare(fetch, bfetch)
				case head != bhead:
					c = cmp.Compare(bhead, head)
				case ent.free != bent.free:
					c = cmp.Compare(ent.free, bent.free)
				default:
					c = cmp.Compare(ent.rank, bent.rank)
				}
			}
			if c > 0 {
				continue
			}
		}
		best, bsv, bhead, bfetch, bent = int32(i), sv, head, fetch, *ent
	}
	p.cands = cands
	if best < 0 {
		return false
	}
	// Where the winner holds the weights, the places as well spread that
	// do not lost on them alone.
	held := warm && bfetch == 0
	if held {
		col.ranked.places -= zeroAbsent
		col.ranked.nodes -= zeroAbsent
		col.weights.places += zeroAbsent
		col.weights.nodes += zeroAbsent
	}
	col.slower = warm && !held
	for k := range cands {
		cd := &cands[k]
		nodes := int(cd.nodes)
		if cd.cell == best {
			nodes--
		}
		absent := 0
		if held {
			absent = int(cd.absent)
		}
		p.spreadOrRanked(col, &cd.sv, &bsv, &cells[cd.cell].spread, ns, nodes, nodes, absent, absent)
	}
	if zero(&bsv) {
		col.ranked.places-- // the winner
		col.ranked.nodes--
	}
	p.oneShard(sh, d, bent)
	return true
}

// oneShard puts a single-node replica on the node of e.
func (p *Planner) oneShard(sh *shape, d *Decision, e centry) {
	pr := &sh.prof
	d.Shards = []Shard{{Node: p.names[e.node], Watts: e.w, GPU: pr.GPU, GPUs: pr.GPUs, CPUCores: pr.CPUCores, MemoryGB: pr.MemoryGB,
		Fetch: p.fetchOf(sh, e.node)}}
	d.Domain = p.scope([]int32{e.node}, LevelPDU)
}

// spreadOrRanked files a place that fits but lost: to spread, at the first
// spread level where it holds more than the winner, or to ranked; of a
// place as well spread as the winner, wnodes and wplaces (of nodes and
// places) to weights: they lost only because the weights are elsewhere.
func (p *Planner) spreadOrRanked(col *collector, sv, best, doms *[NumLevels]int32, ns, nodes, places, wnodes, wplaces int) {
	if sameVec(sv, best) {
		col.ranked.places += places - wplaces
		col.ranked.nodes += nodes - wnodes
		col.weights.places += wplaces
		col.weights.nodes += wnodes
		return
	}
	for i := range ns {
		if sv[i] > best[i] {
			p.record(col, dynSpread, doms[i], nodes, float64(sv[i]), 0)
			return
		}
	}
	col.ranked.places += places
	col.ranked.nodes += nodes
}

// scope returns the levels down to pin (coarse to fine) at which every node
// has one and the same domain.
func (p *Planner) scope(nodes []int32, pin Level) Scope {
	var s Scope
	for _, l := range Levels() {
		if l > pin {
			break
		}
		d := p.cells[p.nodes[nodes[0]].cell].dom[l]
		if d < 0 {
			continue
		}
		same := true
		for _, n := range nodes[1:] {
			if p.cells[p.nodes[n].cell].dom[l] != d {
				same = false
				break
			}
		}
		if same {
			s = append(s, p.doms[d].dom)
		}
	}
	return s
}

// gsortable is a node with room for a shard of a multi-node replica, with
// what orders it in its keep_within domain.
type gsortable struct {
	centry
	cell   int32 // index into shape.cells
	fabric int32
	sv     [NumLevels]int32
}

// gcand is a place that fits a multi-node replica: a keep_within domain
// and a fabric in it, with the nodes chosen there.
type gcand struct {
	dom    int32
	nodes  int
	sv     [NumLevels]int32
	svDom  [NumLevels]int32 // per spread level, the domain holding the most
	head   float64
	free   int
	picked int // where its nodes are in its gangEval's picked
	// Readiness (gangReady): the slowest node's fetch estimate, the nodes
	// that must fetch, the estimates' sum; zero when the shape is not warm.
	ready, fetchSum float64
	absent          int
}

// placeGang places a multi-node replica whole inside one domain of its
// keep_within level, all shards on one fabric. In each domain and fabric it
// takes nodes greedily (fewest of the model at the spread levels, least
// growth of draw, best GPU fit, name) while every budget holds; then the
// places that can hold it are ranked as single nodes are. Each domain's
// part (evalGangDom) comes from the shape's index, evaluated again only
// when a change reaches it (gangindex.go), or, with scanOnly, afresh.
func (p *Planner) placeGang(sh *shape, d *Decision) bool {
	pr := &sh.prof
	need := pr.Nodes
	ns := len(pr.Spread)
	col := &p.col
	var evals []gangEval
	if !p.scanOnly {
		evals = p.gangIndex(sh).evals
	}
	counts := p.countsOf(d.Model)
	runs := p.gruns[:0]
	best := -1
	warm := sh.warm
	for gi := range sh.gangDoms {
		var ge *gangEval
		if evals != nil {
			ge = &evals[gi]
		} else {
			ge = &p.gscratch
			p.evalGangDom(sh, &sh.gangDoms[gi], counts, ge)
		}
		for k := range ge.short {
			if ge.short[k] > 0 {
				col.shortNodes[k] += int(ge.short[k])
				col.shortBest[k] = max(col.shortBest[k], int(ge.shortBest[k]))
			}
		}
		if ge.rec >= 0 {
			p.record(col, int(ge.rec), ge.recDom, ge.recNodes, ge.recA, ge.recB)
		}
		for k := range ge.runs {
			gc := &ge.runs[k]
			better := best < 0
			if !better {
				// gc ranks above the best so far; on a full tie the
				// earlier stays. Only a warm shape's places differ in
				// readiness.
				b := &runs[best]
				ready := 0
				if warm {
					ready = readyCmp(gc, b)
				}
				better = rankCmp(&gc.sv, &b.sv, ready, gc.head, b.head, gc.free, b.free) < 0
			}
			if better {
				p.best = append(p.best[:0], ge.picked[gc.picked:gc.picked+need]...)
				best = len(runs)
			}
			runs = append(runs, *gc)
		}
	}
	p.gruns = runs
	if best < 0 {
		return false
	}
	b := &runs[best]
	held := sh.warm && b.absent == 0 // every node of the winner holds the weights
	col.slower = sh.warm && !held
	for i := range runs {
		if i != best {
			wnodes, wplaces := 0, 0
			if held && runs[i].absent > 0 {
				wnodes, wplaces = runs[i].nodes, 1
			}
			p.spreadOrRanked(col, &runs[i].sv, &b.sv, &runs[i].svDom, ns, runs[i].nodes, 1, wnodes, wplaces)
		}
	}
	picked := p.best
	slices.SortFunc(picked, func(a, b centry) int { return cmp.Compare(a.rank, b.rank) })
	idx := make([]int32, need)
	d.Shards = make([]Shard, need)
	for i, e := range picked {
		idx[i] = e.node
		d.Shards[i] = Shard{Node: p.names[e.node], Watts: e.w, GPU: pr.GPU, GPUs: pr.GPUs, CPUCores: pr.CPUCores, MemoryGB: pr.MemoryGB,
			Fetch: p.fetchOf(sh, e.node)}
	}
	d.Domain = p.scope(idx, pr.KeepWithin)
	return true
}

// gangEval is what one keep_within domain brings to a multi-node decision.
type gangEval struct {
	short     [3]int32 // its nodes short of GPUs, CPU, memory
	shortBest [3]int32 // the most any of those has, -1 for none
	// rec is the rejection it files (dynOverBudget or dynKeepWithin), or -1.
	rec        int8
	recDom     int32
	recNodes   int
	recA, recB float64
	runs       []gcand  // the places in it that fit, one per fabric; picked indexes picked
	picked     []centry // their nodes
}

// evalGangDom finds where in domain g a multi-node replica fits, per
// fabric, and what it files if nowhere.
func (p *Planner) evalGangDom(sh *shape, g *gangDom, counts []int32, ge *gangEval) {
	pr := &sh.prof
	need := pr.Nodes
	ns := len(pr.Spread)
	ge.short, ge.shortBest, ge.rec = [3]int32{}, [3]int32{-1, -1, -1}, -1
	ge.runs, ge.picked = ge.runs[:0], ge.picked[:0]
	svs := p.gsort[:0]
	for _, c := range g.cells {
		ce := p.refresh(sh, c)
		for k := range ce.short {
			if ce.short[k] > 0 {
				ge.short[k] += ce.short[k]
				ge.shortBest[k] = max(ge.shortBest[k], ce.shortBest[k])
			}
		}
		if ce.feasible == 0 {
			continue
		}
		sv := spreadVec(counts, ce, ns)
		for _, e := range sh.lists[c] {
			svs = append(svs, gsortable{e, c, p.nodes[e.node].fabricRank, sv})
		}
	}
	p.gsort = svs
	if len(svs) < need {
		if len(svs) > 0 {
			ge.rec, ge.recDom, ge.recNodes, ge.recA, ge.recB = dynKeepWithin, g.dom, len(svs), float64(len(svs)), float64(len(svs))
		}
		return
	}
	warm, fetch := sh.warm, sh.fetch
	slices.SortFunc(svs, func(a, b gsortable) int {
		if c := cmp.Compare(a.fabric, b.fabric); c != 0 {
			return c
		}
		for i := range a.sv {
			if c := cmp.Compare(a.sv[i], b.sv[i]); c != 0 {
				return c
			}
		}
		if warm {
			// Nodes that hold the weights (then the fastest to fetch) first.
			if c := cmp.Compare(fetch[a.node], fetch[b.node]); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(a.rd, b.rd); c != 0 {
			return c
		}
		if c := cmp.Compare(a.free, b.free); c != 0 {
			return c
		}
		return cmp.Compare(a.rank, b.rank)
	})
	longest := 0
	blocked, blockedAt := int32(-1), 0.0
	for i := 0; i < len(svs); {
		j := i
		for j < len(svs) && svs[j].fabric == svs[i].fabric {
			j++
		}
		run := svs[i:j]
		i = j
		longest = max(longest, len(run))
		if len(run) < need {
			continue
		}
		picked := p.picked[:0]
		for _, e := range run {
			sc := &sh.cells[e.cell]
			if od, after, _ := p.budgets(sc.bud[:sc.nb], &e.delta); od >= 0 {
				if blocked < 0 {
					blocked, blockedAt = od, after
				}
				continue
			}
			picked = append(picked, e.centry)
			for _, bd := range sc.bud[:sc.nb] {
				if !p.touched[bd] {
					p.touched[bd] = true
					p.added = append(p.added, bd)
				}
				p.addW[bd] += e.delta[p.mode[bd]]
			}
			if len(picked) == need {
				break
			}
		}
		p.picked = picked
		if len(picked) == need {
			gc := p.rankGang(sh, g.dom, picked, counts)
			gc.picked = len(ge.picked)
			ge.picked = append(ge.picked, picked...)
			ge.runs = append(ge.runs, gc)
		}
		for _, bd := range p.added {
			p.addW[bd], p.touched[bd] = 0, false
		}
		p.added = p.added[:0]
	}
	if len(ge.runs) == 0 {
		switch {
		case blocked >= 0:
			ge.rec, ge.recDom, ge.recNodes, ge.recA, ge.recB = dynOverBudget, blocked, len(svs), blockedAt, p.limit[blocked]
		default:
			ge.rec, ge.recDom, ge.recNodes, ge.recA, ge.recB = dynKeepWithin, g.dom, len(svs), float64(len(svs)), float64(longest)
		}
	}
}

// rankGang measures a multi-node place: per spread level the most replicas
// of the model any of its domains there holds, the least headroom any
// budgeted domain it touches keeps, and the GPUs it leaves free. p.addW
// holds the draw it adds.
func (p *Planner) rankGang(sh *shape, dom int32, picked []centry, counts []int32) gcand {
	spread := sh.prof.Spread
	gc := gcand{dom: dom, nodes: len(picked), head: math.Inf(1), picked: -1}
	gc.ready, gc.absent, gc.fetchSum = gangReady(sh, picked)
	for i := range gc.svDom {
		gc.svDom[i] = -1
	}
	for _, e := range picked {
		c := &p.cells[p.nodes[e.node].cell]
		gc.free += int(e.free)
		for i, l := range spread {
			if d := c.dom[l]; d >= 0 && (gc.svDom[i] < 0 || counts[d] > gc.sv[i]) {
				gc.sv[i], gc.svDom[i] = counts[d], d
			}
		}
	}
	for _, d := range p.added {
		gc.head = min(gc.head, p.limit[d]-(p.draw[d]+p.addW[d]))
	}
	return gc
}

// readyCmp orders multi-node places by readiness: the slowest node's fetch
// (when the replica can start), then fewer nodes to fetch, then less
// fetching in all. All zero for a shape that is not warm.
func readyCmp(a, b *gcand) int {
	return cmp.Or(cmp.Compare(a.ready, b.ready), cmp.Compare(a.absent, b.absent), cmp.Compare(a.fetchSum, b.fetchSum))
}

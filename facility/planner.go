package facility

import (
	"fmt"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/weightsapi"
)

// Request asks for one new replica of a model.
type Request struct {
	Replica string // its id, such as "llama-3.1-70b-3"
	Model   Model  // the model, with its profiles in order of preference
}

// Shard is one node's part of a replica.
type Shard struct {
	Node  string
	Watts float64 // the shard's declared or derived draw
	// What the shard takes from the node. Commit takes it; a running replica
	// given to NewPlanner or Add does not (the fleet's free counts already
	// leave it out).
	GPU      string
	GPUs     int
	CPUCores int
	MemoryGB int
	// Fetch is, for a model whose weights a node fetches, what the node
	// has to fetch before the engine can load them (Decision.Readiness);
	// nil otherwise. Placement fills it; Commit, Add and Remove ignore it.
	Fetch *Fetch `json:",omitempty"`
}

// Replica is a replica that runs (or is being placed): its shards and their draw.
type Replica struct {
	ID      string
	Model   string
	Profile string
	Shards  []Shard
}

// Decision is where one replica goes, or why it goes nowhere.
type Decision struct {
	Replica string
	Model   string
	Profile string // the profile that fitted; "" when not placed
	Placed  bool
	// Domain is every location level of the chosen place, coarse to fine,
	// down to the level it was pinned at: the node's own location for a
	// single-node replica, the keep_within domain (and what encloses it) for
	// a multi-node one.
	Domain Scope
	Shards []Shard
	Watts  float64 // the replica's draw, the sum of its shards'
	// Rejections says why every other place was refused, for every profile
	// tried, in check order.
	Rejections []Rejection
}

// Reasons returns the rejections' messages; when more than one profile was
// tried, each is prefixed with "profile <name>: ".
func (d Decision) Reasons() []string {
	multi := false
	for _, r := range d.Rejections {
		if r.Profile != d.Rejections[0].Profile {
			multi = true
			break
		}
	}
	out := make([]string, 0, len(d.Rejections))
	for _, r := range d.Rejections {
		if multi {
			out = append(out, "profile "+r.Profile+": "+r.Message)
		} else {
			out = append(out, r.Message)
		}
	}
	return out
}

// Running returns the decision as a running replica.
func (d Decision) Running() Replica {
	return Replica{ID: d.Replica, Model: d.Model, Profile: d.Profile, Shards: slices.Clone(d.Shards)}
}

// Planner places replicas one at a time on a fleet under a facility's budgets
// and holds, keeping the draw and spread counts of what runs and of what it
// placed. It is not safe for concurrent use.
type Planner struct {
	// topo is the index of the layout it was built on, shared with the
	// other planners of a PlannerCache: names, nodeIndex, gpuIndex, cells,
	// doms, limit, mode, nodeCount, domIndex and levelDoms are its, and
	// read only; nodes and gpus are the planner's copies of its.
	topo     *topology
	ownsTopo bool // built by NewPlanner: no other planner shares topo
	fac      Facility

	nodes         []pnode
	names         []string           // per node, its name (the topology's)
	gpus          []pgpu             // the nodes' GPUs (pnode.g0, gn)
	weights       []map[string]int64 // per node, Node.Weights as given
	nodeIndex     map[string]int32
	gpuIndex      map[string]int32
	cells         []cell
	doms          []pdomain
	draw          []float64              // per domain: Σ draw of its nodes, as the domain counts
	limit         []float64              // per domain: budget × (1 − headroom), +Inf without a budget
	mode          []uint8                // per domain: how it counts, modeDeclared or modeMeasured
	declDraw      []float64              // per domain: Σ draw of its nodes were it counted declared
	counted       map[LearnedKey]float64 // what measured domains count a shard at (countedTable)
	now           []float64              // per domain: Σ measured_watts of its nodes
	nodeCount     []int32                // per domain: its nodes
	measuredCount []int32                // per domain: its nodes that are measured
	cellVer       []uint32               // per cell: bumped when a node in it changes
	domIndex      map[Domain]int32
	levelDoms     [NumLevels][]int32
	budgeted      int // domains with a budget

	counts  map[string][]int32 // model → replicas of it per domain
	running []Replica
	// runAt is, per replica of running, its shards' nodes and what they
	// count at: what a PlannerCache sums draws from again.
	runAt [][]shardAt
	// isDirty marks, in a PlannerCache's planner (nil in NewPlanner's),
	// the nodes whose accounting changed since the cache last built or
	// brought it up to date (addDraw), listed in dirty.
	isDirty []bool
	dirty   []int32
	// notServing holds the running replicas NotServing took out of the
	// spread counts (their draw still counts).
	notServing map[string]bool
	shapes     map[shapeKey]*shape
	// shapeOrder is shapes' keys, oldest first; shapeCap is the most kept
	// (maxShapes; tests set it).
	shapeOrder []shapeKey
	shapeCap   int

	// What changed since each shape's index last looked (see oneindex.go).
	chg      []change
	chgGen   uint32
	modelIDs map[string]int32
	scanOnly bool // place single-node replicas by visiting every cell (placeOneScan); for tests

	// weightsKey's memory of the models' weights keys.
	wkeys map[*weightsapi.Source]keyed

	// scratch, reused across decisions
	stamp    uint32
	mark     [numDynKinds][]uint32
	slot     [numDynKinds][]int32
	col      collector
	cands    []cand
	gsort    []gsortable
	gscratch gangEval
	gruns    []gcand
	picked   []centry
	best     []centry
	addW     []float64 // draw a multi-node replica being placed adds, per domain
	touched  []bool
	added    []int32 // the domains it touches
}

type pdomain struct {
	dom      Domain
	key      string
	cap      float64 // budget watts; 0 without a budget
	budgeted bool
	hold     int32   // index into fac.Holds, or -1
	cells    []int32 // cells inside it
}

type cell struct {
	dom      [NumLevels]int32 // domain per level, -1 for none
	start    int32            // nodes [start, end)
	end      int32
	budgeted []int32 // budgeted domains holding the cell, coarse to fine
	hold     int32   // first held domain holding the cell, coarse to fine, or -1
}

// The count modes as indexes into per-mode arrays.
const (
	modeDeclared = 0
	modeMeasured = 1
)

func modeIndex(m CountMode) uint8 {
	if m == CountMeasured {
		return modeMeasured
	}
	return modeDeclared
}

// pnode is a node as a planner reads it. It holds no pointer, so that a
// planner's copy of its topology's nodes is one move, nothing for the
// garbage collector to scan; its name, pool and fabric are the
// topology's, its GPUs and weights the planner's (gpus, weights).
type pnode struct {
	fabricRank int32
	rank       int32 // place in name order
	cell       int32
	cpu, mem   int
	base       float64
	measured   float64
	promised   [2]float64 // Σ draw of its shards, counted declared and measured
	g0, gn     int32      // its GPU models: gpus[g0 : g0+gn] of its planner (or topology)
	fetchBPS   float64    // Node.FetchBytesPerSecond
}

type pgpu struct {
	model int32
	free  int
	power float64
}

// draw is max(measured, base + Σ shards), the shards counted in mode m.
func (n *pnode) draw(m int) float64 { return max(n.measured, n.base+n.promised[m]) }

// delta is how much the node's draw, counted in mode m, grows with one
// more shard counting w.
func (n *pnode) delta(m int, w float64) float64 {
	return max(n.measured, n.base+n.promised[m]+w) - n.draw(m)
}

// gpu returns node n's GPUs of a model, nil for none.
func (p *Planner) gpu(n *pnode, model int32) *pgpu { return gpuIn(p.gpus, n, model) }

func gpuIn(gpus []pgpu, n *pnode, model int32) *pgpu {
	for i := n.g0; i < n.g0+n.gn; i++ {
		if gpus[i].model == model {
			return &gpus[i]
		}
	}
	return nil
}

// NewPlanner indexes a fleet and facility and accounts for the replicas that
// already run: their draw and their spread counts (not their resources, which
// the fleet's free counts already leave out). It refuses an invalid facility,
// duplicate node names and replicas on unknown nodes; other problems of the
// fleet (see Fleet.Validate) are taken as they are. A PlannerCache builds
// the same planner, reusing the index of the fleet's layout it last built.
func NewPlanner(fleet Fleet, fac Facility, running []Replica) (*Planner, error) {
	if err := fac.Validate(); err != nil {
		return nil, err
	}
	t, pos, err := newTopology(fleet, fac, false)
	if err != nil {
		return nil, err
	}
	return t.planner(fleet, fac, pos, running, true)
}

// Add accounts for a replica that runs: its shards' draw and its spread
// counts. It takes no resources (see Shard).
func (p *Planner) Add(r Replica) error {
	at, err := p.shardsAt(r)
	if err != nil {
		return err
	}
	for _, s := range at {
		p.addDraw(s.node, s.w)
	}
	p.count(r.Model, at)
	p.running = append(p.running, Replica{ID: r.ID, Model: r.Model, Profile: r.Profile, Shards: slices.Clone(r.Shards)})
	p.runAt = append(p.runAt, at)
	return nil
}

// shardAt is a shard of a running replica: its node, and what it counts
// at, declared and measured (shardCounts).
type shardAt struct {
	node int32
	w    [2]float64
}

// shardsAt looks up r's shards' nodes and what they count at.
func (p *Planner) shardsAt(r Replica) ([]shardAt, error) {
	at := make([]shardAt, len(r.Shards))
	for i, s := range r.Shards {
		n, ok := p.nodeIndex[s.Node]
		if !ok {
			return nil, fmt.Errorf("replica %s: node %q: %w", r.ID, s.Node, ErrUnknownNode)
		}
		if err := checkWatts("shard watts", s.Watts, false); err != nil {
			return nil, fmt.Errorf("replica %s on %s: %w", r.ID, s.Node, err)
		}
		at[i] = shardAt{node: n, w: p.shardCounts(r.Model, r.Profile, s)}
	}
	return at, nil
}

// Commit accounts for a placed decision: its shards take their resources
// and draw, and the model's spread counts grow. It fails, changing nothing,
// when the decision placed nothing or its nodes no longer have room. It does
// not check budgets or holds again: commit a decision before placing the
// next one.
func (p *Planner) Commit(d Decision) error {
	if !d.Placed {
		return fmt.Errorf("commit %s: %w", d.Replica, ErrNotPlaced)
	}
	r := d.Running()
	at, err := p.shardsAt(r)
	if err != nil {
		return err
	}
	for i, s := range d.Shards {
		n := &p.nodes[at[i].node]
		g := p.gpu(n, p.gpuID(s.GPU))
		if s.GPUs > 0 && (g == nil || g.free < s.GPUs) || n.cpu < s.CPUCores || n.mem < s.MemoryGB ||
			slices.ContainsFunc(at[:i], func(o shardAt) bool { return o.node == at[i].node }) {
			return fmt.Errorf("commit %s on %s: %w", d.Replica, s.Node, ErrNoRoom)
		}
	}
	for i, s := range d.Shards {
		n := &p.nodes[at[i].node]
		if s.GPUs > 0 {
			p.gpu(n, p.gpuID(s.GPU)).free -= s.GPUs
		}
		n.cpu -= s.CPUCores
		n.mem -= s.MemoryGB
		p.addDraw(at[i].node, at[i].w)
	}
	p.count(d.Model, at)
	p.running = append(p.running, r)
	p.runAt = append(p.runAt, at)
	return nil
}

func (p *Planner) gpuID(model string) int32 {
	if id, ok := p.gpuIndex[model]; ok {
		return id
	}
	return -1
}

// shardCounts is what a shard of a profile counts at: [declared, measured].
func (p *Planner) shardCounts(model, profile string, s Shard) [2]float64 {
	return counted(p.counted, LearnedKey{Model: model, Profile: profile, GPU: s.GPU}, s.Watts)
}

// addDraw adds a shard counting w (declared, measured) to node n.
func (p *Planner) addDraw(n int32, w [2]float64) {
	nd := &p.nodes[n]
	var delta [2]float64
	for m := range delta {
		old := nd.draw(m)
		nd.promised[m] += w[m]
		delta[m] = nd.draw(m) - old
	}
	p.cellVer[nd.cell]++
	p.logChange(nd.cell, -1)
	if p.isDirty != nil && !p.isDirty[n] {
		p.isDirty[n] = true
		p.dirty = append(p.dirty, n)
	}
	for _, d := range p.cells[nd.cell].dom {
		if d >= 0 {
			p.draw[d] += delta[p.mode[d]]
			p.declDraw[d] += delta[modeDeclared]
		}
	}
}

// count adds one replica of model to every domain its nodes are in.
func (p *Planner) count(model string, nodes []shardAt) {
	cs := p.countsOf(model)
	p.logCounts(model, nodes)
	for _, l := range Levels() {
		for i, n := range nodes {
			d := p.cells[p.nodes[n.node].cell].dom[l]
			if d < 0 {
				continue
			}
			dup := false
			for _, m := range nodes[:i] {
				if p.cells[p.nodes[m.node].cell].dom[l] == d {
					dup = true
					break
				}
			}
			if !dup {
				cs[d]++
			}
		}
	}
}

// logCounts notes that the model's counts change in the domains of nodes.
func (p *Planner) logCounts(model string, nodes []shardAt) {
	m := p.modelIndex(model)
	for _, n := range nodes {
		p.logChange(p.nodes[n.node].cell, m)
	}
}

func (p *Planner) countsOf(model string) []int32 {
	cs, ok := p.counts[model]
	if !ok {
		cs = make([]int32, len(p.doms))
		p.counts[model] = cs
	}
	return cs
}

// Knows reports whether node is in the planner's fleet.
func (p *Planner) Knows(node string) bool {
	_, ok := p.nodeIndex[node]
	return ok
}

// Count returns how many replicas of model the domain holds.
func (p *Planner) Count(model string, d Domain) int {
	i, ok := p.domIndex[d]
	cs, ok2 := p.counts[model]
	if !ok || !ok2 {
		return 0
	}
	return int(cs[i])
}

// DomainUsage is a domain's budget, draw and hold.
type DomainUsage struct {
	Domain     Domain
	Budgeted   bool
	CapWatts   float64 // the budget; 0 without one
	LimitWatts float64 // CapWatts × (1 − headroom); +Inf without a budget
	// DrawWatts is Σ draw of its nodes, each shard counted as the domain
	// counts (Count): what it has admitted.
	DrawWatts float64
	// Count is how the domain counts shards: CountDeclared or CountMeasured
	// (a domain without a budget counts as the facility does).
	Count CountMode
	// DeclaredWatts is what DrawWatts would be were every shard counted at
	// its declared draw; equal to DrawWatts in a declared domain.
	DeclaredWatts float64
	// NowWatts is Σ measured_watts of its nodes that are measured, of
	// Nodes; MeasuredNodes of them are.
	NowWatts      float64
	Nodes         int
	MeasuredNodes int
	Held          bool
	Hold          Hold
}

// HeadroomWatts is how much more the domain may draw: LimitWatts − DrawWatts.
func (u DomainUsage) HeadroomWatts() float64 { return u.LimitWatts - u.DrawWatts }

// Explain says how the domain counted, for explain and events:
// "pdu=p3: admitted 17.1 kW measured (declared would be 24.5 kW) of 20.0 kW,
// now drawing 12.2 kW".
func (u DomainUsage) Explain() string {
	var b strings.Builder
	b.WriteString(u.Domain.String())
	b.WriteString(": admitted ")
	b.WriteString(kW(u.DrawWatts))
	b.WriteString(" ")
	b.WriteString(u.Count.String())
	if u.Count == CountMeasured {
		b.WriteString(" (declared would be " + kW(u.DeclaredWatts) + ")")
	}
	if u.Budgeted {
		b.WriteString(" of " + kW(u.LimitWatts))
	}
	switch {
	case u.MeasuredNodes == 0:
		b.WriteString(", not measured")
	case u.MeasuredNodes < u.Nodes:
		fmt.Fprintf(&b, ", now drawing %s on %d of %d nodes", kW(u.NowWatts), u.MeasuredNodes, u.Nodes)
	default:
		b.WriteString(", now drawing " + kW(u.NowWatts))
	}
	return b.String()
}

func kW(w float64) string { return fmt.Sprintf("%.1f kW", w/1000) }

func (p *Planner) usage(i int32) DomainUsage {
	d := &p.doms[i]
	u := DomainUsage{Domain: d.dom, Budgeted: d.budgeted, CapWatts: d.cap, LimitWatts: p.limit[i], DrawWatts: p.draw[i],
		Count: CountDeclared, DeclaredWatts: p.declDraw[i], NowWatts: p.now[i], Nodes: int(p.nodeCount[i]), MeasuredNodes: int(p.measuredCount[i])}
	if p.mode[i] == modeMeasured {
		u.Count = CountMeasured
	}
	if d.hold >= 0 {
		u.Held, u.Hold = true, p.fac.Holds[d.hold]
	}
	return u
}

// After returns the budgeted domains holding a placed decision's shards,
// coarse to fine, as they would be once it is committed: what explain
// shows of a decision. It changes nothing.
func (p *Planner) After(d Decision) ([]DomainUsage, error) {
	if !d.Placed {
		return nil, nil
	}
	at, err := p.shardsAt(d.Running())
	if err != nil {
		return nil, err
	}
	add := map[int32]*DomainUsage{}
	var order []int32
	for _, sa := range at {
		nd, w := &p.nodes[sa.node], sa.w
		delta := [2]float64{nd.delta(modeDeclared, w[0]), nd.delta(modeMeasured, w[1])}
		for _, dom := range p.cells[nd.cell].budgeted {
			u, ok := add[dom]
			if !ok {
				uu := p.usage(dom)
				u = &uu
				add[dom] = u
				order = append(order, dom)
			}
			u.DrawWatts += delta[p.mode[dom]]
			u.DeclaredWatts += delta[modeDeclared]
		}
	}
	slices.Sort(order) // domains are indexed by level, then value
	out := make([]DomainUsage, 0, len(order))
	for _, dom := range order {
		out = append(out, *add[dom])
	}
	return out, nil
}

// Usage returns a domain's budget, draw and hold.
func (p *Planner) Usage(d Domain) (DomainUsage, bool) {
	i, ok := p.domIndex[d]
	if !ok {
		return DomainUsage{}, false
	}
	return p.usage(i), true
}

// Budgeted returns every budgeted domain, by level (coarse to fine) then value.
func (p *Planner) Budgeted() []DomainUsage {
	var out []DomainUsage // nil without budgets, as ever
	if p.budgeted > 0 {
		out = make([]DomainUsage, 0, p.budgeted)
	}
	for i := range p.doms {
		if p.doms[i].budgeted {
			out = append(out, p.usage(int32(i)))
		}
	}
	return out
}

// Draining returns the ids of running replicas with a shard inside a domain
// held with drain: the controller places a new copy of each, then stops it.
func (p *Planner) Draining() []string {
	var out []string
	for _, r := range p.running {
		for _, s := range r.Shards {
			c := &p.cells[p.nodes[p.nodeIndex[s.Node]].cell]
			drain := false
			for _, d := range c.dom {
				if d >= 0 && p.doms[d].hold >= 0 && p.fac.Holds[p.doms[d].hold].Drain {
					drain = true
				}
			}
			if drain {
				out = append(out, r.ID)
				break
			}
		}
	}
	return out
}

// Place decides where one replica goes, trying the model's profiles in
// order, without changing the planner: Commit the decision to account for it.
func (p *Planner) Place(req Request) Decision {
	d := Decision{Replica: req.Replica, Model: req.Model.Name}
	for i := range req.Model.Profiles {
		sh := p.shape(&req.Model, &req.Model.Profiles[i])
		if sh.invalid != nil {
			d.Rejections = append(d.Rejections, Rejection{Profile: sh.prof.Name, Kind: KindInvalid, Message: "invalid profile: " + sh.invalid.Error()})
			continue
		}
		p.nextStamp()
		p.col.reset()
		var ok bool
		if sh.prof.Nodes > 1 {
			ok = p.placeGang(sh, &d)
		} else {
			ok = p.placeOne(sh, &d)
		}
		d.Rejections = p.finish(&p.col, sh, sh.prof.Nodes > 1, d.Rejections)
		if ok {
			d.Placed, d.Profile = true, sh.prof.Name
			for _, s := range d.Shards {
				d.Watts += s.Watts
			}
			return d
		}
	}
	return d
}

func (p *Planner) nextStamp() {
	p.stamp++
	if p.stamp == 0 {
		for k := range numDynKinds {
			clear(p.mark[k])
		}
		p.stamp = 1
	}
}

// Place decides where one replica goes on a fleet where running runs. It
// builds a Planner: to place many, use one Planner.
func Place(fleet Fleet, fac Facility, running []Replica, req Request) (Decision, error) {
	p, err := NewPlanner(fleet, fac, running)
	if err != nil {
		return Decision{}, err
	}
	return p.Place(req), nil
}

package reconcile

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/facility"
)

// Want is what the autoscaler (controller/autoscale) wants for one model.
type Want struct {
	N      int
	Reason string // the autoscaler's reason, for explain
}

// Scale is what an autoscaled model wanted, had and got in a pass.
type Scale struct {
	Model    string
	Priority int
	Min, Max int
	// Want is the count asked for, within Min and Max; Had the slots with
	// a job before the pass; Has the slots after its actions.
	Want, Had, Has int
	// Reason is the autoscaler's reason for Want.
	Reason string
	// Short says why Has is below Want ("pdu=p3 would draw 17.6 kW of
	// 17.3 kW; llama-70b (priority 80) holds the rest"); empty when not.
	Short string
	// Stopped are the slots stopped to scale down, Yielded those stopped
	// to give their place to a model of higher priority, Added the slots
	// created.
	Stopped, Yielded, Added []string
}

// Explain is the model's count in one line: "wants 6, has 4: …".
func (s Scale) Explain() string {
	out := fmt.Sprintf("wants %d, has %d", s.Want, s.Has)
	if s.Short != "" {
		out += ": " + s.Short
	}
	return out
}

// autoscaling reports whether any model of the catalog autoscales: only
// then do priorities order the floors and the growth (see Plan).
func autoscaling(cat facility.Catalog) bool {
	return slices.ContainsFunc(cat.Models, func(m facility.Model) bool { return m.Autoscale != nil })
}

// allocator decides, in one pass, how many replicas each model gets when
// some autoscale: which slots a scale down stops, and which new slots the
// floors and the growth get, by priority, inside the facility's budgets.
type allocator struct {
	in       Input
	res      *Result
	models   []facility.Model
	index    map[string]int
	bySlot   map[string][]Job // live jobs by slot
	allSlots map[string]bool  // slots with any job Nomad holds, stopped this pass or not
	slots    map[string][]string
	created  map[string]bool
	deferred map[string][]string // fixed models' slots with no job, placed by priority
	loc      map[string]facility.Location
	scale    map[string]*Scale
	short    map[string]facility.Decision // the failed decision that stopped a model's growth
	noSlot   map[string]bool              // models whose growth found no free slot below max
	planner  *facility.Planner
}

func newAllocator(in Input, res *Result, bySlot map[string][]Job) *allocator {
	a := &allocator{
		in: in, res: res, models: in.Catalog.Models, index: map[string]int{}, bySlot: bySlot,
		allSlots: map[string]bool{}, slots: map[string][]string{}, created: map[string]bool{},
		deferred: map[string][]string{}, loc: map[string]facility.Location{}, scale: map[string]*Scale{},
		short: map[string]facility.Decision{}, noSlot: map[string]bool{},
	}
	for i, m := range a.models {
		a.index[m.Name] = i
	}
	for _, n := range in.Fleet.Nodes {
		a.loc[n.Name] = n.Location
	}
	for _, j := range in.Jobs {
		a.allSlots[j.Replica] = true
	}
	for slot, js := range bySlot {
		if len(js) > 0 {
			a.slots[js[0].Model] = append(a.slots[js[0].Model], slot)
		}
	}
	for m, ss := range a.slots {
		sort.Slice(ss, func(i, k int) bool { return slotIndex(ss[i], m) < slotIndex(ss[k], m) })
	}
	for _, m := range a.models {
		if m.Autoscale == nil {
			continue
		}
		p := m.Autoscale
		had := len(a.slots[m.Name])
		s := &Scale{Model: m.Name, Priority: m.Priority, Min: p.Min, Max: p.Max, Had: had}
		if w, ok := in.Want[m.Name]; ok {
			s.Want, s.Reason = p.Clamp(w.N), w.Reason
			if s.Want != w.N {
				s.Reason += fmt.Sprintf(" (within autoscale min %d, max %d: %d)", p.Min, p.Max, s.Want)
			}
		} else {
			// No decision (the controller does not feed the autoscaler):
			// the model keeps what it has, and at least one replica, so
			// that a model with min 0 is not left at zero with nothing to
			// wake it.
			s.Want = p.Clamp(max(had, 1))
			s.Reason = fmt.Sprintf("no autoscaler decision: keeps its %d slots", had)
			if s.Want != had {
				s.Reason += fmt.Sprintf(", at least 1, within autoscale min %d, max %d: %d", p.Min, p.Max, s.Want)
			}
		}
		a.scale[m.Name] = s
	}
	return a
}

// slotsOf returns the slots a model's existing jobs are planned in, in
// order: a fixed model's 0 … replicas-1, an autoscaled model's slots with a
// job.
func (a *allocator) slotsOf(m facility.Model) []string {
	if m.Autoscale == nil {
		out := make([]string, m.Replicas)
		for i := range out {
			out[i] = facility.ReplicaID(m.Name, i)
		}
		return out
	}
	return a.slots[m.Name]
}

// floor is what the model keeps whatever a higher priority wants.
func floor(m facility.Model) int { return m.Floor() }

func (a *allocator) has(m facility.Model) int { return len(a.slots[m.Name]) }

// scaleDown stops, for every autoscaled model above what it wants, the
// slots whose loss keeps its spread best, and takes them out of bySlot and
// live (their watts are free for this pass's placements, as the catalog's
// stops are).
func (a *allocator) scaleDown(live []Job) ([]Action, []Job) {
	var acts []Action
	gone := map[string]bool{}
	for _, m := range a.models {
		s := a.scale[m.Name]
		if s == nil || s.Had <= s.Want {
			continue
		}
		for _, slot := range a.victims(m, a.slots[m.Name], s.Had-s.Want) {
			for _, j := range a.bySlot[slot] {
				acts = append(acts, stop(j, fmt.Sprintf("scale down %d→%d: %s", s.Had, s.Want, s.Reason)))
				gone[j.ID] = true
			}
			s.Stopped = append(s.Stopped, slot)
			a.dropSlot(m.Name, slot)
		}
	}
	out := live[:0:0]
	for _, j := range live {
		if !gone[j.ID] {
			out = append(out, j)
		}
	}
	return acts, out
}

func (a *allocator) dropSlot(model, slot string) {
	a.slots[model] = slices.DeleteFunc(a.slots[model], func(s string) bool { return s == slot })
	delete(a.bySlot, slot)
}

// slotState is the best state of a slot's jobs.
func slotState(js []Job) State {
	best := Failed
	for _, j := range js {
		best = min(best, j.State)
	}
	return best
}

// spreadOf returns, for a slot, the domains its kept job touches at each
// of its profile's spread levels.
func (a *allocator) spreadOf(m facility.Model, js []Job) [][]string {
	if len(js) == 0 {
		return nil
	}
	best := append([]Job(nil), js...)
	sortBest(best)
	j := best[0]
	levels := facility.DefaultSpread()
	for _, p := range m.Profiles {
		if p.Name == j.Profile {
			levels = p.Spread
		}
	}
	out := make([][]string, len(levels))
	for i, l := range levels {
		for _, sh := range j.Shards {
			loc, ok := a.loc[sh.Node]
			if !ok {
				continue
			}
			if v := loc.Get(l); v != "" {
				key := l.String() + "=" + v
				if !slices.Contains(out[i], key) {
					out[i] = append(out[i], key)
				}
			}
		}
	}
	return out
}

// victims picks n of a model's slots to stop, one at a time, each the
// best to lose of those left: first a slot that does not serve (failed,
// pending, partly placed, starting, in that order); then the one in the
// most crowded domains of its spread levels, level by level, so that what
// stays is spread the widest; then the highest index.
func (a *allocator) victims(m facility.Model, slots []string, n int) []string {
	left := slices.Clone(slots)
	var out []string
	for ; n > 0 && len(left) > 0; n-- {
		spread := make(map[string][][]string, len(left))
		count := map[string]int{}
		for _, s := range left {
			spread[s] = a.spreadOf(m, a.bySlot[s])
			for _, doms := range spread[s] {
				for _, d := range doms {
					count[d]++
				}
			}
		}
		crowd := func(s string) []int {
			out := make([]int, len(spread[s]))
			for i, doms := range spread[s] {
				for _, d := range doms {
					out[i] = max(out[i], count[d])
				}
			}
			return out
		}
		best := left[0]
		for _, s := range left[1:] {
			if victimLess(a.bySlot[s], crowd(s), slotIndex(s, m.Name), a.bySlot[best], crowd(best), slotIndex(best, m.Name)) {
				best = s
			}
		}
		out = append(out, best)
		left = slices.DeleteFunc(left, func(s string) bool { return s == best })
	}
	return out
}

// victimLess reports whether slot x is a better victim than slot y.
func victimLess(xj []Job, xc []int, xi int, yj []Job, yc []int, yi int) bool {
	if sx, sy := slotState(xj), slotState(yj); sx != sy {
		return sx > sy
	}
	if c := slices.Compare(xc, yc); c != 0 {
		return c > 0
	}
	return xi > yi
}

// deferSlot notes a fixed model's slot with no job: with autoscaling on,
// such slots are placed by priority with the autoscaled models' floors.
func (a *allocator) deferSlot(m facility.Model, slot string) {
	a.deferred[m.Name] = append(a.deferred[m.Name], slot)
}

// byPriority returns the models, highest priority first, catalog order
// within one.
func (a *allocator) byPriority() []facility.Model {
	ms := slices.Clone(a.models)
	slices.SortStableFunc(ms, func(x, y facility.Model) int { return cmp.Compare(y.Priority, x.Priority) })
	return ms
}

// grow places, after every existing slot was planned: first every model's
// floor (a fixed model's missing slots, an autoscaled model's min), by
// priority; then each priority's autoscaled models up to what they want,
// sharing what is left in proportion to what each still lacks, before the
// next priority gets any. A model that does not fit may take a lower
// priority model's replicas above that model's floor, new copy first.
func (a *allocator) grow(planner *facility.Planner) error {
	a.planner = planner
	order := a.byPriority()
	for _, m := range order {
		if slots := a.deferred[m.Name]; len(slots) > 0 {
			for _, slot := range slots {
				// Each is tried, as without autoscaling: each gets its
				// decision, for explain.
				if _, err := a.placeOne(m, slot, "missing"); err != nil {
					return err
				}
			}
			continue
		}
		s := a.scale[m.Name]
		if s == nil {
			continue
		}
		for a.has(m) < min(s.Want, m.Autoscale.Min) {
			slot, free := a.nextSlot(m)
			if !free {
				break
			}
			ok, err := a.placeOne(m, slot, fmt.Sprintf("autoscale min %d", m.Autoscale.Min))
			if err != nil {
				return err
			}
			if !ok {
				break
			}
		}
	}
	for i := 0; i < len(order); {
		j := i
		for j < len(order) && order[j].Priority == order[i].Priority {
			j++
		}
		if err := a.share(order[i:j]); err != nil {
			return err
		}
		i = j
	}
	for _, m := range a.models {
		if s := a.scale[m.Name]; s != nil {
			s.Has = a.has(m)
			if s.Has < s.Want {
				s.Short = a.shortReason(m)
			}
			a.res.Scale[m.Name] = *s
		}
	}
	return nil
}

// share grows one priority's autoscaled models: each step goes to the
// model that has got the least share of what it lacked, until each has
// what it wants or fits nowhere more.
func (a *allocator) share(tier []facility.Model) error {
	type grow struct {
		m          facility.Model
		lack, got  int
		blocked    bool
		firstIndex int
	}
	var gs []*grow
	for _, m := range tier {
		s := a.scale[m.Name]
		if s == nil || a.has(m) >= s.Want || a.short[m.Name].Replica != "" {
			continue
		}
		gs = append(gs, &grow{m: m, lack: s.Want - a.has(m), firstIndex: a.index[m.Name]})
	}
	for steps := 0; steps < 1<<16; steps++ {
		var next *grow
		for _, g := range gs {
			if g.blocked || g.got >= g.lack {
				continue
			}
			// Least share first: got/lack, compared without division.
			if next == nil || g.got*next.lack < next.got*g.lack ||
				(g.got*next.lack == next.got*g.lack && g.firstIndex < next.firstIndex) {
				next = g
			}
		}
		if next == nil {
			return nil
		}
		s := a.scale[next.m.Name]
		slot, free := a.nextSlot(next.m)
		if !free {
			next.blocked = true
			continue
		}
		ok, err := a.placeOne(next.m, slot, fmt.Sprintf("scale up %d→%d: %s", s.Had, s.Want, s.Reason))
		if err != nil {
			return err
		}
		if ok {
			next.got++
		} else {
			next.blocked = true
		}
	}
	return nil
}

// nextSlot is the lowest slot index of the model, below its slot limit
// (autoscale max), that no job holds. free is false when every one is
// held: a slot whose job this pass stops (a scale down, a yield) is free
// only once that job is gone, so a model that has just yielded its place
// grows back in a later pass, never past its max.
func (a *allocator) nextSlot(m facility.Model) (slot string, free bool) {
	for i := 0; i < m.SlotLimit(); i++ {
		slot := facility.ReplicaID(m.Name, i)
		if !a.allSlots[slot] && !a.created[slot] {
			return slot, true
		}
	}
	a.noSlot[m.Name] = true
	return "", false
}

// placeOne places one new slot of m, taking a lower priority's replicas
// when nothing else fits. It reports whether the slot was placed.
func (a *allocator) placeOne(m facility.Model, slot, why string) (bool, error) {
	d := a.planner.Place(facility.Request{Replica: slot, Model: m})
	var yield []string
	if !d.Placed {
		if pd, victims, ok := a.preempt(m, slot); ok {
			d, yield = pd, victims
		}
	}
	a.res.Decisions[slot] = d
	if !d.Placed {
		a.short[m.Name] = d
		return false, nil
	}
	if err := a.planner.Commit(d); err != nil {
		return false, fmt.Errorf("commit %s: %w", slot, err)
	}
	profiles := map[string]facility.Profile{}
	for _, p := range m.Profiles {
		profiles[p.Name] = p
	}
	gen := 0
	if g, ok := a.in.Gens[slot]; ok {
		gen = g + 1
	}
	reason := why
	if len(yield) > 0 {
		reason += "; takes the place of " + strings.Join(yield, ", ")
	}
	a.res.Actions = append(a.res.Actions, Action{
		Kind: Create, Replica: slot, Gen: gen, Model: m, Profile: profiles[d.Profile],
		FP: facility.ProfileFingerprint(m, profiles[d.Profile]), Decision: d, Reason: reason,
	})
	// New copy first: the victims' stops come after the create they make
	// room for, and name it.
	for _, v := range yield {
		vm := a.models[a.index[a.bySlot[v][0].Model]]
		for _, j := range a.bySlot[v] {
			act := stop(j, fmt.Sprintf("yields its place to %s of %s (priority %d over %d; %s stays at %d, its floor is %d)",
				slot, m.Name, m.Priority, vm.Priority, vm.Name, a.has(vm)-1, floor(vm)))
			act.Yields = slot
			a.res.Actions = append(a.res.Actions, act)
		}
		if s := a.scale[vm.Name]; s != nil {
			s.Yielded = append(s.Yielded, v)
		}
		a.dropSlot(vm.Name, v)
	}
	a.created[slot] = true
	a.slots[m.Name] = append(a.slots[m.Name], slot)
	if s := a.scale[m.Name]; s != nil {
		s.Added = append(s.Added, slot)
	}
	return true, nil
}

// The bounds of a preemption: candidates tried alone; taken together, and
// the places tried for that.
const (
	maxPreemptTrials  = 32
	maxPreemptVictims = 8
	maxPreemptSeeds   = 8
)

// preempt looks for replicas of lower priority models, above their floor,
// whose place lets a new slot of m fit: one alone if one will do, else a
// few together, keeping only those needed. Their jobs are taken out of the
// planner; the caller commits the decision. A preemption waits while the
// pass has used up max_stops.
func (a *allocator) preempt(m facility.Model, slot string) (facility.Decision, []string, bool) {
	if a.sleeping(m) {
		// An idle model kept asleep takes no one's place: it waits
		// for room (or a request) like a model at zero.
		return facility.Decision{}, nil, false
	}
	stops := 0
	for _, act := range a.res.Actions {
		if act.Kind == Stop {
			stops++
		}
	}
	cands := a.candidates(m)
	if len(cands) == 0 {
		return facility.Decision{}, nil, false
	}
	req := facility.Request{Replica: slot, Model: m}
	fits := func(victims []string) bool {
		if a.in.MaxStops <= 0 {
			return true
		}
		n := 0
		for _, v := range victims {
			n += len(a.bySlot[v])
		}
		return stops+n <= a.in.MaxStops
	}
	for i, c := range cands {
		if i == maxPreemptTrials {
			break
		}
		if !fits([]string{c}) {
			continue
		}
		removed, ok := a.take(c)
		if !ok {
			continue
		}
		if d := a.planner.Place(req); d.Placed {
			return d, []string{c}, true
		}
		a.restore(removed)
	}
	// Together: near a seed (the node of a candidate, best victims'
	// first), take candidates nearest it first — its node, then its PDU,
	// rack and so on — until the new slot fits; then give back every one it
	// fits without.
	var seeds []string
	for _, c := range cands {
		if n := a.nodeOf(c); n != "" && !slices.Contains(seeds, n) {
			seeds = append(seeds, n)
		}
	}
	for si, seed := range seeds {
		if si == maxPreemptSeeds {
			break
		}
		near := slices.Clone(cands)
		slices.SortStableFunc(near, func(x, y string) int { return cmp.Compare(a.distance(seed, x), a.distance(seed, y)) })
		if d, taken, ok := a.takeUntilFits(req, near, fits); ok {
			return d, taken, true
		}
	}
	return facility.Decision{}, nil, false
}

// takeUntilFits takes candidates in order until req places (at most
// maxPreemptVictims), then gives back every one it places without. When
// it never places, everything is given back.
func (a *allocator) takeUntilFits(req facility.Request, cands []string, fits func([]string) bool) (facility.Decision, []string, bool) {
	var taken []string
	held := map[string][]facility.Replica{}
	placed := false
	for _, c := range cands {
		if len(taken) == maxPreemptVictims || !fits(append(slices.Clone(taken), c)) {
			break
		}
		removed, ok := a.take(c)
		if !ok {
			continue
		}
		taken, held[c] = append(taken, c), removed
		if d := a.planner.Place(req); d.Placed {
			placed = true
			break
		}
	}
	if !placed {
		for _, c := range taken {
			a.restore(held[c])
		}
		return facility.Decision{}, nil, false
	}
	for i := 0; i < len(taken)-1; {
		c := taken[i]
		a.restore(held[c])
		if a.planner.Place(req).Placed {
			taken = slices.Delete(taken, i, i+1)
			continue
		}
		if again, ok := a.take(c); ok {
			held[c] = again
		}
		i++
	}
	d := a.planner.Place(req)
	return d, taken, d.Placed
}

// nodeOf is the node of a slot's kept job's first shard.
func (a *allocator) nodeOf(slot string) string {
	js := append([]Job(nil), a.bySlot[slot]...)
	sortBest(js)
	if len(js) == 0 || len(js[0].Shards) == 0 {
		return ""
	}
	return js[0].Shards[0].Node
}

// distance is how far a slot sits from a node: 0 on it, then 1 + the
// levels from the finest (pdu) up to the first the two share, 6 for none.
func (a *allocator) distance(node, slot string) int {
	other := a.nodeOf(slot)
	if other == node {
		return 0
	}
	x, okx := a.loc[node]
	y, oky := a.loc[other]
	if !okx || !oky {
		return 1 + facility.NumLevels
	}
	levels := facility.Levels()
	for i := len(levels) - 1; i >= 0; i-- {
		if v := x.Get(levels[i]); v != "" && v == y.Get(levels[i]) {
			return len(levels) - i
		}
	}
	return 1 + facility.NumLevels
}

// candidates are the slots a new slot of m may take, best victim first:
// of models of lower priority (lowest first), above their floor, slots
// that existed before this pass and have no action in it, in victim
// order; as many of each model as it has above its floor. Slots whose
// engines sleep (Input.Asleep) come before every other.
func (a *allocator) candidates(m facility.Model) []string {
	var lower []facility.Model
	for _, o := range a.models {
		if o.Priority < m.Priority && o.Autoscale != nil && a.has(o) > floor(o) {
			lower = append(lower, o)
		}
	}
	slices.SortStableFunc(lower, func(x, y facility.Model) int { return cmp.Compare(x.Priority, y.Priority) })
	touched := map[string]bool{}
	for _, act := range a.res.Actions {
		touched[act.Replica] = true // a roll or a replacement under way: not a victim this pass
	}
	var out []string
	for _, o := range lower {
		var old []string
		for _, s := range a.slots[o.Name] {
			if !a.created[s] && !touched[s] {
				old = append(old, s)
			}
		}
		out = append(out, a.victims(o, old, a.has(o)-floor(o))...)
	}
	// Asleep first: a sleeping replica serves nothing now.
	slices.SortStableFunc(out, func(x, y string) int {
		switch ax, ay := a.in.Asleep[x], a.in.Asleep[y]; {
		case ax && !ay:
			return -1
		case ay && !ax:
			return 1
		}
		return 0
	})
	return out
}

// sleeping reports whether m is an idle model kept asleep (when_idle =
// "sleep") with a replica whose engine sleeps.
func (a *allocator) sleeping(m facility.Model) bool {
	if !m.Autoscale.Sleeps() {
		return false
	}
	for _, j := range a.in.Jobs {
		if j.Model == m.Name && a.in.Asleep[j.Replica] {
			return true
		}
	}
	return false
}

// take takes a slot's jobs out of the planner.
func (a *allocator) take(slot string) ([]facility.Replica, bool) {
	var out []facility.Replica
	for _, j := range a.bySlot[slot] {
		r, err := a.planner.Remove(j.ID)
		if err != nil {
			continue // no shard on a known node: nothing to free
		}
		out = append(out, r)
	}
	return out, len(out) > 0
}

func (a *allocator) restore(rs []facility.Replica) {
	for _, r := range rs {
		// Remove gave back exactly what Restore takes again.
		_ = a.planner.Restore(r)
	}
}

// binding picks the rejection that says best why a decision placed
// nothing: a budget, then free GPUs, CPU or memory, then a hold, then
// anything.
func binding(d facility.Decision) (facility.Rejection, bool) {
	rank := map[facility.Kind]int{
		facility.KindOverBudget: 1, facility.KindGPUs: 2, facility.KindCPU: 3, facility.KindMemory: 4,
		facility.KindHeld: 5, facility.KindKeepWithin: 6,
	}
	best, found := facility.Rejection{}, false
	for _, r := range d.Rejections {
		rk, ok := rank[r.Kind]
		if !ok {
			rk = 9
		}
		if !found {
			best, found = r, true
			continue
		}
		bk, ok := rank[best.Kind]
		if !ok {
			bk = 9
		}
		if rk < bk {
			best = r
		}
	}
	return best, found
}

// shortReason says why a model has fewer than it wants: what its last
// placement ran into, and, for a budget, who holds the rest of it.
func (a *allocator) shortReason(m facility.Model) string {
	d, ok := a.short[m.Name]
	if !ok && a.noSlot[m.Name] {
		return fmt.Sprintf("every slot below autoscale max %d still has a job (one this pass stops is free once it has gone)", m.SlotLimit())
	}
	if !ok {
		return "no placement was tried"
	}
	r, ok := binding(d)
	if !ok {
		return "no profile to place"
	}
	msg := strings.TrimPrefix(r.Message, "over budget: ")
	if r.Kind != facility.KindOverBudget {
		return msg
	}
	// Of the budgets in the way, the one where other models draw the most.
	best, bestW := "", 0.0
	for _, o := range d.Rejections {
		if o.Kind != facility.KindOverBudget || o.Domain == "" {
			continue
		}
		dom, err := facility.ParseDomain(o.Domain)
		if err != nil {
			continue
		}
		if h, w := a.holders(m, dom); h != "" && w > bestW {
			best, bestW = strings.TrimPrefix(o.Message, "over budget: ")+"; "+h, w
		}
	}
	if best != "" {
		return best
	}
	return msg
}

// holders names the other models drawing in dom, most watts first, each
// with why m could not take its place (a priority as high or higher, at
// its floor, or too few above it), and the watts they draw there.
func (a *allocator) holders(m facility.Model, dom facility.Domain) (string, float64) {
	draw := map[string]float64{}
	slots := make([]string, 0, len(a.bySlot))
	for slot := range a.bySlot {
		slots = append(slots, slot)
	}
	sort.Strings(slots) // the sums, to the last bit, in one order
	for _, slot := range slots {
		for _, j := range a.bySlot[slot] {
			for _, sh := range j.Shards {
				if loc, ok := a.loc[sh.Node]; ok && loc.Get(dom.Level) == dom.Value {
					draw[j.Model] += sh.Watts
				}
			}
		}
	}
	for _, act := range a.res.Actions {
		if act.Kind != Create {
			continue
		}
		for _, sh := range act.Decision.Shards {
			if loc, ok := a.loc[sh.Node]; ok && loc.Get(dom.Level) == dom.Value {
				draw[act.Model.Name] += sh.Watts
			}
		}
	}
	type holder struct {
		name string
		w    float64
		why  string
	}
	var hs []holder
	for name, w := range draw {
		i, ok := a.index[name]
		if !ok || name == m.Name || w <= 0 {
			continue
		}
		o := a.models[i]
		var why string
		switch {
		case o.Priority > m.Priority:
			why = fmt.Sprintf("priority %d", o.Priority)
		case o.Priority == m.Priority:
			why = fmt.Sprintf("priority %d, as high", o.Priority)
		case a.has(o) <= floor(o):
			why = fmt.Sprintf("priority %d, at its floor of %d", o.Priority, floor(o))
		default:
			// Lower, with replicas above its floor: too few, or too far,
			// to make room.
			why = fmt.Sprintf("priority %d, %d above its floor of %d", o.Priority, a.has(o)-floor(o), floor(o))
		}
		hs = append(hs, holder{name, w, why})
	}
	if len(hs) == 0 {
		return "", 0
	}
	sort.Slice(hs, func(i, k int) bool {
		if hs[i].w != hs[k].w {
			return hs[i].w > hs[k].w
		}
		return hs[i].name < hs[k].name
	})
	total := 0.0
	for _, h := range hs {
		total += h.w
	}
	const shown = 3
	var names []string
	for i, h := range hs {
		if i == shown {
			names = append(names, strconv.Itoa(len(hs)-shown)+" more")
			break
		}
		names = append(names, fmt.Sprintf("%s (%s)", h.name, h.why))
	}
	verb := "holds"
	if len(names) > 1 {
		verb = "hold"
	}
	return joinAnd(names) + " " + verb + " the rest", total
}

func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

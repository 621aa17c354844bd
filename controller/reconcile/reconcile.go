package reconcile

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/llmgw/llmgw/facility"
)

// State is where a managed job stands, as observed in Nomad.
type State int

// Job states, best first: the order used to pick which duplicate to keep.
const (
	Serving  State = iota // every shard running and ready
	Starting              // every shard placed, not all ready yet
	Partial               // some shards placed, others not (yet)
	Pending               // registered, nothing placed yet
	Failed                // a shard failed or was lost and is not coming back by itself
)

func (s State) String() string {
	switch s {
	case Serving:
		return "serving"
	case Starting:
		return "starting"
	case Partial:
		return "partial"
	case Pending:
		return "pending"
	case Failed:
		return "failed"
	default:
		return fmt.Sprintf("state(%d)", int(s))
	}
}

// Job is one managed Nomad job, as the controller rebuilt it from Nomad.
type Job struct {
	ID      string
	Replica string // the slot, such as "llama-3.1-70b-3"
	Model   string
	Profile string
	FP      string // llmgw.profile_fp
	Gen     int
	// Shards are the places the job is pinned to (from its groups'
	// constraints) with their draw; they count in budgets and spread for as
	// long as the job lives.
	Shards []facility.Shard
	// Domain is the scope the job was pinned to (informational).
	Domain facility.Scope
	State  State
	// Note says why a job that is not serving is not, shard by shard
	// ("shard-0: node n3 down for 31s (lost_after 0s)"); empty when serving.
	Note string
	// Unhealthy names the GPUs the job holds that their device plugin
	// reports unhealthy: the job is moved off them, new copy first, as out
	// of a drained domain.
	Unhealthy string
	// Since is when the job entered State (for Partial and Pending: when it
	// was registered or last placed).
	Since time.Time
	// CreateIndex orders jobs by age; ModifyIndex is the JobModifyIndex a
	// re-registration must name.
	CreateIndex uint64
	ModifyIndex uint64
}

// Input is everything one pass looks at.
type Input struct {
	Now      time.Time
	Catalog  facility.Catalog
	Fleet    facility.Fleet
	Facility facility.Facility
	Jobs     []Job
	// PartialDeadline is how long a job may stay partly placed (or placed
	// nowhere) before it is placed again; Nomad has no gang placement.
	PartialDeadline time.Duration
	// MaxStops caps the stops of one pass (0: no cap); the rest are left
	// for the next passes, which see what the first ones did.
	MaxStops int
	// Gens holds, per replica slot, the highest generation of any job Nomad
	// still holds for it, stopped and dead ones included (they are not in
	// Jobs). A new job takes a generation above it: Nomad keeps a stopped
	// job until its garbage collection, and a create-only registration of
	// that job's ID would be refused until then.
	Gens map[string]int
	// Want holds, by model, the replica count the autoscaler wants for a
	// model with an autoscale policy (controller/autoscale). A model with
	// a policy and no entry keeps the slots it has (at least one), within
	// its min and max: counts never move on missing data, and a model
	// with min 0 is not left at zero with nothing to wake it. Models with
	// a fixed replicas count ignore it.
	Want map[string]Want
	// Asleep holds the replica slots whose engines sleep (the
	// controller's last reading of each engine's own state): when a model
	// of higher priority needs room, they are given up first.
	Asleep map[string]bool
	// Planners, when set, builds the pass's planner, keeping from one pass
	// to the next the index of the fleet's layout (nodes, locations,
	// budgets, holds) while it does not change, and the pass's planner,
	// which the next pass's is brought up to date from: the nodes whose
	// free resources or draws changed, the jobs that came, went or
	// changed, and the domains and cells those reach, rather than sorting
	// and hashing the fleet and adding every job again. The result is the
	// same as without (TestPlanWithPlannersMatchesPlan). One pass at a
	// time may use it (facility.PlannerCache). nil: every pass builds its
	// own.
	Planners *facility.PlannerCache
}

// Kind is what an action does.
type Kind int

// Action kinds.
const (
	Create  Kind = iota // register a new job (check-and-set: must not exist)
	Replace             // re-register an existing job with a new decision (check-and-set on its modify index)
	Stop                // deregister a job
)

func (k Kind) String() string {
	switch k {
	case Create:
		return "create"
	case Replace:
		return "replace"
	case Stop:
		return "stop"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// Action is one change to make in Nomad.
type Action struct {
	Kind    Kind
	Replica string
	JobID   string // for Replace and Stop: the job; for Create: empty, see Gen
	Gen     int    // for Create: the new job's generation
	Model   facility.Model
	// Profile and FP describe the job to render (Create, Replace).
	Profile  facility.Profile
	FP       string
	Decision facility.Decision
	// ExpectIndex is the JobModifyIndex a Replace or a Stop must match.
	ExpectIndex uint64
	Reason      string
	// Catalog marks a Stop whose cause is the catalog itself (its model or
	// slot left it): what a bad reload would do in bulk.
	Catalog bool
	// Yields, on a Stop, names the slot of a model of higher priority
	// whose Create, earlier in the same pass, this stop makes room for: the
	// stop is for that create only, and is skipped when it was not done.
	Yields string
}

func (a Action) String() string {
	switch a.Kind {
	case Stop:
		return fmt.Sprintf("stop %s (%s): %s", a.JobID, a.Replica, a.Reason)
	case Replace:
		return fmt.Sprintf("replace %s (%s) on %s: %s", a.JobID, a.Replica, a.Decision.Domain.Key(), a.Reason)
	default:
		return fmt.Sprintf("create %s gen %d profile %s on %s: %s", a.Replica, a.Gen, a.Profile.Name, a.Decision.Domain.Key(), a.Reason)
	}
}

// Result is a pass's outcome.
type Result struct {
	Actions []Action
	// Spares are the warm spares of the models that ask for them (Spares),
	// picked beside what runs now: the controller fetches onto them.
	Spares []Spare
	// Decisions holds the placement decision of every replica placed or
	// refused in this pass, by replica: the explanation to keep.
	Decisions map[string]facility.Decision
	// Usage is every budgeted domain's budget and draw from what runs,
	// before this pass's placements (facility.Planner.Budgeted).
	Usage []facility.DomainUsage
	// After is the same domains' draw once this pass's actions are done:
	// its placements added, the jobs its stops and replaces name taken
	// out (a replace's new placement is among the placements). The old
	// copy of a move or roll that this pass does not stop yet (it goes
	// when its new copy serves) still counts.
	After []facility.DomainUsage
	// Waits says, by replica, why a roll or move of it waits this pass
	// (max_surge reached; no room to surge with max_unavailable 0).
	Waits map[string]string
	// DeferredStops counts the stops left for later passes by MaxStops.
	DeferredStops int
	// Scale holds, by autoscaled model, what it wanted, had and got, and
	// why not more; empty when no model of the catalog autoscales.
	Scale map[string]Scale
}

// Plan decides one pass. It fails only on input the planner refuses (an
// invalid facility, jobs on nodes it does not know are tolerated: their
// shards are left out of the accounting).
//
// When a model of the catalog autoscales, Plan also decides the counts:
// autoscaled models above what they want stop the slots whose loss keeps
// their spread (before anything is placed, so their watts are free for
// this pass); after every existing slot is planned, the floors — fixed
// models' missing slots, autoscaled models' min — are placed by priority,
// then each priority's autoscaled models grow towards what they want,
// sharing what the budgets leave in proportion to what each lacks, before
// a lower priority gets anything. A model that fits nowhere may take the
// place of replicas of a lower priority model above that model's floor:
// its Create comes first, the victims' Stops after it (Action.Yields).
func Plan(in Input) (Result, error) {
	p := newPass(in)
	p.sortOut() // 1
	if autoscaling(in.Catalog) {
		p.scaleDown() // 1b
	}
	if err := p.countRunning(); err != nil { // 2
		return Result{}, err
	}
	if err := p.planSlots(); err != nil { // 3
		return Result{}, err
	}
	if p.alloc != nil { // 4
		if err := p.alloc.grow(p.planner); err != nil {
			return Result{}, err
		}
	}
	if err := p.settle(); err != nil { // 5
		return Result{}, err
	}
	spares, err := Spares(in) // 6
	if err != nil {
		return Result{}, err
	}
	p.res.Spares = spares
	return p.res, nil
}

// pass is one Plan: its input, the result it builds, and what its
// numbered steps hand on to the later ones.
type pass struct {
	in     Input
	res    Result
	models map[string]facility.Model // the catalog's, by name
	fps    map[[2]string]string      // the catalog's profile fingerprints, by model and profile (fingerprint)

	jobs   []Job            // in.Jobs in jobLess order
	bySlot map[string][]Job // the live jobs by slot (step 1)
	live   []Job            // the jobs that keep their slot (steps 1, 1b)
	alloc  *allocator       // nil unless a model autoscales (step 1b)

	planner  *facility.Planner // with every live job counted (step 2)
	draining map[string]bool   // job IDs to move: in a drain, or unhealthy (step 2)

	buf [4][]Job // planSlot's, reused from slot to slot
}

func newPass(in Input) *pass {
	p := &pass{
		in:     in,
		res:    Result{Decisions: map[string]facility.Decision{}, Waits: map[string]string{}, Scale: map[string]Scale{}},
		models: map[string]facility.Model{},
		fps:    map[[2]string]string{},
		bySlot: make(map[string][]Job, len(in.Jobs)),
	}
	for _, m := range in.Catalog.Models {
		p.models[m.Name] = m
	}
	p.jobs = append([]Job(nil), in.Jobs...)
	sort.Slice(p.jobs, func(i, j int) bool { return jobLess(p.jobs[i], p.jobs[j]) })
	return p
}

// sortOut (step 1) stops the jobs of models or slots that left the
// catalog, and files the others by slot.
func (p *pass) sortOut() {
	p.live = make([]Job, 0, len(p.jobs))
	for _, j := range p.jobs {
		m, ok := p.models[j.Model]
		var slot int
		if ok {
			slot = slotIndex(j.Replica, j.Model)
		}
		switch {
		case !ok:
			p.res.Actions = append(p.res.Actions, catalogStop(j, fmt.Sprintf("model %s left the catalog", j.Model)))
			continue
		case slot < 0:
			p.res.Actions = append(p.res.Actions, catalogStop(j, fmt.Sprintf("replica id %s is not a slot of model %s", j.Replica, j.Model)))
			continue
		case slot >= m.SlotLimit():
			why := fmt.Sprintf("model %s has replicas = %d", j.Model, m.Replicas)
			if m.Autoscale != nil {
				why = fmt.Sprintf("model %s has autoscale max = %d", j.Model, m.Autoscale.Max)
			}
			p.res.Actions = append(p.res.Actions, catalogStop(j, why))
			continue
		}
		p.bySlot[j.Replica] = append(p.bySlot[j.Replica], j)
		p.live = append(p.live, j)
	}
}

// scaleDown (step 1b, with autoscaling) stops what autoscaled models have
// beyond what they want, before anything is placed.
func (p *pass) scaleDown() {
	p.alloc = newAllocator(p.in, &p.res, p.bySlot)
	var stops []Action
	stops, p.live = p.alloc.scaleDown(p.live)
	p.res.Actions = append(p.res.Actions, stops...)
}

// countRunning (step 2): everything that keeps running counts before
// anything is placed.
func (p *pass) countRunning() error {
	// What runs, given to the planner as it is built (a kept planner is
	// then brought up to date with what changed since the pass before).
	running := make([]facility.Replica, 0, len(p.live))
	var failed []string
	for _, j := range p.live {
		if r, ok := asReplica(j, func(string) bool { return true }); ok {
			running = append(running, r)
			if j.State == Failed {
				failed = append(failed, j.ID)
			}
		}
	}
	planner, err := p.in.Planners.NewPlanner(p.in.Fleet, p.in.Facility, running)
	if errors.Is(err, facility.ErrUnknownNode) {
		// A job with a shard on a node the fleet no longer has: the
		// planner first, then what runs on the nodes it knows, as
		// NewPlanner would add it.
		planner, failed, err = p.countKnown()
	}
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	p.planner = planner
	p.res.Usage = planner.Budgeted()
	// A failed job serves nowhere: its domains do not hold one of its
	// model's replicas when this pass places the next (its draw still
	// counts until it is replaced or stopped).
	for _, id := range failed {
		if err := planner.NotServing(id); err != nil {
			return fmt.Errorf("planner: %w", err)
		}
	}
	p.draining = map[string]bool{}
	for _, id := range planner.Draining() {
		p.draining[id] = true
	}
	for _, j := range p.live {
		if j.Unhealthy != "" {
			p.draining[j.ID] = true // moved off its GPUs as out of a drain
		}
	}
	return nil
}

// countKnown builds the pass's planner and adds the live jobs' shards on
// the nodes it knows; it returns the failed jobs it added.
func (p *pass) countKnown() (*facility.Planner, []string, error) {
	planner, err := p.in.Planners.NewPlanner(p.in.Fleet, p.in.Facility, nil)
	if err != nil {
		return nil, nil, err
	}
	var failed []string
	for _, j := range p.live {
		if r, ok := asReplica(j, planner.Knows); ok {
			if err := planner.Add(r); err != nil {
				return nil, nil, err
			}
			if j.State == Failed {
				failed = append(failed, j.ID)
			}
		}
	}
	return planner, failed, nil
}

// planSlots (step 3) plans every slot that has a job, in catalog order;
// with autoscaling, the empty ones wait for step 4.
func (p *pass) planSlots() error {
	for _, m := range p.in.Catalog.Models {
		mp := &modelPass{m: m, profiles: map[string]facility.Profile{}}
		for _, pr := range m.Profiles {
			mp.profiles[pr.Name] = pr
		}
		slots := make([]string, m.Replicas)
		for i := range slots {
			slots[i] = facility.ReplicaID(m.Name, i)
		}
		if p.alloc != nil {
			slots = p.alloc.slotsOf(m)
		}
		mp.roll = newRollState(p, m, mp.profiles, slots)
		for _, slot := range slots {
			if p.alloc != nil && len(p.bySlot[slot]) == 0 {
				p.alloc.deferSlot(m, slot) // placed by priority, with the floors
				continue
			}
			acts, placed, commit := p.planSlot(mp, slot)
			if mp.roll.wait != "" {
				p.res.Waits[slot] = mp.roll.wait
				mp.roll.wait = ""
			}
			p.res.Actions = append(p.res.Actions, acts...)
			if placed == nil {
				continue
			}
			p.res.Decisions[slot] = *placed
			if commit {
				if err := p.planner.Commit(*placed); err != nil {
					return fmt.Errorf("commit %s: %w", slot, err)
				}
			}
		}
	}
	return nil
}

// settle (step 5) caps the stops at in.MaxStops and takes what this pass
// stops out of the draw, for Result.After.
func (p *pass) settle() error {
	p.res.Actions, p.res.DeferredStops = capStops(p.res.Actions, p.in.MaxStops)
	for _, a := range p.res.Actions {
		if a.Kind == Stop || a.Kind == Replace {
			// A replaced job's old placement goes with it. A job of a
			// model or slot that left the catalog was never counted:
			// nothing to take out.
			if _, err := p.planner.Remove(a.JobID); err != nil && !errors.Is(err, facility.ErrNotRunning) {
				return fmt.Errorf("after %s: %w", a, err)
			}
		}
	}
	p.res.After = p.planner.Budgeted()
	return nil
}

// modelPass is one model's part of step 3: its profiles by name and its
// rolls.
type modelPass struct {
	m        facility.Model
	profiles map[string]facility.Profile
	roll     *rollState
}

// Before is every budgeted domain's budget and draw with every job of
// in.Jobs counted, as Nomad runs them now: Result.Usage leaves out the jobs
// a pass stops for leaving the catalog, which still draw until they stop.
func Before(in Input) ([]facility.DomainUsage, error) {
	p, err := in.Planners.NewPlanner(in.Fleet, in.Facility, runningReplicas(in))
	if err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	return p.Budgeted(), nil
}

// runningReplicas are in.Jobs as the planner counts them: every job with
// its shards on known nodes.
func runningReplicas(in Input) []facility.Replica {
	known := map[string]bool{}
	for _, n := range in.Fleet.Nodes {
		known[n.Name] = true
	}
	var running []facility.Replica
	for _, j := range in.Jobs {
		if r, ok := asReplica(j, func(n string) bool { return known[n] }); ok {
			running = append(running, r)
		}
	}
	return running
}

// capStops keeps the first max stops (all when max is 0) and every other
// action.
func capStops(acts []Action, max int) ([]Action, int) {
	if max <= 0 {
		return acts, 0
	}
	out := acts[:0:0]
	stops, deferred := 0, 0
	for _, a := range acts {
		if a.Kind == Stop {
			if stops == max {
				deferred++
				continue
			}
			stops++
		}
		out = append(out, a)
	}
	return out, deferred
}

// rollState is one model's rolls and moves in a pass: replicas with an old
// copy (a stale profile, or in a drained domain) waiting on a new one.
type rollState struct {
	maxSurge, maxUnavailable int
	// surging counts the slots whose new copy is up but not serving yet
	// beside an old one, and the new copies this pass creates.
	surging int
	// unavailable counts the slots with no serving copy, and the old
	// copies this pass stops before their new one serves.
	unavailable int
	wait        string // why the slot being planned waits; read and reset by Plan
}

func newRollState(ps *pass, m facility.Model, profiles map[string]facility.Profile, slots []string) *rollState {
	r := &rollState{maxSurge: m.MaxSurge, maxUnavailable: m.MaxUnavailable}
	if r.maxSurge == 0 && r.maxUnavailable == 0 {
		r.maxSurge = 1 // a Model built in code, not parsed: the parser's default
	}
	for _, slot := range slots {
		var old, fresh, serving bool
		js := ps.bySlot[slot]
		for i := range js {
			j := &js[i]
			p, ok := profiles[j.Profile]
			current := ok && ps.fingerprint(m, p) == j.FP
			switch {
			case !current || ps.draining[j.ID]:
				old = true
			case j.State != Serving:
				fresh = true
			}
			if j.State == Serving {
				serving = true
			}
		}
		if old && fresh {
			r.surging++
		}
		if !serving {
			r.unavailable++
		}
	}
	return r
}

// planSlot decides one slot. It returns the actions, the decision made for
// it (placed or not) when it asked the planner, and whether an action uses
// that decision, so that it must be committed before the next slot.
func (p *pass) planSlot(mp *modelPass, slot string) ([]Action, *facility.Decision, bool) {
	in, m, profiles, jobs, draining, planner, roll := p.in, mp.m, mp.profiles, p.bySlot[slot], p.draining, p.planner, mp.roll
	var acts []Action
	// The slot's jobs, sorted out, in the pass's buffers: nothing returned
	// holds on to them.
	current, stale, free, held := p.buf[0][:0], p.buf[1][:0], p.buf[2][:0], p.buf[3][:0]
	defer func() { p.buf = [4][]Job{current, stale, free, held} }()
	for i := range jobs {
		if pr, ok := profiles[jobs[i].Profile]; ok && p.fingerprint(m, pr) == jobs[i].FP {
			current = append(current, jobs[i])
		} else {
			stale = append(stale, jobs[i])
		}
	}
	for _, j := range current {
		if inDrain(j, draining) {
			held = append(held, j)
		} else {
			free = append(free, j)
		}
	}
	sortBest(free)
	sortBest(held)
	maxGen := -1
	if g, ok := in.Gens[slot]; ok {
		maxGen = g
	}
	for _, j := range jobs {
		maxGen = max(maxGen, j.Gen)
	}

	var keep *Job
	if len(free) > 0 {
		keep = &free[0]
		for _, d := range free[1:] {
			acts = append(acts, stop(d, "duplicate of "+keep.ID))
		}
	}

	if keep == nil {
		// Nothing current outside drain holds: place a new job.
		reason := "missing"
		switch {
		case len(held) > 0 && held[0].Unhealthy != "":
			reason = "moving off unhealthy GPUs (" + held[0].Unhealthy + ")"
		case len(held) > 0:
			reason = "moving out of held domain"
		case len(stale) > 0:
			reason = "rolling to the catalog's profile"
		}
		if reason == "missing" {
			d := planner.Place(facility.Request{Replica: slot, Model: m})
			if d.Placed {
				acts = append(acts, Action{
					Kind: Create, Replica: slot, Gen: maxGen + 1, Model: m,
					Profile: profiles[d.Profile], FP: p.fingerprint(m, profiles[d.Profile]),
					Decision: d, Reason: reason,
				})
			}
			return acts, &d, d.Placed
		}
		// A roll or a move: new copy first while max_surge allows; the
		// old one keeps serving until the new one does.
		old := append(append([]Job(nil), held...), stale...)
		sortBest(old)
		if roll.surging < roll.maxSurge {
			d := planner.Place(facility.Request{Replica: slot, Model: m})
			if d.Placed {
				roll.surging++
				acts = append(acts, Action{
					Kind: Create, Replica: slot, Gen: maxGen + 1, Model: m,
					Profile: profiles[d.Profile], FP: p.fingerprint(m, profiles[d.Profile]),
					Decision: d, Reason: reason,
				})
				return acts, &d, true
			}
			// No room for a second copy: in place, if max_unavailable
			// lets this replica stop serving until its new copy does.
			if roll.unavailable < roll.maxUnavailable || old[0].State != Serving {
				return append(acts, stopOld(old, roll, reason+": no room for a new copy beside the old; max_unavailable "+
					fmt.Sprint(roll.maxUnavailable)+" lets it go first")...), &d, false
			}
			roll.wait = fmt.Sprintf("%s waits: no room for a new copy beside the serving one, and max_unavailable is %d", reason, roll.maxUnavailable)
			return acts, &d, false
		}
		if roll.unavailable < roll.maxUnavailable {
			return append(acts, stopOld(old, roll, fmt.Sprintf("%s: max_surge %d reached; max_unavailable %d lets it go first", reason, roll.maxSurge, roll.maxUnavailable))...), nil, false
		}
		roll.wait = fmt.Sprintf("%s waits: max_surge %d reached (%d of model %s's replicas have a new copy coming up)", reason, roll.maxSurge, roll.surging, m.Name)
		return acts, nil, false
	}

	// A kept job exists. Older copies go once it serves.
	if keep.State == Serving {
		for _, j := range held {
			why := "moved out of held domain; "
			if j.Unhealthy != "" {
				why = "moved off unhealthy GPUs; "
			}
			acts = append(acts, stop(j, why+keep.ID+" serves"))
		}
		for _, j := range stale {
			acts = append(acts, stop(j, "rolled; "+keep.ID+" serves"))
		}
	}

	// A kept job that failed, or is stuck partly placed, is placed again.
	// Its own shards' draw still counts while it is placed again, so the
	// new decision is conservative: never over a budget. A failed job no
	// longer counts for spread (step 2), so it does not lean away from the
	// domains it failed in; a stuck one still does.
	stuck := (keep.State == Partial || keep.State == Pending) && in.PartialDeadline > 0 && in.Now.Sub(keep.Since) >= in.PartialDeadline
	if keep.State == Failed || stuck {
		why := "failed"
		if stuck {
			why = fmt.Sprintf("%s for %s", keep.State, in.Now.Sub(keep.Since).Round(time.Second))
		}
		// In place first: the same job (so the same profile) on a new
		// decision, registered over its current version.
		same := m
		same.Profiles = []facility.Profile{profiles[keep.Profile]}
		d := planner.Place(facility.Request{Replica: slot, Model: same})
		if d.Placed {
			if samePlace(d.Shards, keep.Shards) {
				return acts, &d, false // Nomad's own rescheduling is at work there
			}
			acts = append(acts, Action{
				Kind: Replace, Replica: slot, JobID: keep.ID, Gen: keep.Gen, Model: m,
				Profile: profiles[keep.Profile], FP: keep.FP,
				Decision: d, ExpectIndex: keep.ModifyIndex, Reason: why + ": placed again",
			})
			return acts, &d, true
		}
		// Its profile fits nowhere now: a new job on whichever profile
		// fits. Once it exists the failed one is its duplicate and goes.
		d = planner.Place(facility.Request{Replica: slot, Model: m})
		if d.Placed {
			acts = append(acts, Action{
				Kind: Create, Replica: slot, Gen: maxGen + 1, Model: m,
				Profile: profiles[d.Profile], FP: p.fingerprint(m, profiles[d.Profile]),
				Decision: d, Reason: why + ": profile " + keep.Profile + " fits nowhere",
			})
			return acts, &d, true
		}
		return acts, &d, false
	}
	return acts, nil, false
}

// fingerprint is facility.ProfileFingerprint(m, pr) of a catalog model's
// profile, computed once a pass: a pass compares it with every job's.
func (p *pass) fingerprint(m facility.Model, pr facility.Profile) string {
	k := [2]string{m.Name, pr.Name}
	fp, ok := p.fps[k]
	if !ok {
		fp = facility.ProfileFingerprint(m, pr)
		p.fps[k] = fp
	}
	return fp
}

func samePlace(a, b []facility.Shard) bool {
	if len(a) != len(b) {
		return false
	}
	na, nb := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		na[i], nb[i] = a[i].Node, b[i].Node
	}
	sort.Strings(na)
	sort.Strings(nb)
	return strings.Join(na, ",") == strings.Join(nb, ",")
}

func inDrain(j Job, draining map[string]bool) bool { return draining[j.ID] }

func stop(j Job, why string) Action {
	return Action{Kind: Stop, Replica: j.Replica, JobID: j.ID, ExpectIndex: j.ModifyIndex, Reason: why}
}

func catalogStop(j Job, why string) Action {
	a := stop(j, why)
	a.Catalog = true
	return a
}

// stopOld stops a slot's old copies before its new one exists (a roll in
// place), counting the slot unavailable if one of them served.
func stopOld(old []Job, roll *rollState, why string) []Action {
	var acts []Action
	served := false
	for _, j := range old {
		served = served || j.State == Serving
		acts = append(acts, stop(j, why))
	}
	if served {
		roll.unavailable++
	}
	return acts
}

// sortBest orders jobs best first: state, then age, then ID.
func sortBest(js []Job) {
	if len(js) < 2 {
		return
	}
	sort.SliceStable(js, func(a, b int) bool {
		if js[a].State != js[b].State {
			return js[a].State < js[b].State
		}
		return jobLess(js[a], js[b])
	})
}

func jobLess(a, b Job) bool {
	if a.CreateIndex != b.CreateIndex {
		return a.CreateIndex < b.CreateIndex
	}
	return a.ID < b.ID
}

// slotIndex returns i when replica is "<model>-<i>", else -1.
func slotIndex(replica, model string) int {
	rest, ok := strings.CutPrefix(replica, model+"-")
	if !ok || rest == "" {
		return -1
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
		if n > 1<<20 {
			return -1
		}
	}
	if len(rest) > 1 && rest[0] == '0' {
		return -1 // leading zeros: not facility.ReplicaID(model, n)
	}
	return n
}

// asReplica turns a job into the planner's running replica, keyed by job
// ID so that drains name jobs. Shards on nodes the fleet does not know (a
// node that left) are left out.
func asReplica(j Job, known func(node string) bool) (facility.Replica, bool) {
	r := facility.Replica{ID: j.ID, Model: j.Model, Profile: j.Profile}
	all := true
	for _, s := range j.Shards {
		all = all && known(s.Node)
	}
	if all { // the planner copies what it keeps
		r.Shards = j.Shards
		return r, len(r.Shards) > 0
	}
	for _, s := range j.Shards {
		if known(s.Node) {
			r.Shards = append(r.Shards, s)
		}
	}
	return r, len(r.Shards) > 0
}

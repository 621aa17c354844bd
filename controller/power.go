package controller

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/facility/powercap"
)

// powerState is the controller's power part. After every power poll
// (round) it learns each profile's draw per shard from the GPUs' readings
// (what measured budgets count: docs/power.md, "Measured admission"), and,
// while it leads, caps GPUs so that every budgeted domain stays under its
// limit (facility/powercap) and divides each domain's limit into node
// shares (powercap.Shares), which each node's plugin holds itself every
// second; it writes each node's caps, fallbacks and share to Nomad
// Variables for its device plugin and renews their lease. The
// passes ask it what measured budgets count (learned, withRefusals) and
// the API for its last round (view).
type powerState struct {
	store     *store.Store
	lead      *leader // fences the caps and the heartbeat: they are the leader's writes
	log       *slog.Logger
	metrics   *metrics
	baseWatts float64       // every node's base draw (node_base_watts)
	lease     time.Duration // the lease the caps are given (capsLease)
	wrote     func(nodes []string)

	// mu guards every field below, and only those. Invariant: what a
	// measured budget counts comes only from samples of running shards; a
	// node's caps variable is written only when its caps or fallbacks
	// change.
	mu      sync.Mutex
	rule    facility.Measured
	learner *powercap.Learner
	alloc   *powercap.Allocator
	// written is the items last written per node caps variable (path), so
	// that only a change is written.
	written map[string]nodeCaps
	// cleaned: the variables of nodes no longer managed were looked for
	// since this controller began to lead.
	cleaned bool
	beats   uint64
	// refused are the measured domains holding a GPU whose plugin reports
	// a cap it could not set: they admit as declared until caps work again.
	refused map[facility.Domain]string
	last    controllerapi.PowerView
	events  []controllerapi.PowerEvent // the last maxPowerEvents, oldest first
}

// maxPowerEvents is how many cap events the API keeps.
const maxPowerEvents = 200

// powerDeps is what the power part is built with.
type powerDeps struct {
	store     *store.Store
	lead      *leader
	log       *slog.Logger
	metrics   *metrics
	baseWatts float64
	// hold is how long caps stay under the lift threshold before they
	// lift (0: powercap's default); interval is the power poll's.
	hold, interval time.Duration
	// wrote, when set, is told the nodes whose caps variable a round
	// wrote (the power poll reads their client stats again).
	wrote func(nodes []string)
}

// newPowerState's allocator has powercap's defaults, with caps lifting
// after d.hold under the lift threshold.
func newPowerState(d powerDeps) *powerState {
	rule := facility.DefaultMeasured()
	cfg := powercap.DefaultConfig()
	if d.hold > 0 {
		cfg.Hold = d.hold
	}
	alloc, err := powercap.NewAllocator(cfg)
	if err != nil {
		panic(err) // the default config is valid (powercap's tests), and so is any positive hold
	}
	return &powerState{
		store: d.store, lead: d.lead, log: d.log, metrics: d.metrics, baseWatts: d.baseWatts, lease: capsLease(d.interval), wrote: d.wrote,
		rule: rule, learner: powercap.NewLearner(rule), alloc: alloc, written: map[string]nodeCaps{}, refused: map[facility.Domain]string{},
	}
}

// capsLease is the lease the controller gives its caps: three power polls,
// and never under 15 s, so that one slow poll does not drop every node to
// its fallback.
func capsLease(interval time.Duration) time.Duration { return max(3*interval, 15*time.Second) }

// learned returns what measured budgets count, for the pass's fleet. A new
// measured rule (a reload) starts learning afresh.
func (p *powerState) learned(fac facility.Facility, now time.Time) []facility.Learned {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rule := fac.MeasuredRule(); rule.Percentile != p.rule.Percentile || rule.Window != p.rule.Window || rule.Margin != p.rule.Margin || rule.MinSamples != p.rule.MinSamples {
		p.rule, p.learner = rule, powercap.NewLearner(rule)
	}
	return p.learner.Learned(now)
}

// withRefusals makes every measured domain whose caps do not work count as
// declared (docs/power.md): what measured admission admits rests on caps.
func (p *powerState) withRefusals(fac facility.Facility) facility.Facility {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.refused) == 0 {
		return fac
	}
	out := fac
	out.Budgets = slices.Clone(fac.Budgets)
	for i, b := range out.Budgets {
		if _, bad := p.refused[b.Domain]; bad && fac.CountOf(b) == facility.CountMeasured {
			out.Budgets[i].Count = facility.CountDeclared
		}
	}
	return out
}

// round runs after every power poll, on the snapshot with its readings and
// the files in force: it learns from the shards' draws and, while this
// controller leads, decides the caps and writes them (capRound).
func (p *powerState) round(ctx context.Context, snap snapshot, cat facility.Catalog, fac facility.Facility, now time.Time) {
	p.mu.Lock()
	for _, d := range observe.ShardDraws(snap.jobs, snap.allocs, snap.gpus) {
		if err := p.learner.Add(d.Key, now, d.Watts); err != nil {
			p.log.Debug("power sample refused", "alloc", d.Alloc, "error", err)
		}
	}
	p.mu.Unlock()
	if !snap.synced() || !p.lead.isLeading() {
		p.mu.Lock()
		p.cleaned = false
		p.mu.Unlock()
		return
	}
	p.capRound(ctx, snap, cat, fac, now)
}

// capRound decides every budgeted domain's caps from the GPUs' readings,
// shows them in the API, writes the nodes' caps that changed, then renews
// the lease.
func (p *powerState) capRound(ctx context.Context, snap snapshot, cat facility.Catalog, fac facility.Facility, now time.Time) {
	in := capInputs(snap, cat, fac, p.baseWatts)
	p.mu.Lock()
	res := p.alloc.Decide(now, in.domains, in.gpus)
	fb := powercap.Fallback(in.domains, in.gpus)
	p.refused = in.refused
	p.mu.Unlock()
	sh := powercap.Shares(in.domains, in.gpus, in.wants())
	want := in.nodeCaps(res, fb, sh)
	// The API shows the round's decisions before the nodes get them, so
	// that a reader who sees a node's caps written also sees this round.
	p.record(now, res, sh, in, want)
	// The caps are the leader's writes: made inside its lease, and cut
	// off when it ends, like its job writes.
	wctx, cancel, err := p.lead.writeContext(ctx, true)
	if err != nil {
		p.log.Info("power caps not written", "error", err)
		return
	}
	defer cancel()
	p.writeCaps(wctx, want)
	p.mu.Lock()
	p.beats++
	beat := p.beats
	p.mu.Unlock()
	if len(want) > 0 {
		if err := p.store.Heartbeat(wctx, p.lease, beat); err != nil {
			p.log.Warn("power caps: heartbeat not written; nodes fall back to their safe caps when the lease ends", "error", err)
		}
	}
}

// capInput is what a cap round decides on: the budgeted domains with their
// draws, the GPUs in them (sorted by UUID) each beside its reading, and
// the domains whose caps a GPU refused.
type capInput struct {
	domains []powercap.Domain
	gpus    []powercap.GPU
	sites   []gpuSite // sites[i] is gpus[i]'s
	refused map[facility.Domain]string
}

// gpuSite is one GPU as the cap round sees it.
type gpuSite struct {
	node  string
	read  observe.GPUReading
	model string
}

// capInputs gathers a cap round's input from the snapshot and the files in
// force: each GPU of a node in a budgeted domain with the model it serves,
// that model's priority and its profile's floor; each such domain's limit,
// base draw (baseWatts per node) and draw.
func capInputs(snap snapshot, cat facility.Catalog, fac facility.Facility, baseWatts float64) capInput {
	prio := map[string]int{}
	// The floor of each profile that sets one (min_watts, per GPU), by
	// model and profile name.
	type profileKey struct{ model, profile string }
	minWatts := map[profileKey]float64{}
	for _, m := range cat.Models {
		prio[m.Name] = m.Priority
		for _, pr := range m.Profiles {
			if pr.MinWatts > 0 {
				minWatts[profileKey{m.Name, pr.Name}] = pr.MinWatts
			}
		}
	}
	// Which model each GPU serves, from the allocations' devices, and the
	// floor its profile sets.
	modelOf := map[string]string{}
	floorOf := map[string]float64{}
	jobModel := map[string]string{}
	jobFloor := map[string]float64{}
	for _, j := range snap.jobs {
		if j.Meta[render.MetaManaged] == "true" {
			jobModel[j.ID] = j.Meta[render.MetaModel]
			jobFloor[j.ID] = minWatts[profileKey{j.Meta[render.MetaModel], j.Meta[render.MetaProfile]}]
		}
	}
	for _, a := range snap.allocs {
		if !observe.Live(a) || a.AllocatedResources == nil || jobModel[a.JobID] == "" {
			continue
		}
		for _, t := range a.AllocatedResources.Tasks {
			if t == nil {
				continue
			}
			for _, d := range t.Devices {
				for _, id := range d.DeviceIDs {
					modelOf[id] = jobModel[a.JobID]
					floorOf[id] = jobFloor[a.JobID]
				}
			}
		}
	}
	budgets := map[facility.Domain]facility.Budget{}
	for _, b := range fac.Budgets {
		budgets[b.Domain] = b
	}
	type dsum struct{ base, draw float64 }
	sums := map[facility.Domain]*dsum{}
	in := capInput{refused: map[facility.Domain]string{}}
	for id, n := range snap.nodes {
		loc := facility.Location{Site: n.Meta[observe.MetaSite], Room: n.Meta[observe.MetaRoom], Row: n.Meta[observe.MetaRow], Rack: n.Meta[observe.MetaRack], PDU: n.Meta[observe.MetaPDU]}
		var doms []facility.Domain
		for _, l := range facility.Levels() {
			if v := loc.Get(l); v != "" {
				if d := (facility.Domain{Level: l, Value: v}); budgets[d].Watts > 0 {
					doms = append(doms, d)
				}
			}
		}
		if len(doms) == 0 {
			continue
		}
		for _, d := range doms {
			s := sums[d]
			if s == nil {
				s = &dsum{}
				sums[d] = s
			}
			s.base += baseWatts
			s.draw += baseWatts
		}
		for _, r := range snap.gpus[id] {
			g := powercap.GPU{UUID: r.ID, Node: n.Name, Model: modelOf[r.ID], Priority: math.MinInt32, Domains: doms, DrawWatts: r.Watts}
			if pr, ok := prio[g.Model]; ok {
				g.Priority = pr
			}
			// A GPU whose plugin does not manage caps (no power_cap stat)
			// or whose limits it does not report counts at what it may draw
			// and cannot be lowered. Else its floor is the larger of its
			// minimum limit and its profile's min_watts.
			g.MaxWatts = max(r.DefaultW, r.EnforcedW, r.Watts)
			g.FloorWatts = g.MaxWatts
			if r.CapState != "" && r.MinW > 0 && r.DefaultW > 0 {
				g.FloorWatts = min(max(r.MinW, floorOf[r.ID]), g.MaxWatts)
			}
			if strings.HasPrefix(r.CapState, "error") {
				for _, d := range doms {
					in.refused[d] = fmt.Sprintf("GPU %s on %s: %s", r.ID, n.Name, r.CapState)
				}
			}
			for _, d := range doms {
				sums[d].draw += r.Watts
			}
			in.gpus = append(in.gpus, g)
			in.sites = append(in.sites, gpuSite{node: n.Name, read: r, model: g.Model})
		}
	}
	for d, s := range sums {
		in.domains = append(in.domains, powercap.Domain{Domain: d, LimitWatts: fac.Limit(budgets[d]), BaseWatts: s.base, DrawWatts: s.draw})
	}
	sort.Slice(in.domains, func(i, j int) bool { return in.domains[i].Domain.String() < in.domains[j].Domain.String() })
	sort.SliceStable(in.gpus, func(i, j int) bool { return in.gpus[i].UUID < in.gpus[j].UUID })
	sort.SliceStable(in.sites, func(i, j int) bool { return in.sites[i].read.ID < in.sites[j].read.ID })
	return in
}

// wants is what each GPU wants when shares are divided (powercap.Want):
// its max while its plugin reports it held at a limit under its max, else
// its draw and some room.
func (in capInput) wants() []float64 {
	out := make([]float64, len(in.gpus))
	for i, g := range in.gpus {
		out[i] = powercap.Want(g, in.sites[i].read.EnforcedW)
	}
	return out
}

// nodeCaps is what one node's caps variable holds: caps and fallbacks, W
// by GPU UUID, and the node's share (format 2).
type nodeCaps struct {
	caps, fallback map[string]float64
	share          devicesapi.NodeShare
}

func (a nodeCaps) equal(b nodeCaps) bool {
	return maps.Equal(a.caps, b.caps) && maps.Equal(a.fallback, b.fallback) &&
		a.share.Watts == b.share.Watts && maps.Equal(a.share.GPUs, b.share.GPUs)
}

// nodeCaps is each node's caps variable after a round that decided res,
// the fallbacks fb and the shares sh: every GPU whose plugin takes caps,
// rounded to the watt; the node's share is the sum of its GPUs' shares,
// rounded down, so that no domain's shares add up over its limit. A node
// whose share leaves every GPU its max gets none (format 1).
func (in capInput) nodeCaps(res, fb, sh powercap.Result) map[string]nodeCaps {
	want := map[string]nodeCaps{}
	most := map[string]float64{} // Σ MaxWatts of each node's GPUs
	for i, g := range in.gpus {
		if in.sites[i].read.CapState == "" {
			continue // its plugin takes no caps
		}
		most[g.Node] += g.MaxWatts
		nc, ok := want[g.Node]
		if !ok {
			nc = nodeCaps{caps: map[string]float64{}, fallback: map[string]float64{}, share: devicesapi.NodeShare{GPUs: map[string]devicesapi.ShareItems{}}}
		}
		if cp := res.Caps[i]; cp.Capped {
			nc.caps[g.UUID] = math.Round(cp.Watts)
		}
		if f := fb.Caps[i]; f.Capped && f.Watts < g.MaxWatts {
			nc.fallback[g.UUID] = math.Round(f.Watts)
		}
		nc.share.Watts += sh.Caps[i].Watts
		gi := devicesapi.ShareItems{Priority: g.Priority}
		if g.FloorWatts < g.MaxWatts {
			gi.Floor = math.Ceil(g.FloorWatts)
		}
		nc.share.GPUs[g.UUID] = gi
		want[g.Node] = nc
	}
	for node, nc := range want {
		nc.share.Watts = math.Floor(nc.share.Watts + 1e-6)
		if nc.share.Watts >= math.Floor(most[node]) {
			// Room for every GPU of the node at its max: no share to hold,
			// the variable stays format 1.
			nc.share = devicesapi.NodeShare{}
		}
		want[node] = nc
	}
	return want
}

// shareDeadBand: a node's share that would rise by less than this share of
// it is not rewritten (keeping the lower share written is safe: the
// domain's shares only add up to less); a share that falls is always
// written. It spares Nomad a write per node and round for the draw's
// small swings.
const shareDeadBand = 0.05

// keepShare reports whether a node's written share may stay instead of
// the new one: the same items otherwise, and the new share above the old
// by less than the dead band.
func keepShare(old, nc nodeCaps) bool {
	if !maps.Equal(old.caps, nc.caps) || !maps.Equal(old.fallback, nc.fallback) || !maps.Equal(old.share.GPUs, nc.share.GPUs) {
		return false
	}
	return nc.share.Watts >= old.share.Watts && nc.share.Watts < old.share.Watts*(1+shareDeadBand)
}

// writeCaps writes every node's caps variable that differs from what was
// last written, and deletes the variables of nodes no longer managed (all
// of them once after this controller began to lead, then as they go).
func (p *powerState) writeCaps(ctx context.Context, want map[string]nodeCaps) {
	p.mu.Lock()
	written, cleaned := maps.Clone(p.written), p.cleaned
	p.mu.Unlock()
	wantPaths := map[string]bool{}
	// The nodes whose share falls are written first, so that a share moved
	// from one node to another is given up before it is taken.
	nodes := slices.Collect(maps.Keys(want))
	falls := func(node string) bool {
		old, ok := written[devicesapi.NodeCapsPath(devicesapi.PowerCapsPrefix, node)]
		return !ok || want[node].share.Watts < old.share.Watts
	}
	slices.SortFunc(nodes, func(a, b string) int {
		fa, fb := falls(a), falls(b)
		switch {
		case fa && !fb:
			return -1
		case fb && !fa:
			return 1
		}
		return strings.Compare(a, b)
	})
	fallFailed := false
	var wroteTo []string
	for _, node := range nodes {
		nc := want[node]
		path := devicesapi.NodeCapsPath(devicesapi.PowerCapsPrefix, node)
		wantPaths[path] = true
		if old, ok := written[path]; ok && (old.equal(nc) || keepShare(old, nc)) {
			continue
		}
		if fallFailed && !falls(node) {
			// A share that should have fallen did not: the shares that
			// rise wait for the next round, so that no domain's written
			// shares add up over its limit.
			continue
		}
		if err := p.store.SetNodeCaps(ctx, node, nc.caps, nc.fallback, nc.share); err != nil {
			p.log.Warn("power caps not written", "node", node, "error", err)
			fallFailed = fallFailed || falls(node)
			continue
		}
		// The plugin sets its GPUs from caps and a share: a variable with
		// none, before or now, moves nothing on the node.
		if old := written[path]; len(nc.caps) > 0 || nc.share.Watts > 0 || len(old.caps) > 0 || old.share.Watts > 0 {
			wroteTo = append(wroteTo, node)
		}
		written[path] = nc
	}
	if len(wroteTo) > 0 && p.wrote != nil {
		p.wrote(wroteTo)
	}
	var gone []string
	if !cleaned {
		paths, err := p.store.CappedNodes(ctx)
		if err != nil {
			p.log.Warn("power caps: the managed nodes cannot be listed", "error", err)
		} else {
			cleaned = true
			for _, path := range paths {
				if !wantPaths[path] {
					gone = append(gone, path)
				}
			}
		}
	}
	for path := range written {
		if !wantPaths[path] && !slices.Contains(gone, path) {
			gone = append(gone, path)
		}
	}
	for _, path := range gone {
		if err := p.store.DeletePath(ctx, path); err != nil {
			p.log.Warn("power caps: a node no longer managed keeps its variable", "variable", path, "error", err)
			continue
		}
		p.log.Info("power caps: node no longer managed; its GPUs go back to their default limits", "variable", path)
		delete(written, path)
	}
	p.mu.Lock()
	p.written, p.cleaned = written, cleaned
	p.mu.Unlock()
}

// record keeps the round's outcome for the API, logs and counts every cap
// decision as an event, and names the GPUs that refused a cap.
func (p *powerState) record(now time.Time, res, sh powercap.Result, in capInput, want map[string]nodeCaps) {
	v := controllerapi.PowerView{At: now}
	draw := map[string]float64{}
	for _, g := range in.gpus {
		draw[g.Node] += g.DrawWatts
	}
	for node, nc := range want {
		if nc.share.Watts > 0 {
			v.Shares = append(v.Shares, controllerapi.NodeShare{Node: node, ShareWatts: nc.share.Watts, DrawWatts: draw[node], GPUs: len(nc.share.GPUs)})
		}
	}
	sort.Slice(v.Shares, func(i, j int) bool { return v.Shares[i].Node < v.Shares[j].Node })
	for _, d := range res.Domains {
		pd := controllerapi.PowerDomain{Domain: d.Domain.String(), Engaged: d.Engaged, LimitWatts: d.LimitWatts, DrawWatts: d.DrawWatts, BoundWatts: d.BoundWatts, ShortfallWatts: d.ShortfallWatts}
		v.Domains = append(v.Domains, pd)
	}
	for i, g := range in.gpus {
		cp := res.Caps[i]
		gv := controllerapi.GPUPower{UUID: g.UUID, Node: g.Node, Model: g.Model, DrawWatts: g.DrawWatts, DrawFrom: in.sites[i].read.From,
			State: in.sites[i].read.CapState, EnforcedWatts: in.sites[i].read.EnforcedW}
		if g.FloorWatts < g.MaxWatts {
			gv.FloorWatts = g.FloorWatts
		}
		if cp.Capped {
			gv.CapWatts, gv.CapDomain, gv.Reason = cp.Watts, cp.Domain.String(), cp.Reason
		}
		if s := sh.Caps[i]; s.Capped && in.sites[i].read.CapState != "" {
			gv.ShareWatts = s.Watts
		}
		v.GPUs = append(v.GPUs, gv)
	}
	var evs []controllerapi.PowerEvent
	for _, d := range res.Decisions {
		ev := controllerapi.PowerEvent{At: now, Kind: d.Kind.String(), Domain: d.Domain.String(), GPU: d.UUID, Node: d.Node, Model: d.Model, Watts: d.Watts, Reason: d.Reason}
		evs = append(evs, ev)
		p.log.Info("power cap", "kind", ev.Kind, "domain", ev.Domain, "gpu", ev.GPU, "node", ev.Node, "model", ev.Model, "watts", ev.Watts, "reason", ev.Reason)
		p.metrics.powerCapEvents.WithLabelValues(ev.Domain, ev.Kind).Inc()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for d, why := range p.refused {
		v.Refused = append(v.Refused, controllerapi.PowerRefusal{Domain: d.String(), Reason: why})
	}
	sort.Slice(v.Refused, func(i, j int) bool { return v.Refused[i].Domain < v.Refused[j].Domain })
	for _, r := range v.Refused {
		if !slices.ContainsFunc(p.last.Refused, func(o controllerapi.PowerRefusal) bool { return o == r }) {
			ev := controllerapi.PowerEvent{At: now, Kind: "refused", Domain: r.Domain, Reason: r.Reason + "; the domain admits as declared until caps work again"}
			evs = append(evs, ev)
			p.log.Error("power cap refused", "domain", r.Domain, "reason", r.Reason)
			p.metrics.powerCapEvents.WithLabelValues(r.Domain, "refused").Inc()
		}
	}
	v.Learned = controllerapi.LearnedDraws(p.learner.Learned(now), p.rule.MinSamples)
	p.events = append(p.events, evs...)
	if n := len(p.events) - maxPowerEvents; n > 0 {
		p.events = slices.Delete(p.events, 0, n)
	}
	v.Events = slices.Clone(p.events)
	p.last = v
}

// view answers GET /v1/power: the last cap round's view, with what has
// been learned by now when no round has run.
func (p *powerState) view(now time.Time) controllerapi.PowerView {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.last
	if v.Learned == nil {
		v.Learned = controllerapi.LearnedDraws(p.learner.Learned(now), p.rule.MinSamples)
	}
	return v
}

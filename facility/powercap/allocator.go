package powercap

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/facility"
)

// Domain is one budgeted domain as the allocator sees it.
type Domain struct {
	Domain facility.Domain
	// LimitWatts is what it may draw: budget × (1 − headroom).
	LimitWatts float64
	// BaseWatts is Σ the non-GPU draw of its nodes (their base_watts).
	BaseWatts float64
	// DrawWatts is what it draws now (Σ its nodes' measured draw): it
	// engages and lifts caps.
	DrawWatts float64
}

// GPU is one GPU under the allocator.
type GPU struct {
	UUID     string
	Node     string
	Model    string // the llmgw model it serves; "" for none
	Priority int    // the model's priority: lower is capped first
	// Domains are the budgeted domains holding its node.
	Domains []facility.Domain
	// DrawWatts is what it draws now.
	DrawWatts float64
	// FloorWatts is the least cap it may get: max(the profile's
	// min_watts, the GPU's minimum settable limit).
	FloorWatts float64
	// MaxWatts is the GPU's default (maximum) power limit: what it may draw
	// uncapped.
	MaxWatts float64
}

// Config is the allocator's hysteresis.
type Config struct {
	// Engage: a domain's caps engage when it draws at least Engage × its
	// limit. Default 0.95.
	Engage float64
	// Lift: they lift when it has drawn under Lift × its limit for Hold,
	// each capped GPU drawing at least AtCap of its cap counted at its
	// MaxWatts. Defaults 0.85 and 5 minutes.
	Lift float64
	Hold time.Duration
}

// AtCap is the share of its cap at which a capped GPU counts as held down
// by it: its demand is unknown, and lifting counts it at its MaxWatts.
const AtCap = 0.9

// HeldFor bounds how long held GPUs defer a lift: once a domain's draw
// alone has stayed under the lift line for HeldFor × Hold, its caps lift.
const HeldFor = 3

// DefaultConfig returns engage at 95 % of the limit, lift after 5 minutes
// under 85 %.
func DefaultConfig() Config { return Config{Engage: 0.95, Lift: 0.85, Hold: 5 * time.Minute} }

// Check reports a config whose fractions are not 0 < Lift ≤ Engage ≤ 1 or
// whose Hold is negative.
func (c Config) Check() error {
	switch {
	case math.IsNaN(c.Engage) || c.Engage <= 0 || c.Engage > 1:
		return fmt.Errorf("engage must be above 0 and at most 1, got %v", c.Engage)
	case math.IsNaN(c.Lift) || c.Lift <= 0 || c.Lift > c.Engage:
		return fmt.Errorf("lift must be above 0 and at most engage (%v), got %v", c.Engage, c.Lift)
	case c.Hold < 0:
		return fmt.Errorf("hold must not be negative, got %s", c.Hold)
	}
	return nil
}

// Cap is the allocator's word on one GPU.
type Cap struct {
	UUID   string
	Capped bool
	Watts  float64         // the cap when Capped; else the GPU's MaxWatts
	Domain facility.Domain // the domain whose limit set it (when Capped)
	Reason string
}

// DomainStatus is a budgeted domain after a decision.
type DomainStatus struct {
	Domain  facility.Domain
	Engaged bool
	// BoundWatts is the most it could draw: base + Σ over its GPUs of the
	// cap, or MaxWatts uncapped. Engaged, it is at most LimitWatts unless
	// ShortfallWatts > 0.
	BoundWatts float64
	LimitWatts float64
	DrawWatts  float64
	// ShortfallWatts is by how much even every GPU at its floor leaves
	// the bound over the limit; 0 when the caps hold it.
	ShortfallWatts float64
}

// DecisionKind is what a decision does.
type DecisionKind int

const (
	// KindCap sets a cap on an uncapped GPU.
	KindCap DecisionKind = iota + 1
	// KindChange moves a capped GPU's cap.
	KindChange
	// KindLift removes a GPU's cap.
	KindLift
)

func (k DecisionKind) String() string {
	switch k {
	case KindCap:
		return "cap"
	case KindChange:
		return "change"
	case KindLift:
		return "lift"
	}
	return fmt.Sprintf("DecisionKind(%d)", int(k))
}

// Decision is one change to one GPU, for events: the domain that caused
// it, the GPU, its model, the new cap (MaxWatts for a lift) and why.
type Decision struct {
	Kind   DecisionKind
	Domain facility.Domain
	UUID   string
	Node   string
	Model  string
	Watts  float64
	Reason string
}

// Result is one round's decisions.
type Result struct {
	Caps      []Cap          // per GPU, in input order
	Domains   []DomainStatus // per domain, in input order
	Decisions []Decision     // changes since the last round, by GPU UUID
}

// Allocator decides GPU caps round by round, remembering which domains
// are engaged and the caps it gave. It is not safe for concurrent use.
type Allocator struct {
	cfg   Config
	state map[facility.Domain]*domainState
	last  map[string]Cap
}

type domainState struct {
	engaged    bool
	underSince time.Time // when it went under Lift × limit, held GPUs counted at their max; zero when not under
	// rawUnderSince is when its draw alone went under Lift × limit.
	rawUnderSince time.Time
}

// NewAllocator returns an allocator with cfg (see Config.Check).
func NewAllocator(cfg Config) (*Allocator, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Allocator{cfg: cfg, state: map[facility.Domain]*domainState{}, last: map[string]Cap{}}, nil
}

// Decide runs one round at now: it updates which domains are engaged from
// their draw, then caps GPUs so that every engaged domain's bound (base +
// Σ cap, or MaxWatts for a GPU not capped) is at most its limit.
func (a *Allocator) Decide(now time.Time, doms []Domain, gpus []GPU) Result {
	// A GPU drawing at its cap may want more than it draws: for lifting, a
	// domain counts each such GPU at its MaxWatts, so that caps do not
	// lift while the demand that called for them lasts (and come back a
	// round later).
	held := map[facility.Domain]float64{}
	for _, g := range gpus {
		if c, ok := a.last[g.UUID]; ok && c.Capped && g.DrawWatts >= AtCap*c.Watts {
			for _, d := range g.Domains {
				held[d] += max(g.MaxWatts-g.DrawWatts, 0)
			}
		}
	}
	engaged := make([]bool, len(doms))
	for i, d := range doms {
		st := a.state[d.Domain]
		if st == nil {
			st = &domainState{}
			a.state[d.Domain] = st
		}
		lift := a.cfg.Lift * d.LimitWatts
		since := func(t *time.Time, under bool) {
			switch {
			case !under:
				*t = time.Time{}
			case t.IsZero():
				*t = now
			}
		}
		if d.DrawWatts >= a.cfg.Engage*d.LimitWatts {
			st.engaged, st.underSince, st.rawUnderSince = true, time.Time{}, time.Time{}
		} else {
			since(&st.underSince, d.DrawWatts+held[d.Domain] < lift)
			since(&st.rawUnderSince, d.DrawWatts < lift)
			switch {
			case !st.engaged:
			case !st.underSince.IsZero() && now.Sub(st.underSince) >= a.cfg.Hold:
				st.engaged = false
			case !st.rawUnderSince.IsZero() && now.Sub(st.rawUnderSince) >= HeldFor*a.cfg.Hold:
				// Held GPUs defer the lift for HeldFor holds at most:
				// one whose cap is under its idle draw always draws at
				// it, whatever its demand; if the demand is real, the
				// next round engages again.
				st.engaged = false
			}
		}
		engaged[i] = st.engaged
	}
	res := allocate(doms, gpus, engaged, func(d Domain) string {
		return fmt.Sprintf("%s drew %s of its %s limit (engaged at %.0f %%)", d.Domain, kW(d.DrawWatts), kW(d.LimitWatts), 100*a.cfg.Engage)
	})
	// Decisions: what changed since the last round.
	seen := map[string]bool{}
	for i, c := range res.Caps {
		g := &gpus[i]
		seen[g.UUID] = true
		old, had := a.last[g.UUID]
		switch {
		case c.Capped && (!had || !old.Capped):
			res.Decisions = append(res.Decisions, Decision{Kind: KindCap, Domain: c.Domain, UUID: g.UUID, Node: g.Node, Model: g.Model, Watts: c.Watts, Reason: c.Reason})
		case c.Capped && old.Watts != c.Watts:
			res.Decisions = append(res.Decisions, Decision{Kind: KindChange, Domain: c.Domain, UUID: g.UUID, Node: g.Node, Model: g.Model, Watts: c.Watts, Reason: c.Reason})
		case !c.Capped && had && old.Capped:
			res.Decisions = append(res.Decisions, Decision{Kind: KindLift, Domain: old.Domain, UUID: g.UUID, Node: g.Node, Model: g.Model, Watts: g.MaxWatts,
				Reason: a.liftReason(old.Domain, doms)})
		}
		a.last[g.UUID] = c
	}
	for id := range a.last {
		if !seen[id] {
			delete(a.last, id) // a GPU gone: nothing to lift
		}
	}
	slices.SortStableFunc(res.Decisions, func(x, y Decision) int { return cmp.Compare(x.UUID, y.UUID) })
	return res
}

func (a *Allocator) liftReason(dom facility.Domain, doms []Domain) string {
	for _, d := range doms {
		if d.Domain == dom {
			if st := a.state[dom]; st != nil && !st.engaged {
				return fmt.Sprintf("%s drew under %.0f %% of its %s limit for %s", dom, 100*a.cfg.Lift, kW(d.LimitWatts), a.cfg.Hold)
			}
			return fmt.Sprintf("%s has room: its bound is under its limit without this cap", dom)
		}
	}
	return fmt.Sprintf("%s is no longer budgeted", dom)
}

// Fallback returns, per GPU in input order, the cap its node keeps when it
// loses the controller: the caps with every domain engaged, so that every
// domain stays under its limit even if every GPU draws up to its cap. A GPU
// no domain needs to cap keeps its MaxWatts (as a cap). Domains whose
// floors cannot hold them have a ShortfallWatts in the result.
func Fallback(doms []Domain, gpus []GPU) Result {
	engaged := make([]bool, len(doms))
	for i := range engaged {
		engaged[i] = true
	}
	return allocate(doms, gpus, engaged, func(d Domain) string {
		return fmt.Sprintf("fallback for %s: its %s limit holds with every GPU at its cap", d.Domain, kW(d.LimitWatts))
	})
}

// allocate caps GPUs for the engaged domains: each in turn (finest level
// first, then by name), lowering caps only, so a domain done stays done.
// Inside a domain, GPUs of the lowest priority are lowered first, all to
// one level (water-filling: the highest caps come down first), never below
// their floors; a higher priority is touched only when every GPU below it
// is at its floor.
func allocate(doms []Domain, gpus []GPU, engaged []bool, why func(Domain) string) Result {
	caps := make([]float64, len(gpus))
	by := make([]int, len(gpus)) // the domain (index) that set the cap, -1 none
	floors, prio := make([]float64, len(gpus)), make([]int, len(gpus))
	for i, g := range gpus {
		caps[i], by[i] = g.MaxWatts, -1
		floors[i], prio[i] = g.FloorWatts, g.Priority
	}
	inDom := map[facility.Domain][]int{}
	for i, g := range gpus {
		for _, d := range g.Domains {
			inDom[d] = append(inDom[d], i)
		}
	}
	order := make([]int, len(doms))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		a, b := doms[x].Domain, doms[y].Domain
		return cmp.Or(cmp.Compare(b.Level, a.Level), cmp.Compare(a.Value, b.Value))
	})
	res := Result{Domains: make([]DomainStatus, len(doms))}
	for _, di := range order {
		d := doms[di]
		members := inDom[d.Domain]
		st := DomainStatus{Domain: d.Domain, Engaged: engaged[di], LimitWatts: d.LimitWatts, DrawWatts: d.DrawWatts}
		if engaged[di] {
			over := d.BaseWatts - d.LimitWatts
			for _, i := range members {
				over += caps[i]
			}
			if over > 0 {
				over = devicesapi.LowerByPriority(caps, floors, prio, members, over, func(i int) { by[i] = di })
				st.ShortfallWatts = max(over, 0)
			}
		}
		res.Domains[di] = st
	}
	// Bounds, with every domain's caps in.
	for di, d := range doms {
		b := d.BaseWatts
		for _, i := range inDom[d.Domain] {
			b += caps[i]
		}
		res.Domains[di].BoundWatts = b
	}
	res.Caps = make([]Cap, len(gpus))
	for i, g := range gpus {
		c := Cap{UUID: g.UUID, Watts: caps[i]}
		if by[i] >= 0 {
			c.Capped, c.Domain, c.Reason = true, doms[by[i]].Domain, why(doms[by[i]])
		}
		res.Caps[i] = c
	}
	return res
}

func kW(w float64) string { return fmt.Sprintf("%.1f kW", w/1000) }

package devicesapi

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Format 2 of a node's caps variable adds the node's power share to
// format 1's items (CapItem, FallbackItem, ManagedItem), which keep their
// meaning: a plugin that knows only format 1 follows the caps and ignores
// the rest; a format-2 plugin holds the share itself, every second, from
// its own readings of its GPUs (ShareHolder). A variable without
// FormatItem is format 1. docs/device-plugin.md, "Power caps".
const (
	FormatItem = "format" // the variable's format: absent (1) or Format
	Format     = "2"
	// ShareItem = watts: the most the node's GPUs together may draw. The
	// controller gives shares so that, in every budgeted domain, Σ (node
	// base draw + share) is at most the domain's limit.
	ShareItem = "share"
	// FloorItem+<GPU UUID> = watts: the least the node caps that GPU to
	// (its profile's min_watts, else its minimum limit).
	FloorItem = "floor."
	// PriorityItem+<GPU UUID> = an integer: the priority of the model it
	// serves; lower is capped first.
	PriorityItem = "priority."
)

// ShareItems is one GPU's part of a format-2 variable.
type ShareItems struct {
	Floor    float64 // 0: none given (the GPU's minimum limit)
	Priority int
}

// NodeShare is what a format-2 variable says beyond format 1: the node's
// share in watts (0: no share given) and, per GPU UUID, its floor and
// priority.
type NodeShare struct {
	Watts float64
	GPUs  map[string]ShareItems
}

// ParseShare reads the format-2 items of a node's caps variable (path
// names it in errors). A variable of format 1 gives an empty NodeShare;
// one of an unknown format an error (its format-1 items still apply: the
// plugin reads them apart). Any format-2 item it cannot read refuses the
// share, naming the item.
func ParseShare(path string, items map[string]string) (NodeShare, error) {
	out := NodeShare{GPUs: map[string]ShareItems{}}
	switch f, ok := items[FormatItem]; {
	case !ok || f == "1":
		return out, nil
	case f != Format:
		return out, fmt.Errorf("%s: item %s = %q: this plugin knows formats 1 and %s; the share is not held, the caps are", path, FormatItem, f, Format)
	}
	watts := func(k string) (float64, error) {
		w, err := strconv.ParseFloat(strings.TrimSpace(items[k]), 64)
		if err != nil || math.IsNaN(w) || w <= 0 || w > 1e7 {
			return 0, fmt.Errorf("%s: item %s = %q is not a power in watts (a number above zero)", path, k, items[k])
		}
		return w, nil
	}
	if _, ok := items[ShareItem]; !ok {
		return out, fmt.Errorf("%s: format %s without a %s item", path, Format, ShareItem)
	}
	w, err := watts(ShareItem)
	if err != nil {
		return out, err
	}
	out.Watts = w
	keys := make([]string, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, FloorItem):
			uuid := strings.TrimPrefix(k, FloorItem)
			if uuid == "" {
				return out, fmt.Errorf("%s: item %q names no GPU UUID", path, k)
			}
			f, err := watts(k)
			if err != nil {
				return out, err
			}
			g := out.GPUs[uuid]
			g.Floor = f
			out.GPUs[uuid] = g
		case strings.HasPrefix(k, PriorityItem):
			uuid := strings.TrimPrefix(k, PriorityItem)
			if uuid == "" {
				return out, fmt.Errorf("%s: item %q names no GPU UUID", path, k)
			}
			p, err := strconv.Atoi(strings.TrimSpace(items[k]))
			if err != nil {
				return out, fmt.Errorf("%s: item %s = %q is not an integer priority", path, k, items[k])
			}
			g := out.GPUs[uuid]
			g.Priority = p
			out.GPUs[uuid] = g
		}
	}
	return out, nil
}

// ShareGPU is one GPU under a node's share, as the node reads it.
type ShareGPU struct {
	UUID     string
	Priority int // lower is capped first
	// DrawWatts is what it drew at the last reading.
	DrawWatts float64
	// FloorWatts is the least cap it may get; MaxWatts the most: the
	// controller's cap when it has one, else the GPU's default limit.
	FloorWatts, MaxWatts float64
}

// ShareConfig is the node's hysteresis on its share.
type ShareConfig struct {
	// Engage: the node caps its GPUs when they draw at least Engage × the
	// share together. Default 0.95.
	Engage float64
	// Lift: the caps go when they have drawn under Lift × the share for
	// Hold. Defaults 0.85 and 30 s.
	Lift float64
	Hold time.Duration
}

// DefaultShareConfig returns engage at 95 % of the share, lift after 30 s
// under 85 %.
func DefaultShareConfig() ShareConfig {
	return ShareConfig{Engage: 0.95, Lift: 0.85, Hold: 30 * time.Second}
}

// ShareHeld is the share of its cap at which a capped GPU counts as held
// down: it wants more than it draws, so the split counts it at its max.
const ShareHeld = 0.9

// ShareWant is how much above its draw a GPU not held down is given room
// when the split must lower it: want = draw × ShareWant.
const ShareWant = 1.15

// ShareHolder keeps a node's GPUs within its share. Each Step reads the
// GPUs' draws and returns their caps: none while the node draws under
// Engage × the share (and once it has drawn under Lift × the share for
// Hold); while engaged, caps whose sum is at most the share, so that
// once they are in place the node draws no more than its share whatever
// its GPUs do. It is pure (no clock, no I/O): the device plugin calls it
// every second, the power simulation in its place. Not safe for
// concurrent use.
type ShareHolder struct {
	cfg        ShareConfig
	engaged    bool
	underSince time.Time
	caps       map[string]float64 // while engaged, the caps the last Step gave
}

// NewShareHolder returns a holder with cfg; a zero field takes the
// default.
func NewShareHolder(cfg ShareConfig) *ShareHolder {
	d := DefaultShareConfig()
	if cfg.Engage <= 0 || cfg.Engage > 1 {
		cfg.Engage = d.Engage
	}
	if cfg.Lift <= 0 || cfg.Lift > cfg.Engage {
		cfg.Lift = min(d.Lift, cfg.Engage)
	}
	if cfg.Hold <= 0 {
		cfg.Hold = d.Hold
	}
	return &ShareHolder{cfg: cfg, caps: map[string]float64{}}
}

// Engaged reports whether the last Step capped.
func (h *ShareHolder) Engaged() bool { return h.engaged }

// Step decides at now, for a share of share watts (0: none, nothing is
// capped) and the GPUs' readings, each GPU's cap (0: none), in input
// order.
func (h *ShareHolder) Step(now time.Time, share float64, gpus []ShareGPU) []float64 {
	out := make([]float64, len(gpus))
	total, most := 0.0, 0.0
	for _, g := range gpus {
		total += g.DrawWatts
		most += max(g.MaxWatts, g.FloorWatts)
	}
	switch {
	case share <= 0 || most <= share:
		// No share, or one the GPUs cannot draw past at their max.
		h.engaged, h.underSince = false, time.Time{}
		clear(h.caps)
		return out
	case total >= h.cfg.Engage*share:
		h.engaged, h.underSince = true, time.Time{}
	case !h.engaged:
	case total >= h.cfg.Lift*share:
		h.underSince = time.Time{}
	case h.underSince.IsZero():
		h.underSince = now
	case now.Sub(h.underSince) >= h.cfg.Hold:
		h.engaged, h.underSince = false, time.Time{}
	}
	if !h.engaged {
		clear(h.caps)
		return out
	}
	want := make([]float64, len(gpus))
	for i, g := range gpus {
		want[i] = min(g.MaxWatts, g.DrawWatts*ShareWant)
		if c, ok := h.caps[g.UUID]; ok && g.DrawWatts >= ShareHeld*c {
			want[i] = g.MaxWatts // held down: its demand is unknown
		}
	}
	caps := SplitShare(share, gpus, want)
	clear(h.caps)
	for i, g := range gpus {
		h.caps[g.UUID] = caps[i]
		out[i] = caps[i]
	}
	return out
}

// SplitShare divides share watts over gpus by their wants and priorities:
// every GPU starts at its max; while the sum is over the share, the GPUs
// of the lowest priority come down first toward what they want (all to
// one level, the highest first), then the next priority; when every GPU
// is at its want and the sum is still over, they come down the same way
// toward their floors. The sum is at most the share unless every GPU is
// at its floor.
func SplitShare(share float64, gpus []ShareGPU, want []float64) []float64 {
	caps := make([]float64, len(gpus))
	over := -share
	for i, g := range gpus {
		caps[i] = max(g.MaxWatts, g.FloorWatts)
		over += caps[i]
	}
	floorA := make([]float64, len(gpus))
	floorB := make([]float64, len(gpus))
	for i, g := range gpus {
		floorB[i] = min(g.FloorWatts, caps[i])
		floorA[i] = max(floorB[i], min(want[i], caps[i]))
	}
	prio, all := make([]int, len(gpus)), make([]int, len(gpus))
	for i, g := range gpus {
		prio[i], all[i] = g.Priority, i
	}
	for _, floors := range [][]float64{floorA, floorB} {
		if over <= 0 {
			break
		}
		over = LowerByPriority(caps, floors, prio, all, over, nil)
	}
	return caps
}

// LowerByPriority takes over watts off the caps of members (indexes into
// caps, floors and prio), lowest priority first, each priority
// water-filled: its highest caps come down to one level, in whole watts
// rounded down (a little more taken), none below its floor, and none
// raised. lowered, when not nil, is called with each member whose cap it
// lowers. It returns what it could not take. The device plugin splits a
// node's share with it (SplitShare), and the controller a domain's budget
// over its GPUs (facility/powercap).
func LowerByPriority(caps, floors []float64, prio, members []int, over float64, lowered func(i int)) float64 {
	set := func(i int, c float64) {
		if c < caps[i] {
			caps[i] = c
			if lowered != nil {
				lowered(i)
			}
		}
	}
	prios := make([]int, 0, len(members))
	for _, i := range members {
		prios = append(prios, prio[i])
	}
	slices.Sort(prios)
	prios = slices.Compact(prios)
	for _, pr := range prios {
		if over <= 0 {
			break
		}
		var group []int
		room := 0.0
		for _, i := range members {
			if prio[i] == pr {
				group = append(group, i)
				room += max(caps[i]-floors[i], 0)
			}
		}
		if room <= 0 {
			continue
		}
		if room <= over {
			for _, i := range group {
				set(i, floors[i])
			}
			over -= room
			continue
		}
		// The level c with Σ max(caps − max(min(caps, c), floor), 0) =
		// over: a cap already under its floor gives nothing, and takes
		// nothing from the others' share.
		lo, hi := 0.0, 0.0
		for _, i := range group {
			hi = max(hi, caps[i])
		}
		for range 100 {
			mid := (lo + hi) / 2
			taken := 0.0
			for _, i := range group {
				taken += max(caps[i]-max(min(caps[i], mid), floors[i]), 0)
			}
			if taken >= over {
				lo = mid
			} else {
				hi = mid
			}
		}
		level := math.Floor(lo)
		for _, i := range group {
			set(i, max(min(caps[i], level), floors[i]))
		}
		over = 0
	}
	return over
}

package facility

import (
	"errors"
	"fmt"
	"math"
)

// Facility is what the data centre allows: power budgets per domain and holds.
type Facility struct {
	// Headroom is the fraction of every budget kept free, in [0, 1).
	Headroom float64
	// Count is how budgets that set no count of their own count shards:
	// CountDefault is CountDeclared.
	Count CountMode `json:",omitempty"`
	// Measured is the measured rule; nil is DefaultMeasured (MeasuredRule).
	Measured *Measured `json:",omitempty"`
	Budgets  []Budget
	Holds    []Hold
}

// Budget caps the draw of every node in a domain.
type Budget struct {
	Domain Domain
	Watts  float64
	// Count is how the budget counts the shards in its domain;
	// CountDefault takes the facility's (CountOf).
	Count CountMode `json:",omitempty"`
	Pos   Pos
}

// Hold takes a domain out of placement: no new shard goes into it. With
// Drain, what runs there is moved too (a new copy is placed first).
type Hold struct {
	Domain Domain
	Reason string
	Drain  bool
	Pos    Pos
}

// Limit returns the most a budgeted domain may draw: b.Watts × (1 − Headroom).
func (f Facility) Limit(b Budget) float64 { return b.Watts * (1 - f.Headroom) }

// HoldOn returns the hold covering a node at loc, coarsest level first.
func (f Facility) HoldOn(loc Location) (Hold, bool) {
	for _, l := range Levels() {
		v := loc.Get(l)
		if v == "" {
			continue
		}
		for _, h := range f.Holds {
			if h.Domain.Level == l && h.Domain.Value == v {
				return h, true
			}
		}
	}
	return Hold{}, false
}

// Validate reports every problem with the facility, each an *Error at the
// budget or hold: headroom out of range, watts not positive, a domain
// budgeted or held twice, an unknown count mode, a measured rule out of
// range.
func (f Facility) Validate() error {
	var errs []error
	if math.IsNaN(f.Headroom) || f.Headroom < 0 || f.Headroom >= 1 {
		errs = append(errs, fmt.Errorf("headroom must be at least 0 and less than 1, got %v", f.Headroom))
	}
	if f.Count > CountMeasured {
		errs = append(errs, fmt.Errorf("count: unknown count mode %d", f.Count))
	}
	if f.Measured != nil {
		for _, b := range f.Measured.check() {
			errs = append(errs, errAt(f.Measured.Pos, "measured: "+b))
		}
	}
	budgets := map[Domain]Pos{}
	for _, b := range f.Budgets {
		if !b.Domain.Level.Valid() {
			errs = append(errs, errAt(b.Pos, fmt.Sprintf("budget: %v %d", ErrUnknownLevel, b.Domain.Level)))
		} else if err := checkValue(b.Domain.Value); err != nil {
			errs = append(errs, errAt(b.Pos, fmt.Sprintf("budget %q: %v", b.Domain, err)))
		}
		if err := checkWatts("watts", b.Watts, true); err != nil {
			errs = append(errs, errAt(b.Pos, fmt.Sprintf("budget %q: %v", b.Domain, err)))
		}
		if b.Count > CountMeasured {
			errs = append(errs, errAt(b.Pos, fmt.Sprintf("budget %q: count: unknown count mode %d", b.Domain, b.Count)))
		}
		if p, dup := budgets[b.Domain]; dup {
			errs = append(errs, errAt(b.Pos, fmt.Sprintf("budget %q: duplicate (first at %s)", b.Domain, p)))
		} else {
			budgets[b.Domain] = b.Pos
		}
	}
	holds := map[Domain]Pos{}
	for _, h := range f.Holds {
		if !h.Domain.Level.Valid() {
			errs = append(errs, errAt(h.Pos, fmt.Sprintf("hold: %v %d", ErrUnknownLevel, h.Domain.Level)))
		} else if err := checkValue(h.Domain.Value); err != nil {
			errs = append(errs, errAt(h.Pos, fmt.Sprintf("hold %q: %v", h.Domain, err)))
		}
		if p, dup := holds[h.Domain]; dup {
			errs = append(errs, errAt(h.Pos, fmt.Sprintf("hold %q: duplicate (first at %s)", h.Domain, p)))
		} else {
			holds[h.Domain] = h.Pos
		}
	}
	return errors.Join(errs...)
}

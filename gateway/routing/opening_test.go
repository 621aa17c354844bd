package routing

import "testing"

// The opening limit is the one set, else one more than the engine's slots
// once they are known, else none; reserve counts a request only below it.
func TestOpeningLimitAndReserve(t *testing.T) {
	s := NewState("a:1", &testGate{})
	p := &Prefix{}
	if got := p.openingLimit(s); got != 0 {
		t.Errorf("slots unknown: limit %d, want 0 (none)", got)
	}
	s.Slots.Store(1)
	if got := p.openingLimit(s); got != 2 {
		t.Errorf("1 slot: limit %d, want 2", got)
	}
	p.OpeningLimit = 5
	if got := p.openingLimit(s); got != 5 {
		t.Errorf("limit set: %d, want 5", got)
	}
	s.Outstanding.Store(1)
	s.Others.Store(1)
	if s.reserve(2) {
		t.Error("reserved at the limit (1 own + 1 other, limit 2)")
	}
	s.Others.Store(0)
	if !s.reserve(2) || s.Outstanding.Load() != 2 {
		t.Errorf("below the limit: not reserved, or %d in flight (want 2)", s.Outstanding.Load())
	}
	if !s.reserve(0) || s.Outstanding.Load() != 3 {
		t.Errorf("no limit: not reserved, or %d in flight (want 3)", s.Outstanding.Load())
	}
}

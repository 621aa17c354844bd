package powercap

import "fmt"

// ShareWant is how far above its draw a GPU not held down by its cap is
// given room when shares must come down: want = draw × ShareWant (the
// node side's rule too, devicesapi.ShareWant).
const ShareWant = 1.15

// Want is what a GPU is counted to want when shares are divided: its
// MaxWatts when it is held down (it draws at least AtCap of the limit it
// runs under, a cap below its max), else its draw × ShareWant, at most
// its MaxWatts.
func Want(g GPU, enforcedWatts float64) float64 {
	if enforcedWatts > 0 && enforcedWatts < g.MaxWatts && g.DrawWatts >= AtCap*enforcedWatts {
		return g.MaxWatts
	}
	return min(g.MaxWatts, g.DrawWatts*ShareWant)
}

// Shares divides every budgeted domain's limit into per-GPU shares, whose
// sums per node are the nodes' power shares: in every domain, base + Σ
// share ≤ limit (or the domain reports a ShortfallWatts, every GPU of it
// at its floor). want[i] is what gpus[i] wants (Want). Each domain in turn
// (finest level first, as the allocator takes them) lowers shares from
// MaxWatts only while it is over: first the room above each GPU's want,
// lowest priority first; then, when every GPU is at its want, toward the
// floors, lowest priority first. A domain with room for every GPU at its
// max gives every one its max. Result.Caps[i].Watts is gpus[i]'s share,
// Capped when it is under its max; Decisions is empty (shares are not
// events).
func Shares(doms []Domain, gpus []GPU, want []float64) Result {
	engaged := make([]bool, len(doms))
	for i := range engaged {
		engaged[i] = true
	}
	why := func(d Domain) string { return fmt.Sprintf("%s: share of its %s limit", d.Domain, kW(d.LimitWatts)) }
	// Phase A: the room above the wants.
	ga := make([]GPU, len(gpus))
	for i, g := range gpus {
		ga[i] = g
		ga[i].FloorWatts = max(g.FloorWatts, min(g.MaxWatts, want[i]))
	}
	ra := allocate(doms, ga, engaged, why)
	// Phase B: from there, toward the floors.
	gb := make([]GPU, len(gpus))
	for i, g := range gpus {
		gb[i] = g
		gb[i].MaxWatts = ra.Caps[i].Watts
	}
	rb := allocate(doms, gb, engaged, why)
	for i := range rb.Caps {
		if !rb.Caps[i].Capped && ra.Caps[i].Capped {
			rb.Caps[i] = ra.Caps[i]
		}
		rb.Caps[i].Capped = rb.Caps[i].Watts < gpus[i].MaxWatts
	}
	return rb
}

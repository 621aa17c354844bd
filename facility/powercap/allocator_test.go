package powercap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/facility"
)

func dom(key string) facility.Domain {
	d, err := facility.ParseDomain(key)
	if err != nil {
		panic(err)
	}
	return d
}

// h200 is a GPU of 700 W (floor 200 W) under the given domains.
func h200(uuid, model string, prio int, draw float64, doms ...string) GPU {
	g := GPU{UUID: uuid, Node: "n-" + uuid, Model: model, Priority: prio, DrawWatts: draw, FloorWatts: 200, MaxWatts: 700}
	for _, d := range doms {
		g.Domains = append(g.Domains, dom(d))
	}
	return g
}

func capsOf(r Result) map[string]float64 {
	out := map[string]float64{}
	for _, c := range r.Caps {
		if c.Capped {
			out[c.UUID] = c.Watts
		}
	}
	return out
}

func mustAllocator(t *testing.T) *Allocator {
	t.Helper()
	a, err := NewAllocator(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Four GPUs under a 2,500 W PDU (500 W base): uncapped they could draw
// 2,800 + 500. Engaged, 800 W comes off the low-priority pair first.
func TestAllocatorLowerPriorityFirst(t *testing.T) {
	t.Parallel()
	a := mustAllocator(t)
	gpus := []GPU{
		h200("a", "big", 80, 650, "pdu=p1"), h200("b", "big", 80, 650, "pdu=p1"),
		h200("c", "small", 30, 500, "pdu=p1"), h200("d", "small", 30, 600, "pdu=p1"),
	}
	pdu := Domain{Domain: dom("pdu=p1"), LimitWatts: 2500, BaseWatts: 500}

	// Drawing 2,000 W (80 %): not engaged, no cap.
	pdu.DrawWatts = 2000
	r := a.Decide(t0, []Domain{pdu}, gpus)
	if len(capsOf(r)) != 0 || r.Domains[0].Engaged || len(r.Decisions) != 0 {
		t.Fatalf("under the engage line: caps %v, status %+v, decisions %v", capsOf(r), r.Domains[0], r.Decisions)
	}
	// 2,400 W (96 %): engaged; 800 W off c and d: 300 W each.
	pdu.DrawWatts = 2400
	r = a.Decide(t0.Add(time.Second), []Domain{pdu}, gpus)
	if diff := cmp.Diff(map[string]float64{"c": 300, "d": 300}, capsOf(r)); diff != "" {
		t.Errorf("caps (-want +got):\n%s", diff)
	}
	if st := r.Domains[0]; !st.Engaged || st.BoundWatts != 2500 || st.ShortfallWatts != 0 {
		t.Errorf("status %+v", st)
	}
	if len(r.Decisions) != 2 || r.Decisions[0].Kind != KindCap || r.Decisions[0].UUID != "c" || r.Decisions[0].Model != "small" ||
		r.Decisions[0].Domain != dom("pdu=p1") || r.Decisions[0].Watts != 300 ||
		r.Decisions[0].Reason != "pdu=p1 drew 2.4 kW of its 2.5 kW limit (engaged at 95 %)" {
		t.Errorf("decisions %+v", r.Decisions)
	}
	// A tighter limit: the small ones reach their floor, then the big ones share the rest.
	pdu.LimitWatts = 1800 // 1,300 W for GPUs: 400 at the floors, 900 for the big pair
	r = a.Decide(t0.Add(2*time.Second), []Domain{pdu}, gpus)
	if diff := cmp.Diff(map[string]float64{"a": 450, "b": 450, "c": 200, "d": 200}, capsOf(r)); diff != "" {
		t.Errorf("tighter (-want +got):\n%s", diff)
	}
	kinds := map[string]DecisionKind{}
	for _, d := range r.Decisions {
		kinds[d.UUID] = d.Kind
	}
	if diff := cmp.Diff(map[string]DecisionKind{"a": KindCap, "b": KindCap, "c": KindChange, "d": KindChange}, kinds); diff != "" {
		t.Errorf("decision kinds (-want +got):\n%s", diff)
	}
	// Tighter than the floors: all at floor, the shortfall said.
	pdu.LimitWatts = 1000
	r = a.Decide(t0.Add(3*time.Second), []Domain{pdu}, gpus)
	if st := r.Domains[0]; st.ShortfallWatts != 300 || st.BoundWatts != 1300 {
		t.Errorf("below the floors: status %+v, want shortfall 300, bound 1300", st)
	}
	for _, c := range r.Caps {
		if c.Watts != 200 {
			t.Errorf("%s at %v, want its floor 200", c.UUID, c.Watts)
		}
	}
}

// Hysteresis: caps stay while the draw is between lift and engage, and
// lift only after the draw has stayed under lift for the hold time.
func TestAllocatorHysteresis(t *testing.T) {
	t.Parallel()
	a := mustAllocator(t)
	gpus := []GPU{h200("a", "m", 50, 600, "pdu=p1"), h200("b", "m", 50, 600, "pdu=p1")}
	pdu := Domain{Domain: dom("pdu=p1"), LimitWatts: 1200}
	step := func(at time.Duration, draw float64) Result {
		pdu.DrawWatts = draw
		for i := range gpus {
			gpus[i].DrawWatts = draw / 2 // under their 600 W caps: not held
		}
		return a.Decide(t0.Add(at), []Domain{pdu}, gpus)
	}
	if r := step(0, 1150); len(capsOf(r)) != 2 { // 96 %
		t.Fatalf("not engaged at 96 %%: %v", capsOf(r))
	}
	steps := []struct {
		at     time.Duration
		draw   float64
		capped bool
	}{
		{time.Minute, 1100, true},     // 92 %: between, stays
		{2 * time.Minute, 900, true},  // 75 %: under lift, hold starts
		{6 * time.Minute, 1050, true}, // 87.5 %: above lift: the hold restarts
		{7 * time.Minute, 900, true},
		{11 * time.Minute, 900, true},   // 4 minutes under
		{12 * time.Minute, 900, false},  // 5 minutes under: lifted
		{13 * time.Minute, 1100, false}, // 92 %: not engaged again until 95 %
	}
	for _, s := range steps {
		r := step(s.at, s.draw)
		if got := len(capsOf(r)) > 0; got != s.capped {
			t.Errorf("at +%s drawing %v: capped %v, want %v", s.at, s.draw, got, s.capped)
		}
		if s.at == 12*time.Minute {
			if len(r.Decisions) != 2 || r.Decisions[0].Kind != KindLift || r.Decisions[0].Watts != 700 ||
				r.Decisions[0].Reason != "pdu=p1 drew under 85 % of its 1.2 kW limit for 5m0s" {
				t.Errorf("lift decisions %+v", r.Decisions)
			}
		}
	}
}

// Caps do not lift while the GPUs they hold down draw at them: the domain
// draws under lift only because of the caps. Once the GPUs draw under
// AtCap of their caps, the hold runs and the caps lift.
func TestAllocatorKeepsCapsWhileHeld(t *testing.T) {
	t.Parallel()
	a := mustAllocator(t)
	gpus := []GPU{h200("a", "m", 50, 690, "pdu=p1"), h200("b", "m", 50, 690, "pdu=p1")}
	pdu := Domain{Domain: dom("pdu=p1"), LimitWatts: 1000, DrawWatts: 1380}
	r := a.Decide(t0, []Domain{pdu}, gpus)
	if caps := capsOf(r); caps["a"] != 500 || caps["b"] != 500 {
		t.Fatalf("caps %v, want both at 500", caps)
	}
	// The domain at 800 W, 80 % of its limit: under lift. But a draws 495
	// W of its 500 W cap: held down, it counts at 700 W for lifting (1,005
	// W, not under lift), so the caps stay however long it lasts.
	pdu.DrawWatts = 800
	for _, at := range []time.Duration{time.Minute, 10 * time.Minute} {
		gpus[0].DrawWatts, gpus[1].DrawWatts = 495, 305 // a held at its cap, b not
		if caps := capsOf(a.Decide(t0.Add(at), []Domain{pdu}, gpus)); len(caps) != 2 {
			t.Fatalf("at +%s with a at its cap: caps %v, want both kept", at, caps)
		}
	}
	gpus[0].DrawWatts = 400 // neither held now: the hold starts
	if caps := capsOf(a.Decide(t0.Add(11*time.Minute), []Domain{pdu}, gpus)); len(caps) != 2 {
		t.Fatalf("the hold just started: caps %v, want both kept", caps)
	}
	if caps := capsOf(a.Decide(t0.Add(16*time.Minute), []Domain{pdu}, gpus)); len(caps) != 0 {
		t.Fatalf("5 minutes under lift, nothing held: caps %v, want none", caps)
	}
}

// Held GPUs defer a lift for HeldFor holds at most: GPUs capped under
// their idle draw always draw at their caps, whatever their demand.
func TestAllocatorHeldLiftsAfterHeldFor(t *testing.T) {
	t.Parallel()
	a := mustAllocator(t)
	gpus := []GPU{h200("a", "m", 50, 690, "pdu=p1"), h200("b", "m", 50, 690, "pdu=p1")}
	pdu := Domain{Domain: dom("pdu=p1"), LimitWatts: 1000, DrawWatts: 1380}
	if caps := capsOf(a.Decide(t0, []Domain{pdu}, gpus)); len(caps) != 2 {
		t.Fatalf("caps %v, want both", caps)
	}
	gpus[0].DrawWatts, gpus[1].DrawWatts = 500, 300 // a at its cap all along
	pdu.DrawWatts = 800
	for _, s := range []struct {
		at     time.Duration
		capped bool
	}{{time.Minute, true}, {10 * time.Minute, true}, {15 * time.Minute, true}, {16 * time.Minute, false}} {
		if got := len(capsOf(a.Decide(t0.Add(s.at), []Domain{pdu}, gpus))) > 0; got != s.capped {
			t.Errorf("at +%s, a held at its cap: capped %v, want %v", s.at, got, s.capped)
		}
	}
}

// Nested domains: each engaged one holds; caps combine as the minimum.
func TestAllocatorNested(t *testing.T) {
	t.Parallel()
	a := mustAllocator(t)
	gpus := []GPU{
		h200("a", "hi", 80, 700, "rack=k1", "pdu=p1"), h200("b", "lo", 10, 700, "rack=k1", "pdu=p1"),
		h200("c", "hi", 80, 700, "rack=k1", "pdu=p2"), h200("d", "lo", 10, 700, "rack=k1", "pdu=p2"),
	}
	doms := []Domain{
		{Domain: dom("rack=k1"), LimitWatts: 2000, DrawWatts: 2000}, // 800 W off: b and d to 300
		{Domain: dom("pdu=p1"), LimitWatts: 1300, DrawWatts: 1300},  // 100 W off: b to 600
		{Domain: dom("pdu=p2"), LimitWatts: 10000, DrawWatts: 1300}, // not engaged
	}
	r := a.Decide(t0, doms, gpus)
	if diff := cmp.Diff(map[string]float64{"b": 300, "d": 300}, capsOf(r)); diff != "" {
		t.Errorf("caps (-want +got):\n%s", diff)
	}
	for _, st := range r.Domains {
		if st.Engaged && st.BoundWatts > st.LimitWatts {
			t.Errorf("%s: bound %v over limit %v", st.Domain, st.BoundWatts, st.LimitWatts)
		}
	}
	// The PDU alone binding: it names itself.
	doms[0].LimitWatts, doms[0].DrawWatts = 10000, 0
	a = mustAllocator(t)
	r = a.Decide(t0, doms, gpus)
	for _, c := range r.Caps {
		if c.UUID == "b" && (!c.Capped || c.Watts != 600 || c.Domain != dom("pdu=p1")) {
			t.Errorf("b: %+v, want 600 W by pdu=p1", c)
		}
	}
}

func TestFallback(t *testing.T) {
	t.Parallel()
	gpus := []GPU{h200("a", "hi", 80, 0, "pdu=p1"), h200("b", "lo", 10, 0, "pdu=p1"), h200("c", "x", 10, 0, "pdu=p2")}
	doms := []Domain{
		{Domain: dom("pdu=p1"), LimitWatts: 1000, BaseWatts: 0}, // oversubscribed: 1400 W of GPUs
		{Domain: dom("pdu=p2"), LimitWatts: 1000, BaseWatts: 0}, // not: 700 W
	}
	r := Fallback(doms, gpus)
	want := map[string]float64{"a": 700, "b": 300, "c": 700}
	for _, c := range r.Caps {
		if c.Watts != want[c.UUID] {
			t.Errorf("%s: %v, want %v", c.UUID, c.Watts, want[c.UUID])
		}
	}
	if !r.Caps[1].Capped || !strings.HasPrefix(r.Caps[1].Reason, "fallback for pdu=p1") {
		t.Errorf("b: %+v", r.Caps[1])
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{Engage: 0, Lift: 0.5}, {Engage: 1.1, Lift: 0.5}, {Engage: 0.9, Lift: 0.95}, {Engage: 0.9, Lift: 0}, {Engage: 0.9, Lift: 0.8, Hold: -1}, {Engage: math.NaN(), Lift: 0.5}} {
		if _, err := NewAllocator(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// Random trees and draws: with the caps applied, no engaged domain can
// exceed its limit if GPUs obey them (unless a shortfall is said, and then
// every GPU of it is at its floor); no cap is below a floor or above a
// maximum; a GPU of a higher priority is capped in a domain only when
// every lower-priority GPU there is at its floor; Fallback holds every
// domain.
func TestAllocatorProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	capped, shortfalls := 0, 0
	for iter := range 2000 {
		var doms []Domain
		var gpus []GPU
		nodes := 2 + r.IntN(10)
		racks := 1 + r.IntN(3)
		pdus := 1 + r.IntN(4)
		limit := map[facility.Domain]float64{}
		base := map[facility.Domain]float64{}
		for n := range nodes {
			nb := float64(r.IntN(1500))
			node := []string{fmt.Sprintf("rack=k%d", n%racks), fmt.Sprintf("pdu=p%d", r.IntN(pdus)), "site=s"}
			for _, d := range node {
				base[dom(d)] += nb
			}
			for g := range 1 + r.IntN(8) {
				mx := float64(pick(r, 300, 700, 1000))
				floor := float64(pick(r, 100, 150, 200))
				gpus = append(gpus, GPU{UUID: fmt.Sprintf("g%d-%d", n, g), Node: fmt.Sprintf("n%d", n), Model: "m",
					Priority: pick(r, 10, 50, 80), DrawWatts: r.Float64() * mx, FloorWatts: floor, MaxWatts: mx,
					Domains: []facility.Domain{dom(node[0]), dom(node[1]), dom(node[2])}})
				for _, d := range node {
					limit[dom(d)] += mx * (0.3 + 0.9*r.Float64())
				}
			}
		}
		for d, l := range limit {
			if r.IntN(4) > 0 {
				doms = append(doms, Domain{Domain: d, LimitWatts: l + base[d], BaseWatts: base[d], DrawWatts: (l + base[d]) * (0.7 + 0.4*r.Float64())})
			}
		}
		a := mustAllocator(t)
		res := a.Decide(t0, doms, gpus)
		fb := Fallback(doms, gpus)
		check := func(what string, res Result, all bool) {
			for i, c := range res.Caps {
				g := gpus[i]
				if c.Watts < g.FloorWatts-1e-9 && c.Watts < g.MaxWatts || c.Watts > g.MaxWatts {
					t.Fatalf("iter %d %s: %s cap %v outside [%v, %v]", iter, what, g.UUID, c.Watts, g.FloorWatts, g.MaxWatts)
				}
				if c.Capped {
					capped++
				}
			}
			for di, d := range doms {
				st := res.Domains[di]
				if !st.Engaged && !all {
					continue
				}
				bound := d.BaseWatts
				atFloor := true
				for i, g := range gpus {
					for _, gd := range g.Domains {
						if gd == d.Domain {
							bound += res.Caps[i].Watts
							if res.Caps[i].Watts > max(g.FloorWatts, 0)+1e-9 && res.Caps[i].Watts > g.FloorWatts {
								atFloor = false
							}
						}
					}
				}
				if math.Abs(bound-st.BoundWatts) > 1e-6 {
					t.Fatalf("iter %d %s: %s bound %v, recount %v", iter, what, d.Domain, st.BoundWatts, bound)
				}
				if st.ShortfallWatts > 0 {
					shortfalls++
					if !atFloor {
						t.Fatalf("iter %d %s: %s says shortfall %v but not every GPU is at its floor", iter, what, d.Domain, st.ShortfallWatts)
					}
					continue
				}
				if bound > d.LimitWatts+1e-6 {
					t.Fatalf("iter %d %s: %s bound %v over limit %v", iter, what, d.Domain, bound, d.LimitWatts)
				}
			}
			// Priority: the domain that last lowered a GPU's cap took every
			// lower-priority GPU in it to its floor first (later, coarser
			// domains only lower caps).
			for i, c := range res.Caps {
				if !c.Capped {
					continue
				}
				for j, g := range gpus {
					if g.Priority < gpus[i].Priority && res.Caps[j].Watts > g.FloorWatts+1e-9 && inDomain(g, c.Domain) && inDomain(gpus[i], c.Domain) {
						t.Fatalf("iter %d %s: %s (priority %d) capped by %s while %s (priority %d) is at %v above its floor %v",
							iter, what, gpus[i].UUID, gpus[i].Priority, c.Domain, g.UUID, g.Priority, res.Caps[j].Watts, g.FloorWatts)
					}
				}
			}
		}
		check("decide", res, false)
		check("fallback", fb, true)
	}
	t.Logf("%d caps, %d shortfalls", capped, shortfalls)
	if capped < 1000 || shortfalls == 0 {
		t.Errorf("generator too mild: %d caps, %d shortfalls", capped, shortfalls)
	}
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

func inDomain(g GPU, d facility.Domain) bool {
	for _, x := range g.Domains {
		if x == d {
			return true
		}
	}
	return false
}

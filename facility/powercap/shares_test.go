package powercap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/llmgw/llmgw/facility"
)

// Four GPUs under a 2,500 W PDU (500 W base): 2,000 W of shares for 2,800
// W of max. The room above the wants goes first, the lowest priority's
// first; nobody is cut below its want while some GPU has room above its.
func TestSharesFollowWantsThenPriorities(t *testing.T) {
	t.Parallel()
	pdu := Domain{Domain: dom("pdu=p1"), LimitWatts: 2500, BaseWatts: 500}
	gpus := []GPU{
		h200("a", "hi", 80, 100, "pdu=p1"),
		h200("b", "hi", 80, 600, "pdu=p1"),
		h200("c", "lo", 20, 100, "pdu=p1"),
		h200("d", "lo", 20, 600, "pdu=p1"),
	}
	want := make([]float64, len(gpus))
	for i, g := range gpus {
		want[i] = Want(g, 0)
	}
	res := Shares([]Domain{pdu}, gpus, want)
	got := map[string]float64{}
	sum := 0.0
	for _, c := range res.Caps {
		got[c.UUID] = c.Watts
		sum += c.Watts
	}
	// Wants 115, 690, 115, 690: 800 W to take. lo: c 700 → 200 (floor),
	// d 700 → 690: 510 W; hi: the rest, 290 W, water-filled over its room
	// (a 500: its want is under its floor 200; b 10): b 700 → 690, a 700 →
	// 420.
	if got["c"] != 200 || got["d"] != 690 || got["b"] != 690 || got["a"] != 420 {
		t.Errorf("shares %v, want a 420, b 690, c 200, d 690", got)
	}
	if sum+pdu.BaseWatts > pdu.LimitWatts {
		t.Errorf("shares %v W + base over the limit", sum)
	}
	// Everyone wants everything (held at their caps): the lowest priority
	// comes down first, toward its floors: 800 W off two GPUs, 300 W each.
	for i := range gpus {
		gpus[i].DrawWatts = 400
		want[i] = Want(gpus[i], 400)
	}
	res = Shares([]Domain{pdu}, gpus, want)
	for _, c := range res.Caps {
		got[c.UUID] = c.Watts
	}
	if got["c"] != 300 || got["d"] != 300 || got["a"] != 700 || got["b"] != 700 {
		t.Errorf("all held: shares %v, want hi 700 each, lo 300 each", got)
	}
	// A domain with room for every GPU at its max gives each its max.
	roomy := pdu
	roomy.LimitWatts = 3300
	for _, c := range Shares([]Domain{roomy}, gpus, want).Caps {
		if c.Capped || c.Watts != 700 {
			t.Errorf("roomy PDU: %s share %v capped %v", c.UUID, c.Watts, c.Capped)
		}
	}
}

// Over random trees of domains, draws and wants: in every domain base + Σ
// shares ≤ limit unless it reports a shortfall with every GPU at its
// floor; every share is within [floor, max]; a GPU under its want only
// where its domain had no room above any want left.
func TestSharesProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(38, 3))
	lowered, shortfalls := 0, 0
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
				gpus = append(gpus, GPU{UUID: fmt.Sprintf("g%d-%d", n, g), Node: fmt.Sprintf("n%d", n), Priority: pick(r, 10, 50, 80),
					DrawWatts: r.Float64() * mx, FloorWatts: float64(pick(r, 100, 150, 200)), MaxWatts: mx,
					Domains: []facility.Domain{dom(node[0]), dom(node[1]), dom(node[2])}})
				for _, d := range node {
					limit[dom(d)] += mx * (0.3 + 0.9*r.Float64())
				}
			}
		}
		for d, l := range limit {
			if r.IntN(4) > 0 {
				doms = append(doms, Domain{Domain: d, LimitWatts: l + base[d], BaseWatts: base[d]})
			}
		}
		want := make([]float64, len(gpus))
		for i, g := range gpus {
			enforced := 0.0
			if r.IntN(3) == 0 {
				enforced = g.DrawWatts // held at a cap
			}
			want[i] = Want(g, enforced)
		}
		res := Shares(doms, gpus, want)
		for i, c := range res.Caps {
			g := gpus[i]
			if c.Watts < g.FloorWatts-1e-9 || c.Watts > g.MaxWatts+1e-9 {
				t.Fatalf("iter %d: %s share %v outside [%v, %v]", iter, g.UUID, c.Watts, g.FloorWatts, g.MaxWatts)
			}
			if c.Capped {
				lowered++
			}
		}
		for di, d := range doms {
			sum, atFloor := d.BaseWatts, true
			for i, g := range gpus {
				if inDomain(g, d.Domain) {
					sum += res.Caps[i].Watts
					atFloor = atFloor && res.Caps[i].Watts <= g.FloorWatts+1e-9
				}
			}
			if sf := res.Domains[di].ShortfallWatts; sf > 0 {
				shortfalls++
				if !atFloor {
					t.Fatalf("iter %d: %s reports a shortfall of %v W with GPUs above their floors", iter, d.Domain, sf)
				}
				continue
			}
			if sum > d.LimitWatts+1e-6 {
				t.Fatalf("iter %d: %s: base + Σ shares = %v over its limit %v", iter, d.Domain, sum, d.LimitWatts)
			}
		}
		// Under its want: the domain that set it had taken every GPU in it
		// to its want (or lower) first.
		for i, c := range res.Caps {
			if c.Watts >= math.Max(gpus[i].FloorWatts, math.Min(want[i], gpus[i].MaxWatts))-1 {
				continue
			}
			for j, g := range gpus {
				if inDomain(g, c.Domain) && res.Caps[j].Watts > math.Max(g.FloorWatts, math.Min(want[j], g.MaxWatts))+1e-6 {
					t.Fatalf("iter %d: %s cut to %v under its want %v by %s while %s has %v above its want %v", iter, gpus[i].UUID, c.Watts, want[i], c.Domain, g.UUID, res.Caps[j].Watts, want[j])
				}
			}
		}
	}
	t.Logf("%d shares lowered, %d shortfalls", lowered, shortfalls)
	if lowered < 1000 || shortfalls == 0 {
		t.Errorf("generator too mild: %d lowered, %d shortfalls", lowered, shortfalls)
	}
}

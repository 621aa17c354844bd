package facility

import (
	"errors"
	"fmt"
	"strings"
)

// CheckFacility reports budgets and holds on domains no node of the fleet is
// in: most likely a typo, which would leave a budget unenforced or a domain
// not held.
func CheckFacility(fleet Fleet, fac Facility) error {
	known := map[Domain]bool{}
	for _, n := range fleet.Nodes {
		for _, l := range Levels() {
			if v := n.Location.Get(l); v != "" {
				known[Domain{l, v}] = true
			}
		}
	}
	var errs []error
	for _, b := range fac.Budgets {
		if !known[b.Domain] {
			errs = append(errs, errAt(b.Pos, fmt.Sprintf("budget %q: no node of the fleet is in %s", b.Domain, b.Domain)))
		}
	}
	for _, h := range fac.Holds {
		if !known[h.Domain] {
			errs = append(errs, errAt(h.Pos, fmt.Sprintf("hold %q: no node of the fleet is in %s", h.Domain, h.Domain)))
		}
	}
	return errors.Join(errs...)
}

// CheckCatalog reports every profile that no node of the fleet could ever
// hold, whatever runs: no node in its pool with enough GPUs of its model,
// CPU cores and memory, on its fabric, whose budgeted domains could take
// one shard over the base draw of all their nodes; and for a multi-node
// profile, no keep_within domain with enough such nodes on one fabric. Holds
// and measured draw are ignored: they pass. A measured budget counts the
// shard as it would (its learned draw, when enough is learned).
func CheckCatalog(fleet Fleet, fac Facility, cat Catalog) error {
	limit := map[Domain]float64{}
	measured := map[Domain]bool{}
	for _, b := range fac.Budgets {
		limit[b.Domain] = fac.Limit(b)
		measured[b.Domain] = fac.CountOf(b) == CountMeasured
	}
	table := countedTable(fleet.Learned, fac.MeasuredRule())
	base := map[Domain]float64{}
	for _, n := range fleet.Nodes {
		for _, l := range Levels() {
			if v := n.Location.Get(l); v != "" {
				base[Domain{l, v}] += n.BaseWatts
			}
		}
	}
	var errs []error
	for _, m := range cat.Models {
		for _, p := range m.Profiles {
			// What one shard counts at in domain d, on a GPU of power limit pl.
			w := func(d Domain, pl float64) float64 {
				c := counted(table, LearnedKey{Model: m.Name, Profile: p.Name, GPU: p.GPU}, p.ShardWatts(pl))
				if measured[d] {
					return c[modeMeasured]
				}
				return c[modeDeclared]
			}
			if why := neverFits(fleet, limit, base, p, w); why != "" {
				errs = append(errs, errAt(p.Pos, fmt.Sprintf("profile %s/%s: no node could ever hold it: %s", m.Name, p.Name, why)))
			}
		}
	}
	return errors.Join(errs...)
}

func neverFits(fleet Fleet, limit, base map[Domain]float64, p Profile, shardW func(Domain, float64) float64) string {
	pool := p.pool()
	var most [3]int // GPUs, CPU, memory among nodes that passed the checks before
	stage := 0      // how far the best node got
	why := [...]string{
		"no node in pool " + pool,
		"no node has any " + p.GPU,
		"",
		"",
		"",
		"no node on a " + p.Fabric + "* fabric",
		"",
	}
	var over string
	// able[(keep_within value, fabric)] counts nodes that could hold a shard.
	able := map[[2]string]int{}
	for _, n := range fleet.Nodes {
		s := 0
		var g *GPU
		for i := range n.GPUs {
			if n.GPUs[i].Model == p.GPU {
				g = &n.GPUs[i]
			}
		}
		switch {
		case pool != AllPools && orDefault(n.Pool) != pool:
		case g == nil:
			s = 1
		case g.Count < p.GPUs:
			s, most[0] = 2, max(most[0], g.Count)
		case n.CPUCores < p.CPUCores:
			s, most[1] = 3, max(most[1], n.CPUCores)
		case n.MemoryGB < p.MemoryGB:
			s, most[2] = 4, max(most[2], n.MemoryGB)
		case !strings.HasPrefix(n.Fabric, p.Fabric):
			s = 5
		default:
			s = 7
			for _, l := range Levels() {
				d := Domain{l, n.Location.Get(l)}
				if lim, ok := limit[d]; ok && d.Value != "" && base[d]+shardW(d, g.PowerLimitWatts) > lim {
					w := shardW(d, g.PowerLimitWatts)
					s = 6
					if over == "" {
						a, b := kWPair(base[d]+w, lim)
						over = fmt.Sprintf("over budget: %s would draw %s of %s with nothing else running", d, a, b)
					}
					break
				}
			}
		}
		stage = max(stage, s)
		if s == 7 {
			if p.Nodes == 1 {
				return ""
			}
			if v := n.Location.Get(p.KeepWithin); v != "" {
				able[[2]string{v, n.Fabric}]++
			}
		}
	}
	why[2] = fmt.Sprintf("no node has %d %s (most is %d)", p.GPUs, p.GPU, most[0])
	why[3] = fmt.Sprintf("no node has %d CPU cores free (most is %d)", p.CPUCores, most[1])
	why[4] = fmt.Sprintf("no node has %d GB of memory free (most is %d)", p.MemoryGB, most[2])
	why[6] = over
	if stage < 7 {
		return why[stage]
	}
	best := 0
	for _, c := range able {
		if c >= p.Nodes {
			return ""
		}
		best = max(best, c)
	}
	return fmt.Sprintf("no %s has %d nodes that could hold a shard on one fabric (most is %d)", p.KeepWithin, p.Nodes, best)
}

func orDefault(pool string) string {
	if pool == "" {
		return DefaultPool
	}
	return pool
}

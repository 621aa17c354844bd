package facility

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llmgw/llmgw/weightsapi"
)

// world is a random fleet, facility and catalog.
type world struct {
	fleet Fleet
	fac   Facility
	cat   Catalog
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// randomWorld builds a small random data centre. All watts are whole, so
// sums are exact and the planner and the reference below must agree exactly.
func randomWorld(r *rand.Rand, budgets bool) world {
	var w world
	var doms []Domain
	addDom := func(d Domain) {
		if !slices.Contains(doms, d) {
			doms = append(doms, d)
		}
	}
	nodeCount := map[Domain]int{}
	id := 0
	for room := range 1 + r.IntN(2) {
		roomName := fmt.Sprintf("m%d", room)
		for row := range 1 + r.IntN(3) {
			rowName := fmt.Sprintf("%s-r%d", roomName, row)
			rowPDU := r.IntN(3) == 0 // one PDU feeding every rack of the row
			rowFabric := pick(r, "ib-1", "ib-1", "ib-2", "roce-1", "")
			for rack := range 1 + r.IntN(3) {
				rackName := fmt.Sprintf("%s-k%d", rowName, rack)
				for pdu := range 1 + r.IntN(2) {
					pduName := fmt.Sprintf("%s-p%d", rackName, pdu)
					if rowPDU {
						pduName = rowName + "-P"
					}
					for range 1 + r.IntN(3) {
						id++
						count := pick(r, 4, 8)
						n := Node{
							Name:     fmt.Sprintf("n%03d", id),
							Pool:     pick(r, DefaultPool, DefaultPool, DefaultPool, DefaultPool, "batch"),
							Location: Location{Site: "s1", Room: roomName, Row: rowName, Rack: rackName, PDU: pduName},
							CPUCores: 16 * (1 + r.IntN(8)),
							MemoryGB: 128 * (1 + r.IntN(8)),
							Fabric:   rowFabric,
							GPUs: []GPU{{
								Model: pick(r, "H", "H", "H", "H", "B"), Count: count, Free: pick(r, count, count, r.IntN(count+1)),
								PowerLimitWatts: float64(pick(r, 700, 500)),
							}},
						}
						if r.IntN(5) == 0 {
							n.Fabric = pick(r, "ib-1", "ib-2", "")
						}
						if r.IntN(2) == 0 {
							n.BaseWatts = float64(r.IntN(1500))
						}
						if r.IntN(4) == 0 {
							n.MeasuredWatts = float64(r.IntN(6000))
						}
						w.fleet.Nodes = append(w.fleet.Nodes, n)
						for _, l := range Levels() {
							d := Domain{l, n.Location.Get(l)}
							addDom(d)
							nodeCount[d]++
						}
					}
				}
			}
		}
	}
	if budgets {
		w.fac.Headroom = pick(r, 0, 0.05, 0.1)
		for _, d := range doms {
			if r.IntN(2) == 0 {
				n := nodeCount[d]
				w.fac.Budgets = append(w.fac.Budgets, Budget{Domain: d, Watts: float64(n*1500 + r.IntN(n*6000+1))})
			}
		}
	}
	for range r.IntN(3) {
		d := pick(r, doms...)
		if !slices.ContainsFunc(w.fac.Holds, func(h Hold) bool { return h.Domain == d }) {
			w.fac.Holds = append(w.fac.Holds, Hold{Domain: d, Reason: "test", Drain: r.IntN(2) == 0})
		}
	}
	for m := range 1 + r.IntN(4) {
		model := Model{Name: fmt.Sprintf("model%d", m), Replicas: 1 + r.IntN(6)}
		for p := range 1 + r.IntN(2) {
			prof := Profile{
				Name: fmt.Sprintf("p%d", p), Engine: "vllm", GPU: pick(r, "H", "H", "H", "B"),
				GPUs: pick(r, 1, 2, 4, 8), Nodes: 1, Weight: 1,
				CPUCores: 8 * r.IntN(5), MemoryGB: 64 * r.IntN(5),
				Fabric: pick(r, "", "", "ib"),
				Pool:   pick(r, "", "", "", AllPools, "batch"),
			}
			if r.IntN(3) == 0 {
				prof.Nodes = 2 + r.IntN(2)
				prof.KeepWithin = pick(r, LevelRoom, LevelRow, LevelRack, LevelPDU)
			}
			if r.IntN(2) == 0 {
				prof.Watts = float64(500 + r.IntN(5000))
			}
			for _, l := range Levels() {
				if r.IntN(3) == 0 {
					prof.Spread = append(prof.Spread, l)
				}
			}
			if r.IntN(2) == 0 {
				r.Shuffle(len(prof.Spread), func(i, j int) { prof.Spread[i], prof.Spread[j] = prof.Spread[j], prof.Spread[i] })
			}
			model.Profiles = append(model.Profiles, prof)
		}
		if r.IntN(2) == 0 {
			model.Weights, model.WeightsBytes = randomWeights(r, m)
		}
		w.cat.Models = append(w.cat.Models, model)
	}
	// Some nodes hold some models' weights; some say how fast they fetch.
	for i := range w.fleet.Nodes {
		n := &w.fleet.Nodes[i]
		for _, m := range w.cat.Models {
			if k := weightsKey(m); k != "" && r.IntN(3) == 0 {
				if n.Weights == nil {
					n.Weights = map[string]int64{}
				}
				n.Weights[k] = pick(r, int64(4e9), int64(6e9))
			}
		}
		n.FetchBytesPerSecond = pick(r, 0, 0, 50e6, 250e6)
	}
	return w
}

// randomWeights gives model m weights: a hub repository, URLs or a path,
// with or without a size in the catalog.
func randomWeights(r *rand.Rand, m int) (*weightsapi.Source, int64) {
	var src weightsapi.Source
	switch r.IntN(4) {
	case 0:
		src.URLs = []weightsapi.URL{{URL: fmt.Sprintf("https://h.example/m%d.gguf", m)}}
	case 1:
		src.Path = fmt.Sprintf("/models/m%d", m)
	default:
		src.Hub = &weightsapi.Hub{Repo: fmt.Sprintf("org/m%d", m), Files: []string{"m.gguf"}}
	}
	return &src, pick(r, 0, 0, int64(5e9))
}

// weightsKey is the model's weights key, "" when a node fetches none.
func weightsKey(m Model) string {
	if m.Weights == nil {
		return ""
	}
	return m.Weights.Key()
}

// ref is a slow, obvious model of the rules, recomputing everything from
// scratch, to check the planner against.
type ref struct {
	w        world
	promised map[string]float64
	gpus     map[string]int
	cpu      map[string]int
	mem      map[string]int
	counts   map[string]map[Domain]int
	limits   map[Domain]float64
}

func newRef(w world) *ref {
	r := &ref{w: w, promised: map[string]float64{}, gpus: map[string]int{}, cpu: map[string]int{},
		mem: map[string]int{}, counts: map[string]map[Domain]int{}, limits: map[Domain]float64{}}
	for _, b := range w.fac.Budgets {
		r.limits[b.Domain] = w.fac.Limit(b)
	}
	for _, n := range w.fleet.Nodes {
		r.gpus[n.Name] = n.GPUs[0].Free
		r.cpu[n.Name] = n.CPUCores
		r.mem[n.Name] = n.MemoryGB
	}
	return r
}

func (r *ref) node(name string) *Node {
	for i := range r.w.fleet.Nodes {
		if r.w.fleet.Nodes[i].Name == name {
			return &r.w.fleet.Nodes[i]
		}
	}
	panic(name)
}

// draw is a domain's draw with extra watts promised on some nodes.
func (r *ref) draw(d Domain, extra map[string]float64) float64 {
	sum := 0.0
	for i := range r.w.fleet.Nodes {
		n := &r.w.fleet.Nodes[i]
		if n.Location.Get(d.Level) == d.Value {
			sum += max(n.MeasuredWatts, n.BaseWatts+r.promised[n.Name]+extra[n.Name])
		}
	}
	return sum
}

func (r *ref) held(n *Node) bool {
	_, ok := r.w.fac.HoldOn(n.Location)
	return ok
}

// fits checks the node-level rules for one shard of p on n.
func (r *ref) fits(n *Node, p Profile) bool {
	pool := p.Pool
	if pool == "" {
		pool = DefaultPool
	}
	return (pool == AllPools || n.Pool == pool) && n.GPUs[0].Model == p.GPU && strings.HasPrefix(n.Fabric, p.Fabric) &&
		!r.held(n) && r.gpus[n.Name] >= p.GPUs && r.cpu[n.Name] >= p.CPUCores && r.mem[n.Name] >= p.MemoryGB
}

// budgetsHold checks every budget against extra promised draw; it returns
// the least headroom left.
func (r *ref) budgetsHold(extra map[string]float64) (bool, float64) {
	head := math.Inf(1)
	for d, lim := range r.limits {
		touched := false
		for name := range extra {
			if r.node(name).Location.Get(d.Level) == d.Value {
				touched = true
			}
		}
		if !touched {
			continue
		}
		after := r.draw(d, extra)
		if after > lim {
			return false, 0
		}
		head = min(head, lim-after)
	}
	return true, head
}

func (r *ref) spread(model string, p Profile, nodes []string) [NumLevels]int32 {
	var sv [NumLevels]int32
	for i, l := range p.Spread {
		for _, name := range nodes {
			if v := r.node(name).Location.Get(l); v != "" {
				sv[i] = max(sv[i], int32(r.counts[model][Domain{l, v}]))
			}
		}
	}
	return sv
}

// fetch is the reference estimate of how long node n needs before a
// replica of m could load there: 0 when it holds m's weights (or m has no
// weights to fetch), else their size over its rate, +Inf for an unknown
// size; the size is the largest any node holds, else the catalog's.
func (r *ref) fetch(m Model, n *Node) float64 {
	key := weightsKey(m)
	if key == "" {
		return 0
	}
	if _, ok := n.Weights[key]; ok {
		return 0
	}
	var size int64
	for _, o := range r.w.fleet.Nodes {
		size = max(size, o.Weights[key])
	}
	if size == 0 {
		size = m.WeightsBytes
	}
	if size == 0 {
		return math.Inf(1)
	}
	rate := n.FetchBytesPerSecond
	if rate == 0 {
		rate = DefaultFetchBytesPerSecond
	}
	return float64(size) / rate
}

// bestSingle is the reference placement of a single-node profile: among
// the nodes that fit, fewest of the model at the spread levels, then
// soonest ready, then most headroom, then best fit, then name.
func (r *ref) bestSingle(m Model, p Profile) (string, bool) {
	model := m.Name
	var best string
	var bsv [NumLevels]int32
	var bhead, bfetch float64
	var bfree int
	for i := range r.w.fleet.Nodes {
		n := &r.w.fleet.Nodes[i]
		if !r.fits(n, p) {
			continue
		}
		ok, head := r.budgetsHold(map[string]float64{n.Name: p.ShardWatts(n.GPUs[0].PowerLimitWatts)})
		if !ok {
			continue
		}
		sv := r.spread(model, p, []string{n.Name})
		free := r.gpus[n.Name] - p.GPUs
		fetch := r.fetch(m, n)
		better := best == ""
		if !better {
			c := rankCmp(&sv, &bsv, cmp.Compare(fetch, bfetch), head, bhead, free, bfree)
			better = c < 0 || c == 0 && n.Name < best
		}
		if better {
			best, bsv, bhead, bfetch, bfree = n.Name, sv, head, fetch, free
		}
	}
	return best, best != ""
}

// gangDomains returns, per keep_within domain, whether some fabric in it has
// enough nodes that fit (ignoring budgets), and the domain's spread vector
// (constant over the domain when every spread level encloses keep_within).
func (r *ref) gangDomains(model string, p Profile) map[string][NumLevels]int32 {
	groups := map[[2]string][]string{}
	for i := range r.w.fleet.Nodes {
		n := &r.w.fleet.Nodes[i]
		if v := n.Location.Get(p.KeepWithin); v != "" && r.fits(n, p) {
			k := [2]string{v, n.Fabric}
			groups[k] = append(groups[k], n.Name)
		}
	}
	out := map[string][NumLevels]int32{}
	for k, names := range groups {
		if len(names) >= p.Nodes {
			out[k[0]] = r.spread(model, p, names[:1])
		}
	}
	return out
}

// checkGangReady checks that no keep_within domain and fabric as well
// spread as the multi-node decision d (budgets aside) could be ready
// sooner, and reports whether some but not all of d's nodes hold the
// weights.
func checkGangReady(t *testing.T, where string, ref *ref, m Model, prof Profile, d Decision, doms map[string][NumLevels]int32, got [NumLevels]int32) bool {
	t.Helper()
	gotReady := ref.readiness(m, shardNodes(d))
	for g, rd := range ref.gangReadiness(m, prof) {
		if sv := doms[g[0]]; sameVec(&sv, &got) && rd.less(gotReady) {
			t.Fatalf("%s: readiness %v, but %s=%s on fabric %q is ready with %v", where, gotReady, prof.KeepWithin, g[0], g[1], rd)
		}
	}
	return gotReady.absent > 0 && gotReady.absent < prof.Nodes
}

// TestPlaceGangReadiness places random worlds without budgets, their
// models multi-node and with weights some nodes hold: among the places as
// well spread, every multi-node replica goes where it is ready soonest.
func TestPlaceGangReadiness(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	checked, mixed := 0, 0
	for iter := range 400 {
		w := randomWorld(r, false)
		for i := range w.cat.Models {
			m := &w.cat.Models[i]
			for j := range m.Profiles {
				p := &m.Profiles[j]
				if p.Nodes == 1 {
					p.Nodes, p.KeepWithin = 2+r.IntN(2), pick(r, LevelRoom, LevelRow, LevelRack)
				}
				p.Spread = slices.DeleteFunc(p.Spread, func(l Level) bool { return l > p.KeepWithin || l == LevelPDU })
			}
		}
		p, err := NewPlanner(w.fleet, w.fac, nil)
		if err != nil {
			t.Fatal(err)
		}
		ref := newRef(w)
		for _, m := range w.cat.Models {
			for i := range m.Replicas {
				d := p.Place(Request{Replica: ReplicaID(m.Name, i), Model: m})
				if !d.Placed {
					continue
				}
				prof := m.Profiles[slices.IndexFunc(m.Profiles, func(p Profile) bool { return p.Name == d.Profile })]
				where := fmt.Sprintf("world %d, %s: %v", iter, d.Replica, shardNodes(d))
				checkDecision(t, where, ref, d, prof)
				if spreadEnclosing(prof) {
					checked++
					got := ref.spread(m.Name, prof, shardNodes(d))
					if checkGangReady(t, where, ref, m, prof, d, ref.gangDomains(m.Name, prof), got) {
						mixed++
					}
				}
				if err := p.Commit(d); err != nil {
					t.Fatalf("%s: commit: %v", where, err)
				}
				ref.commit(d)
			}
		}
	}
	t.Logf("%d multi-node decisions checked, %d of them on nodes some of which hold the weights", checked, mixed)
	if checked < 300 || mixed < 30 {
		t.Errorf("generator too weak: %d checked, %d mixed", checked, mixed)
	}
}

// ready is a multi-node place's readiness as the planner ranks it: the
// slowest node's fetch, the nodes that must fetch, the fetches' sum.
type ready struct {
	max    float64
	absent int
	sum    float64
}

func (a ready) less(b ready) bool {
	return cmp.Or(cmp.Compare(a.max, b.max), cmp.Compare(a.absent, b.absent), cmp.Compare(a.sum, b.sum)) < 0
}

func (r *ref) readiness(m Model, nodes []string) ready {
	var out ready
	for _, name := range nodes {
		f := r.fetch(m, r.node(name))
		out.max = max(out.max, f)
		out.sum += f
		if f > 0 {
			out.absent++
		}
	}
	return out
}

// gangReadiness returns, per keep_within domain and fabric with enough
// nodes that fit (ignoring budgets), the best readiness a replica there
// could have: its p.Nodes soonest ready nodes.
func (r *ref) gangReadiness(m Model, p Profile) map[[2]string]ready {
	groups := map[[2]string][]string{}
	for i := range r.w.fleet.Nodes {
		n := &r.w.fleet.Nodes[i]
		if v := n.Location.Get(p.KeepWithin); v != "" && r.fits(n, p) {
			k := [2]string{v, n.Fabric}
			groups[k] = append(groups[k], n.Name)
		}
	}
	out := map[[2]string]ready{}
	for k, names := range groups {
		if len(names) < p.Nodes {
			continue
		}
		slices.SortFunc(names, func(a, b string) int { return cmp.Compare(r.fetch(m, r.node(a)), r.fetch(m, r.node(b))) })
		out[k] = r.readiness(m, names[:p.Nodes])
	}
	return out
}

func (r *ref) commit(d Decision) {
	seen := map[Domain]bool{}
	for _, s := range d.Shards {
		r.promised[s.Node] += s.Watts
		r.gpus[s.Node] -= s.GPUs
		r.cpu[s.Node] -= s.CPUCores
		r.mem[s.Node] -= s.MemoryGB
		for _, l := range Levels() {
			if v := r.node(s.Node).Location.Get(l); v != "" {
				seen[Domain{l, v}] = true
			}
		}
	}
	if r.counts[d.Model] == nil {
		r.counts[d.Model] = map[Domain]int{}
	}
	for dom := range seen {
		r.counts[d.Model][dom]++
	}
}

// spreadEnclosing reports whether every spread level of p encloses its
// keep_within level in the site > room > row > rack tree.
func spreadEnclosing(p Profile) bool {
	if p.KeepWithin == LevelPDU {
		return false
	}
	for _, l := range p.Spread {
		if l > p.KeepWithin {
			return false
		}
	}
	return true
}

func TestPlaceProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	decisions, placed, gangs, gangSpread, gangMixed := 0, 0, 0, 0, 0
	warmSingle, warmHeld := 0, 0
	for iter := range 1000 {
		budgets := iter%4 != 0 // every fourth world has no budgets: gang spread is checked exactly there
		w := randomWorld(r, budgets)
		p, err := NewPlanner(w.fleet, w.fac, nil)
		if err != nil {
			t.Fatal(err)
		}
		ref := newRef(w)
		for _, m := range w.cat.Models {
			for i := range m.Replicas {
				d := p.Place(Request{Replica: ReplicaID(m.Name, i), Model: m})
				decisions++
				where := fmt.Sprintf("world %d, %s: %v", iter, d.Replica, shardNodes(d))
				// Profiles before the chosen one cannot fit (exactly known for single-node ones).
				for _, prof := range m.Profiles {
					if d.Placed && prof.Name == d.Profile {
						break
					}
					if prof.Nodes == 1 {
						if n, ok := ref.bestSingle(m, prof); ok {
							t.Fatalf("%s: profile %s not placed, but %s fits", where, prof.Name, n)
						}
					}
				}
				if !d.Placed {
					if len(d.Rejections) == 0 {
						t.Errorf("%s: not placed and no reason", where)
					}
					continue
				}
				placed++
				prof := m.Profiles[slices.IndexFunc(m.Profiles, func(p Profile) bool { return p.Name == d.Profile })]
				checkDecision(t, where, ref, d, prof)
				if prof.Nodes == 1 {
					want, _ := ref.bestSingle(m, prof)
					if d.Shards[0].Node != want {
						t.Fatalf("%s: got %s, want %s (reasons %q)", where, d.Shards[0].Node, want, d.Reasons())
					}
					if k := weightsKey(m); k != "" {
						warmSingle++
						if _, ok := ref.node(want).Weights[k]; ok {
							warmHeld++
						}
					}
				} else {
					gangs++
					if !budgets && spreadEnclosing(prof) {
						gangSpread++
						doms := ref.gangDomains(m.Name, prof)
						got := ref.spread(m.Name, prof, shardNodes(d))
						for dom, sv := range doms {
							if rankCmp(&sv, &got, 0, 0, 0, 0, 0) < 0 {
								t.Fatalf("%s: spread %v, but %s=%s fits with %v", where, got, prof.KeepWithin, dom, sv)
							}
						}
						if checkGangReady(t, where, ref, m, prof, d, doms, got) {
							gangMixed++
						}
					}
				}
				if err := p.Commit(d); err != nil {
					t.Fatalf("%s: commit: %v", where, err)
				}
				ref.commit(d)
			}
		}
		// The planner's incremental draws match a recount.
		for _, u := range p.Budgeted() {
			if want := ref.draw(u.Domain, nil); u.DrawWatts != want {
				t.Fatalf("world %d: %s draw: got %v, want %v", iter, u.Domain, u.DrawWatts, want)
			}
		}
	}
	t.Logf("%d decisions, %d placed, %d multi-node, %d multi-node checked for spread and readiness (%d with some nodes holding the weights); %d single-node with weights to fetch, %d of them on a node that holds them",
		decisions, placed, gangs, gangSpread, gangMixed, warmSingle, warmHeld)
	if placed < decisions/4 || gangs < 50 || gangSpread < 5 {
		t.Errorf("generator too harsh: %d of %d placed, %d multi-node", placed, decisions, gangs)
	}
	if warmSingle < 200 || warmHeld < warmSingle/4 || warmHeld == warmSingle {
		t.Errorf("generator does not exercise weights: %d single-node decisions with weights, %d on a node holding them; %d gangs with some nodes holding them",
			warmSingle, warmHeld, gangMixed)
	}
}

// checkDecision checks the invariants of a placed decision against the
// reference state before it.
func checkDecision(t *testing.T, where string, ref *ref, d Decision, prof Profile) {
	t.Helper()
	if len(d.Shards) != prof.Nodes {
		t.Fatalf("%s: %d shards, want %d", where, len(d.Shards), prof.Nodes)
	}
	extra := map[string]float64{}
	fab := ref.node(d.Shards[0].Node).Fabric
	total := 0.0
	for _, s := range d.Shards {
		n := ref.node(s.Node)
		if _, dup := extra[s.Node]; dup {
			t.Fatalf("%s: node %s twice", where, s.Node)
		}
		if !ref.fits(n, prof) {
			t.Fatalf("%s: %s does not fit (held %v)", where, s.Node, ref.held(n))
		}
		if want := prof.ShardWatts(n.GPUs[0].PowerLimitWatts); s.Watts != want {
			t.Fatalf("%s: shard watts %v, want %v", where, s.Watts, want)
		}
		if prof.Nodes > 1 {
			if n.Fabric != fab {
				t.Fatalf("%s: shards on fabrics %q and %q", where, fab, n.Fabric)
			}
			if v := n.Location.Get(prof.KeepWithin); v == "" || v != ref.node(d.Shards[0].Node).Location.Get(prof.KeepWithin) {
				t.Fatalf("%s: shards not within one %s", where, prof.KeepWithin)
			}
		}
		extra[s.Node] = s.Watts
		total += s.Watts
	}
	if d.Watts != total {
		t.Fatalf("%s: watts %v, want %v", where, d.Watts, total)
	}
	if ok, _ := ref.budgetsHold(extra); !ok {
		t.Fatalf("%s: a budget is exceeded", where)
	}
	pin := LevelPDU
	if prof.Nodes > 1 {
		pin = prof.KeepWithin
	}
	if got, ok := d.Domain.Get(pin); !ok || got != ref.node(d.Shards[0].Node).Location.Get(pin) {
		t.Fatalf("%s: scope %v does not pin %s", where, d.Domain, pin)
	}
}

func TestPlanDeterministic(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	ignore := cmpopts.IgnoreFields(Plan{}, "Holds")
	for iter := range 100 {
		w := randomWorld(r, iter%2 == 0)
		a, err := PlanCatalog(w.fleet, w.fac, w.cat)
		if err != nil {
			t.Fatal(err)
		}
		b, err := PlanCatalog(w.fleet, w.fac, w.cat)
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(a, b, ignore); diff != "" {
			t.Fatalf("world %d: same input, different plans (-first +second):\n%s", iter, diff)
		}
		// Input order does not matter either.
		r.Shuffle(len(w.fleet.Nodes), func(i, j int) { w.fleet.Nodes[i], w.fleet.Nodes[j] = w.fleet.Nodes[j], w.fleet.Nodes[i] })
		r.Shuffle(len(w.fac.Budgets), func(i, j int) { w.fac.Budgets[i], w.fac.Budgets[j] = w.fac.Budgets[j], w.fac.Budgets[i] })
		r.Shuffle(len(w.fac.Holds), func(i, j int) { w.fac.Holds[i], w.fac.Holds[j] = w.fac.Holds[j], w.fac.Holds[i] })
		c, err := PlanCatalog(w.fleet, w.fac, w.cat)
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(a, c, ignore); diff != "" {
			t.Fatalf("world %d: shuffled input, different plans (-first +shuffled):\n%s", iter, diff)
		}
	}
}

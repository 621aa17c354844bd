package facility

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// placeAll places replicas of m one by one until one does not fit, and
// returns how many fitted and the last decision (the refused one).
func placeAll(t *testing.T, p *Planner, m Model, most int) (int, Decision) {
	t.Helper()
	for i := range most {
		d := p.Place(Request{Replica: ReplicaID(m.Name, i), Model: m})
		if !d.Placed {
			return i, d
		}
		if err := p.Commit(d); err != nil {
			t.Fatal(err)
		}
	}
	return most, Decision{}
}

// onePDU is two nodes of 8 "H" (700 W) on pdu p1 in rack k1, 1000 W base each.
func onePDU() []Node {
	return []Node{tnode("n1", "r1", "k1", "p1"), tnode("n2", "r1", "k1", "p1")}
}

func learned(model, profile string, w float64, samples int) Learned {
	return Learned{LearnedKey: LearnedKey{Model: model, Profile: profile, GPU: "H"}, Watts: w, Samples: samples}
}

func TestMeasuredAdmitsMore(t *testing.T) {
	t.Parallel()
	m := tmodel("m", tprof("p", 1))
	m.Profiles[0].Spread = []Level{}
	fleet := Fleet{Nodes: onePDU(), Learned: []Learned{learned("m", "p", 300, 500)}}
	// 8000 W: 2000 W base, 6000 W for shards: 8 declared (700 W), 18 measured (330 W).
	count := func(mode CountMode) (int, Decision, *Planner) {
		b := budget("pdu=p1", 8000)
		b.Count = mode
		p, err := NewPlanner(fleet, Facility{Budgets: []Budget{b}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, last := placeAll(t, p, m, 100)
		return n, last, p
	}
	nd, lastD, _ := count(CountDeclared)
	if nd != 8 {
		t.Errorf("declared: %d replicas, want 8", nd)
	}
	if want := "over budget: pdu=p1 would draw 8.3 kW of 8.0 kW"; !slices.Contains(lastD.Reasons(), want) {
		t.Errorf("declared: reasons %q, want %q", lastD.Reasons(), want)
	}
	nm, lastM, p := count(CountMeasured)
	if nm != 16 {
		t.Errorf("measured: %d replicas, want 16 (every GPU)", nm)
	}
	if want := "too few free H (needs 1, best node has 0)"; !slices.Contains(lastM.Reasons(), want) {
		t.Errorf("measured: reasons %q, want %q", lastM.Reasons(), want)
	}
	u, _ := p.Usage(mustDomain("pdu=p1"))
	want := DomainUsage{Domain: mustDomain("pdu=p1"), Budgeted: true, CapWatts: 8000, LimitWatts: 8000,
		DrawWatts: 2000 + 16*330, Count: CountMeasured, DeclaredWatts: 2000 + 16*700, Nodes: 2}
	if diff := cmp.Diff(want, u, cmpFloat); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if got, want := u.Explain(), "pdu=p1: admitted 7.3 kW measured (declared would be 13.2 kW) of 8.0 kW, not measured"; got != want {
		t.Errorf("explain: got %q, want %q", got, want)
	}

	// A tighter budget refuses in measured too, and says how it counted.
	b := budget("pdu=p1", 4000)
	b.Count = CountMeasured
	p, err := NewPlanner(fleet, Facility{Budgets: []Budget{b}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, last := placeAll(t, p, m, 100)
	if n != 6 { // 2000 + 6 × 330 = 3980
		t.Errorf("measured at 4000 W: %d replicas, want 6", n)
	}
	if want := "over budget: pdu=p1 would draw 4.3 kW of 4.0 kW, counted measured"; !slices.Contains(last.Reasons(), want) {
		t.Errorf("reasons %q, want %q", last.Reasons(), want)
	}
}

var cmpFloat = cmp.Comparer(func(a, b float64) bool { return a == b || math.Abs(a-b) < 1e-6 })

func TestMeasuredNeedsSamples(t *testing.T) {
	t.Parallel()
	m := tmodel("m", tprof("p", 1))
	m.Profiles[0].Spread = []Level{}
	for _, tc := range []struct {
		name    string
		learned []Learned
		rule    *Measured
		want    int
	}{
		{"too few samples: declared", []Learned{learned("m", "p", 300, 99)}, nil, 8},
		{"just enough samples", []Learned{learned("m", "p", 300, 100)}, nil, 16},
		{"a lower min_samples", []Learned{learned("m", "p", 300, 10)}, &Measured{Percentile: 95, Window: time.Hour, Margin: 0.1, MinSamples: 10}, 16},
		{"another profile's learned draw", []Learned{learned("m", "other", 300, 500)}, nil, 8},
		{"another GPU model's", []Learned{{LearnedKey: LearnedKey{"m", "p", "B"}, Watts: 300, Samples: 500}}, nil, 8},
		{"absurd learned watts count declared", []Learned{learned("m", "p", math.NaN(), 500)}, nil, 8},
		// learned above declared counts above declared: 6000 / (800 × 1.1) = 6.8
		{"learned above declared", []Learned{learned("m", "p", 800, 500)}, nil, 6},
		// a margin of 1 doubles: 6000 / 600 = 10
		{"margin 1", []Learned{learned("m", "p", 300, 500)}, &Measured{Percentile: 95, Window: time.Hour, Margin: 1, MinSamples: 1}, 10},
	} {
		b := budget("pdu=p1", 8000)
		fac := Facility{Budgets: []Budget{b}, Count: CountMeasured, Measured: tc.rule} // the facility's default
		p, err := NewPlanner(Fleet{Nodes: onePDU(), Learned: tc.learned}, fac, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := placeAll(t, p, m, 100); n != tc.want {
			t.Errorf("%s: %d replicas, want %d", tc.name, n, tc.want)
		}
	}
}

// A rack counted declared holds two PDUs counted measured: each domain
// sums with its own rule, and the tighter one stops placement.
func TestMeasuredMixedModes(t *testing.T) {
	t.Parallel()
	nodes := []Node{tnode("n1", "r1", "k1", "p1"), tnode("n2", "r1", "k1", "p2")}
	fleet := Fleet{Nodes: nodes, Learned: []Learned{learned("m", "p", 400, 1000)}}
	m := tmodel("m", tprof("p", 2)) // 1400 W declared, 880 W measured
	m.Profiles[0].Spread = []Level{}
	fleet.Learned[0].Watts = 800 // per shard of 2 GPUs: 880 W with the margin
	pdu := func(key string) Budget { b := budget(key, 4000); b.Count = CountMeasured; return b }
	rack := budget("rack=k1", 9000) // declared (the facility's default)
	p, err := NewPlanner(fleet, Facility{Budgets: []Budget{rack, pdu("pdu=p1"), pdu("pdu=p2")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// PDUs measured: (4000 − 1000) / 880 = 3 each, 6 in all; the rack
	// declared: (9000 − 2000) / 1400 = 5. The rack stops it at 5.
	n, last := placeAll(t, p, m, 100)
	if n != 5 {
		t.Errorf("%d replicas, want 5", n)
	}
	if want := "over budget: rack=k1 would draw 10.4 kW of 9.0 kW"; !slices.Contains(last.Reasons(), want) {
		t.Errorf("reasons %q, want %q", last.Reasons(), want)
	}
	us := p.Budgeted()
	got := map[string][3]float64{}
	for _, u := range us {
		got[u.Domain.String()] = [3]float64{u.DrawWatts, u.DeclaredWatts, float64(u.Count)}
	}
	// 3 on one PDU, 2 on the other (the one with more headroom first).
	want := map[string][3]float64{
		"rack=k1": {2000 + 5*1400, 2000 + 5*1400, float64(CountDeclared)},
		"pdu=p1":  {1000 + 3*880, 1000 + 3*1400, float64(CountMeasured)},
		"pdu=p2":  {1000 + 2*880, 1000 + 2*1400, float64(CountMeasured)},
	}
	if diff := cmp.Diff(want, got, cmpFloat); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}

	// The same with the rack measured too: 6 fit, the PDUs stop it.
	rack.Count = CountMeasured
	p, err = NewPlanner(fleet, Facility{Budgets: []Budget{rack, pdu("pdu=p1"), pdu("pdu=p2")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := placeAll(t, p, m, 100); n != 6 {
		t.Errorf("rack measured: %d replicas, want 6", n)
	}
}

// Running replicas count by their model, profile and shard GPU; measured
// node draw raises a node's count in both modes; Remove gives back what
// was counted.
func TestMeasuredRunningAndMeasuredDraw(t *testing.T) {
	t.Parallel()
	fleet := Fleet{Nodes: []Node{tnode("n1", "r1", "k1", "p1", measured(3000)), tnode("n2", "r1", "k1", "p1")},
		Learned: []Learned{learned("m", "p", 300, 500)}}
	b := budget("pdu=p1", 10000)
	b.Count = CountMeasured
	running := []Replica{
		{ID: "m-0", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 700, GPU: "H", GPUs: 1}}},
		{ID: "m-1", Model: "m", Profile: "p", Shards: []Shard{{Node: "n2", Watts: 700, GPU: "H", GPUs: 1}}},
		{ID: "x-0", Model: "x", Profile: "p", Shards: []Shard{{Node: "n2", Watts: 700, GPU: "H", GPUs: 1}}},
	}
	p, err := NewPlanner(fleet, Facility{Budgets: []Budget{b}}, running)
	if err != nil {
		t.Fatal(err)
	}
	// n1: max(3000, 1000 + 330) = 3000; n2: 1000 + 330 + 700 (x has
	// nothing learned) = 2030. Declared: 3000 + 1000 + 1400.
	u, _ := p.Usage(mustDomain("pdu=p1"))
	if u.DrawWatts != 5030 || u.DeclaredWatts != 5400 || u.NowWatts != 3000 || u.MeasuredNodes != 1 || u.Nodes != 2 {
		t.Errorf("usage %+v: want draw 5030, declared 5400, now 3000 on 1 of 2 nodes", u)
	}
	if got, want := u.Explain(), "pdu=p1: admitted 5.0 kW measured (declared would be 5.4 kW) of 10.0 kW, now drawing 3.0 kW on 1 of 2 nodes"; got != want {
		t.Errorf("explain: got %q, want %q", got, want)
	}
	m := tmodel("m", tprof("p", 1))
	m.Profiles[0].Spread = []Level{}
	d := p.Place(Request{Replica: "m-2", Model: m})
	if !d.Placed || d.Shards[0].Node != "n1" || d.Shards[0].Watts != 700 {
		t.Fatalf("placed %v on %v: want n1 (its measured draw covers the shard), declared watts 700", d.Placed, d.Shards)
	}
	after, err := p.After(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 1 || after[0].DrawWatts != 5030 || after[0].DeclaredWatts != 5400 {
		t.Errorf("after %+v: the measured draw covers the shard in both modes, want 5030 and 5400", after)
	}
	if _, err := p.Remove("m-1"); err != nil {
		t.Fatal(err)
	}
	if u, _ := p.Usage(mustDomain("pdu=p1")); u.DrawWatts != 4700 || u.DeclaredWatts != 4700 {
		t.Errorf("after removing m-1: draw %v, declared %v, want 4700 and 4700", u.DrawWatts, u.DeclaredWatts)
	}
}

// Multi-node replicas count each shard by the learned draw too.
func TestMeasuredGang(t *testing.T) {
	t.Parallel()
	nodes := []Node{tnode("n1", "r1", "k1", "p1"), tnode("n2", "r1", "k1", "p1"), tnode("n3", "r1", "k1", "p1")}
	prof := tprof("p", 8)
	prof.Nodes, prof.KeepWithin, prof.Spread = 2, LevelRack, []Level{}
	m := tmodel("m", prof)
	b := budget("pdu=p1", 3000+2*5600+1000) // declared: one 2-node replica (11.2 kW); measured: 2 × 2 × 3300
	fleet := Fleet{Nodes: nodes, Learned: []Learned{learned("m", "p", 3000, 500)}}
	for _, tc := range []struct {
		mode CountMode
		want int
	}{{CountDeclared, 1}, {CountMeasured, 1}} {
		b.Count = tc.mode
		p, err := NewPlanner(fleet, Facility{Budgets: []Budget{b}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		d := p.Place(Request{Replica: "m-0", Model: m})
		if !d.Placed {
			t.Fatalf("%s: not placed: %q", tc.mode, d.Reasons())
		}
		after, _ := p.After(d)
		wantDraw := 3000 + 2*5600.0
		if tc.mode == CountMeasured {
			wantDraw = 3000 + 2*3300
		}
		if len(after) != 1 || math.Abs(after[0].DrawWatts-wantDraw) > 1e-6 || after[0].DeclaredWatts != 3000+2*5600 {
			t.Errorf("%s: after %+v, want draw %v", tc.mode, after, wantDraw)
		}
	}
}

func TestParseMeasured(t *testing.T) {
	t.Parallel()
	src := `count = "measured"
measured {
  percentile  = 99
  window      = "30m"
  margin      = 0.2
  min_samples = 60
}
budget "pdu=p1" { watts = 17300 }
budget "rack=k1" {
  watts = 30000
  count = "declared"
}
`
	fac, err := ParseFacility("facility.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if fac.Count != CountMeasured || fac.CountOf(fac.Budgets[0]) != CountMeasured || fac.CountOf(fac.Budgets[1]) != CountDeclared {
		t.Errorf("counts: facility %v, pdu %v, rack %v", fac.Count, fac.CountOf(fac.Budgets[0]), fac.CountOf(fac.Budgets[1]))
	}
	want := Measured{Percentile: 99, Window: 30 * time.Minute, Margin: 0.2, MinSamples: 60, Pos: Pos{"facility.hcl", 2}}
	if diff := cmp.Diff(want, fac.MeasuredRule()); diff != "" {
		t.Errorf("measured (-want +got):\n%s", diff)
	}
	// Defaults: an empty block, and none.
	fac, err = ParseFacility("facility.hcl", []byte("measured {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fac.MeasuredRule(); got.Percentile != 95 || got.Window != time.Hour || got.Margin != 0.1 || got.MinSamples != 100 {
		t.Errorf("defaults: %+v", got)
	}
	if fac.CountOf(Budget{}) != CountDeclared {
		t.Errorf("default count: %v", fac.CountOf(Budget{}))
	}
	if got := (Facility{}).MeasuredRule(); got != DefaultMeasured() {
		t.Errorf("no block: %+v", got)
	}

	fleet, err := ParseFleet("fleet.hcl", []byte(`node "n1" {
  gpu "H" {
    count = 8
    power_limit = 700
  }
}
learned "m" "p" {
  gpu     = "H"
  watts   = 310.5
  samples = 4000
}
`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Learned{{LearnedKey: LearnedKey{"m", "p", "H"}, Watts: 310.5, Samples: 4000, Pos: Pos{"fleet.hcl", 7}}}; !cmp.Equal(want, fleet.Learned) {
		t.Errorf("learned: %+v", fleet.Learned)
	}
}

func TestParseMeasuredErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, src, want string
	}{
		{"facility.hcl", `count = "guessed"`, `facility.hcl:1: count: "guessed": want "declared" or "measured"`},
		{"facility.hcl", "budget \"pdu=p\" {\n  watts = 1\n  count = \"x\"\n}", `facility.hcl:3: count: "x": want "declared" or "measured"`},
		{"facility.hcl", "measured {\n  percentile = 40\n}", "facility.hcl:2: measured: percentile must be from 50 to 100, got 40"},
		{"facility.hcl", "measured {\n  percentile = 101\n}", "facility.hcl:2: measured: percentile must be from 50 to 100, got 101"},
		{"facility.hcl", "measured {\n  window = \"10s\"\n}", "facility.hcl:2: measured: window must be from 1m to 168h, got 10s"},
		{"facility.hcl", "measured {\n  window = \"soon\"\n}", `facility.hcl:2: measured: window: "soon" is not a duration`},
		{"facility.hcl", "measured {\n  margin = -0.1\n}", "facility.hcl:2: measured: margin must be from 0 to 1, got -0.1"},
		{"facility.hcl", "measured {\n  min_samples = 0\n}", "facility.hcl:2: measured: min_samples must be between 1 and 1000000000, got 0"},
		{"facility.hcl", "measured {\n  percentil = 90\n}", "facility.hcl:2: "},
		{"facility.hcl", "measured {}\nmeasured {}", "facility.hcl:2: "},
		{"fleet.hcl", "learned \"m\" \"p\" {\n  gpu = \"H\"\n  watts = -1\n  samples = 1\n}", "fleet.hcl:3: watts must not be negative, got -1"},
		{"fleet.hcl", "learned \"m\" \"p\" {\n  gpu = \"H\"\n  watts = 1\n  samples = -1\n}", "fleet.hcl:4: samples must not be negative, got -1"},
		{"fleet.hcl", "learned \"m\" \"p\" {\n  gpu = \"\"\n  watts = 1\n  samples = 1\n}", "fleet.hcl:2: learned m/p on : gpu must name a GPU model"},
		{"fleet.hcl", "learned \"m x\" \"p\" {\n  gpu = \"H\"\n  watts = 1\n  samples = 1\n}", "fleet.hcl:1: learned m x/p on H: model name"},
		{"fleet.hcl", "learned \"m\" \"p\" {\n  watts = 1\n  samples = 1\n}", "fleet.hcl:1: "},
		{"fleet.hcl", "learned \"m\" \"p\" {\n  gpu = \"H\"\n  watts = 1\n  samples = 1\n}\nlearned \"m\" \"p\" {\n  gpu = \"H\"\n  watts = 2\n  samples = 1\n}",
			"fleet.hcl:6: learned m/p on H: duplicate (first at fleet.hcl:1)"},
	} {
		var err error
		if tc.file == "fleet.hcl" {
			_, err = ParseFleet(tc.file, []byte(tc.src))
		} else {
			_, err = ParseFacility(tc.file, []byte(tc.src))
		}
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.src, tc.want)
			continue
		}
		if !containsLine(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant a line starting %q", tc.src, err, tc.want)
		}
	}
}

// Random worlds with random count modes and learned draws: every placed
// decision keeps every budget within its limit as that budget counts, and
// the planner's draws match a recount in both modes.
func TestMeasuredProperties(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	placed, measuredDoms := 0, 0
	for iter := range 300 {
		w := randomWorld(r, true)
		w.fac.Count = pick(r, CountDefault, CountDeclared, CountMeasured)
		for i := range w.fac.Budgets {
			w.fac.Budgets[i].Count = pick(r, CountDefault, CountDeclared, CountMeasured)
		}
		rule := Measured{Percentile: 95, Window: time.Hour, Margin: pick(r, 0, 0.1, 0.5), MinSamples: 50}
		w.fac.Measured = &rule
		for _, m := range w.cat.Models {
			for _, p := range m.Profiles {
				if r.IntN(3) > 0 {
					w.fleet.Learned = append(w.fleet.Learned, Learned{LearnedKey: LearnedKey{m.Name, p.Name, p.GPU},
						Watts: float64(100 * (1 + r.IntN(40))), Samples: pick(r, 10, 60, 1000)})
				}
			}
		}
		p, err := NewPlanner(w.fleet, w.fac, nil)
		if err != nil {
			t.Fatal(err)
		}
		table := countedTable(w.fleet.Learned, rule)
		mode := map[Domain]CountMode{}
		for _, b := range w.fac.Budgets {
			mode[b.Domain] = w.fac.CountOf(b)
			if mode[b.Domain] == CountMeasured {
				measuredDoms++
			}
		}
		promised := map[string][2]float64{}
		recount := func(d Domain, m CountMode, extra map[string][2]float64) float64 {
			i := 0
			if m == CountMeasured {
				i = 1
			}
			sum := 0.0
			for _, n := range w.fleet.Nodes {
				if n.Location.Get(d.Level) == d.Value {
					sum += max(n.MeasuredWatts, n.BaseWatts+promised[n.Name][i]+extra[n.Name][i])
				}
			}
			return sum
		}
		for _, m := range w.cat.Models {
			for i := range m.Replicas {
				d := p.Place(Request{Replica: ReplicaID(m.Name, i), Model: m})
				if !d.Placed {
					continue
				}
				placed++
				extra := map[string][2]float64{}
				for _, s := range d.Shards {
					extra[s.Node] = counted(table, LearnedKey{m.Name, d.Profile, s.GPU}, s.Watts)
				}
				after, err := p.After(d)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range w.fac.Budgets {
					touched := false
					for name := range extra {
						for _, n := range w.fleet.Nodes {
							if n.Name == name && n.Location.Get(b.Domain.Level) == b.Domain.Value {
								touched = true
							}
						}
					}
					if !touched {
						continue
					}
					got := recount(b.Domain, mode[b.Domain], extra)
					if got > w.fac.Limit(b)+1e-6 {
						t.Fatalf("world %d, %s: %s (%s) would draw %v of %v", iter, d.Replica, b.Domain, mode[b.Domain], got, w.fac.Limit(b))
					}
					k := slices.IndexFunc(after, func(u DomainUsage) bool { return u.Domain == b.Domain })
					if k < 0 || math.Abs(after[k].DrawWatts-got) > 1e-6 || math.Abs(after[k].DeclaredWatts-recount(b.Domain, CountDeclared, extra)) > 1e-6 {
						t.Fatalf("world %d, %s: After for %s is %+v, want draw %v", iter, d.Replica, b.Domain, after, got)
					}
				}
				if err := p.Commit(d); err != nil {
					t.Fatal(err)
				}
				for node, e := range extra {
					pr := promised[node]
					promised[node] = [2]float64{pr[0] + e[0], pr[1] + e[1]}
				}
			}
		}
		for _, u := range p.Budgeted() {
			if want := recount(u.Domain, mode[u.Domain], nil); math.Abs(u.DrawWatts-want) > 1e-6 {
				t.Fatalf("world %d: %s draw %v, recount %v", iter, u.Domain, u.DrawWatts, want)
			}
			if want := recount(u.Domain, CountDeclared, nil); math.Abs(u.DeclaredWatts-want) > 1e-6 {
				t.Fatalf("world %d: %s declared %v, recount %v", iter, u.Domain, u.DeclaredWatts, want)
			}
			if !strings.HasPrefix(u.Explain(), u.Domain.String()+": admitted ") {
				t.Fatalf("explain %q", u.Explain())
			}
		}
	}
	t.Logf("%d placed, %d measured budgets", placed, measuredDoms)
	if placed < 500 || measuredDoms < 100 {
		t.Errorf("generator too harsh: %d placed, %d measured budgets", placed, measuredDoms)
	}
}

// CheckCatalog counts a shard as each budget would: a profile too big
// for a PDU declared fits it measured, once enough is learned.
func TestCheckCatalogMeasured(t *testing.T) {
	t.Parallel()
	cat := Catalog{Models: []Model{tmodel("m", tprof("p", 8))}} // 5600 W declared
	b := budget("pdu=p1", 6000)                                 // 2000 W base: 4000 W left
	fleet := Fleet{Nodes: onePDU()}
	if err := CheckCatalog(fleet, Facility{Budgets: []Budget{b}}, cat); err == nil || !strings.Contains(err.Error(), "over budget: pdu=p1 would draw 7.6 kW of 6.0 kW with nothing else running") {
		t.Errorf("declared: %v", err)
	}
	b.Count = CountMeasured
	if err := CheckCatalog(fleet, Facility{Budgets: []Budget{b}}, cat); err == nil {
		t.Error("measured, nothing learned: no error")
	}
	fleet.Learned = []Learned{learned("m", "p", 3000, 500)} // 3300 W counted
	if err := CheckCatalog(fleet, Facility{Budgets: []Budget{b}}, cat); err != nil {
		t.Errorf("measured, learned: %v", err)
	}
}

package facility

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tnode is a node in site s, room a, with 8 free GPUs "H" of 700 W, 64
// cores, 512 GB, 1000 W base, on fabric ib-1.
func tnode(name, row, rack, pdu string, opts ...func(*Node)) Node {
	n := Node{
		Name: name, Pool: DefaultPool, Location: Location{Site: "s", Room: "a", Row: row, Rack: rack, PDU: pdu},
		CPUCores: 64, MemoryGB: 512, BaseWatts: 1000, Fabric: "ib-1",
		GPUs: []GPU{{Model: "H", Count: 8, Free: 8, PowerLimitWatts: 700}},
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func free(k int) func(*Node)         { return func(n *Node) { n.GPUs[0].Free = k } }
func measured(w float64) func(*Node) { return func(n *Node) { n.MeasuredWatts = w } }
func fabric(f string) func(*Node)    { return func(n *Node) { n.Fabric = f } }
func tprof(name string, gpus int) Profile {
	return Profile{Name: name, Engine: "vllm", GPU: "H", GPUs: gpus, Nodes: 1, Spread: []Level{LevelRack, LevelPDU}, Weight: 1}
}
func tmodel(name string, ps ...Profile) Model { return Model{Name: name, Replicas: 1, Profiles: ps} }
func budget(key string, w float64) Budget     { return Budget{Domain: mustDomain(key), Watts: w} }
func mustDomain(key string) Domain {
	d, err := ParseDomain(key)
	if err != nil {
		panic(err)
	}
	return d
}

// fourNodes: racks k1 (n1 on p1, n2 on p2) and k2 (n3 on p3, n4 on p4), all in row r1.
func fourNodes(opts map[string][]func(*Node)) []Node {
	return []Node{
		tnode("n1", "r1", "k1", "p1", opts["n1"]...),
		tnode("n2", "r1", "k1", "p2", opts["n2"]...),
		tnode("n3", "r1", "k2", "p3", opts["n3"]...),
		tnode("n4", "r1", "k2", "p4", opts["n4"]...),
	}
}

func shardNodes(d Decision) []string {
	var out []string
	for _, s := range d.Shards {
		out = append(out, s.Node)
	}
	return out
}

func TestPlaceRules(t *testing.T) {
	t.Parallel()
	watts := func(w float64) Profile { p := tprof("p", 4); p.Watts = w; return p }
	full := []func(*Node){free(0)}
	onlyN1 := map[string][]func(*Node){"n2": full, "n3": full, "n4": full}
	with := func(p Profile, f func(*Profile)) Profile { f(&p); return p }
	tests := []struct {
		name      string
		nodes     []Node
		fac       Facility
		running   []Replica
		model     Model
		wantNodes []string // nil: not placed
		wantWatts float64
		// every one of these must be among the decision's reasons
		wantReasons []string
	}{
		{
			name:  "declared watts fit exactly at the limit",
			nodes: fourNodes(onlyN1), fac: Facility{Budgets: []Budget{budget("pdu=p1", 3600)}},
			model: tmodel("m", watts(2600)), wantNodes: []string{"n1"}, wantWatts: 2600,
		},
		{
			name:  "derived watts: gpus × power limit",
			nodes: fourNodes(onlyN1), fac: Facility{Budgets: []Budget{budget("pdu=p1", 3600)}},
			model:       tmodel("m", tprof("p", 4)),
			wantReasons: []string{"over budget: pdu=p1 would draw 3.8 kW of 3.6 kW", "too few free H (needs 4, best node has 0)"},
		},
		{
			name:  "headroom shrinks the limit",
			nodes: fourNodes(onlyN1), fac: Facility{Headroom: 0.1, Budgets: []Budget{budget("pdu=p1", 4000)}},
			model: tmodel("m", watts(2600)), wantNodes: []string{"n1"}, wantWatts: 2600,
		},
		{
			name:  "one watt over the limit, told in watts when kW reads the same",
			nodes: fourNodes(onlyN1), fac: Facility{Headroom: 0.1, Budgets: []Budget{budget("pdu=p1", 4000)}},
			model:       tmodel("m", watts(2601)),
			wantReasons: []string{"over budget: pdu=p1 would draw 3601 W of 3600 W"},
		},
		{
			name:  "measured draw covers part of the shard",
			nodes: fourNodes(map[string][]func(*Node){"n1": {measured(3000)}, "n2": full, "n3": full, "n4": full}),
			fac:   Facility{Budgets: []Budget{budget("pdu=p1", 3600)}},
			// max(3000, 1000+2600) = 3600: the domain grows by 600 W only.
			model: tmodel("m", watts(2600)), wantNodes: []string{"n1"}, wantWatts: 2600,
		},
		{
			name:        "a domain over its limit by measured draw takes nothing, even at no extra draw",
			nodes:       fourNodes(map[string][]func(*Node){"n1": {measured(4000)}, "n2": full, "n3": full, "n4": full}),
			fac:         Facility{Budgets: []Budget{budget("pdu=p1", 3600)}},
			model:       tmodel("m", watts(2600)),
			wantReasons: []string{"over budget: pdu=p1 would draw 4.0 kW of 3.6 kW"},
		},
		{
			name:        "every enclosing budget counts: rack over while pdu fits",
			nodes:       fourNodes(map[string][]func(*Node){"n3": full, "n4": full}),
			fac:         Facility{Budgets: []Budget{budget("pdu=p1", 10000), budget("pdu=p2", 10000), budget("rack=k1", 4000)}},
			model:       tmodel("m", watts(2600)),
			wantReasons: []string{"over budget: rack=k1 would draw 4.6 kW of 4.0 kW"},
		},
		{
			name:        "held domain takes nothing",
			nodes:       fourNodes(map[string][]func(*Node){"n3": full, "n4": full}),
			fac:         Facility{Holds: []Hold{{Domain: mustDomain("rack=k1"), Reason: "PDU swap"}}},
			model:       tmodel("m", tprof("p", 4)),
			wantReasons: []string{"held: rack=k1 (PDU swap)", "too few free H (needs 4, best node has 0)"},
		},
		{
			name: "hold without a reason", nodes: fourNodes(onlyN1),
			fac:         Facility{Holds: []Hold{{Domain: mustDomain("pdu=p1")}}},
			model:       tmodel("m", tprof("p", 4)),
			wantReasons: []string{"held: pdu=p1"},
		},
		{
			name: "pool", nodes: fourNodes(nil),
			model:       tmodel("m", with(tprof("p", 1), func(p *Profile) { p.Pool = "batch" })),
			wantReasons: []string{"not in pool batch"},
		},
		{
			name: "pool all matches any pool", nodes: fourNodes(onlyN1),
			model:     tmodel("m", with(tprof("p", 1), func(p *Profile) { p.Pool = AllPools })),
			wantNodes: []string{"n1"}, wantWatts: 700,
		},
		{
			name: "gpu model", nodes: fourNodes(nil),
			model:       tmodel("m", with(tprof("p", 1), func(p *Profile) { p.GPU = "B" })),
			wantReasons: []string{"no B"},
		},
		{
			name: "fabric prefix", nodes: fourNodes(map[string][]func(*Node){"n2": {fabric("roce-2")}}),
			model:     tmodel("m", with(tprof("p", 1), func(p *Profile) { p.Fabric = "roce" })),
			wantNodes: []string{"n2"}, wantWatts: 700,
			wantReasons: []string{"not on a roce* fabric"},
		},
		{
			name: "cpu", nodes: fourNodes(nil),
			model:       tmodel("m", with(tprof("p", 1), func(p *Profile) { p.CPUCores = 128 })),
			wantReasons: []string{"too few free CPU cores (needs 128, best node has 64)"},
		},
		{
			name: "memory", nodes: fourNodes(nil),
			model:       tmodel("m", with(tprof("p", 1), func(p *Profile) { p.MemoryGB = 1024 })),
			wantReasons: []string{"too little free memory (needs 1024 GB, best node has 512 GB)"},
		},
		{
			name:      "spread beats headroom",
			nodes:     fourNodes(nil),
			fac:       Facility{Budgets: []Budget{budget("pdu=p3", 5000), budget("pdu=p4", 5000)}},
			running:   []Replica{{ID: "m-0", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 700}}}},
			model:     tmodel("m", tprof("p", 1)),
			wantNodes: []string{"n3"}, wantWatts: 700,
			wantReasons: []string{"spread: rack=k1 already holds 1"},
		},
		{
			name:  "second spread level decides within a rack",
			nodes: fourNodes(map[string][]func(*Node){"n3": full, "n4": full}),
			running: []Replica{
				{ID: "m-0", Model: "m", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 700}}},
			},
			model:     tmodel("m", tprof("p", 1)),
			wantNodes: []string{"n2"}, wantWatts: 700,
			wantReasons: []string{"spread: pdu=p1 already holds 1"},
		},
		{
			name:      "other models do not count for spread",
			nodes:     fourNodes(nil),
			running:   []Replica{{ID: "x-0", Model: "x", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 0}}}},
			model:     tmodel("m", tprof("p", 1)),
			wantNodes: []string{"n1"}, wantWatts: 700,
		},
		{
			name:  "headroom breaks a spread tie",
			nodes: fourNodes(nil),
			fac:   Facility{Budgets: []Budget{budget("pdu=p1", 5000), budget("pdu=p2", 5000), budget("pdu=p3", 9000), budget("pdu=p4", 5000)}},
			model: tmodel("m", tprof("p", 1)), wantNodes: []string{"n3"}, wantWatts: 700,
			wantReasons: []string{"ranked lower: 3 other nodes fit, with less power headroom or a worse GPU fit"},
		},
		{
			name:      "running draw lowers headroom",
			nodes:     fourNodes(nil),
			fac:       Facility{Budgets: []Budget{budget("pdu=p1", 9000), budget("pdu=p2", 5000), budget("pdu=p3", 5000), budget("pdu=p4", 5000)}},
			running:   []Replica{{ID: "x-0", Model: "x", Profile: "p", Shards: []Shard{{Node: "n1", Watts: 4500}}}},
			model:     tmodel("m", tprof("p", 1)),
			wantNodes: []string{"n2"}, wantWatts: 700,
		},
		{
			name:      "best GPU fit breaks a headroom tie",
			nodes:     fourNodes(map[string][]func(*Node){"n1": {free(6)}, "n2": {free(4)}, "n4": {free(5)}}),
			model:     tmodel("m", tprof("p", 4)),
			wantNodes: []string{"n2"}, wantWatts: 2800,
		},
		{
			name:      "name breaks a full tie",
			nodes:     fourNodes(nil),
			model:     tmodel("m", tprof("p", 4)),
			wantNodes: []string{"n1"}, wantWatts: 2800,
		},
		{
			name:      "first profile that fits",
			nodes:     fourNodes(nil),
			model:     tmodel("m", tprof("big", 16), tprof("small", 8)),
			wantNodes: []string{"n1"}, wantWatts: 5600,
			wantReasons: []string{"profile big: too few free H (needs 16, best node has 8)"},
		},
		{
			name:      "multi-node inside one rack",
			nodes:     fourNodes(map[string][]func(*Node){"n4": full}),
			model:     tmodel("m", with(tprof("p", 8), func(p *Profile) { p.Nodes, p.KeepWithin = 2, LevelRack })),
			wantNodes: []string{"n1", "n2"}, wantWatts: 11200,
			wantReasons: []string{"keep_within: rack=k2 has 1 node that fits, needs 2"},
		},
		{
			name:      "multi-node on one fabric",
			nodes:     fourNodes(map[string][]func(*Node){"n2": {fabric("ib-2")}}),
			model:     tmodel("m", with(tprof("p", 8), func(p *Profile) { p.Nodes, p.KeepWithin = 2, LevelRack })),
			wantNodes: []string{"n3", "n4"}, wantWatts: 11200,
			wantReasons: []string{"keep_within: rack=k1 has 2 nodes that fit but at most 1 on one fabric, needs 2"},
		},
		{
			name: "multi-node shards add up against a shared budget",
			nodes: []Node{
				tnode("n1", "r1", "k1", "p1"), tnode("n2", "r1", "k1", "p1"),
				tnode("n3", "r1", "k2", "p3", free(0)), tnode("n4", "r1", "k2", "p3", free(0)),
			},
			fac:         Facility{Budgets: []Budget{budget("pdu=p1", 2000+2*5600-1)}},
			model:       tmodel("m", with(tprof("p", 8), func(p *Profile) { p.Nodes, p.KeepWithin = 2, LevelRack })),
			wantReasons: []string{"over budget: pdu=p1 would draw 13200 W of 13199 W", "too few free H (needs 8, best node has 0)"},
		},
		{
			name: "multi-node across racks of a row, spread over rows",
			nodes: []Node{
				tnode("n1", "r1", "k1", "p1"), tnode("n2", "r1", "k2", "p2"),
				tnode("n3", "r2", "k3", "p3"), tnode("n4", "r2", "k4", "p4"),
			},
			running: []Replica{{ID: "m-0", Model: "m", Profile: "p", Shards: []Shard{{Node: "n3", Watts: 0}}}},
			model: tmodel("m", with(tprof("p", 8), func(p *Profile) {
				p.Nodes, p.KeepWithin, p.Spread = 2, LevelRow, []Level{LevelRow}
			})),
			wantNodes: []string{"n1", "n2"}, wantWatts: 11200,
			wantReasons: []string{"spread: row=r2 already holds 1"},
		},
		{
			name:        "nothing fits anywhere",
			nodes:       fourNodes(map[string][]func(*Node){"n1": full, "n2": full, "n3": full, "n4": full}),
			model:       tmodel("m", tprof("p", 1)),
			wantReasons: []string{"too few free H (needs 1, best node has 0)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Place(Fleet{Nodes: tt.nodes}, tt.fac, tt.running, Request{Replica: "m-1", Model: tt.model})
			if err != nil {
				t.Fatal(err)
			}
			if got := shardNodes(d); !slices.Equal(got, tt.wantNodes) {
				t.Errorf("nodes: got %v, want %v\nreasons: %q", got, tt.wantNodes, d.Reasons())
			}
			if d.Placed != (tt.wantNodes != nil) {
				t.Errorf("placed: got %v, want %v", d.Placed, tt.wantNodes != nil)
			}
			if d.Watts != tt.wantWatts {
				t.Errorf("watts: got %v, want %v", d.Watts, tt.wantWatts)
			}
			reasons := d.Reasons()
			for _, w := range tt.wantReasons {
				if !slices.Contains(reasons, w) {
					t.Errorf("reasons: got %q, want it to contain %q", reasons, w)
				}
			}
		})
	}
}

func TestPlaceScope(t *testing.T) {
	t.Parallel()
	nodes := []Node{
		tnode("n1", "r1", "k1", "p1"), tnode("n2", "r1", "k1", "p2"),
		tnode("n3", "r1", "k2", "p3"), tnode("n4", "r1", "k2", "p3"),
	}
	gang := func(l Level) Model {
		p := tprof("p", 8)
		p.Nodes, p.KeepWithin = 2, l
		return tmodel("m", p)
	}
	dom := func(keys ...string) Scope {
		var s Scope
		for _, k := range keys {
			s = append(s, mustDomain(k))
		}
		return s
	}
	tests := []struct {
		name  string
		nodes []Node
		model Model
		want  Scope
	}{
		{"single node: its whole location", nodes, tmodel("m", tprof("p", 1)), dom("site=s", "room=a", "row=r1", "rack=k1", "pdu=p1")},
		{"keep_within rack: down to the rack", nodes, gang(LevelRack), dom("site=s", "room=a", "row=r1", "rack=k1")},
		{"keep_within pdu: the pdu and what encloses it", nodes, gang(LevelPDU), dom("site=s", "room=a", "row=r1", "rack=k2", "pdu=p3")},
		{"keep_within row across racks: down to the row", []Node{tnode("n1", "r1", "k1", "p1"), tnode("n2", "r1", "k2", "p2")}, gang(LevelRow), dom("site=s", "room=a", "row=r1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Place(Fleet{Nodes: tt.nodes}, Facility{}, nil, Request{Replica: "m-0", Model: tt.model})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, d.Domain); diff != "" {
				t.Errorf("scope (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRejectionsListedAndSummed(t *testing.T) {
	t.Parallel()
	var nodes []Node
	var holds []Hold
	for i := range 12 {
		rack := fmt.Sprintf("k%02d", i)
		nodes = append(nodes, tnode("n"+rack, "r1", rack, "p"+rack))
		holds = append(holds, Hold{Domain: Domain{LevelRack, rack}, Reason: "work"})
	}
	d, err := Place(Fleet{Nodes: nodes}, Facility{Holds: holds}, nil, Request{Replica: "m-0", Model: tmodel("m", tprof("p", 1))})
	if err != nil {
		t.Fatal(err)
	}
	var want []Rejection
	for i := range MaxListed {
		want = append(want, Rejection{Profile: "p", Kind: KindHeld, Domain: fmt.Sprintf("rack=k%02d", i), Nodes: 1, Message: fmt.Sprintf("held: rack=k%02d (work)", i)})
	}
	want = append(want, Rejection{Profile: "p", Kind: KindHeld, Nodes: 4, Message: "held: and 4 more domains"})
	if diff := cmp.Diff(want, d.Rejections); diff != "" {
		t.Errorf("rejections (-want +got):\n%s", diff)
	}
}

func TestRejectionKindsAndCounts(t *testing.T) {
	t.Parallel()
	nodes := []Node{
		tnode("a1", "r1", "k1", "p1", func(n *Node) { n.Pool = "batch" }),
		tnode("a2", "r1", "k1", "p1", func(n *Node) { n.GPUs[0].Model = "B" }),
		tnode("a3", "r1", "k2", "p2", free(1)),
		tnode("a4", "r1", "k2", "p2", free(2)),
		tnode("a5", "r1", "k3", "p3"),
		tnode("a6", "r1", "k4", "p4"),
		tnode("a7", "r1", "k5", "p5"),
	}
	fac := Facility{
		Budgets: []Budget{budget("pdu=p4", 1500)},
		Holds:   []Hold{{Domain: mustDomain("rack=k3"), Reason: "PDU swap"}},
	}
	d, err := Place(Fleet{Nodes: nodes}, fac, nil, Request{Replica: "m-0", Model: tmodel("m", tprof("p", 4))})
	if err != nil {
		t.Fatal(err)
	}
	want := []Rejection{
		{Profile: "p", Kind: KindPool, Nodes: 1, Message: "not in pool default"},
		{Profile: "p", Kind: KindGPUModel, Nodes: 1, Message: "no H"},
		{Profile: "p", Kind: KindHeld, Domain: "rack=k3", Nodes: 1, Message: "held: rack=k3 (PDU swap)"},
		{Profile: "p", Kind: KindGPUs, Nodes: 2, Message: "too few free H (needs 4, best node has 2)"},
		{Profile: "p", Kind: KindOverBudget, Domain: "pdu=p4", Nodes: 1, Message: "over budget: pdu=p4 would draw 3.8 kW of 1.5 kW"},
	}
	if diff := cmp.Diff(want, d.Rejections); diff != "" {
		t.Errorf("rejections (-want +got):\n%s", diff)
	}
	if got := shardNodes(d); !slices.Equal(got, []string{"a7"}) {
		t.Errorf("nodes: got %v, want [a7]", got)
	}
	for _, k := range Kinds() {
		if strings.ContainsAny(k.String(), " (") {
			t.Errorf("kind %d: label %q is not a metric label", k, k)
		}
	}
}

func TestCommit(t *testing.T) {
	t.Parallel()
	nodes := fourNodes(nil)
	p, err := NewPlanner(Fleet{Nodes: nodes}, Facility{Budgets: []Budget{budget("rack=k1", 100000), budget("rack=k2", 100000)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := tmodel("m", tprof("p", 8))
	d := p.Place(Request{Replica: "m-0", Model: m})
	if err := p.Commit(d); err != nil {
		t.Fatal(err)
	}
	u, _ := p.Usage(mustDomain("rack=k1"))
	if got, want := u.DrawWatts, 2000.0+5600; got != want {
		t.Errorf("rack=k1 draw: got %v, want %v", got, want)
	}
	if got := p.Count("m", mustDomain("rack=k1")); got != 1 {
		t.Errorf("count: got %d, want 1", got)
	}
	if err := p.Commit(d); !errors.Is(err, ErrNoRoom) {
		t.Errorf("commit twice: got %v, want ErrNoRoom", err)
	}
	if err := p.Commit(Decision{Replica: "x"}); !errors.Is(err, ErrNotPlaced) {
		t.Errorf("commit unplaced: got %v, want ErrNotPlaced", err)
	}
	bad := d
	bad.Shards = []Shard{{Node: "nope"}}
	if err := p.Commit(bad); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("commit on unknown node: got %v, want ErrUnknownNode", err)
	}
	// The next replica sees the first: it spreads to the other rack.
	d2 := p.Place(Request{Replica: "m-1", Model: m})
	if got := shardNodes(d2); !slices.Equal(got, []string{"n3"}) {
		t.Errorf("second replica: got %v, want [n3]", got)
	}
	if _, err := NewPlanner(Fleet{Nodes: nodes}, Facility{}, []Replica{{ID: "r", Shards: []Shard{{Node: "zz"}}}}); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("running on unknown node: got %v, want ErrUnknownNode", err)
	}
}

func TestDraining(t *testing.T) {
	t.Parallel()
	fac := Facility{Holds: []Hold{
		{Domain: mustDomain("rack=k1"), Reason: "PDU swap", Drain: true},
		{Domain: mustDomain("pdu=p3"), Reason: "look only"},
	}}
	running := []Replica{
		{ID: "a", Shards: []Shard{{Node: "n2"}}},
		{ID: "b", Shards: []Shard{{Node: "n3"}}},
		{ID: "c", Shards: []Shard{{Node: "n4"}, {Node: "n1"}}},
	}
	p, err := NewPlanner(Fleet{Nodes: fourNodes(nil)}, fac, running)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "c"}, p.Draining()); diff != "" {
		t.Errorf("draining (-want +got):\n%s", diff)
	}
	if h, ok := fac.HoldOn(Location{Rack: "k1", PDU: "p3"}); !ok || h.Domain.Value != "k1" {
		t.Errorf("HoldOn: got %v %v, want the rack hold (coarsest first)", h, ok)
	}
}

func TestPlaceInvalidProfile(t *testing.T) {
	t.Parallel()
	bad := tprof("bad", 1)
	bad.Spread = []Level{LevelRack, LevelRack, LevelPDU, LevelRow, LevelRoom, LevelSite}
	gang := tprof("gang", 1)
	gang.Nodes, gang.KeepWithin = 2, Level(9)
	d, err := Place(Fleet{Nodes: fourNodes(nil)}, Facility{}, nil, Request{Replica: "m-0", Model: tmodel("m", bad, gang, tprof("ok", 1))})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Placed || d.Profile != "ok" {
		t.Fatalf("got placed=%v profile %q, want the valid profile placed", d.Placed, d.Profile)
	}
	var kinds []Kind
	for _, r := range d.Rejections {
		kinds = append(kinds, r.Kind)
	}
	if diff := cmp.Diff([]Kind{KindInvalid, KindInvalid}, kinds[:2]); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
}

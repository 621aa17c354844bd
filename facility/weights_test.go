package facility

import (
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/weightsapi"
)

// qwenWeights is a hub source and its key.
var qwenWeights = &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF", Files: []string{"q.gguf"}}}

func holds(key string, bytes int64) func(*Node) {
	return func(n *Node) {
		if n.Weights == nil {
			n.Weights = map[string]int64{}
		}
		n.Weights[key] = bytes
	}
}
func rate(bps float64) func(*Node) { return func(n *Node) { n.FetchBytesPerSecond = bps } }

// wmodel is a model of one single-node profile of gpus GPUs with weights.
func wmodel(w *weightsapi.Source, bytes int64, p Profile) Model {
	m := tmodel("m", p)
	m.Weights, m.WeightsBytes = w, bytes
	return m
}

// TestPlaceWeights: where weights are decides among places equal in
// spread, before power headroom; never against spread, a budget or a hold.
func TestPlaceWeights(t *testing.T) {
	t.Parallel()
	key := qwenWeights.Key()
	spreadOnly := func(p Profile) Profile { p.Spread = []Level{LevelRack}; return p }
	tests := []struct {
		name    string
		nodes   []Node
		fac     Facility
		running []Replica
		model   Model
		want    []string
	}{
		{
			"the node holding the weights, over more headroom",
			fourNodes(map[string][]func(*Node){"n3": {holds(key, 16e9)}}),
			Facility{Budgets: []Budget{budget("pdu=p3", 9000), budget("pdu=p1", 90000), budget("pdu=p2", 80000), budget("pdu=p4", 80000)}}, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)), []string{"n3"},
		},
		{
			"without weights the same fleet places by headroom",
			fourNodes(map[string][]func(*Node){"n3": {holds(key, 16e9)}}),
			Facility{Budgets: []Budget{budget("pdu=p3", 9000), budget("pdu=p1", 90000), budget("pdu=p2", 80000), budget("pdu=p4", 80000)}}, nil,
			tmodel("m", tprof("p", 1)), []string{"n1"},
		},
		{
			"a path source: nothing to fetch, places by headroom",
			fourNodes(map[string][]func(*Node){"n3": {holds(key, 16e9)}}),
			Facility{Budgets: []Budget{budget("pdu=p3", 9000), budget("pdu=p1", 90000), budget("pdu=p2", 80000), budget("pdu=p4", 80000)}}, nil,
			wmodel(&weightsapi.Source{Path: "/models/q"}, 0, tprof("p", 1)), []string{"n1"},
		},
		{
			"spread first: a rack without the model, though it must fetch",
			fourNodes(map[string][]func(*Node){"n1": {holds(key, 16e9)}, "n2": {holds(key, 16e9)}}), Facility{},
			[]Replica{{ID: "m-0", Model: "m", Profile: "p", Shards: []Shard{{Node: "n2", Watts: 700}}}},
			wmodel(qwenWeights, 0, spreadOnly(tprof("p", 1))), []string{"n3"},
		},
		{
			"a budget first: the node holding them would go over",
			fourNodes(map[string][]func(*Node){"n1": {holds(key, 16e9)}}),
			Facility{Budgets: []Budget{budget("pdu=p1", 1500)}}, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)), []string{"n2"},
		},
		{
			"a hold first",
			fourNodes(map[string][]func(*Node){"n1": {holds(key, 16e9)}}),
			Facility{Holds: []Hold{{Domain: mustDomain("rack=k1")}}}, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)), []string{"n3"},
		},
		{
			"nobody holds them, size known: the fastest fetch",
			fourNodes(map[string][]func(*Node){"n2": {rate(50e6)}, "n4": {rate(400e6)}}), Facility{}, nil,
			wmodel(qwenWeights, 16e9, tprof("p", 1)), []string{"n4"},
		},
		{
			"nobody holds them, size unknown: places as without weights",
			fourNodes(map[string][]func(*Node){"n2": {rate(50e6)}, "n4": {rate(400e6)}, "n1": {free(4)}}), Facility{}, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)), []string{"n1"},
		},
		{
			"a node holding them over a faster link, size from the fleet",
			fourNodes(map[string][]func(*Node){"n2": {holds(key, 16e9), rate(1e6)}, "n4": {rate(1e12)}}), Facility{}, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)), []string{"n2"},
		},
		{
			"other weights do not count",
			fourNodes(map[string][]func(*Node){"n3": {holds("other--m--main-0123456789", 16e9)}, "n1": {free(4)}}), Facility{}, nil,
			wmodel(qwenWeights, 16e9, tprof("p", 1)), []string{"n1"},
		},
		{
			"within one cell, the node holding them before the better fit",
			[]Node{tnode("a", "r1", "k1", "p1", free(4)), tnode("b", "r1", "k1", "p1", holds(key, 1e9))}, Facility{}, nil,
			wmodel(qwenWeights, 0, tprof("p", 4)), []string{"b"},
		},
		{
			"within one cell, a budget the node holding them would break",
			[]Node{tnode("a", "r1", "k1", "p1", measured(4000)), tnode("b", "r1", "k1", "p1", holds(key, 1e9))},
			Facility{Budgets: []Budget{budget("pdu=p1", 6000)}}, nil,
			wmodel(qwenWeights, 0, tprof("p", 4)), []string{"a"},
		},
		{
			"multi-node: the rack whose nodes hold them",
			fourNodes(map[string][]func(*Node){"n3": {holds(key, 16e9)}, "n4": {holds(key, 16e9)}}),
			Facility{Budgets: []Budget{budget("rack=k2", 20000), budget("rack=k1", 90000)}}, nil,
			wmodel(qwenWeights, 0, Profile{Name: "p", Engine: "vllm", GPU: "H", GPUs: 8, Nodes: 2, KeepWithin: LevelRack, Weight: 1}),
			[]string{"n3", "n4"},
		},
		{
			"multi-node: more of its nodes holding them, though both must fetch somewhere",
			append(fourNodes(map[string][]func(*Node){"n3": {holds(key, 16e9)}}), tnode("n5", "r1", "k1", "p5")),
			Facility{}, nil,
			wmodel(qwenWeights, 0, Profile{Name: "p", Engine: "vllm", GPU: "H", GPUs: 8, Nodes: 2, KeepWithin: LevelRack, Weight: 1}),
			[]string{"n3", "n4"},
		},
		{
			"multi-node: inside the domain, the nodes holding them",
			append(fourNodes(map[string][]func(*Node){"n2": {holds(key, 16e9)}}), tnode("n0", "r1", "k1", "p0")),
			Facility{}, nil,
			wmodel(qwenWeights, 0, Profile{Name: "p", Engine: "vllm", GPU: "H", GPUs: 8, Nodes: 2, KeepWithin: LevelRow, Weight: 1}),
			[]string{"n0", "n2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, scan := range []bool{false, true} {
				p, err := NewPlanner(Fleet{Nodes: tt.nodes}, tt.fac, tt.running)
				if err != nil {
					t.Fatal(err)
				}
				p.scanOnly = scan
				d := p.Place(Request{Replica: "m-1", Model: tt.model})
				if got := shardNodes(d); !slices.Equal(got, tt.want) {
					t.Errorf("scan %v: got %v, want %v (reasons %q)", scan, got, tt.want, d.Reasons())
				}
			}
		})
	}
}

// The estimate: nothing to fetch where the weights are; elsewhere their
// size (the largest a node reports, else the catalog's) over the node's
// rate (else 100 MB/s); unknown without a size.
func TestFetchEstimate(t *testing.T) {
	t.Parallel()
	key := qwenWeights.Key()
	for _, tt := range []struct {
		name    string
		nodes   []Node
		catalog int64
		want    []float64 // per node, in the fleet's order
	}{
		{"size from the fleet, the largest", fourNodes(map[string][]func(*Node){"n1": {holds(key, 15e9)}, "n2": {holds(key, 16e9)}, "n3": {rate(200e6)}}),
			1e9, []float64{0, 0, 80, 160}},
		{"size from the catalog", fourNodes(map[string][]func(*Node){"n3": {rate(200e6)}}), 1e9, []float64{10, 10, 5, 10}},
		{"size unknown", fourNodes(map[string][]func(*Node){"n3": {holds(key, 0)}}), 0, []float64{math.Inf(1), math.Inf(1), 0, math.Inf(1)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPlanner(Fleet{Nodes: tt.nodes}, Facility{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			m := wmodel(qwenWeights, tt.catalog, tprof("p", 1))
			k, bytes := p.weightsOf(&m)
			for i, n := range tt.nodes {
				if got := p.fetchSeconds(p.nodeIndex[n.Name], k, bytes); got != tt.want[i] {
					t.Errorf("%s: got %v s, want %v", n.Name, got, tt.want[i])
				}
			}
		})
	}
}

// A planner asked for a model whose weights changed (a reload) builds its
// shape again.
func TestShapeFollowsWeights(t *testing.T) {
	t.Parallel()
	other := &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/other", Files: []string{"o.gguf"}}}
	nodes := fourNodes(map[string][]func(*Node){"n3": {holds(qwenWeights.Key(), 1e9)}, "n4": {holds(other.Key(), 1e9)}})
	p, err := NewPlanner(Fleet{Nodes: nodes}, Facility{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		w    *weightsapi.Source
		want string
	}{{qwenWeights, "n3"}, {other, "n4"}, {nil, "n1"}, {qwenWeights, "n3"}} {
		d := p.Place(Request{Replica: "m-0", Model: wmodel(tt.w, 0, tprof("p", 1))})
		if got := shardNodes(d); !slices.Equal(got, []string{tt.want}) {
			t.Errorf("weights %v: got %v, want %s", tt.w, got, tt.want)
		}
	}
	// The same source changed in place is a new key.
	w := &weightsapi.Source{Hub: &weightsapi.Hub{Repo: qwenWeights.Hub.Repo, Files: []string{"q.gguf"}}}
	for _, tt := range []struct {
		repo, file, want string
	}{{qwenWeights.Hub.Repo, "q.gguf", "n3"}, {"org/other", "o.gguf", "n4"}} {
		w.Hub.Repo, w.Hub.Files[0] = tt.repo, tt.file
		d := p.Place(Request{Replica: "m-0", Model: wmodel(w, 0, tprof("p", 1))})
		if got := shardNodes(d); !slices.Equal(got, []string{tt.want}) {
			t.Errorf("weights %v changed in place: got %v, want %s", w, got, tt.want)
		}
	}
}

// TestExplainWeights: a decision says per chosen node what it has to
// fetch, and files the places that lost only because the weights are
// elsewhere under "weights".
func TestExplainWeights(t *testing.T) {
	t.Parallel()
	key := qwenWeights.Key()
	pdus := Facility{Budgets: []Budget{budget("pdu=p1", 90000), budget("pdu=p2", 80000), budget("pdu=p3", 9000), budget("pdu=p4", 80000)}}
	gang := Profile{Name: "p", Engine: "vllm", GPU: "H", GPUs: 8, Nodes: 2, KeepWithin: LevelRack, Weight: 1}
	tests := []struct {
		name       string
		nodes      []Node
		fac        Facility
		running    []Replica
		model      Model
		readiness  []string
		rejections []Rejection
	}{
		{
			"held on one node: the others lost on the weights alone",
			fourNodes(map[string][]func(*Node){"n3": {holds(key, 16_100_000_000)}}), pdus, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)),
			[]string{"n3: weights present, nothing to fetch"},
			[]Rejection{{Profile: "p", Kind: KindWeights, Nodes: 3,
				Message: "weights elsewhere: 3 other nodes fit but do not hold the weights (16.1 GB to fetch); the chosen node holds them"}},
		},
		{
			"held on two nodes, one other node: one lost on the weights, one on headroom",
			fourNodes(map[string][]func(*Node){"n3": {holds(key, 16_100_000_000)}, "n4": {holds(key, 16_100_000_000)}, "n2": {free(0)}}), pdus, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)),
			[]string{"n4: weights present, nothing to fetch"},
			[]Rejection{
				{Profile: "p", Kind: KindGPUs, Nodes: 1, Message: "too few free H (needs 1, best node has 0)"},
				{Profile: "p", Kind: KindWeights, Nodes: 1, Message: "weights elsewhere: 1 other node fits but does not hold the weights (16.1 GB to fetch); the chosen node holds them"},
				{Profile: "p", Kind: KindRanked, Nodes: 1, Message: "ranked lower: 1 other nodes fit, with less power headroom or a worse GPU fit"},
			},
		},
		{
			"spread before the weights: the rack holding the model is refused for spread",
			fourNodes(map[string][]func(*Node){"n1": {holds(key, 16_100_000_000)}, "n3": {holds(key, 16_100_000_000)}}), Facility{},
			[]Replica{{ID: "m-0", Model: "m", Profile: "p", Shards: []Shard{{Node: "n2", Watts: 700}}}},
			wmodel(qwenWeights, 0, tprof("p", 1)),
			[]string{"n3: weights present, nothing to fetch"},
			[]Rejection{
				{Profile: "p", Kind: KindSpread, Domain: "rack=k1", Nodes: 2, Message: "spread: rack=k1 already holds 1"},
				{Profile: "p", Kind: KindWeights, Nodes: 1, Message: "weights elsewhere: 1 other node fits but does not hold the weights (16.1 GB to fetch); the chosen node holds them"},
			},
		},
		{
			"nobody holds them, one rate: the estimate ranks nothing",
			fourNodes(nil), pdus, nil,
			wmodel(qwenWeights, 16_100_000_000, tprof("p", 1)),
			[]string{"n1: 16.1 GB to fetch, ~2 m 41 s at 100 MB/s"},
			[]Rejection{{Profile: "p", Kind: KindRanked, Nodes: 3, Message: "ranked lower: 3 other nodes fit, with less power headroom or a worse GPU fit"}},
		},
		{
			"nobody holds them, rates differ: the fastest, the others slower",
			fourNodes(map[string][]func(*Node){"n4": {rate(400e6)}, "n2": {rate(25e6)}}), pdus, nil,
			wmodel(qwenWeights, 16_100_000_000, tprof("p", 1)),
			[]string{"n4: 16.1 GB to fetch, ~41 s at 400 MB/s"},
			[]Rejection{{Profile: "p", Kind: KindRanked, Nodes: 3, Message: "ranked lower: 3 other nodes fit, with a slower fetch of the weights, less power headroom or a worse GPU fit"}},
		},
		{
			"size unknown",
			fourNodes(map[string][]func(*Node){"n2": {holds(key, 0)}}), pdus, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)),
			[]string{"n2: weights present, nothing to fetch"},
			[]Rejection{{Profile: "p", Kind: KindWeights, Nodes: 3, Message: "weights elsewhere: 3 other nodes fit but do not hold the weights; the chosen node holds them"}},
		},
		{
			"size unknown, placed where they must be fetched",
			fourNodes(map[string][]func(*Node){"n2": {holds(key, 0), free(0)}}), pdus, nil,
			wmodel(qwenWeights, 0, tprof("p", 1)),
			[]string{"n1: weights to fetch, size unknown, at 100 MB/s"},
			[]Rejection{
				{Profile: "p", Kind: KindGPUs, Nodes: 1, Message: "too few free H (needs 1, best node has 0)"},
				{Profile: "p", Kind: KindRanked, Nodes: 2, Message: "ranked lower: 2 other nodes fit, with a slower fetch of the weights, less power headroom or a worse GPU fit"},
			},
		},
		{
			"a long fetch",
			fourNodes(map[string][]func(*Node){"n1": {rate(1e6)}, "n2": {rate(1e6)}, "n3": {rate(1e6)}, "n4": {rate(1e6)}}), Facility{}, nil,
			wmodel(qwenWeights, 16_100_000_000, tprof("p", 1)),
			[]string{"n1: 16.1 GB to fetch, ~4 h 29 m at 1 MB/s"},
			[]Rejection{{Profile: "p", Kind: KindRanked, Nodes: 3, Message: "ranked lower: 3 other nodes fit, with less power headroom or a worse GPU fit"}},
		},
		{
			"a path: nothing to say",
			fourNodes(nil), pdus, nil,
			wmodel(&weightsapi.Source{Path: "/models/q"}, 0, tprof("p", 1)),
			nil,
			[]Rejection{{Profile: "p", Kind: KindRanked, Nodes: 3, Message: "ranked lower: 3 other nodes fit, with less power headroom or a worse GPU fit"}},
		},
		{
			"multi-node: the rack whose nodes hold them",
			fourNodes(map[string][]func(*Node){"n3": {holds(key, 16_100_000_000)}, "n4": {holds(key, 16_100_000_000)}}),
			Facility{Budgets: []Budget{budget("rack=k2", 20000), budget("rack=k1", 90000)}}, nil,
			wmodel(qwenWeights, 0, gang),
			[]string{"n3: weights present, nothing to fetch", "n4: weights present, nothing to fetch"},
			[]Rejection{{Profile: "p", Kind: KindWeights, Nodes: 2,
				Message: "weights elsewhere: 1 other rack fits but some of its nodes do not hold the weights (16.1 GB to fetch); the chosen nodes hold them"}},
		},
		{
			"multi-node: one of the chosen nodes must fetch",
			append(fourNodes(map[string][]func(*Node){"n3": {holds(key, 16_100_000_000)}}), tnode("n5", "r1", "k1", "p5")),
			Facility{}, nil,
			wmodel(qwenWeights, 0, gang),
			[]string{"n3: weights present, nothing to fetch", "n4: 16.1 GB to fetch, ~2 m 41 s at 100 MB/s"},
			[]Rejection{{Profile: "p", Kind: KindRanked, Nodes: 2,
				Message: "ranked lower: 1 other racks fit, with a slower fetch of the weights, less power headroom or a worse GPU fit"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, scan := range []bool{false, true} {
				p, err := NewPlanner(Fleet{Nodes: tt.nodes}, tt.fac, tt.running)
				if err != nil {
					t.Fatal(err)
				}
				p.scanOnly = scan
				d := p.Place(Request{Replica: "m-1", Model: tt.model})
				if !d.Placed {
					t.Fatalf("not placed: %q", d.Reasons())
				}
				if diff := cmp.Diff(tt.readiness, d.Readiness()); diff != "" {
					t.Errorf("scan %v: readiness (-want +got):\n%s", scan, diff)
				}
				if diff := cmp.Diff(tt.rejections, d.Rejections); diff != "" {
					t.Errorf("scan %v: rejections (-want +got):\n%s", scan, diff)
				}
			}
		})
	}
}

// The estimate's own fields, as a stored decision carries them.
func TestFetchFields(t *testing.T) {
	t.Parallel()
	key := qwenWeights.Key()
	nodes := fourNodes(map[string][]func(*Node){"n1": {free(0)}, "n2": {rate(250e6)}, "n3": {free(0), holds(key, 8e9)}, "n4": {free(0)}})
	d, err := Place(Fleet{Nodes: nodes}, Facility{}, nil, Request{Replica: "m-0", Model: wmodel(qwenWeights, 1e9, tprof("p", 1))})
	if err != nil {
		t.Fatal(err)
	}
	want := &Fetch{Key: key, Bytes: 8e9, BytesPerSecond: 250e6, Seconds: 32}
	if diff := cmp.Diff(want, d.Shards[0].Fetch); diff != "" {
		t.Errorf("fetch (-want +got):\n%s", diff)
	}
	if got, want := d.Shards[0].Fetch.String(), "8 GB to fetch, ~32 s at 250 MB/s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (Fetch{Key: key, BytesPerSecond: DefaultFetchBytesPerSecond, DefaultRate: true}).String(); got != "weights to fetch, size unknown, at 100 MB/s" {
		t.Errorf("unknown size: got %q", got)
	}
	for _, tt := range []struct {
		b    float64
		want string
	}{{512, "512 B"}, {1500, "1.5 kB"}, {100e6, "100 MB"}, {999.96e9, "1 TB"}, {16.1e9, "16.1 GB"}} {
		if got := fmtBytes(tt.b); got != tt.want {
			t.Errorf("fmtBytes(%v) = %q, want %q", tt.b, got, tt.want)
		}
	}
	for _, tt := range []struct {
		s    float64
		want string
	}{{0.2, "1 s"}, {59, "59 s"}, {60, "1 m 0 s"}, {161, "2 m 41 s"}, {3600, "1 h 0 m"}, {3601, "1 h 1 m"}, {math.Inf(1), "unknown"}} {
		if got := fmtSeconds(tt.s); got != tt.want {
			t.Errorf("fmtSeconds(%v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

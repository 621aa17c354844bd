package facility

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/weightsapi"
)

// sixNodes: racks k1 (a1 on p1, a2 on p2), k2 (b1 on p3, b2 on p4) and k3
// (c1 on p5, c2 on p6), all in row r1.
func sixNodes(opts map[string][]func(*Node)) []Node {
	return []Node{
		tnode("a1", "r1", "k1", "p1", opts["a1"]...), tnode("a2", "r1", "k1", "p2", opts["a2"]...),
		tnode("b1", "r1", "k2", "p3", opts["b1"]...), tnode("b2", "r1", "k2", "p4", opts["b2"]...),
		tnode("c1", "r1", "k3", "p5", opts["c1"]...), tnode("c2", "r1", "k3", "p6", opts["c2"]...),
	}
}

// spareModel is model m with weights of 16.1 GB and spares warm spares.
func spareModel(spares int, ps ...Profile) Model {
	if len(ps) == 0 {
		ps = []Profile{tprof("p", 4)}
	}
	m := tmodel("m", ps...)
	m.Weights, m.WeightsBytes, m.WarmSpares = qwenWeights, 16_100_000_000, spares
	return m
}

func serving(model string, nodes ...string) []Replica {
	var out []Replica
	for i, n := range nodes {
		out = append(out, Replica{ID: ReplicaID(model, i), Model: model, Profile: "p", Shards: []Shard{{Node: n, Watts: 2800, GPU: "H", GPUs: 4}}})
	}
	return out
}

func spareNodes(ss []WarmSpare) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Model+"@"+s.Node)
	}
	return out
}

func TestWarmSpares(t *testing.T) {
	t.Parallel()
	key := qwenWeights.Key()
	other := tmodel("o", tprof("p", 4))
	other.Weights, other.WarmSpares = &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/o", Files: []string{"o.gguf"}}}, 1
	tests := []struct {
		name    string
		nodes   []Node
		fac     Facility
		running []Replica
		models  []Model
		want    []string
	}{
		{"another rack than the replica's, the node holding the weights",
			sixNodes(map[string][]func(*Node){"c2": {holds(key, 16_100_000_000)}}), Facility{}, serving("m", "a1"),
			[]Model{spareModel(1)}, []string{"m@c2"}},
		{"spares stand apart from each other too",
			sixNodes(nil), Facility{}, serving("m", "a1"),
			[]Model{spareModel(2)}, []string{"m@b1", "m@c1"}},
		{"then the PDUs left in those racks, then the replica's rack",
			sixNodes(nil), Facility{}, serving("m", "a1"),
			[]Model{spareModel(5)}, []string{"m@b1", "m@c1", "m@b2", "m@c2", "m@a2"}},
		{"never a node serving the model; fewer when fewer qualify",
			sixNodes(nil), Facility{}, serving("m", "a1", "a2", "b1", "b2"),
			[]Model{spareModel(4)}, []string{"m@c1", "m@c2"}},
		{"a faster fetch before name among nodes that must fetch",
			sixNodes(map[string][]func(*Node){"c2": {rate(1e9)}}), Facility{}, serving("m", "a1", "b1"),
			[]Model{spareModel(1)}, []string{"m@c2"}},
		{"spread before the weights",
			sixNodes(map[string][]func(*Node){"a2": {holds(key, 16_100_000_000)}}), Facility{}, serving("m", "a1"),
			[]Model{spareModel(1)}, []string{"m@b1"}},
		{"a budget that would not take a shard",
			sixNodes(nil), Facility{Budgets: []Budget{budget("rack=k2", 4500)}}, serving("m", "a1"),
			[]Model{spareModel(2)}, []string{"m@c1", "m@c2"}},
		{"spares are not draw: a budget with room for one shard takes two spares",
			sixNodes(nil), Facility{Budgets: []Budget{budget("rack=k2", 5900)}}, serving("m", "a1"),
			[]Model{spareModel(3)}, []string{"m@b1", "m@c1", "m@b2"}},
		{"a hold, a node without free GPUs, another GPU model",
			sixNodes(map[string][]func(*Node){"c1": {free(2)}, "c2": {func(n *Node) { n.GPUs[0].Model = "B" }}}),
			Facility{Holds: []Hold{{Domain: mustDomain("rack=k2")}}}, serving("m", "a1"),
			[]Model{spareModel(3)}, []string{"m@a2"}},
		{"the first profile's nodes before the second's",
			sixNodes(map[string][]func(*Node){"b1": {free(2)}, "b2": {free(2)}, "c1": {free(2)}}), Facility{}, serving("m", "a1"),
			[]Model{spareModel(2, tprof("p", 4), tprof("q", 2))}, []string{"m@c2", "m@a2"}},
		{"other models' replicas do not spread a model's spares; each model its own",
			sixNodes(nil), Facility{}, append(serving("m", "a1"), serving("o", "b1")...),
			[]Model{spareModel(1), other}, []string{"m@b1", "o@a1"}},
		{"a multi-node model: nodes apart from its replica's, each able to hold a shard",
			sixNodes(map[string][]func(*Node){"c1": {free(4)}}), Facility{},
			[]Replica{{ID: "m-0", Model: "m", Profile: "g", Shards: []Shard{{Node: "a1", Watts: 5600}, {Node: "a2", Watts: 5600}}}},
			[]Model{spareModel(2, Profile{Name: "g", Engine: "vllm", GPU: "H", GPUs: 8, Nodes: 2, KeepWithin: LevelRack, Spread: []Level{LevelRack}, Weight: 1})},
			[]string{"m@b1", "m@c2"}},
		{"no spares: a model without weights, a path, warm_spares 0",
			sixNodes(nil), Facility{}, nil,
			[]Model{tmodel("x", tprof("p", 1)), func() Model { m := spareModel(0); m.Name = "z"; return m }(),
				func() Model { m := spareModel(2); m.Name = "y"; m.Weights = &weightsapi.Source{Path: "/m"}; return m }()}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WarmSpares(Fleet{Nodes: tt.nodes}, tt.fac, tt.models, tt.running)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, spareNodes(got)); diff != "" {
				t.Errorf("spares (-want +got):\n%s", diff)
			}
		})
	}
}

// Each spare says why, and what its node still has to fetch.
func TestWarmSparesReasons(t *testing.T) {
	t.Parallel()
	key := qwenWeights.Key()
	nodes := sixNodes(map[string][]func(*Node){"c2": {holds(key, 16_100_000_000)}, "b1": {rate(500e6)}})
	got, err := WarmSpares(Fleet{Nodes: nodes}, Facility{}, []Model{spareModel(3)}, serving("m", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	want := []WarmSpare{
		{Model: "m", Node: "c2", Profile: "p", Fetch: Fetch{Key: key, Present: true},
			Reason: "profile p fits here (its replicas: rack=k3 0, pdu=p6 0; its spares: rack=k3 0, pdu=p6 0); weights present, nothing to fetch"},
		{Model: "m", Node: "b1", Profile: "p", Fetch: Fetch{Key: key, Bytes: 16_100_000_000, BytesPerSecond: 500e6, Seconds: 32.2},
			Reason: "profile p fits here (its replicas: rack=k2 0, pdu=p3 0; its spares: rack=k2 0, pdu=p3 0); 16.1 GB to fetch, ~33 s at 500 MB/s"},
		{Model: "m", Node: "b2", Profile: "p", Fetch: Fetch{Key: key, Bytes: 16_100_000_000, BytesPerSecond: 100e6, DefaultRate: true, Seconds: 161},
			Reason: "profile p fits here (its replicas: rack=k2 0, pdu=p4 0; its spares: rack=k2 1, pdu=p4 0); 16.1 GB to fetch, ~2 m 41 s at 100 MB/s"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spares (-want +got):\n%s", diff)
	}
	noSpread := spareModel(1)
	noSpread.Profiles[0].Spread = nil
	got, err = WarmSpares(Fleet{Nodes: nodes}, Facility{}, []Model{noSpread}, serving("m", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Reason != "profile p fits here (no spread level); weights present, nothing to fetch" {
		t.Errorf("without spread: got %+v", got)
	}
}

// Same input, same output, whatever the order of the fleet; the inputs
// are left as they were; bad input fails as NewPlanner does.
func TestWarmSparesDeterministic(t *testing.T) {
	t.Parallel()
	key := qwenWeights.Key()
	nodes := sixNodes(map[string][]func(*Node){"b2": {holds(key, 1e9)}, "c1": {holds(key, 1e9)}})
	models := []Model{spareModel(4)}
	run := serving("m", "a1")
	first, err := WarmSpares(Fleet{Nodes: nodes}, Facility{}, models, run)
	if err != nil {
		t.Fatal(err)
	}
	if got := spareNodes(first); !slices.Equal(got, []string{"m@b2", "m@c1", "m@b1", "m@c2"}) {
		t.Errorf("got %v", got)
	}
	rev := slices.Clone(nodes)
	slices.Reverse(rev)
	again, err := WarmSpares(Fleet{Nodes: rev}, Facility{}, models, run)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("reversed fleet (-first +again):\n%s", diff)
	}
	if len(nodes[3].Weights) != 1 || models[0].WarmSpares != 4 || len(run) != 1 {
		t.Error("inputs changed")
	}
	_, err = WarmSpares(Fleet{Nodes: nodes}, Facility{}, models, serving("m", "nowhere"))
	if !errors.Is(err, ErrUnknownNode) {
		t.Errorf("unknown node: got %v, want ErrUnknownNode", err)
	}
}

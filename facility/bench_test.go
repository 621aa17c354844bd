package facility

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/llmgw/llmgw/weightsapi"
)

// benchWorld is a fleet of n nodes of 8 H200s: 4 nodes a rack, two PDUs a
// rack, 16 racks a row, 8 rows a room; budgets on every PDU, rack, row and
// room; a hold on every 50th rack; some nodes measured, some with GPUs out.
func benchWorld(n int) (Fleet, Facility) {
	r := rand.New(rand.NewPCG(7, 7))
	var fleet Fleet
	var fac Facility
	fac.Headroom = 0.05
	budgeted := map[Domain]bool{}
	budgetOn := func(d Domain, w float64) {
		if !budgeted[d] {
			budgeted[d] = true
			fac.Budgets = append(fac.Budgets, Budget{Domain: d, Watts: w})
		}
	}
	for i := range n {
		rack := i / 4
		row := rack / 16
		room := row / 8
		loc := Location{
			Site: "s1",
			Room: fmt.Sprintf("m%03d", room),
			Row:  fmt.Sprintf("m%03d-r%d", room, row%8),
			Rack: fmt.Sprintf("m%03d-r%d-k%02d", room, row%8, rack%16),
		}
		loc.PDU = fmt.Sprintf("%s-%c", loc.Rack, 'a'+rune(i%4/2))
		node := Node{
			Name: fmt.Sprintf("n%06d", i), Location: loc, CPUCores: 192, MemoryGB: 2048,
			BaseWatts: 1200, Fabric: fmt.Sprintf("ib-%d", room%2),
			GPUs: []GPU{{Model: "NVIDIA H200", Count: 8, Free: 8, PowerLimitWatts: 700}},
		}
		if r.IntN(20) == 0 {
			node.GPUs[0].Free = 8 - 1 - r.IntN(4)
		}
		if r.IntN(20) == 0 {
			node.MeasuredWatts = float64(2000 + r.IntN(4000))
		}
		fleet.Nodes = append(fleet.Nodes, node)
		budgetOn(Domain{LevelPDU, loc.PDU}, 17300)
		budgetOn(Domain{LevelRack, loc.Rack}, 30000)
		budgetOn(Domain{LevelRow, loc.Row}, 400000)
		budgetOn(Domain{LevelRoom, loc.Room}, 3000000)
		if rack%50 == 3 && i%4 == 0 {
			fac.Holds = append(fac.Holds, Hold{Domain: Domain{LevelRack, loc.Rack}, Reason: "maintenance"})
		}
	}
	return fleet, fac
}

// benchCatalog is replicas replicas (2,000 in BenchmarkPlace): single-node
// models of 1, 2, 4 and 8 GPUs, and multi-node models of 2 nodes in a rack
// and 4 nodes in a row, in the shares 40, 25, 20, 7.5, 5 and 2.5%.
func benchCatalog(replicas int) Catalog {
	share := func(per2000 int) int { return per2000 * replicas / 2000 }
	prof := func(gpus, nodes int, within Level, spread ...Level) Profile {
		return Profile{Name: fmt.Sprintf("g%dn%d", gpus, nodes), Engine: "vllm", GPU: "NVIDIA H200", GPUs: gpus, Nodes: nodes, KeepWithin: within,
			CPUCores: 8 * gpus, MemoryGB: 128 * gpus, Spread: spread, Fabric: "ib", Weight: 1}
	}
	return Catalog{Models: []Model{
		{Name: "one", Replicas: share(800), Profiles: []Profile{prof(1, 1, 0, LevelRack, LevelPDU)}},
		{Name: "two", Replicas: share(500), Profiles: []Profile{prof(2, 1, 0, LevelRack, LevelPDU)}},
		{Name: "four", Replicas: share(400), Profiles: []Profile{prof(4, 1, 0, LevelRack, LevelPDU), prof(8, 1, 0, LevelRack)}},
		{Name: "eight", Replicas: share(150), Profiles: []Profile{prof(8, 1, 0, LevelRow, LevelRack)}},
		{Name: "pair", Replicas: share(100), Profiles: []Profile{prof(8, 2, LevelRack, LevelRow, LevelRack)}},
		{Name: "quad", Replicas: share(50), Profiles: []Profile{prof(8, 4, LevelRow, LevelRoom, LevelRow)}},
	}}
}

func benchRequests(cat Catalog) []Request {
	var reqs []Request
	for i := 0; ; i++ {
		more := false
		for _, m := range cat.Models {
			if i < m.Replicas {
				reqs = append(reqs, Request{Replica: ReplicaID(m.Name, i), Model: m})
				more = true
			}
		}
		if !more {
			return reqs
		}
	}
}

var benchSizes = []int{1_000, 10_000, 100_000}

// benchPlaceAll places and commits reqs on a fresh planner per
// iteration (building it not timed) and reports decisions per second,
// nanoseconds per decision and how many were placed.
func benchPlaceAll(b *testing.B, fleet Fleet, fac Facility, reqs []Request) {
	b.Helper()
	placed := 0
	for range b.N {
		b.StopTimer()
		p, err := NewPlanner(fleet, fac, nil)
		if err != nil {
			b.Fatal(err)
		}
		placed = 0
		b.StartTimer()
		for _, req := range reqs {
			d := p.Place(req)
			if d.Placed {
				placed++
				if err := p.Commit(d); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	decisions := float64(len(reqs)) * float64(b.N)
	b.ReportMetric(decisions/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/decisions, "ns/decision")
	b.ReportMetric(float64(placed), "placed")
}

// BenchmarkPlace places 2,000 replicas (Place, then Commit) on a fresh
// planner; building the planner is not timed (see BenchmarkNewPlanner).
func BenchmarkPlace(b *testing.B) {
	reqs := benchRequests(benchCatalog(2000))
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			fleet, fac := benchWorld(n)
			benchPlaceAll(b, fleet, fac, reqs)
		})
	}
}

// BenchmarkNewPlanner indexes the fleet and facility.
func BenchmarkNewPlanner(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			fleet, fac := benchWorld(n)
			for range b.N {
				if _, err := NewPlanner(fleet, fac, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchWeights gives every model of cat weights of 16.1 GB (a hub
// repository of its own) and, with every > 0, puts each model's weights on
// the nodes of one rack in every (a rack's nodes share them, as after a
// replica ran there) and a measured fetch rate on every seventh node; the
// fleet's nodes are copied.
func benchWeights(fleet Fleet, cat Catalog, every int) (Fleet, Catalog) {
	out := Fleet{Nodes: slices.Clone(fleet.Nodes), Learned: fleet.Learned}
	cat.Models = slices.Clone(cat.Models)
	for j := range cat.Models {
		m := &cat.Models[j]
		m.Weights = &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/" + m.Name, Files: []string{"model.gguf"}}}
		m.WeightsBytes = 16_100_000_000
	}
	if every <= 0 {
		return out, cat
	}
	for i := range out.Nodes {
		n := &out.Nodes[i]
		n.Weights = nil
		for j, m := range cat.Models {
			if (i/4+j)%every == 0 {
				if n.Weights == nil {
					n.Weights = map[string]int64{}
				}
				n.Weights[m.Weights.Key()] = m.WeightsBytes
			}
		}
		if i%7 == 0 {
			n.FetchBytesPerSecond = 250e6
		}
	}
	return out, cat
}

// BenchmarkPlaceWeights is BenchmarkPlace with every model's weights a
// node fetches: held=none, no node holds any (the estimate is the same
// everywhere, so it ranks nothing); held=quarter, a quarter of the racks
// hold each model's and a seventh of the nodes fetch faster.
func BenchmarkPlaceWeights(b *testing.B) {
	for _, held := range []struct {
		name  string
		every int
	}{{"none", 0}, {"quarter", 4}} {
		for _, n := range benchSizes[:2] {
			b.Run(fmt.Sprintf("held=%s/nodes=%d", held.name, n), func(b *testing.B) {
				fleet, fac := benchWorld(n)
				fleet, cat := benchWeights(fleet, benchCatalog(2000), held.every)
				benchPlaceAll(b, fleet, fac, benchRequests(cat))
			})
		}
	}
}

// nodeLost is benchWorld(n) with benchCatalog(n/5) placed and running
// (the nodes' free GPUs, cores and memory less its shards), then the node
// of one single-node replica lost: nothing free on it, the replica failed.
func nodeLost(b *testing.B, n int) (healthy, lost Fleet, fac Facility, running []Replica, req Request) {
	b.Helper()
	fleet, fac := benchWorld(n)
	cat := benchCatalog(n / 5)
	plan, err := PlanCatalog(fleet, fac, cat)
	if err != nil {
		b.Fatal(err)
	}
	idx := map[string]int{}
	for i, nd := range fleet.Nodes {
		idx[nd.Name] = i
	}
	for _, d := range plan.Placements {
		running = append(running, d.Running())
		for _, s := range d.Shards {
			nd := &fleet.Nodes[idx[s.Node]]
			nd.GPUs[0].Free -= s.GPUs
			nd.CPUCores -= s.CPUCores
			nd.MemoryGB -= s.MemoryGB
		}
	}
	if len(plan.Unplaced) > 0 {
		b.Fatalf("%d replicas not placed", len(plan.Unplaced))
	}
	victim := running[0] // model "one", replica 0: a one-GPU shard
	lost = Fleet{Nodes: slices.Clone(fleet.Nodes)}
	nd := &lost.Nodes[idx[victim.Shards[0].Node]]
	nd.GPUs = []GPU{{Model: nd.GPUs[0].Model, Count: nd.GPUs[0].Count, PowerLimitWatts: nd.GPUs[0].PowerLimitWatts}}
	nd.CPUCores, nd.MemoryGB = 0, 0
	for _, m := range cat.Models {
		if m.Name == victim.Model {
			req = Request{Replica: victim.ID, Model: m}
		}
	}
	return fleet, lost, fac, running, req
}

// BenchmarkPlaceAfterNodeLost is the placement decision for the one
// replica of a lost node, on a fleet where one replica runs for every five
// nodes (2,000 at 10,000 nodes; benchCatalog's mix): a planner for the
// pass (every running replica counted, the lost one not serving), then
// Place. planners=kept builds it from a PlannerCache that built the
// previous pass's (the fleet before the loss), as a controller's pass
// does, and whose planner of the pass before that placed and committed
// the replica; planners=none builds it from scratch (NewPlanner).
// planners=unchanged is the cache's planner for the same fleet and
// replicas as the pass before's, nothing placed: what finding that
// nothing changed costs (every node's inputs compared, the replicas
// aligned).
func BenchmarkPlaceAfterNodeLost(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		healthy, lost, fac, running, req := nodeLost(b, n)
		for _, mode := range []string{"none", "kept", "unchanged"} {
			b.Run(fmt.Sprintf("nodes=%d/planners=%s", n, mode), func(b *testing.B) {
				var c *PlannerCache
				if mode != "none" {
					c = &PlannerCache{}
				}
				if mode == "unchanged" {
					for b.Loop() {
						if _, err := c.NewPlanner(lost, fac, running); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				for b.Loop() {
					b.StopTimer()
					if _, err := c.NewPlanner(healthy, fac, running); err != nil { // the pass before
						b.Fatal(err)
					}
					b.StartTimer()
					p, err := c.NewPlanner(lost, fac, running)
					if err != nil {
						b.Fatal(err)
					}
					if err := p.NotServing(req.Replica); err != nil {
						b.Fatal(err)
					}
					d := p.Place(req)
					if !d.Placed {
						b.Fatalf("%s not placed: %v", req.Replica, d.Reasons())
					}
					b.StopTimer()
					if err := p.Commit(d); err != nil { // as the pass does
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}

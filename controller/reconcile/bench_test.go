package reconcile

import (
	"fmt"
	"testing"
	"time"

	"github.com/llmgw/llmgw/facility"
)

// scaleInput is the fleet of controller/scale_test.go's BenchmarkScale
// (docs/perf.md, "At fleet scale"), as a pass's input: nodes nodes of 8
// H200s, 10 a rack, a PDU for each pair, a budget on every PDU (20 kW)
// and rack (100 kW) with 5 % headroom; 2,500 serving two-GPU replicas of
// ten models, replica k on node k mod nodes.
func scaleInput(nodes int) Input {
	const replicas, models = 2500, 10
	in := Input{Now: t0, PartialDeadline: 10 * time.Minute, Facility: facility.Facility{Headroom: 0.05}}
	for i := range nodes {
		pair := i / 2
		n := facility.Node{Name: fmt.Sprintf("n%05d", i), Location: facility.Location{Rack: fmt.Sprintf("r%04d", pair/5), PDU: fmt.Sprintf("p%05d", pair)},
			CPUCores: 128, MemoryGB: 2048, BaseWatts: 1000,
			GPUs: []facility.GPU{{Model: "NVIDIA H200", Count: 8, Free: 8, PowerLimitWatts: 700}}}
		in.Fleet.Nodes = append(in.Fleet.Nodes, n)
		if i%2 == 0 {
			in.Facility.Budgets = append(in.Facility.Budgets, facility.Budget{Domain: facility.Domain{Level: facility.LevelPDU, Value: n.Location.PDU}, Watts: 20000})
		}
		if i%10 == 0 {
			in.Facility.Budgets = append(in.Facility.Budgets, facility.Budget{Domain: facility.Domain{Level: facility.LevelRack, Value: n.Location.Rack}, Watts: 100000})
		}
	}
	for m := range models {
		in.Catalog.Models = append(in.Catalog.Models, facility.Model{Name: fmt.Sprintf("m%d", m), Source: fmt.Sprintf("org/m%d", m), Replicas: replicas / models, MaxSurge: 1,
			Profiles: []facility.Profile{{Name: "p", Engine: "sglang", GPU: "NVIDIA H200", GPUs: 2, Nodes: 1, KeepWithin: facility.LevelRack, Watts: 900, Weight: 1}}})
	}
	for k := range replicas {
		m := in.Catalog.Models[k%models]
		node := &in.Fleet.Nodes[k%nodes]
		node.GPUs[0].Free -= 2
		in.Jobs = append(in.Jobs, Job{ID: fmt.Sprintf("llmgw-%s-%d", m.Name, k/models), Replica: facility.ReplicaID(m.Name, k/models), Model: m.Name, Profile: "p",
			FP: facility.ProfileFingerprint(m, m.Profiles[0]), State: Serving, CreateIndex: uint64(k + 1), ModifyIndex: uint64(k + 1),
			Shards: []facility.Shard{{Node: node.Name, Watts: 900, GPU: "NVIDIA H200", GPUs: 2}}})
	}
	return in
}

// lose is in with node i lost, as the controller sees it: nothing free
// on it, its replicas failed.
func lose(in Input, i int) Input {
	in.Fleet.Nodes = append([]facility.Node(nil), in.Fleet.Nodes...)
	n := &in.Fleet.Nodes[i]
	n.GPUs = []facility.GPU{{Model: n.GPUs[0].Model, Count: n.GPUs[0].Count, PowerLimitWatts: n.GPUs[0].PowerLimitWatts}}
	n.CPUCores, n.MemoryGB = 0, 0
	in.Jobs = append([]Job(nil), in.Jobs...)
	for k := range in.Jobs {
		if in.Jobs[k].Shards[0].Node == n.Name {
			in.Jobs[k].State = Failed
		}
	}
	return in
}

// BenchmarkPlanNodeLost times the planning step of the pass after a node
// is lost (reconcile.Plan: every slot looked at, the lost node's replicas
// placed again) on BenchmarkScale's fleet: at 1,000 nodes node n00000
// holds three replicas, at 10,000 one. planners=kept plans with a
// PlannerCache that planned the pass before the loss, as the controller
// does; planners=none without (each pass indexes the fleet).
func BenchmarkPlanNodeLost(b *testing.B) {
	for _, nodes := range []int{1_000, 10_000} {
		healthy := scaleInput(nodes)
		lost := lose(healthy, 0)
		for _, kept := range []bool{false, true} {
			name := map[bool]string{false: "none", true: "kept"}[kept]
			b.Run(fmt.Sprintf("nodes=%d/planners=%s", nodes, name), func(b *testing.B) {
				healthy, lost := healthy, lost
				if kept {
					c := &facility.PlannerCache{}
					healthy.Planners, lost.Planners = c, c
				}
				replaced := 0
				for b.Loop() {
					b.StopTimer()
					if res, err := Plan(healthy); err != nil || len(res.Actions) != 0 {
						b.Fatalf("the pass before: %v, %v", err, res.Actions)
					}
					b.StartTimer()
					res, err := Plan(lost)
					if err != nil {
						b.Fatal(err)
					}
					replaced = len(res.Actions)
				}
				if replaced != (2500+nodes-1)/nodes {
					b.Fatalf("%d actions, want a replace for each replica of the lost node", replaced)
				}
			})
		}
	}
}

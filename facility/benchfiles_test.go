package facility

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// The fleet of issue 23's slow `llmgw plan`: 12,800 nodes (about 3.3 MB of
// fleet.hcl) and 2,560 replicas.
const (
	benchFileNodes    = 12_800
	benchFileReplicas = 2_560
)

var benchFilesDir = flag.String("bench-files", "",
	"TestBenchFiles writes the fleet, facility and catalog files of the 12,800-node bench fleet into this directory, as .hcl and as .json")

// benchFiles writes benchWorld(nodes) and benchCatalog(replicas) as the
// fleet, facility and catalog files `llmgw plan` reads.
func benchFiles(nodes, replicas int) (fleetSrc, facSrc, catSrc []byte) {
	fleet, fac := benchWorld(nodes)
	return fleetHCLFile(fleet), facilityHCLFile(fac), catalogHCLFile(benchCatalog(replicas))
}

// benchJSONFiles is benchFiles in HCL's JSON syntax.
func benchJSONFiles(nodes, replicas int) (fleetSrc, facSrc, catSrc []byte) {
	fleet, fac := benchWorld(nodes)
	return fleetJSONFile(fleet), facilityJSONFile(fac), catalogJSONFile(benchCatalog(replicas))
}

// jsonObject is an attribute or block body in HCL's JSON syntax.
type jsonObject = map[string]any

// jsonBlock is a block with one label: an array of one-property objects
// keeps the blocks in their order (an object's properties would come out
// sorted by encoding/json).
func jsonBlock(label string, body jsonObject) jsonObject { return jsonObject{label: body} }

func marshalJSONFile(v any) []byte {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// fleetJSONFile writes the fleet as a program generating it from an
// inventory would: encoding/json, no HCL library.
func fleetJSONFile(fleet Fleet) []byte {
	nodes := make([]jsonObject, 0, len(fleet.Nodes))
	for _, n := range fleet.Nodes {
		b := jsonObject{}
		for _, l := range Levels() {
			if v := n.Location.Get(l); v != "" {
				b[l.String()] = v
			}
		}
		if n.Pool != "" {
			b["pool"] = n.Pool
		}
		b["cpu_cores"], b["memory_gb"], b["base_watts"] = n.CPUCores, n.MemoryGB, n.BaseWatts
		if n.MeasuredWatts > 0 {
			b["measured_watts"] = n.MeasuredWatts
		}
		if n.Fabric != "" {
			b["fabric"] = n.Fabric
		}
		var gpus []jsonObject
		for _, g := range n.GPUs {
			gb := jsonObject{"count": g.Count, "power_limit": g.PowerLimitWatts}
			if g.Free != g.Count {
				gb["free"] = g.Free
			}
			if g.MemoryMiB > 0 {
				gb["memory"] = g.MemoryMiB
			}
			gpus = append(gpus, jsonBlock(g.Model, gb))
		}
		if gpus != nil {
			b["gpu"] = gpus
		}
		nodes = append(nodes, jsonBlock(n.Name, b))
	}
	return marshalJSONFile(jsonObject{"node": nodes})
}

func facilityJSONFile(fac Facility) []byte {
	budgets := make([]jsonObject, 0, len(fac.Budgets))
	for _, b := range fac.Budgets {
		budgets = append(budgets, jsonBlock(b.Domain.String(), jsonObject{"watts": b.Watts}))
	}
	holds := make([]jsonObject, 0, len(fac.Holds))
	for _, h := range fac.Holds {
		hb := jsonObject{}
		if h.Reason != "" {
			hb["reason"] = h.Reason
		}
		if h.Drain {
			hb["drain"] = true
		}
		holds = append(holds, jsonBlock(h.Domain.String(), hb))
	}
	return marshalJSONFile(jsonObject{"headroom": fac.Headroom, "budget": budgets, "hold": holds})
}

func catalogJSONFile(cat Catalog) []byte {
	models := make([]jsonObject, 0, len(cat.Models))
	for _, m := range cat.Models {
		var profiles []jsonObject
		for _, p := range m.Profiles {
			pb := jsonObject{"engine": p.Engine, "gpu": p.GPU, "gpus": p.GPUs, "nodes": p.Nodes,
				"cpu_cores": p.CPUCores, "memory_gb": p.MemoryGB, "weight": p.Weight}
			if p.Nodes > 1 {
				pb["keep_within"] = p.KeepWithin.String()
			}
			spread := make([]string, 0, len(p.Spread))
			for _, l := range p.Spread {
				spread = append(spread, l.String())
			}
			pb["spread"] = spread
			if p.Fabric != "" {
				pb["fabric"] = p.Fabric
			}
			profiles = append(profiles, jsonBlock(p.Name, pb))
		}
		models = append(models, jsonBlock(m.Name, jsonObject{"replicas": m.Replicas, "profile": profiles}))
	}
	return marshalJSONFile(jsonObject{"model": models})
}

func fleetHCLFile(fleet Fleet) []byte {
	f := hclwrite.NewEmptyFile()
	for _, n := range fleet.Nodes {
		b := f.Body().AppendNewBlock("node", []string{n.Name}).Body()
		for _, l := range Levels() {
			if v := n.Location.Get(l); v != "" {
				b.SetAttributeValue(l.String(), cty.StringVal(v))
			}
		}
		if n.Pool != "" {
			b.SetAttributeValue("pool", cty.StringVal(n.Pool))
		}
		b.SetAttributeValue("cpu_cores", cty.NumberIntVal(int64(n.CPUCores)))
		b.SetAttributeValue("memory_gb", cty.NumberIntVal(int64(n.MemoryGB)))
		b.SetAttributeValue("base_watts", cty.NumberFloatVal(n.BaseWatts))
		if n.MeasuredWatts > 0 {
			b.SetAttributeValue("measured_watts", cty.NumberFloatVal(n.MeasuredWatts))
		}
		if n.Fabric != "" {
			b.SetAttributeValue("fabric", cty.StringVal(n.Fabric))
		}
		for _, g := range n.GPUs {
			gb := b.AppendNewBlock("gpu", []string{g.Model}).Body()
			gb.SetAttributeValue("count", cty.NumberIntVal(int64(g.Count)))
			if g.Free != g.Count {
				gb.SetAttributeValue("free", cty.NumberIntVal(int64(g.Free)))
			}
			gb.SetAttributeValue("power_limit", cty.NumberFloatVal(g.PowerLimitWatts))
			if g.MemoryMiB > 0 {
				gb.SetAttributeValue("memory", cty.NumberIntVal(int64(g.MemoryMiB)))
			}
		}
		f.Body().AppendNewline()
	}
	return f.Bytes()
}

func facilityHCLFile(fac Facility) []byte {
	f := hclwrite.NewEmptyFile()
	f.Body().SetAttributeValue("headroom", cty.NumberFloatVal(fac.Headroom))
	for _, b := range fac.Budgets {
		f.Body().AppendNewBlock("budget", []string{b.Domain.String()}).Body().
			SetAttributeValue("watts", cty.NumberFloatVal(b.Watts))
	}
	for _, h := range fac.Holds {
		hb := f.Body().AppendNewBlock("hold", []string{h.Domain.String()}).Body()
		if h.Reason != "" {
			hb.SetAttributeValue("reason", cty.StringVal(h.Reason))
		}
		if h.Drain {
			hb.SetAttributeValue("drain", cty.True)
		}
	}
	return f.Bytes()
}

func catalogHCLFile(cat Catalog) []byte {
	f := hclwrite.NewEmptyFile()
	for _, m := range cat.Models {
		mb := f.Body().AppendNewBlock("model", []string{m.Name}).Body()
		mb.SetAttributeValue("replicas", cty.NumberIntVal(int64(m.Replicas)))
		for _, p := range m.Profiles {
			pb := mb.AppendNewBlock("profile", []string{p.Name}).Body()
			pb.SetAttributeValue("engine", cty.StringVal(p.Engine))
			pb.SetAttributeValue("gpu", cty.StringVal(p.GPU))
			pb.SetAttributeValue("gpus", cty.NumberIntVal(int64(p.GPUs)))
			pb.SetAttributeValue("nodes", cty.NumberIntVal(int64(p.Nodes)))
			if p.Nodes > 1 {
				pb.SetAttributeValue("keep_within", cty.StringVal(p.KeepWithin.String()))
			}
			pb.SetAttributeValue("cpu_cores", cty.NumberIntVal(int64(p.CPUCores)))
			pb.SetAttributeValue("memory_gb", cty.NumberIntVal(int64(p.MemoryGB)))
			spread := make([]cty.Value, 0, len(p.Spread))
			for _, l := range p.Spread {
				spread = append(spread, cty.StringVal(l.String()))
			}
			pb.SetAttributeValue("spread", cty.ListVal(spread))
			if p.Fabric != "" {
				pb.SetAttributeValue("fabric", cty.StringVal(p.Fabric))
			}
			pb.SetAttributeValue("weight", cty.NumberIntVal(int64(p.Weight)))
		}
		f.Body().AppendNewline()
	}
	return f.Bytes()
}

// TestBenchFiles checks that the bench fleet's files, in HCL and in HCL's
// JSON syntax, read back as the world they were written from (at 200
// nodes), so that the reading
// benchmark reads what the placement benchmark places. With -bench-files
// DIR it also writes the 12,800-node files into DIR for timing `llmgw plan`
// (docs/perf.md).
func TestBenchFiles(t *testing.T) {
	t.Parallel()
	const nodes, replicas = 200, 100
	fleetSrc, facSrc, catSrc := benchFiles(nodes, replicas)
	fleetJSON, facJSON, catJSON := benchJSONFiles(nodes, replicas)
	wantFleet, wantFac := benchWorld(nodes)
	for i := range wantFleet.Nodes {
		wantFleet.Nodes[i].Pool = DefaultPool
	}
	wantCat := benchCatalog(replicas)
	for i := range wantCat.Models {
		m := &wantCat.Models[i]
		m.MaxSurge, m.Priority = 1, DefaultPriority
		for j := range m.Profiles {
			m.Profiles[j].Pool = DefaultPool
		}
	}
	ignorePos := cmpopts.IgnoreTypes(Pos{})
	read := func(ext string, fleetSrc, facSrc, catSrc []byte) {
		fleet, err := ParseFleet("fleet"+ext, fleetSrc)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantFleet, fleet, ignorePos); diff != "" {
			t.Errorf("fleet%s (-want +got):\n%s", ext, diff)
		}
		fac, err := ParseFacility("facility"+ext, facSrc)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantFac, fac, ignorePos); diff != "" {
			t.Errorf("facility%s (-want +got):\n%s", ext, diff)
		}
		cat, err := ParseCatalog("catalog"+ext, catSrc)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantCat, cat, ignorePos, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("catalog%s (-want +got):\n%s", ext, diff)
		}
		if err := CheckFacility(fleet, fac); err != nil {
			t.Error(err)
		}
		if err := CheckCatalog(fleet, fac, cat); err != nil {
			t.Error(err)
		}
	}
	read(".hcl", fleetSrc, facSrc, catSrc)
	read(".json", fleetJSON, facJSON, catJSON)

	if *benchFilesDir == "" {
		return
	}
	fleetSrc, facSrc, catSrc = benchFiles(benchFileNodes, benchFileReplicas)
	fleetJSON, facJSON, catJSON = benchJSONFiles(benchFileNodes, benchFileReplicas)
	for name, src := range map[string][]byte{
		"fleet.hcl": fleetSrc, "facility.hcl": facSrc, "catalog.hcl": catSrc,
		"fleet.json": fleetJSON, "facility.json": facJSON, "catalog.json": catJSON,
	} {
		path := filepath.Join(*benchFilesDir, name)
		if err := os.WriteFile(path, src, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(src))
	}
}

// BenchmarkRead reads the files of the 12,800-node bench fleet as `llmgw
// plan` does (plancmd.Load): each file parsed, then the checks of the
// facility and the catalog against the fleet. all is the four together;
// the -json sub-benchmarks read the same files written in HCL's JSON
// syntax. cpu-ms/op is the process's CPU time (user and system, every
// thread, the garbage collector's too) per op: on a shared machine it
// varies less than the wall time, and it counts work done on more than one
// CPU.
func BenchmarkRead(b *testing.B) {
	fleetSrc, facSrc, catSrc := benchFiles(benchFileNodes, benchFileReplicas)
	fleetJSON, facJSON, catJSON := benchJSONFiles(benchFileNodes, benchFileReplicas)
	fleet, err := ParseFleet("fleet.hcl", fleetSrc)
	if err != nil {
		b.Fatal(err)
	}
	fac, err := ParseFacility("facility.hcl", facSrc)
	if err != nil {
		b.Fatal(err)
	}
	cat, err := ParseCatalog("catalog.hcl", catSrc)
	if err != nil {
		b.Fatal(err)
	}
	type step struct {
		name string
		run  func() error
	}
	check := step{"check", func() error { return errors.Join(CheckFacility(fleet, fac), CheckCatalog(fleet, fac, cat)) }}
	steps := []step{
		{"fleet", func() error { _, err := ParseFleet("fleet.hcl", fleetSrc); return err }},
		{"facility", func() error { _, err := ParseFacility("facility.hcl", facSrc); return err }},
		{"catalog", func() error { _, err := ParseCatalog("catalog.hcl", catSrc); return err }},
		check,
	}
	jsonSteps := []step{
		{"fleet-json", func() error { _, err := ParseFleet("fleet.json", fleetJSON); return err }},
		{"facility-json", func() error { _, err := ParseFacility("facility.json", facJSON); return err }},
		{"catalog-json", func() error { _, err := ParseCatalog("catalog.json", catJSON); return err }},
		check,
	}
	for _, s := range append(steps, jsonSteps[:3]...) {
		b.Run(s.name, func(b *testing.B) {
			cpu0 := cpuTime(b)
			for range b.N {
				if err := s.run(); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0)
		})
	}
	for _, all := range []struct {
		name  string
		steps []step
	}{{"all", steps}, {"all-json", jsonSteps}} {
		b.Run(all.name, func(b *testing.B) {
			cpu0 := cpuTime(b)
			for range b.N {
				for _, s := range all.steps {
					if err := s.run(); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-since)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkPlanCatalog is the placing part of `llmgw plan` on the bench
// fleet: PlanCatalog with 2,560 replicas on 12,800 nodes, the planner
// built included.
func BenchmarkPlanCatalog(b *testing.B) {
	fleet, fac := benchWorld(benchFileNodes)
	cat := benchCatalog(benchFileReplicas)
	for i := range fleet.Nodes {
		fleet.Nodes[i].Pool = DefaultPool
	}
	for i := range cat.Models {
		for j := range cat.Models[i].Profiles {
			cat.Models[i].Profiles[j].Pool = DefaultPool
		}
	}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	var plan Plan
	for range b.N {
		var err error
		if plan, err = PlanCatalog(fleet, fac, cat); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu0)
	b.ReportMetric(float64(len(plan.Placements)), "placed")
}

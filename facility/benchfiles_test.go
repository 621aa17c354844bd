package facility

import (
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
	"TestBenchFiles writes the fleet.hcl, facility.hcl and catalog.hcl of the 12,800-node bench fleet into this directory")

// benchFiles writes benchWorld(nodes) and benchCatalog(replicas) as the
// fleet, facility and catalog files `llmgw plan` reads.
func benchFiles(nodes, replicas int) (fleetSrc, facSrc, catSrc []byte) {
	fleet, fac := benchWorld(nodes)
	return fleetHCLFile(fleet), facilityHCLFile(fac), catalogHCLFile(benchCatalog(replicas))
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

// TestBenchFiles checks that the bench fleet's files read back as the
// world they were written from (at 200 nodes), so that the reading
// benchmark reads what the placement benchmark places. With -bench-files
// DIR it also writes the 12,800-node files into DIR for timing `llmgw plan`
// (docs/perf.md).
func TestBenchFiles(t *testing.T) {
	t.Parallel()
	const nodes, replicas = 200, 100
	fleetSrc, facSrc, catSrc := benchFiles(nodes, replicas)
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
	fleet, err := ParseFleet("fleet.hcl", fleetSrc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantFleet, fleet, ignorePos); diff != "" {
		t.Errorf("fleet (-want +got):\n%s", diff)
	}
	fac, err := ParseFacility("facility.hcl", facSrc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantFac, fac, ignorePos); diff != "" {
		t.Errorf("facility (-want +got):\n%s", diff)
	}
	cat, err := ParseCatalog("catalog.hcl", catSrc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantCat, cat, ignorePos, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("catalog (-want +got):\n%s", diff)
	}
	if err := CheckFacility(fleet, fac); err != nil {
		t.Error(err)
	}
	if err := CheckCatalog(fleet, fac, cat); err != nil {
		t.Error(err)
	}

	if *benchFilesDir == "" {
		return
	}
	fleetSrc, facSrc, catSrc = benchFiles(benchFileNodes, benchFileReplicas)
	for name, src := range map[string][]byte{"fleet.hcl": fleetSrc, "facility.hcl": facSrc, "catalog.hcl": catSrc} {
		path := filepath.Join(*benchFilesDir, name)
		if err := os.WriteFile(path, src, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", path, len(src))
	}
}

// BenchmarkRead reads the files of the 12,800-node bench fleet as `llmgw
// plan` does (plancmd.Load): each file parsed, then the checks of the
// facility and the catalog against the fleet. all is the four together.
// cpu-ms/op is the process's CPU time (user and system, every thread, the
// garbage collector's too) per op: on a shared machine it varies less than
// the wall time, and it counts work done on more than one CPU.
func BenchmarkRead(b *testing.B) {
	fleetSrc, facSrc, catSrc := benchFiles(benchFileNodes, benchFileReplicas)
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
	steps := []struct {
		name string
		run  func() error
	}{
		{"fleet", func() error { _, err := ParseFleet("fleet.hcl", fleetSrc); return err }},
		{"facility", func() error { _, err := ParseFacility("facility.hcl", facSrc); return err }},
		{"catalog", func() error { _, err := ParseCatalog("catalog.hcl", catSrc); return err }},
		{"check", func() error { return errors.Join(CheckFacility(fleet, fac), CheckCatalog(fleet, fac, cat)) }},
	}
	for _, s := range steps {
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
	b.Run("all", func(b *testing.B) {
		cpu0 := cpuTime(b)
		for range b.N {
			for _, s := range steps {
				if err := s.run(); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportCPU(b, cpu0)
	})
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

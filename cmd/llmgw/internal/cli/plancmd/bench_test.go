package plancmd

import (
	"flag"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/llmgw/llmgw/facility"
)

var planFiles = flag.String("plan-files", "",
	"BenchmarkRender plans the fleet.json, facility.json and catalog.json in this directory (written by facility's TestBenchFiles -bench-files)")

// BenchmarkRender writes the plan of the 12,800-node bench fleet (docs/perf.md,
// issue 23) as the table and as JSON; the plan is made once, untimed.
func BenchmarkRender(b *testing.B) {
	if *planFiles == "" {
		b.Skip("no -plan-files DIR: write the bench files with go test ./facility -run '^TestBenchFiles$' -args -bench-files=DIR")
	}
	f := func(name string) string { return filepath.Join(*planFiles, name) }
	fleet, fac, cat, err := Load(f("fleet.json"), f("facility.json"), f("catalog.json"))
	if err != nil {
		b.Fatal(err)
	}
	plan, err := facility.PlanCatalog(fleet, fac, cat)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("table", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for range b.N {
			n = len(RenderText(plan))
		}
		b.ReportMetric(float64(n), "bytes")
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for range b.N {
			out, err := RenderJSON(plan)
			if err != nil {
				b.Fatal(err)
			}
			n = len(out)
		}
		b.ReportMetric(float64(n), "bytes")
	})
}

// BenchmarkLoad reads the bench fleet's three files as llmgw plan does
// (Load: at once, a JSON fleet in parts a core each), in HCL's JSON syntax
// and in the native syntax, at the garbage collector's target llmgw plan
// sets (GOGC=400 unless GOGC is set).
func BenchmarkLoad(b *testing.B) {
	if *planFiles == "" {
		b.Skip("no -plan-files DIR: write the bench files with go test ./facility -run '^TestBenchFiles$' -args -bench-files=DIR")
	}
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(planGCPercent))
	}
	for _, ext := range []string{"json", "hcl"} {
		b.Run(ext, func(b *testing.B) {
			f := func(name string) string { return filepath.Join(*planFiles, name+"."+ext) }
			b.ReportAllocs()
			for range b.N {
				fleet, _, _, err := Load(f("fleet"), f("facility"), f("catalog"))
				if err != nil {
					b.Fatal(err)
				}
				if len(fleet.Nodes) == 0 {
					b.Fatal("no nodes")
				}
			}
		})
	}
}

package render

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmgw/llmgw/facility"
)

// benchCatalog is every profile shape the catalog allows, one model each.
const benchCatalog = "testdata/bench/catalog.hcl"

// benchInputs places every profile of cat on made-up nodes of one fabric.
func benchInputs(cat facility.Catalog) []Input {
	var out []Input
	for _, m := range cat.Models {
		for _, p := range m.Profiles {
			var names []string
			nodes := map[string]NodeInfo{}
			for i := range max(p.Nodes, 1) {
				n := fmt.Sprintf("n-%04d", i)
				names = append(names, n)
				nodes[n] = NodeInfo{Fabric: p.Fabric + "-1"}
			}
			in := input(facility.Model{Name: m.Name, Source: m.Source, Replicas: 1, Profiles: []facility.Profile{p}},
				0, scope("site=ams1", "room=a", "row=r01", "rack=r01-k01"), nodes, names...)
			out = append(out, in)
		}
	}
	return out
}

// TestBenchCatalogRenders keeps the benchmark honest: its catalog parses
// and every profile renders.
func TestBenchCatalogRenders(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(benchCatalog)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := facility.ParseCatalog(filepath.Base(benchCatalog), src)
	if err != nil {
		t.Fatal(err)
	}
	ins := benchInputs(cat)
	if len(ins) < 10 {
		t.Fatalf("%d profiles, want every shape (10)", len(ins))
	}
	for _, in := range ins {
		if _, err := Job(in); err != nil {
			t.Errorf("%s: %v", in.Model.Name, err)
		}
	}
}

// BenchmarkParseValidateRender parses and validates the catalog of every
// profile shape, then renders one replica of each profile into its job:
// what the controller does for a catalog it reads, per catalog.
func BenchmarkParseValidateRender(b *testing.B) {
	src, err := os.ReadFile(benchCatalog)
	if err != nil {
		b.Fatal(err)
	}
	cat, err := facility.ParseCatalog("catalog.hcl", src)
	if err != nil {
		b.Fatal(err)
	}
	ins := benchInputs(cat)
	b.Run("parse+validate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := facility.ParseCatalog("catalog.hcl", src); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("render", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, in := range ins {
				if _, err := Job(in); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			cat, err := facility.ParseCatalog("catalog.hcl", src)
			if err != nil {
				b.Fatal(err)
			}
			for _, in := range benchInputs(cat) {
				if _, err := Job(in); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

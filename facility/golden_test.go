package facility

import (
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// repoRoot is the repository's root, from this package's directory.
const repoRoot = ".."

// exampleFiles returns every fleet, facility and catalog file under jobs/
// and the repository's testdata folders, by kind, as paths relative to the
// repository's root. A file's kind is in its name (fleet.hcl,
// bad-facility.hcl, catalog-over.hcl); Nomad job and agent files name none
// and are left out.
func exampleFiles(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".hcl") || (!strings.HasPrefix(rel, "jobs/") && !strings.Contains(rel, "/testdata/")) {
			return nil
		}
		for _, kind := range []string{"fleet", "facility", "catalog"} {
			if strings.Contains(d.Name(), kind) {
				out[kind] = append(out[kind], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"fleet", "facility", "catalog"} {
		if len(out[kind]) == 0 {
			t.Fatalf("no %s file found under jobs/ or testdata", kind)
		}
	}
	return out
}

// parsed is what a parser made of a file: its value, or its errors.
type parsed struct {
	Value any    `json:",omitempty"`
	Error string `json:",omitempty"`
}

// TestParseGolden parses every example and testdata file and compares the
// values (or errors) with testdata/golden, which the parsers before the
// move to gohcl wrote: the same files parse to the same values.
func TestParseGolden(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for kind, files := range exampleFiles(t) {
		for _, rel := range files {
			want[goldenPath(kind, rel)] = true
			t.Run(rel, func(t *testing.T) {
				src, err := os.ReadFile(filepath.Join(repoRoot, rel))
				if err != nil {
					t.Fatal(err)
				}
				var p parsed
				switch kind {
				case "fleet":
					p.Value, err = ParseFleet(rel, src)
				case "facility":
					p.Value, err = ParseFacility(rel, src)
				case "catalog":
					p.Value, err = ParseCatalog(rel, src)
				}
				if err != nil {
					p.Value, p.Error = nil, err.Error()
				}
				got, err := json.MarshalIndent(p, "", " ")
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, '\n')
				golden := goldenPath(kind, rel)
				if *update {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, got, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test -run TestParseGolden -update to create it)", err)
				}
				if diff := cmp.Diff(string(want), string(got)); diff != "" {
					t.Errorf("%s differs (-golden +got):\n%s", golden, diff)
				}
			})
		}
	}
	// No golden file outlives its input.
	have, _ := filepath.Glob(filepath.Join("testdata", "golden", "*", "*.json"))
	for _, g := range have {
		if !want[g] && !*update {
			t.Errorf("%s: no such example file any more; remove it", g)
		}
	}
}

func goldenPath(kind, rel string) string {
	return filepath.Join("testdata", "golden", kind, strings.ReplaceAll(rel, "/", "_")+".json")
}

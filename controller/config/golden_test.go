package config

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
const repoRoot = "../.."

// goldenEnv is the environment of the "env" half of TestParseGolden: every
// variable the parser reads, and those the test files read with env().
var goldenEnv = map[string]string{
	"NOMAD_ADDR": "https://nomad.env:4646", "NOMAD_TOKEN": "env-token", "NOMAD_REGION": "env-region",
	"NOMAD_NAMESPACE": "default", "NOMAD_CACERT": "env/ca.pem", "NOMAD_CLIENT_CERT": "env/cli.pem",
	"NOMAD_CLIENT_KEY": "env/cli-key.pem", "NOMAD_TLS_SERVER_NAME": "server.env.nomad", "NOMAD_SKIP_VERIFY": "true",
	"CONSUL_HTTP_ADDR": "consul.env:8500", "CONSUL_HTTP_TOKEN": "env-consul-token",
	"LLMGW_NOMAD_TOKEN": "file-nomad-token", "LLMGW_API_TOKEN": "file-api-token",
}

// configFiles returns the controller configurations under jobs/ (named
// llmgw.hcl) and this package's testdata, relative to the repository's root.
func configFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "jobs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "llmgw.hcl" {
			rel, _ := filepath.Rel(repoRoot, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	td, _ := filepath.Glob(filepath.Join("testdata", "*.hcl"))
	for _, f := range td {
		out = append(out, "controller/config/"+filepath.ToSlash(f))
	}
	if len(out) < 2 {
		t.Fatalf("found only %v", out)
	}
	return out
}

// TestParseGolden parses every example configuration, in an empty
// environment and in goldenEnv, and compares the values (or errors) with
// testdata/golden, which the parser before the move to gohcl wrote: the
// same files parse to the same values.
func TestParseGolden(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for _, rel := range configFiles(t) {
		for _, env := range []string{"noenv", "env"} {
			golden := filepath.Join("testdata", "golden", strings.ReplaceAll(rel, "/", "_")+"."+env+".json")
			want[golden] = true
			t.Run(rel+"/"+env, func(t *testing.T) {
				src, err := os.ReadFile(filepath.Join(repoRoot, rel))
				if err != nil {
					t.Fatal(err)
				}
				var m map[string]string
				if env == "env" {
					m = goldenEnv
				}
				var p struct {
					Value  *Config `json:",omitempty"`
					Errors []string
				}
				c, err := Parse(rel, src, envMap(m))
				if err != nil {
					for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
						p.Errors = append(p.Errors, e.Error())
					}
				} else {
					p.Value = &c
				}
				got, err := json.MarshalIndent(p, "", " ")
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, '\n')
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
	have, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	for _, g := range have {
		if !want[g] && !*update {
			t.Errorf("%s: no such example file any more; remove it", g)
		}
	}
}

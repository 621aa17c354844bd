package plancmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/bounded"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", name, diff)
	}
}

func exitCode(err error) int {
	if err == nil {
		return ExitPlaced
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return -1
}

func TestPlanGolden(t *testing.T) {
	td := func(name string) string { return filepath.Join("testdata", name) }
	ex := func(name string) string { return filepath.Join("..", "..", "..", "..", "..", "jobs", "examples", name) }
	tests := []struct {
		name                     string
		fleet, facility, catalog string
		wantCode                 int
	}{
		{"plan", td("fleet.hcl"), td("facility.hcl"), td("catalog.hcl"), ExitPlaced},
		{"over", td("fleet.hcl"), td("facility.hcl"), td("catalog-over.hcl"), ExitUnplaced},
		// Row r01 and pdu=p03-a count measured, from the learned blocks.
		{"measured", td("fleet-learned.hcl"), td("facility-measured.hcl"), td("catalog.hcl"), ExitPlaced},
		{"examples", ex("fleet.hcl"), ex("facility.hcl"), ex("catalog.hcl"), ExitPlaced},
		// The fleet and facility in HCL's JSON syntax place as in HCL.
		{"plan", td("fleet.json"), td("facility.json"), td("catalog.hcl"), ExitPlaced},
		// Its nodes in one array: read in parts (facility.FleetReader).
		{"plan", td("fleet-array.json"), td("facility.json"), td("catalog.hcl"), ExitPlaced},
		// Models with weights, nodes whose stores hold some: where they
		// are decides among places as well spread, and the plan says
		// what each node fetches.
		{"weights", td("fleet-weights.hcl"), td("facility.hcl"), td("catalog-weights.hcl"), ExitPlaced},
	}
	for _, tt := range tests {
		for _, asJSON := range []bool{false, true} {
			name, ext := tt.name, ".txt"
			if asJSON {
				ext = ".json"
			}
			t.Run(name+ext, func(t *testing.T) {
				var out bytes.Buffer
				err := Run(Options{Fleet: tt.fleet, Facility: tt.facility, Catalog: tt.catalog, Output: map[bool]string{false: "table", true: "json"}[asJSON]}, &out)
				if got := exitCode(err); got != tt.wantCode {
					t.Fatalf("exit code: got %d (%v), want %d", got, err, tt.wantCode)
				}
				golden(t, name+ext+".golden", out.Bytes())
				if asJSON {
					checkJSONShape(t, out.Bytes())
				}
			})
		}
	}
}

// keyOrder returns the keys of a JSON object, in order.
func keyOrder(t *testing.T, raw []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("want an object, got %.40s", raw)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// checkJSONShape checks --json has exactly the keys the issue specifies, in
// its order, and nothing else.
func checkJSONShape(t *testing.T, b []byte) {
	t.Helper()
	if bytes.Count(b, []byte("\n")) != 1 || !bytes.HasSuffix(b, []byte("\n")) {
		t.Errorf("want one line, got %d newlines", bytes.Count(b, []byte("\n")))
	}
	if diff := cmp.Diff([]string{"placements", "unplaced", "domains"}, keyOrder(t, b)); diff != "" {
		t.Errorf("top-level keys (-want +got):\n%s", diff)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	// check checks a list's items have the keys want, or one of the
	// shapes or.
	check := func(what string, raw json.RawMessage, want []string, each func(json.RawMessage), or ...[]string) {
		var xs []json.RawMessage
		if err := json.Unmarshal(raw, &xs); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if xs == nil {
			t.Errorf("%s: got null, want a list", what)
		}
		for _, x := range xs {
			got := keyOrder(t, x)
			if diff := cmp.Diff(want, got); diff != "" && !slices.ContainsFunc(or, func(o []string) bool { return slices.Equal(o, got) }) {
				t.Errorf("%s keys (-want +got):\n%s", what, diff)
			}
			if each != nil {
				each(x)
			}
		}
	}
	levels := []string{"site", "room", "row", "rack", "pdu"}
	check("placements", top["placements"], []string{"replica", "model", "profile", "domain", "shards", "watts"}, func(raw json.RawMessage) {
		var p map[string]json.RawMessage
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		check("shards", p["shards"], []string{"node", "watts"}, nil, []string{"node", "watts", "fetch"})
		// domain: level → value, coarse to fine, from the site down.
		got := keyOrder(t, p["domain"])
		if len(got) == 0 || !slices.Equal(got, levels[:len(got)]) {
			t.Errorf("domain levels: got %v, want a prefix of %v", got, levels)
		}
	})
	check("unplaced", top["unplaced"], []string{"replica", "model", "reasons"}, nil)
	check("domains", top["domains"], []string{"domain", "cap_watts", "draw_watts", "count", "declared_watts", "held"}, nil)
}

func TestPlanBadInput(t *testing.T) {
	td := func(name string) string { return filepath.Join("testdata", name) }
	dir := t.TempDir()
	tests := []struct {
		name                     string
		fleet, facility, catalog string
		want                     []string // lines of the error
	}{
		{
			"duplicate node, unknown level, negative watts",
			td("bad-fleet.hcl"), td("bad-facility.hcl"), td("catalog.hcl"),
			[]string{
				`testdata/bad-fleet.hcl:7: node "n1": duplicate node name (first defined at testdata/bad-fleet.hcl:1)`,
				`testdata/bad-facility.hcl:2: budget: domain "shelf=s1": unknown level "shelf" (want site, room, row, rack or pdu)`,
				`testdata/bad-facility.hcl:4: watts must not be negative, got -17300`,
			},
		},
		{
			"a JSON fleet: a value of the wrong type",
			td("bad-fleet.json"), td("facility.json"), td("catalog.hcl"),
			[]string{`testdata/bad-fleet.json:4: count: Unsuitable value type: a number is required`},
		},
		{
			"a profile no node could ever hold",
			td("fleet.hcl"), td("facility.hcl"), td("catalog-never.hcl"),
			[]string{`testdata/catalog-never.hcl:2: profile llama-3.1-405b/b200x8: no node could ever hold it: no node has any NVIDIA B200`},
		},
		{
			"missing file",
			td("fleet.hcl"), td("nope.hcl"), td("catalog.hcl"),
			[]string{`open testdata/nope.hcl: no such file or directory`},
		},
		{
			"a catalog nested past the limit, a facility past the size limit",
			td("fleet.hcl"), deepOrBig(t, dir, "facility.hcl", bounded.MaxFileBytes+1), deepOrBig(t, dir, "catalog.hcl", 0),
			[]string{
				filepath.Join(dir, "facility.hcl") + ": larger than 67108864 bytes (llmgw's size limit on this input)",
				filepath.Join(dir, "catalog.hcl") + ":2: nested deeper than 64 levels (llmgw's nesting depth limit)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(Options{Fleet: tt.fleet, Facility: tt.facility, Catalog: tt.catalog}, &out)
			if got := exitCode(err); got != ExitBadInput {
				t.Fatalf("exit code: got %d (%v), want %d", got, err, ExitBadInput)
			}
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q on bad input, want nothing", out.String())
			}
		})
	}
}

// The command line: -o json (and --output json) prints what Run prints for
// json, -o table the tables; --json, deprecated, is -o json and says so;
// another format, or --json against -o table, is bad input.
func TestPlanOutputFlag(t *testing.T) {
	files := []string{"--fleet", filepath.Join("testdata", "fleet.hcl"), "--facility", filepath.Join("testdata", "facility.hcl"),
		"--catalog", filepath.Join("testdata", "catalog.hcl")}
	runCmd := func(args ...string) (string, string, error) {
		cmd := NewCommand()
		var stdout, stderr bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(append(slices.Clone(files), args...))
		err := cmd.Execute()
		return stdout.String(), stderr.String(), err
	}
	want := map[string][]byte{}
	for _, f := range []string{"table", "json"} {
		var out bytes.Buffer
		if err := Run(Options{Fleet: files[1], Facility: files[3], Catalog: files[5], Output: f}, &out); err != nil {
			t.Fatal(err)
		}
		want[f] = out.Bytes()
	}
	if !json.Valid(want["json"]) || json.Valid(want["table"]) {
		t.Fatalf("Run's json is not JSON or its table is:\n%s\n%s", want["json"], want["table"])
	}
	for _, tc := range []struct {
		args       []string
		want       string
		deprecated bool
	}{
		{nil, "table", false},
		{[]string{"-o", "table"}, "table", false},
		{[]string{"-o", "json"}, "json", false},
		{[]string{"--output=json"}, "json", false},
		{[]string{"--json"}, "json", true},
		{[]string{"--json", "-o", "json"}, "json", true},
	} {
		stdout, stderr, err := runCmd(tc.args...)
		if err != nil {
			t.Errorf("plan %v: %v", tc.args, err)
			continue
		}
		if stdout != string(want[tc.want]) {
			t.Errorf("plan %v printed:\n%s\nwant the %s output:\n%s", tc.args, stdout, tc.want, want[tc.want])
		}
		if got := strings.Contains(stderr, "deprecated") && strings.Contains(stderr, "-o json"); got != tc.deprecated {
			t.Errorf("plan %v: stderr %q, deprecation notice %v, want %v", tc.args, stderr, got, tc.deprecated)
		}
	}
	for _, args := range [][]string{{"-o", "yaml"}, {"--json", "-o", "table"}} {
		if _, _, err := runCmd(args...); exitCode(err) != ExitBadInput {
			t.Errorf("plan %v: %v (exit %d), want exit %d", args, err, exitCode(err), ExitBadInput)
		}
	}
}

// A profile whose args no contract checked (an engine_version llmgw has
// no contract for) plans, and the plan says so in both outputs.
func TestPlanWarnings(t *testing.T) {
	catalog := filepath.Join(t.TempDir(), "catalog.hcl")
	src := `model "m" {
  source = "org/m"
  profile "p" {
    engine         = "vllm"
    engine_version = "0.99.0"
    gpu            = "NVIDIA H200"
    args           = ["--a-flag-of-0.99", "1"]
  }
}
`
	if err := os.WriteFile(catalog, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	want := catalog + `:3: profile m/p: engine_version "0.99.0": llmgw has no contract for vllm 0.99.0 (it has vllm@v0.28.0), so args were not checked against a contract, only for flags llmgw sets`
	o := Options{Fleet: filepath.Join("testdata", "fleet.hcl"), Facility: filepath.Join("testdata", "facility.hcl"), Catalog: catalog}
	var out bytes.Buffer
	if err := Run(o, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nWARNINGS\n"+want+"\n") {
		t.Errorf("table output has no WARNINGS section with %q:\n%s", want, out.String())
	}
	o.Output = "json"
	out.Reset()
	if err := Run(o, &out); err != nil {
		t.Fatal(err)
	}
	var got struct{ Warnings []string }
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{want}, got.Warnings); diff != "" {
		t.Errorf("json warnings (-want +got):\n%s", diff)
	}
}

// deepOrBig writes the file name in dir: size bytes
// of a comment when size > 0, else a catalog nested 100,000 levels deep
// on its second line.
func deepOrBig(t *testing.T, dir, name string, size int) string {
	t.Helper()
	p := filepath.Join(dir, name)
	src := "# a catalog\nmodel \"m\" { replicas = " + strings.Repeat("[", 100_000) + "\n"
	if size > 0 {
		src = "#" + strings.Repeat("x", size-1)
	}
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

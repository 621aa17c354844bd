package facility

import (
	"os"
	"testing"

	"github.com/llmgw/llmgw/internal/testing/hostile"
)

// addHostile adds the hostile-input seeds: deep nesting, huge values.
func addHostile(f *testing.F) {
	for _, b := range hostile.HCLSeeds() {
		f.Add(b)
	}
}

func addSeeds(f *testing.F, files ...string) {
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// fuzzCheck: a parser never panics; what it accepts validates; what it
// refuses names file:line on every line.
func fuzzCheck(t *testing.T, err error, validate func() error) {
	if err != nil {
		checkErrorLines(t, "fuzz.hcl", err)
		return
	}
	if err := validate(); err != nil {
		t.Fatalf("parsed, but does not validate: %v", err)
	}
}

func FuzzParseFleet(f *testing.F) {
	addHostile(f)
	addSeeds(f, "../jobs/examples/fleet.hcl")
	f.Add([]byte(okNode))
	f.Add([]byte(okNode + okNode))
	f.Add([]byte("node \"n1\" {\n  row = \"r1\"\n  rack = \"k1\"\n}\nnode \"n2\" {\n  row = \"r2\"\n  rack = \"k1\"\n}\n"))
	f.Add([]byte("node \"n1\" {\n  gpu \"H\" {\n    count = 1\n    free = 2\n    power_limit = 1e400\n  }\n}\n"))
	f.Add([]byte(okNode + "learned \"m\" \"p\" {\n  gpu = \"H\"\n  watts = 310.5\n  samples = 4000\n}\n"))
	f.Add([]byte("learned \"m\" \"p\" {\n  gpu = \"\"\n  watts = -1\n  samples = 1e12\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		fleet, err := ParseFleet("fuzz.hcl", src)
		fuzzCheck(t, err, fleet.Validate)
		if err == nil {
			if _, err := NewPlanner(fleet, Facility{}, nil); err != nil {
				t.Fatalf("parsed, but the planner refuses it: %v", err)
			}
		}
	})
}

func FuzzParseFacility(f *testing.F) {
	addHostile(f)
	addSeeds(f, "../jobs/examples/facility.hcl")
	f.Add([]byte("headroom = 0.05\nbudget \"pdu=p01-a\" { watts = 17300 }\nhold \"rack=r01-k03\" {\n  reason = \"PDU swap\"\n  drain = true\n}\n"))
	f.Add([]byte("budget \"shelf=s1\" { watts = -1 }\n"))
	f.Add([]byte("headroom = 1\nbudget \"rack\" {}\n"))
	f.Add([]byte("count = \"measured\"\nmeasured {\n  percentile = 99\n  window = \"30m\"\n  margin = 0.2\n  min_samples = 60\n}\nbudget \"pdu=p1\" {\n  watts = 17300\n  count = \"declared\"\n}\n"))
	f.Add([]byte("count = \"x\"\nmeasured {\n  percentile = 1e400\n  window = \"-1h\"\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		fac, err := ParseFacility("fuzz.hcl", src)
		fuzzCheck(t, err, fac.Validate)
	})
}

func FuzzParseCatalog(f *testing.F) {
	addHostile(f)
	addSeeds(f, "../jobs/examples/catalog.hcl")
	f.Add([]byte(okProfile))
	f.Add([]byte("model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    nodes = 2\n    keep_within = \"cage\"\n    spread = [\"rack\", \"rack\"]\n  }\n}\n"))
	addSeeds(f, "testdata/catalog-autoscale.hcl")
	f.Add([]byte("model \"m\" {\n  autoscale {\n    min = 0\n    max = 2\n    target { ttft_p90 = \"1s\" }\n    idle_after = \"11m\"\n  }\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n"))
	f.Add([]byte("model \"m\" {\n  replicas = -1\n  profile \"p\" {\n    engine = var.x\n    env = { A = 1 }\n  }\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		cat, err := ParseCatalog("fuzz.hcl", src)
		fuzzCheck(t, err, cat.Validate)
		if err == nil {
			for _, m := range cat.Models {
				for _, p := range m.Profiles {
					if a, b := ProfileFingerprint(m, p), ProfileFingerprint(m, p); a != b || len(a) != 16 {
						t.Fatalf("fingerprint %q, %q: want one 16-digit value", a, b)
					}
				}
			}
		}
	})
}

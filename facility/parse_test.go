package facility

import (
	"errors"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/hcldecode"
)

// twoNodeFleet is what TestParseFleet's file says, in either syntax, its
// nodes at the positions given.
func twoNodeFleet(first, second Pos) Fleet {
	return Fleet{Nodes: []Node{
		{
			Name: "n-0001", Pool: "gpu",
			Location: Location{Site: "ams1", Room: "a", Row: "r01", Rack: "r01-k01", PDU: "p01-a"},
			CPUCores: 192, MemoryGB: 2048, BaseWatts: 1200, MeasuredWatts: 3100.5, Fabric: "ib-ndr-1",
			GPUs: []GPU{{Model: "NVIDIA H200", Count: 8, Free: 6, PowerLimitWatts: 700, MemoryMiB: 143771}},
			Pos:  first,
		},
		{
			Name: "n-0002", Pool: DefaultPool, Location: Location{Rack: "r01-k01"},
			GPUs: []GPU{{Model: "NVIDIA H200", Count: 4, Free: 4, PowerLimitWatts: 600}},
			Pos:  second,
		},
	}}
}

func TestParseFleet(t *testing.T) {
	t.Parallel()
	src := `
node "n-0001" {
  site = "ams1"
  room = "a"
  row  = "r01"
  rack = "r01-k01"
  pdu  = "p01-a"
  pool = "gpu"
  cpu_cores = 192
  memory_gb = 2048
  base_watts = 1200
  measured_watts = 3100.5
  fabric = "ib-ndr-1"
  gpu "NVIDIA H200" {
    count = 8
    free  = 6
    power_limit = 700
    memory = 143771
  }
}

node "n-0002" {
  rack = "r01-k01"
  gpu "NVIDIA H200" {
    count = 4
    power_limit = 600
  }
}
`
	got, err := ParseFleet("fleet.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(twoNodeFleet(Pos{"fleet.hcl", 2}, Pos{"fleet.hcl", 22}), got); diff != "" {
		t.Errorf("fleet (-want +got):\n%s", diff)
	}
}

func TestParseFacility(t *testing.T) {
	t.Parallel()
	src := `headroom = 0.05
budget "pdu=p01-a"    { watts = 17300 }
budget "rack=r01-k01" { watts = 30000 }
hold "rack=r01-k03" {
  reason = "PDU swap"
  drain  = true
}
hold "row=r02" {}
`
	got, err := ParseFacility("facility.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Facility{
		Headroom: 0.05,
		Budgets: []Budget{
			{Domain: Domain{LevelPDU, "p01-a"}, Watts: 17300, Pos: Pos{"facility.hcl", 2}},
			{Domain: Domain{LevelRack, "r01-k01"}, Watts: 30000, Pos: Pos{"facility.hcl", 3}},
		},
		Holds: []Hold{
			{Domain: Domain{LevelRack, "r01-k03"}, Reason: "PDU swap", Drain: true, Pos: Pos{"facility.hcl", 4}},
			{Domain: Domain{LevelRow, "r02"}, Pos: Pos{"facility.hcl", 8}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("facility (-want +got):\n%s", diff)
	}
	if got, want := got.Limit(got.Budgets[0]), 17300*0.95; got != want {
		t.Errorf("limit: got %v, want %v", got, want)
	}
}

func TestParseCatalog(t *testing.T) {
	t.Parallel()
	src := `model "llama-3.1-70b" {
  source   = "meta-llama/Llama-3.1-70B-Instruct"
  replicas = 4
  profile "h200x4" {
    engine      = "vllm"
    gpu         = "NVIDIA H200"
    gpus        = 4
    nodes       = 2
    watts       = 2600
    min_watts   = 300
    cpu_cores   = 16
    memory_gb   = 256
    keep_within = "rack"
    spread      = ["pdu"]
    fabric      = "ib-ndr"
    pool        = "gpu"
    args        = ["--max-model-len", "32768"]
    env         = { HF_HOME = "/models" }
    ready       = "/health"
    weight      = 3
  }
  profile "min" {
    engine = "tgi"
    gpu    = "NVIDIA H200"
  }
}
`
	got, err := ParseCatalog("catalog.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Catalog{Models: []Model{{
		Name: "llama-3.1-70b", Source: "meta-llama/Llama-3.1-70B-Instruct", Replicas: 4, MaxSurge: 1, Priority: DefaultPriority, Pos: Pos{"catalog.hcl", 1},
		Profiles: []Profile{
			{
				Name: "h200x4", Engine: "vllm", GPU: "NVIDIA H200", GPUs: 4, Nodes: 2, Watts: 2600, MinWatts: 300,
				CPUCores: 16, MemoryGB: 256, KeepWithin: LevelRack, Spread: []Level{LevelPDU},
				Fabric: "ib-ndr", Pool: "gpu", Args: []string{"--max-model-len", "32768"},
				Env: map[string]string{"HF_HOME": "/models"}, Ready: "/health", Weight: 3, Pos: Pos{"catalog.hcl", 4},
			},
			{
				Name: "min", Engine: "tgi", GPU: "NVIDIA H200", GPUs: 1, Nodes: 1, Pool: DefaultPool,
				Spread: []Level{LevelRack, LevelPDU}, Weight: 1, Pos: Pos{"catalog.hcl", 22},
			},
		},
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("catalog (-want +got):\n%s", diff)
	}
}

const (
	okNode = `node "n1" {
  rack = "k1"
  cpu_cores = 64
  gpu "H" {
    count = 8
    power_limit = 700
  }
}
`
	okProfile = `model "m" {
  profile "p" {
    engine = "vllm"
    gpu    = "H"
    gpus   = 8
  }
}
`
)

// Every bad input is an error naming file:line.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kind string // fleet, facility, catalog
		src  string
		want string // the whole error, or one of its lines
	}{
		{"fleet: duplicate node names", "fleet", okNode + okNode, `f.hcl:9: node "n1": duplicate node name (first defined at f.hcl:1)`},
		{"fleet: negative base watts", "fleet", "node \"n1\" {\n  base_watts = -5\n}\n", "f.hcl:2: base_watts must not be negative, got -5"},
		{"fleet: negative measured watts", "fleet", "node \"n1\" {\n  measured_watts = -1\n}\n", "f.hcl:2: measured_watts must not be negative, got -1"},
		{"fleet: negative cpu", "fleet", "node \"n1\" {\n  cpu_cores = -1\n}\n", "f.hcl:2: cpu_cores must not be negative, got -1"},
		{"fleet: zero power limit", "fleet", "node \"n1\" {\n  gpu \"H\" {\n    count = 1\n    power_limit = 0\n  }\n}\n", "f.hcl:4: power_limit must be positive"},
		{"fleet: free over count", "fleet", "node \"n1\" {\n  gpu \"H\" {\n    count = 1\n    free = 2\n    power_limit = 1\n  }\n}\n", "f.hcl:4: free must be between 0 and count (1), got 2"},
		{"fleet: missing count", "fleet", "node \"n1\" {\n  gpu \"H\" {\n    power_limit = 1\n  }\n}\n", `f.hcl:2: Missing required argument: The argument "count" is required, but no definition was found.`},
		{"fleet: gpu listed twice", "fleet", "node \"n1\" {\n  gpu \"H\" {\n    count = 1\n    power_limit = 1\n  }\n  gpu \"H\" {\n    count = 1\n    power_limit = 1\n  }\n}\n", `f.hcl:1: node "n1": gpu "H" listed twice`},
		{"fleet: fractional count", "fleet", "node \"n1\" {\n  gpu \"H\" {\n    count = 1.5\n    power_limit = 1\n  }\n}\n", "f.hcl:3: count: Unsuitable value type: value must be a whole number"},
		{"fleet: unknown attribute", "fleet", "node \"n1\" {\n  shelf = \"x\"\n}\n", `f.hcl:2: Unsupported argument: An argument named "shelf" is not expected here.`},
		{"fleet: value with a space", "fleet", "node \"n1\" {\n  rack = \"k 1\"\n}\n", `f.hcl:2: rack: value "k 1": no spaces, control characters, '=' or ','`},
		{"fleet: rack in two rows", "fleet", "node \"n1\" {\n  row = \"r1\"\n  rack = \"k1\"\n}\nnode \"n2\" {\n  row = \"r2\"\n  rack = \"k1\"\n}\n", `f.hcl:5: node "n2": rack=k1 is in row="r2" here but in row="r1" at f.hcl:1`},
		{"fleet: syntax", "fleet", "node \"n1\" {\n  rack = \n}\n", "f.hcl:2: "},
		{"facility: unknown level in a budget key", "facility", "budget \"shelf=s1\" { watts = 100 }\n", `f.hcl:1: budget: domain "shelf=s1": unknown level "shelf" (want site, room, row, rack or pdu)`},
		{"facility: budget key without a value", "facility", "\n\nbudget \"rack\" { watts = 100 }\n", `f.hcl:3: budget: domain "rack": want level=value, such as rack=r01-k01`},
		{"facility: negative watts", "facility", "budget \"pdu=p1\" {\n  watts = -17300\n}\n", "f.hcl:2: watts must not be negative, got -17300"},
		{"facility: zero watts", "facility", "budget \"pdu=p1\" {\n  watts = 0\n}\n", "f.hcl:2: watts must be positive"},
		{"facility: headroom of 1", "facility", "headroom = 1\n", "f.hcl:1: headroom must be at least 0 and less than 1, got 1"},
		{"facility: negative headroom", "facility", "\nheadroom = -0.1\n", "f.hcl:2: headroom must be at least 0 and less than 1, got -0.1"},
		{"facility: duplicate budget", "facility", "budget \"pdu=p1\" { watts = 1 }\nbudget \"pdu=p1\" { watts = 2 }\n", `f.hcl:2: budget "pdu=p1": duplicate (first at f.hcl:1)`},
		{"facility: unknown level in a hold key", "facility", "hold \"cage=c1\" {}\n", `f.hcl:1: hold: domain "cage=c1": unknown level "cage"`},
		{"facility: duplicate hold", "facility", "hold \"rack=k1\" {}\n\nhold \"rack=k1\" {}\n", `f.hcl:3: hold "rack=k1": duplicate (first at f.hcl:1)`},
		{"facility: drain not a bool", "facility", "hold \"rack=k1\" {\n  drain = \"maybe\"\n}\n", "f.hcl:2: drain: Unsuitable value type: a bool is required"},
		{"catalog: negative watts", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    watts = -1\n  }\n}\n", "f.hcl:5: watts must not be negative, got -1"},
		{"catalog: zero min_watts", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    min_watts = 0\n  }\n}\n", "f.hcl:5: min_watts must be positive"},
		{"catalog: negative min_watts", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    min_watts = -200\n  }\n}\n", "f.hcl:5: min_watts must not be negative, got -200"},
		{"catalog: min_watts above the declared draw per GPU", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    gpus = 2\n    watts = 1000\n\n    min_watts = 600\n  }\n}\n", "f.hcl:8: min_watts 600 is more than the profile's declared draw per GPU (watts 1000 / gpus 2 = 500)"},
		{"catalog: missing engine", "catalog", "model \"m\" {\n  profile \"p\" {\n    gpu = \"H\"\n  }\n}\n", `f.hcl:2: Missing required argument: The argument "engine" is required, but no definition was found.`},
		{"catalog: zero gpus", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    gpus = 0\n  }\n}\n", "f.hcl:5: gpus must be between 1 and 65536, got 0"},
		{"catalog: negative replicas", "catalog", "model \"m\" {\n  replicas = -1\n" + "  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n", "f.hcl:2: replicas must not be negative, got -1"},
		{"catalog: negative max_surge", "catalog", "model \"m\" {\n\n  max_surge = -1\n" + "  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n", "f.hcl:3: max_surge must not be negative, got -1"},
		{"catalog: negative max_unavailable", "catalog", "model \"m\" {\n  max_unavailable = -2\n" + "  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n", "f.hcl:2: max_unavailable must not be negative, got -2"},
		{"catalog: a roll that cannot move", "catalog", "model \"m\" {\n  max_surge = 0\n" + "  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n", "f.hcl:1: model \"m\": max_surge and max_unavailable are both 0: a roll could never make progress"},
		{"catalog: multi-node without keep_within", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    nodes = 2\n  }\n}\n", `f.hcl:2: profile "p": keep_within is required when nodes > 1`},
		{"catalog: unknown keep_within", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    nodes = 2\n    keep_within = \"cage\"\n  }\n}\n", `f.hcl:6: keep_within: unknown level "cage"`},
		{"catalog: unknown spread level", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    spread = [\"rack\", \"shelf\"]\n  }\n}\n", `f.hcl:5: spread: unknown level "shelf"`},
		{"catalog: spread level twice", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    spread = [\"rack\", \"rack\"]\n  }\n}\n", "f.hcl:2: profile m/p: spread lists rack twice"},
		{"catalog: no profile", "catalog", "model \"m\" {\n}\n", `f.hcl:1: model "m": no profile`},
		{"catalog: duplicate model", "catalog", okProfile + okProfile, `f.hcl:8: model "m": duplicate model (first at f.hcl:1)`},
		{"catalog: name like a flag", "catalog", strings.Replace(okProfile, `model "m"`, `model "-m"`, 1), `f.hcl:1: model "-m": name starts with '-': engines would read --served-model-name -m as a flag`},
		{"catalog: source like a flag", "catalog", strings.Replace(okProfile, "{\n", "{\n  source = \"-x\"\n", 1), `f.hcl:1: model "m": source "-x" starts with '-': engines would read it as a flag (write a path as ./-x)`},
		{"catalog: duplicate profile", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n", "f.hcl:6: profile m/p: duplicate (first at f.hcl:2)"},
		{"catalog: args not a list", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    args = 3\n  }\n}\n", "f.hcl:5: args: Unsuitable value type: list of string required"},
		{"fleet: unknown attribute, with a hint", "fleet", "node \"n1\" {\n  rak = \"x\"\n}\n", `f.hcl:2: Unsupported argument: An argument named "rak" is not expected here. Did you mean "rack"?`},
		{"fleet: unknown block, with a hint", "fleet", "node \"n1\" {\n  gpus \"H\" {}\n}\n", `f.hcl:2: Unsupported block type: Blocks of type "gpus" are not expected here. Did you mean "gpu"?`},
		{"facility: unknown block, with a hint", "facility", "\nbudgets \"pdu=p1\" { watts = 1 }\n", `f.hcl:2: Unsupported block type: Blocks of type "budgets" are not expected here. Did you mean "budget"?`},
		{"facility: hold without a domain", "facility", "hold {}\n", `f.hcl:1: Missing domain for hold: All hold blocks must have 1 labels (domain).`},
		{"facility: null reason", "facility", "hold \"rack=k1\" {\n  reason = null\n}\n", "f.hcl:2: reason: must not be null"},
		{"catalog: unknown attribute, with a hint", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    gpuss = 2\n  }\n}\n", `f.hcl:5: Unsupported argument: An argument named "gpuss" is not expected here. Did you mean "gpus"?`},
		{"catalog: null args", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n    args = null\n  }\n}\n", "f.hcl:5: args: must not be null"},
		{"catalog: variables are not allowed", "catalog", "model \"m\" {\n  profile \"p\" {\n    engine = var.engine\n    gpu = \"H\"\n  }\n}\n", "f.hcl:3: engine: Variables not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			switch tt.kind {
			case "fleet":
				_, err = ParseFleet("f.hcl", []byte(tt.src))
			case "facility":
				_, err = ParseFacility("f.hcl", []byte(tt.src))
			case "catalog":
				_, err = ParseCatalog("f.hcl", []byte(tt.src))
			}
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			checkErrorLines(t, "f.hcl", err)
			if !containsLine(err.Error(), tt.want) {
				t.Errorf("got error:\n%v\nwant a line starting %q", err, tt.want)
			}
			var fe *hcldecode.Problem
			if !errors.As(err, &fe) || fe.Filename != "f.hcl" || fe.Line < 1 {
				t.Errorf("got %#v, want an *hcldecode.Problem with a position", err)
			}
		})
	}
}

func containsLine(msg, prefix string) bool {
	for line := range strings.SplitSeq(msg, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

var errLine = regexp.MustCompile(`^[^:]+:[1-9][0-9]*: `)

// checkErrorLines checks that every line of err names filename:line.
func checkErrorLines(t *testing.T, filename string, err error) {
	t.Helper()
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if !errLine.MatchString(line) || !strings.HasPrefix(line, filename+":") {
			t.Errorf("error line %q does not start with %s:LINE: ", line, filename)
		}
	}
}

func TestCheckCatalog(t *testing.T) {
	t.Parallel()
	fleet, err := ParseFleet("fleet.hcl", []byte(okNode+`
node "n2" {
  rack = "k2"
  cpu_cores = 64
  fabric = "ib-1"
  gpu "H" {
    count = 8
    power_limit = 700
  }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	fac, err := ParseFacility("facility.hcl", []byte("budget \"rack=k1\" { watts = 3000 }\nbudget \"rack=k2\" { watts = 30000 }\n"))
	if err != nil {
		t.Fatal(err)
	}
	prof := func(body string) string {
		return "model \"m\" {\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n" + body + "  }\n}\n"
	}
	tests := []struct {
		name, body, want string
	}{
		{"fits", "    gpus = 8\n", ""},
		{"too many gpus", "    gpus = 16\n", "catalog.hcl:2: profile m/p: no node could ever hold it: no node has 16 H (most is 8)"},
		{"gpu model", "    gpus = 1\n  }\n  profile \"q\" {\n    engine = \"vllm\"\n    gpu = \"B\"\n", "catalog.hcl:7: profile m/q: no node could ever hold it: no node has any B"},
		{"cpu", "    cpu_cores = 65\n", "catalog.hcl:2: profile m/p: no node could ever hold it: no node has 65 CPU cores free (most is 64)"},
		{"memory", "    memory_gb = 1\n", "catalog.hcl:2: profile m/p: no node could ever hold it: no node has 1 GB of memory free (most is 0)"},
		{"pool", "    pool = \"batch\"\n", "catalog.hcl:2: profile m/p: no node could ever hold it: no node in pool batch"},
		{"fabric", "    fabric = \"roce\"\n", "catalog.hcl:2: profile m/p: no node could ever hold it: no node on a roce* fabric"},
		{"budget", "    watts = 40000\n", "catalog.hcl:2: profile m/p: no node could ever hold it: over budget: rack=k1 would draw 40.0 kW of 3.0 kW with nothing else running"},
		{"keep_within", "    nodes = 2\n    keep_within = \"rack\"\n", "catalog.hcl:2: profile m/p: no node could ever hold it: no rack has 2 nodes that could hold a shard on one fabric (most is 1)"},
		{"keep_within site fits", "    nodes = 2\n    keep_within = \"site\"\n", "catalog.hcl:2: profile m/p: no node could ever hold it: no site has 2 nodes that could hold a shard on one fabric (most is 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat, err := ParseCatalog("catalog.hcl", []byte(prof(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			err = CheckCatalog(fleet, fac, cat)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %s", err, tt.want)
			}
		})
	}
}

func TestCheckFacility(t *testing.T) {
	t.Parallel()
	fleet, err := ParseFleet("fleet.hcl", []byte(okNode))
	if err != nil {
		t.Fatal(err)
	}
	fac, err := ParseFacility("facility.hcl", []byte("budget \"rack=k1\" { watts = 3000 }\nbudget \"rack=k9\" { watts = 3000 }\nhold \"pdu=p1\" {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "facility.hcl:2: budget \"rack=k9\": no node of the fleet is in rack=k9\nfacility.hcl:3: hold \"pdu=p1\": no node of the fleet is in pdu=p1"
	if err := CheckFacility(fleet, fac); err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestParseExamples(t *testing.T) {
	t.Parallel()
	read := func(name string) []byte {
		b, err := os.ReadFile("../jobs/examples/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fleet, err := ParseFleet("fleet.hcl", read("fleet.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	fac, err := ParseFacility("facility.hcl", read("facility.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := ParseCatalog("catalog.hcl", read("catalog.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(fleet.Nodes), 2*4*8*4; got != want {
		t.Errorf("nodes: got %d, want %d", got, want)
	}
	if err := errors.Join(CheckFacility(fleet, fac), CheckCatalog(fleet, fac, cat)); err != nil {
		t.Error(err)
	}
	multi := 0
	for _, m := range cat.Models {
		if m.Profiles[0].Nodes > 1 {
			multi++
		}
	}
	if multi == 0 || multi == len(cat.Models) {
		t.Errorf("catalog has %d multi-node models of %d, want a mix", multi, len(cat.Models))
	}
	if len(fac.Holds) == 0 {
		t.Error("facility has no hold")
	}
}

// Validate checks min_watts of a profile built in code as the parser does:
// finite, not negative, at most the declared draw per GPU.
func TestValidateMinWatts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		watts, floor float64
		want         string // "" valid
	}{
		{"under the declared draw per GPU", 1400, 300, ""},
		{"at it", 1400, 700, ""},
		{"no declared draw", 0, 650, ""},
		{"above it", 1400, 701, "x.hcl:4: profile m/p: min_watts 701 is more than the profile's declared draw per GPU (watts 1400 / gpus 2 = 700)"},
		{"negative", 1400, -1, "x.hcl:4: profile m/p: min_watts must not be negative, got -1"},
		{"not finite", 1400, math.Inf(1), "x.hcl:4: profile m/p: min_watts must be a finite number"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cat := Catalog{Models: []Model{{Name: "m", Profiles: []Profile{{
				Name: "p", Engine: "vllm", GPU: "H", GPUs: 2, Nodes: 1, Watts: tt.watts, MinWatts: tt.floor, Pos: Pos{"x.hcl", 4},
			}}}}}
			err := cat.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

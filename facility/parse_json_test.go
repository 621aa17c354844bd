package facility

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/hcldecode"
)

// TestParseFleetJSON reads TestParseFleet's fleet written in HCL's JSON
// syntax, as a generator would write it.
func TestParseFleetJSON(t *testing.T) {
	t.Parallel()
	src := `{
  "node": {
    "n-0001": {
      "site": "ams1", "room": "a", "row": "r01", "rack": "r01-k01", "pdu": "p01-a",
      "pool": "gpu", "cpu_cores": 192, "memory_gb": 2048,
      "base_watts": 1200, "measured_watts": 3100.5, "fabric": "ib-ndr-1",
      "gpu": {"NVIDIA H200": {"count": 8, "free": 6, "power_limit": 700, "memory": 143771}}
    },
    "n-0002": {
      "rack": "r01-k01",
      "gpu": {"NVIDIA H200": {"count": 4, "power_limit": 600}}
    }
  }
}`
	got, err := ParseFleet("fleet.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(twoNodeFleet(Pos{"fleet.json", 3}, Pos{"fleet.json", 9}), got); diff != "" {
		t.Errorf("fleet (-want +got):\n%s", diff)
	}
}

// TestParseErrorsJSON: bad input in a JSON file is reported as in an HCL
// file, each problem naming file:line and the field.
func TestParseErrorsJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		kind string // fleet, facility, catalog
		src  string
		want string // one line of the error
	}{
		{"fleet: syntax", "fleet", "{\"node\": {\"n1\": {\n  \"rack\": \n}}}", "f.json:3: Missing JSON value"},
		{"fleet: count not a number", "fleet", "{\"node\": {\"n1\": {\"gpu\": {\"H\": {\n  \"count\": \"eight\",\n  \"power_limit\": 700}}}}}", "f.json:2: count: Unsuitable value type: a number is required"},
		{"fleet: fractional count", "fleet", "{\"node\": {\"n1\": {\"gpu\": {\"H\": {\n  \"count\": 1.5,\n  \"power_limit\": 700}}}}}", "f.json:2: count: Unsuitable value type: value must be a whole number"},
		{"fleet: missing count", "fleet", "{\"node\": {\"n1\": {\"gpu\": {\"H\": {\n  \"power_limit\": 700\n}}}}}", `f.json:3: Missing required argument: The argument "count" is required, but no definition was found.`},
		{"fleet: negative base watts", "fleet", "{\"node\": {\"n1\": {\n\n  \"base_watts\": -5}}}", "f.json:3: base_watts must not be negative, got -5"},
		{"fleet: free over count", "fleet", "{\"node\": {\"n1\": {\"gpu\": {\"H\": {\"count\": 1,\n  \"free\": 2, \"power_limit\": 1}}}}}", "f.json:2: free must be between 0 and count (1), got 2"},
		{"fleet: unknown attribute, with a hint", "fleet", "{\"node\": {\"n1\": {\n  \"rak\": \"x\"}}}", `f.json:2: Extraneous JSON object property: No argument or block type is named "rak". Did you mean "rack"?`},
		{"fleet: null rack", "fleet", "{\"node\": {\"n1\": {\n  \"rack\": null}}}", "f.json:2: rack: must not be null"},
		{"fleet: value with a space", "fleet", "{\"node\": {\"n1\": {\n  \"rack\": \"k 1\"}}}", `f.json:2: rack: value "k 1": no spaces, control characters, '=' or ','`},
		{"fleet: duplicate node names", "fleet", "{\"node\": [\n{\"n1\": {}},\n{\"n1\": {}}\n]}", `f.json:3: node "n1": duplicate node name (first defined at f.json:2)`},
		{"fleet: nodes not an object", "fleet", "{\"node\": 3}", `f.json:1: Incorrect JSON value type: Either a JSON object or JSON array of objects is required here, to specify name labels for this block.`},
		{"facility: negative watts", "facility", "{\"budget\": {\"pdu=p1\": {\n  \"watts\": -17300}}}", "f.json:2: watts must not be negative, got -17300"},
		{"facility: unknown level in a budget key", "facility", "{\"budget\": {\n  \"shelf=s1\": {\"watts\": 100}}}", `f.json:2: budget: domain "shelf=s1": unknown level "shelf"`},
		{"facility: headroom of 1", "facility", "{\n  \"headroom\": 1}", "f.json:2: headroom must be at least 0 and less than 1, got 1"},
		{"facility: drain not a bool", "facility", "{\"hold\": {\"rack=k1\": {\n  \"drain\": \"maybe\"}}}", "f.json:2: drain: Unsuitable value type: a bool is required"},
		{"catalog: zero gpus", "catalog", "{\"model\": {\"m\": {\"profile\": {\"p\": {\"engine\": \"vllm\", \"gpu\": \"H\",\n  \"gpus\": 0}}}}}", "f.json:2: gpus must be between 1 and 65536, got 0"},
		{"catalog: unknown spread level", "catalog", "{\"model\": {\"m\": {\"profile\": {\"p\": {\"engine\": \"vllm\", \"gpu\": \"H\",\n  \"spread\": [\"rack\", \"shelf\"]}}}}}", `f.json:2: spread: unknown level "shelf"`},
		{"catalog: missing engine", "catalog", "{\"model\": {\"m\": {\"profile\": {\"p\": {\"gpu\": \"H\"\n}}}}}", `f.json:2: Missing required argument: The argument "engine" is required, but no definition was found.`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			switch tt.kind {
			case "fleet":
				_, err = ParseFleet("f.json", []byte(tt.src))
			case "facility":
				_, err = ParseFacility("f.json", []byte(tt.src))
			case "catalog":
				_, err = ParseCatalog("f.json", []byte(tt.src))
			}
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			checkErrorLines(t, "f.json", err)
			if !containsLine(err.Error(), tt.want) {
				t.Errorf("got error:\n%v\nwant a line starting %q", err, tt.want)
			}
			var fe *hcldecode.Problem
			if !errors.As(err, &fe) || fe.Filename != "f.json" || fe.Line < 1 {
				t.Errorf("got %#v, want an *hcldecode.Problem with a position", err)
			}
		})
	}
}

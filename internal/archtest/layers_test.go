package archtest

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// room is the part of the tree a package belongs to for the layer rules: its
// top directory, internal/<library> for the module's private libraries,
// and cmd for every binary and the binaries' own packages.
func room(path string) string {
	p := strings.TrimPrefix(path, module+"/")
	parts := strings.Split(p, "/")
	switch {
	case parts[0] == "internal" && len(parts) > 1:
		return "internal/" + parts[1]
	default:
		return parts[0]
	}
}

// anyRoom, as an allowed import, lets a room import every other: the
// composition roots and the test trees.
const anyRoom = "*"

// layers is the allow-matrix: for each room, the other rooms its non-test
// code may link, and why: those it imports, and those it reaches through
// them ("through engine"). Everything not listed is refused; a listed room
// nothing links any more fails too, so the matrix stays the truth.
// docs/architecture.md ("Rules the architecture tests enforce") draws it.
var layers = map[string]map[string]string{
	// The binaries wire the parts together.
	"cmd": {anyRoom: "the binaries are the composition roots"},
	// Test trees.
	"e2e":              {anyRoom: "tests against a real Nomad drive every part"},
	"internal/testing": {anyRoom: "doubles and harnesses stand in for, or run, every part"},
	// Development tools that measure the parts, run with go run.
	"bench": {anyRoom: "measuring tools run the gateway against fake and real engines"},

	// The leaves: no other room of the module.
	"engine":                 {"internal/suggest": "did-you-mean hints for an unknown flag"},
	"gatewayapi":             {},
	"weightsapi":             {},
	"devicesapi":             {},
	"nomadplugin":            {},
	"internal/blockingquery": {},
	"internal/gatewayclient": {"gatewayapi": "the demand's wire type, and the service name and TLS tag it finds the gateways by"},
	"internal/hcldecode":     {"internal/bounded": "every file is checked for size and nesting before HCL's parsers see it"},
	"internal/bounded":       {},
	"internal/jsonscan":      {"internal/bounded": "a request body's nesting is checked with the limit every input has"},
	"internal/atomicfile":    {},
	"internal/httpjson":      {},
	"internal/nomadenv":      {},
	"internal/nvmlseam":      {},
	"internal/suggest":       {},
	"internal/version":       {},
	"internal/archtest":      {},
	"enginemetrics":          {"engine": "the metric names are the engine descriptors'", "internal/suggest": "through engine"},
	"facility":               {"engine": "profiles are checked against the engines' recipes and contracts", "internal/suggest": "through engine", "internal/hcldecode": "catalog, facility and fleet files are HCL", "internal/bounded": "through internal/hcldecode", "gatewayapi": "the routing policies a model may name are the gateway's", "weightsapi": "a model's weights source, checked, and the key placement looks for on nodes", "devicesapi": "facility/powercap lowers a domain's GPU caps by priority with the water-filling the device plugin splits a node's share with"},
	"devices":                {"nomadplugin": "it is a device plugin", "internal/nvmlseam": "NVML through the one seam", "internal/blockingquery": "its Backoff and Sleep for NVML init retries; blocking queries of the power caps' Nomad variables", "devicesapi": "the stat and variable names it shares with the controller"},
	"driver":                 {"nomadplugin": "it is a driver plugin", "engine": "the recipes it runs", "enginemetrics": "engine metrics in task stats", "internal/nvmlseam": "GPU memory per process through the one seam", "internal/atomicfile": "the task's state files", "weights": "the node's model store: tasks' weights fetched before their engines start, and what it holds in the fingerprint", "internal/bounded": "through weights", "internal/suggest": "through engine", "weightsapi": "the attribute names the controller reads"},
	"weights":                {"internal/atomicfile": "the store's records", "internal/bounded": "the hub's model-info answer read within a limit", "weightsapi": "the sources it fetches"},
	"gateway": {
		"enginemetrics":          "replicas' load from their engines' metrics",
		"engine":                 "engine names (how a request for a LoRA adapter is written for a replica's engine); through enginemetrics",
		"internal/suggest":       "through enginemetrics and engine",
		"internal/blockingquery": "Nomad's and Consul's blocking queries",
		"internal/gatewayclient": "counting the gateways registered beside it (share_limits)",
		"internal/hcldecode":     "API key files are HCL",
		"internal/bounded":       "key files read within the size limit; a body past the nesting limit (jsonscan.Check's *bounded.LimitError) answered 400",
		"internal/jsonscan":      "request bodies and answers read without decoding them: the model, the prefix key's messages, max_tokens, usage",
		"internal/httpjson":      "its JSON answers",
		"internal/nomadenv":      "which Nomad API the environment names (Run, discovering from Nomad in a task)",
		"gatewayapi":             "the names and wire types it shares with the controller",
	},
	"controller": {
		"engine":                 "profiles' recipes and metric names",
		"enginemetrics":          "replicas' engine readings",
		"facility":               "placement",
		"internal/blockingquery": "Nomad's blocking queries",
		"internal/gatewayclient": "finding the gateways and reading their demand",
		"internal/hcldecode":     "its configuration is HCL",
		"internal/bounded":       "its files read within the size limit; a plan's texts counted before they are parsed",
		"internal/httpjson":      "its API's JSON answers",
		"internal/nomadenv":      "which Nomad API the environment names",
		"internal/suggest":       "did-you-mean hints",
		"gatewayapi":             "the names and wire types it shares with the gateway (the model list, the demand, the gateways' service name)",
		"controllerapi":          "its API's answers, request bodies and errors, and the pin it stores",
		"devicesapi":             "the device plugin's stat names it reads, and the power-caps variables it writes",
		"weightsapi":             "the driver's attributes that say which node holds which weights; a model's weights in its task",
	},
	// The controller's API as its clients (llmgw ctl) see it.
	"controllerapi": {
		"facility":      "answers carry a catalog's models and a placement's scope and rejections as they are",
		"enginemetrics": "a replica's answer carries its engine's reading as it is",
		// What facility and enginemetrics link.
		"engine":             "through facility and enginemetrics",
		"internal/suggest":   "through engine",
		"internal/hcldecode": "through facility",
		"internal/bounded":   "through facility and internal/hcldecode",
		"gatewayapi":         "through facility",
		"weightsapi":         "through facility",
	},
}

// TestLayers holds what every package links of the module's other rooms,
// not only what it imports, to the allow-matrix above: a room that may
// import another links what that one imports too, and its row must say so.
func TestLayers(t *testing.T) {
	g := newLinkGraph(t)
	used := map[string]map[string]bool{}
	for _, p := range listPackages(t) {
		from := room(p.ImportPath)
		allowed, known := layers[from]
		if !known {
			t.Errorf("%s is in room %q, which the layer matrix (internal/archtest/layers_test.go) does not list: add it, with what it may import and why", p.ImportPath, from)
			continue
		}
		if _, any := allowed[anyRoom]; any {
			continue
		}
		may := func(to string) bool {
			_, ok := allowed[to]
			return to == from || ok
		}
		refused := map[string]bool{}
		// Third-party packages import nothing of the module, so the walk
		// goes through the module's packages only, and stops at a refused
		// room: what lies behind it is that room's own row's business.
		through := func(q string) bool { return inModule(q) && may(room(q)) }
		g.links(p.ImportPath, through, func(q string, chain []string) {
			if !inModule(q) {
				return
			}
			to := room(q)
			if to == from {
				return
			}
			if !may(to) {
				if refused[to] {
					return
				}
				refused[to] = true
				if len(chain) == 2 {
					t.Errorf("%s imports %s: room %s may not import room %s (allowed: %s); change the code, or the matrix with a reason", p.ImportPath, q, from, to, strings.Join(sortedKeys(allowed), ", "))
				} else {
					t.Errorf("%s links %s through %s: room %s may not link room %s (allowed: %s); change the code, or the matrix with a reason", p.ImportPath, q, chainText(chain), from, to, strings.Join(sortedKeys(allowed), ", "))
				}
				return
			}
			if used[from] == nil {
				used[from] = map[string]bool{}
			}
			used[from][to] = true
		})
	}
	for from, allowed := range layers {
		for to := range allowed {
			if to != anyRoom && !used[from][to] {
				t.Errorf("the layer matrix lets %s link %s (%q), but nothing does any more: remove it", from, to, allowed[to])
			}
		}
	}
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	if len(ks) == 0 {
		return []string{"no other room"}
	}
	return slices.Clip(ks)
}

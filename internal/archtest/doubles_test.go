package archtest

import (
	"strings"
	"testing"
)

const module = "github.com/llmgw/llmgw"

// isDouble reports whether path is a test double or harness: everything
// under internal/testing/, and the plugin harness nomadplugin/plugintest.
func isDouble(path string) bool {
	return strings.HasPrefix(path, module+"/internal/testing/") ||
		path == module+"/nomadplugin/plugintest" || strings.HasPrefix(path, module+"/nomadplugin/plugintest/")
}

// isTestTree reports whether path is test-only code: the doubles
// themselves and the real-Nomad suite (e2e and its helpers).
func isTestTree(path string) bool {
	return isDouble(path) || path == module+"/e2e" || strings.HasPrefix(path, module+"/e2e/")
}

// mayImportDoubles are the production-tree packages allowed to import a
// test double from non-test code, and why. Each must be a main package, so
// that nothing can import it and carry the double further.
var mayImportDoubles = map[string]string{
	// fake-engine is fakeengine's command line: the stand-in engine that
	// tests, the e2e suite and make demo run as a process. It is a
	// development binary; no Nomad client needs it in production.
	module + "/cmd/fake-engine": "the fake-engine binary is internal/testing/fakeengine's main",
	// llmgw-demo is what make demo runs: a local Nomad cluster on
	// loopback, started with internal/testing/localnomad.
	module + "/cmd/llmgw-demo": "make demo's local cluster is internal/testing/localnomad",
	// llmgw-tinymodel writes internal/testing/tinymodel's models from the
	// command line, for tests, demos and measurements by hand.
	module + "/cmd/llmgw-tinymodel": "the tiny model writer's command line is internal/testing/tinymodel's",
	// gwload measures the latency the gateway adds (docs/perf.md) against
	// an in-process fake-engine replica; it is run with go run, and make
	// build does not build it.
	module + "/bench/gwload": "the gateway latency tool serves a fakeengine replica",
	// prefixload measures the routing policies on real llama-server
	// replicas (docs/perf.md), run with go run like gwload.
	module + "/bench/prefixload": "the routing benchmark runs the real engine with tiny models (llamabuild, tinymodel)",
	// loraload measures routing for LoRA adapters the same way.
	module + "/bench/loraload": "the LoRA benchmark runs the real engine with tiny models and adapters (llamabuild, tinymodel), or fake-engine impersonating vLLM (fakeengine)",
}

// TestNoTestDoubleInProduction checks that no production package imports a
// test double or harness from its non-test files: only the doubles
// themselves, the e2e suite, _test.go files and the development binaries
// in mayImportDoubles may.
func TestNoTestDoubleInProduction(t *testing.T) {
	pkgs := listPackages(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[p.ImportPath] = true
		if isTestTree(p.ImportPath) {
			continue
		}
		_, excepted := mayImportDoubles[p.ImportPath]
		if excepted && p.Name != "main" {
			t.Errorf("%s is in mayImportDoubles but is package %s, not main: another package could import it and the double with it", p.ImportPath, p.Name)
		}
		for _, imp := range p.Imports {
			if isDouble(imp) && !excepted {
				t.Errorf("%s imports the test double %s from non-test code; doubles are for tests (move the use into a _test.go file, or the shared code out of internal/testing/)", p.ImportPath, imp)
			}
		}
	}
	for path := range mayImportDoubles {
		if !seen[path] {
			t.Errorf("mayImportDoubles names %s, which is not a package of the module any more: remove it", path)
		}
	}
}

package archtest

import (
	"strings"
	"testing"
)

// TestSDKStandsAlone checks that nomadplugin, the public plugin SDK, links
// nothing of llmgw outside nomadplugin/: a stranger's plugin that imports it
// gets the protocol, not llmgw's device plugin, driver or controller.
func TestSDKStandsAlone(t *testing.T) {
	const sdk = module + "/nomadplugin"
	n := 0
	for _, p := range listDeps(t, "./nomadplugin/...") {
		if !strings.HasPrefix(p.ImportPath, module+"/") {
			continue
		}
		n++
		if p.ImportPath != sdk && !strings.HasPrefix(p.ImportPath, sdk+"/") {
			t.Errorf("the nomadplugin SDK links %s; it may only use its own packages and third-party modules", p.ImportPath)
		}
	}
	if n == 0 {
		t.Fatal("go list found no nomadplugin packages")
	}
}

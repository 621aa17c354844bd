package devicesapi

import "testing"

func TestNodeCapsPath(t *testing.T) {
	t.Parallel()
	for node, want := range map[string]string{
		"gpu-1":     "llmgw/power-caps/gpu-1",
		"gpu-1.dc1": "llmgw/power-caps/gpu-1~2edc1",
		"a b":       "llmgw/power-caps/a~20b",
		"n_2~x":     "llmgw/power-caps/n_2~7ex",
	} {
		if got := NodeCapsPath(PowerCapsPrefix, node); got != want {
			t.Errorf("NodeCapsPath(%q) = %q, want %q", node, got, want)
		}
	}
}

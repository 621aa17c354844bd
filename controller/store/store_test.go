package store

import (
	"regexp"
	"testing"
)

func TestDecisionPathIsAValidVariablePath(t *testing.T) {
	valid := regexp.MustCompile("^[a-zA-Z0-9-_~/]{1,128}$") // Nomad's rule
	for replica, want := range map[string]string{
		"llama-3.1-70b-0": "llmgw/decisions/llama-3~2e1-70b-0",
		"qwen_7b-12":      "llmgw/decisions/qwen_7b-12",
		"a/b~c-1":         "llmgw/decisions/a~2fb~7ec-1",
	} {
		got := DecisionPath(replica)
		if got != want {
			t.Errorf("DecisionPath(%q) = %q, want %q", replica, got, want)
		}
		if !valid.MatchString(got) {
			t.Errorf("%q is not a valid Nomad variable path", got)
		}
	}
	if DecisionPath("a.b") == DecisionPath("a~2eb") {
		t.Error("escaping is not reversible: two replicas share a path")
	}
}

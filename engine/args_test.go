package engine_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/engine"
)

// The contract that checks args is the one of the version named: the
// pinned one (with or without a leading v) walks them; a version llmgw
// has no contract for does not, and HasContract says so.
func TestCheckContractAt(t *testing.T) {
	t.Parallel()
	in := engine.Input{Engine: "vllm", Executable: "vllm", Model: "org/m", Host: "127.0.0.1", Port: 8000,
		GPUs: 1, Nodes: 1, Layout: engine.Layout{Tensor: 1, Pipeline: 1, Data: 1, Expert: 1}, Args: []string{"--a-flag-of-a-later-release"}}
	for _, v := range []string{"", "v0.28.0", "0.28.0"} {
		if !engine.HasContract("vllm", v) {
			t.Errorf("HasContract(vllm, %q) = false", v)
		}
		err := engine.CheckContractAt(in, v)
		if err == nil || !strings.HasPrefix(err.Error(), "args[0]: --a-flag-of-a-later-release: engine \"vllm\"") {
			t.Errorf("CheckContractAt(%q) = %v, want args[0] refused", v, err)
		}
	}
	if engine.HasContract("vllm", "0.99.0") {
		t.Error("HasContract(vllm, 0.99.0) = true")
	}
	if err := engine.CheckContractAt(in, "0.99.0"); err != nil {
		t.Errorf("CheckContractAt(0.99.0) = %v, want nil: no contract, nothing checked", err)
	}
	if got := engine.ContractVersions("vllm"); !slices.Equal(got, []string{"vllm@v0.28.0"}) {
		t.Errorf("ContractVersions(vllm) = %q", got)
	}
	if got := engine.ContractVersions("command"); got != nil || engine.HasContract("command", "") {
		t.Errorf("command: ContractVersions %q, HasContract %v; want none", got, engine.HasContract("command", ""))
	}
}

package driver_test

import (
	"strings"
	"testing"
	"time"
)

// A rank above 0 of a multi-node vLLM replica is started with its rank and
// the leader's address, headless.
func TestStartMultiNodeRank(t *testing.T) {
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{gpus: []string{"GPU-1", "GPU-2"}, body: vllmTask(`
tensor_parallel   = 2
pipeline_parallel = 2
nodes             = 2
node_rank         = 1
leader_addr       = "10.1.2.3:24001"
served_model_name = "big"
ready { skip = true }
`)})
	p.start(t, tk)
	ev := p.events.wait(t, tk.cfg.GetId(), "Started vllm", 10*time.Second)
	want := "--tensor-parallel-size 2 --pipeline-parallel-size 2 --served-model-name big --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --master-port 24001 --headless"
	if !strings.Contains(ev.GetMessage(), want) {
		t.Errorf("started event %q, want it to contain %q", ev.GetMessage(), want)
	}
}

package driver

import (
	"strings"
	"testing"
)

func TestDecodeTaskConfigLayoutErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`engine = "vllm"
model = "m"
port = "http"
args = ["--max-model-len", "8", "--tensor-parallel-size", "2"]`, "args[2]: --tensor-parallel-size is set by llmgw from tensor_parallel: set that instead"},
		{`engine = "tgi"
model = "m"
port = "http"
nodes = 2
leader_addr = "h:1"`, `nodes: engine "tgi" runs on one node (text-generation-launcher v3.3.7), got 2`},
		{`engine = "vllm"
model = "m"
port = "http"
nodes = 2
node_rank = 1`, "leader_addr: required with nodes = 2"},
		{`engine = "vllm"
model = "m"
port = "http"
nodes = 2
node_rank = 2
leader_addr = "h:1"`, "node_rank: 2 is not a rank of a replica of 2 nodes"},
		{`engine = "llamacpp"
model = "org/m"
port = "http"
tensor_parallel = 0
pipeline_parallel = 2`, `pipeline_parallel: engine "llamacpp" has no pipeline parallelism`},
		{`engine = "vllm"
model = "m"
port = "http"
data_parallel = -1`, "data_parallel: must be 0 (the default) or more, got -1"},
	} {
		_, err := DecodeTaskConfig(encode(t, TaskConfigSpec(), c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\ngot %v, want an error containing %q", c.body, err, c.want)
		}
	}
}

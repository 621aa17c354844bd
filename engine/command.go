package engine

import "strconv"

// Environment variables the command engine reads its settings from.
const (
	EnvHost           = "LLMGW_HOST"
	EnvPort           = "LLMGW_PORT"
	EnvModel          = "LLMGW_MODEL"
	EnvTensorParallel = "LLMGW_TENSOR_PARALLEL"
)

// Any command: the task's `command` with its args verbatim, told its
// settings through the environment.
func init() {
	register(&Descriptor{
		Name:  Command,
		Model: ModelArg{Optional: true},
		env: func(in Input) map[string]string {
			return map[string]string{
				EnvHost:           in.Host,
				EnvPort:           strconv.Itoa(in.Port),
				EnvModel:          in.Model,
				EnvTensorParallel: strconv.Itoa(in.TensorParallel),
			}
		},
		// It reads its rank and leader from the environment every shard
		// gets (LLMGW_NNODES, LLMGW_NODE_RANK, LLMGW_LEADER_*).
		MultiNode: &MultiNode{Headless: true},
		ReadyPath: "/health",
		Progress:  ParseProgress,
	})
}

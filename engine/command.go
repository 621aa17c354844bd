package engine

import "strconv"

// Environment variables the command engine reads its settings from.
const (
	EnvHost             = "LLMGW_HOST"
	EnvPort             = "LLMGW_PORT"
	EnvModel            = "LLMGW_MODEL"
	EnvTensorParallel   = "LLMGW_TENSOR_PARALLEL"
	EnvPipelineParallel = "LLMGW_PIPELINE_PARALLEL"
	EnvDataParallel     = "LLMGW_DATA_PARALLEL"
	EnvExpertParallel   = "LLMGW_EXPERT_PARALLEL"
)

// Any command: the task's `command` with its args verbatim, told its
// settings through the environment. Its layout is whatever it makes of
// LLMGW_*_PARALLEL; llmgw only checks that tensor × pipeline × data is
// the replica's GPUs (default: tensor = gpus per node, pipeline = nodes),
// so that LLMGW_TENSOR_PARALLEL stays the GPUs of one node by default.
func init() {
	register(&Descriptor{
		Name:      Command,
		Model:     ModelArg{Optional: true},
		layoutEnv: true,
		layout: layoutRules{
			defaults: tensorThenPipeline,
			why:      "the command engine's layout is tensor × pipeline × data GPUs",
		},
		env: func(in Input) map[string]string {
			env := map[string]string{
				EnvHost:           in.Host,
				EnvPort:           strconv.Itoa(in.Port),
				EnvModel:          in.Model,
				EnvTensorParallel: strconv.Itoa(in.Layout.Tensor),
			}
			for k, v := range map[string]int{EnvPipelineParallel: in.Layout.Pipeline, EnvDataParallel: in.Layout.Data, EnvExpertParallel: in.Layout.Expert} {
				if v > 1 {
					env[k] = strconv.Itoa(v)
				}
			}
			return env
		},
		// It reads its rank and leader from the environment every shard
		// gets (LLMGW_NNODES, LLMGW_NODE_RANK, LLMGW_LEADER_*), and only
		// rank 0 is probed.
		MultiNode: &MultiNode{Headless: true},
		ReadyPath: "/health",
		Progress:  ParseProgress,
	})
}

// tensorThenPipeline is the default layout of an engine that keeps tensor
// parallelism inside a node and pipelines across nodes: tensor = the GPUs
// of one node's share of one data-parallel rank (data-parallel ranks are
// spread whole over the nodes where there are enough of them), pipeline =
// what is left.
func tensorThenPipeline(l Layout, s Shape) Layout {
	total := s.total()
	switch {
	case l.Tensor == 0 && l.Pipeline == 0:
		local := max(one(l.Data)/s.Nodes, 1) // data-parallel ranks on a node
		l.Tensor = max(s.GPUs/local, 1)
		l.Pipeline = max(total/(l.Tensor*one(l.Data)), 1)
	case l.Tensor == 0:
		if d := l.Pipeline * one(l.Data); total%d == 0 {
			l.Tensor = total / d
		}
	case l.Pipeline == 0:
		if d := l.Tensor * one(l.Data); total%d == 0 {
			l.Pipeline = total / d
		}
	}
	return l
}

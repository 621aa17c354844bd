package engine

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// SGLang: `python3 -m sglang.launch_server --model-path MODEL --host H
// --port P --tp-size T ...`.
//
// Facts from SGLang v0.5.18 (tag commit
// 71de97b264b04dcd514cf904003028aefe9775c8; docs/engines/sglang.md,
// flag table engine/contract/sglang.txt; paths under python/):
//   - argparse with allow_abbrev (--tp is --tp-size by prefix; --pp is
//     ambiguous), no '_' to '-' rewriting, the last of a repeated flag
//     wins. Aliases: --model, --tensor-parallel-size,
//     --pipeline-parallel-size, --data-parallel-size,
//     --expert-parallel-size and --ep, --nccl-init-addr
//     (sglang/srt/server_args.py:492-499, 1000-1049, 2338-2346).
//   - --tp-size is the whole model-parallel world of one replica, over all
//     its nodes ("The tp_size is the world size", server_args.py:6559,
//     6572); each node takes tp / nnodes of it
//     (sglang/srt/entrypoints/engine.py:1825-1858). Plain data
//     parallelism starts --dp-size such tensor × pipeline groups
//     (sglang/srt/managers/data_parallel_controller.py:388-390): GPUs = dp
//     × tp × pp. With --enable-dp-attention the data-parallel ranks are
//     carved out of the tensor world (tp divisible by dp,
//     server_args.py:6559-6565): GPUs = tp × pp. Expert parallelism lives
//     inside the tensor world too (server_args.py:6573-6585).
//   - Several nodes: every node runs the same totals with --nnodes N
//     --node-rank i --dist-init-addr HEAD:PORT. Ranks above 0 run no API
//     server but a health server on --host:--port answering /health once
//     their schedulers are ready (engine.py:1150-1177,
//     sglang/srt/utils/common.py:3273-3313), so every rank is probed.
//   - Node 0 listens only once every scheduler is ready, answers /health
//     503 until its warm-up request passed, then 200
//     (sglang/srt/entrypoints/http_server.py:654-670, 2300-2313).
//   - /metrics only with --enable-metrics (server_args.py:1547), which the
//     recipe gives.
func init() {
	register(&Descriptor{
		Name: SGLang,
		Pinned: Pinned{Version: "v0.5.18", Commit: "71de97b264b04dcd514cf904003028aefe9775c8",
			Notes: "docs/engines/sglang.md"},
		DefaultExecutable: "python3",
		// A Python interpreter runs the launcher module; anything else is
		// taken to be a launcher (a wrapper script or a venv entry point)
		// that accepts launch_server's arguments itself.
		prefix: func(exe string) []string {
			if strings.HasPrefix(path.Base(exe), "python") {
				return []string{"-m", "sglang.launch_server"}
			}
			return nil
		},
		Model:          ModelArg{Flag: "--model-path"},
		HostFlag:       "--host",
		PortFlag:       "--port",
		ServedNameFlag: "--served-model-name",
		Parallel: ParallelFlags{
			Tensor: "--tp-size", Pipeline: "--pp-size", Data: "--dp-size", Expert: "--ep-size",
		},
		layout: layoutRules{
			defaults: func(l Layout, s Shape) Layout {
				world := s.total()
				if !dpAttention(s.Args) {
					world /= one(l.Data)
				}
				if l.Tensor == 0 {
					l.Tensor = max(world/one(l.Pipeline), 1)
				}
				return l
			},
			world: func(l Layout, args []string) int {
				if dpAttention(args) {
					return one(l.Tensor) * one(l.Pipeline)
				}
				return product(l)
			},
			check: checkSGLangLayout,
			why:   "SGLang's --tp-size is the tensor world of one replica over all its nodes, and plain --dp-size runs that many such groups: sglang/srt/server_args.py:6559, sglang/srt/managers/data_parallel_controller.py:388-390 at v0.5.18",
		},
		MultiNode: &MultiNode{
			Flags: []string{"--nnodes", "--node-rank", "--dist-init-addr"},
			Args: func(nodes, rank int, _ Layout, leader Leader) []string {
				return []string{"--nnodes", strconv.Itoa(nodes), "--node-rank", strconv.Itoa(rank), "--dist-init-addr", leader.Addr}
			},
		},
		aliases: map[string]string{
			"--model": "--model-path", "--tensor-parallel-size": "--tp-size", "--pipeline-parallel-size": "--pp-size",
			"--data-parallel-size": "--dp-size", "--expert-parallel-size": "--ep-size", "--ep": "--ep-size",
			"--nccl-init-addr": "--dist-init-addr",
		},
		abbrev: true,
		Adapters: &AdapterRule{
			Flags: []string{"--enable-lora", "--max-loras-per-batch", "--max-loaded-loras", "--max-lora-rank", "--lora-paths", "--lora-target-modules"},
			args:  sglangAdapters,
			Why:   "python/sglang/srt/server_args.py:2879-2917 at v0.5.18",
			// SGLang lists what its LoRA registry holds as cards of
			// /v1/models, as vLLM does.
			Listed: &AdapterListing{Path: "/v1/models", parse: parseModelCards,
				Why: "python/sglang/srt/entrypoints/http_server.py:1846-1871 (available_models) at v0.5.18"},
			// Its runtime load and unload: the contract with file and
			// line is in adapters_runtime.go.
			Runtime: &AdapterRuntime{
				LoadPath:   "/load_lora_adapter",
				UnloadPath: "/unload_lora_adapter",
				startArgs:  sglangRuntimeStart,
				blocked:    sglangRuntimeBlocked,
				Why: "python/sglang/srt/entrypoints/http_server.py:1539-1570, python/sglang/srt/managers/io_struct.py:2212-2271, " +
					"python/sglang/srt/managers/tokenizer_control_mixin.py:597-779, python/sglang/srt/server_args.py:9451-9453 at v0.5.18",
			},
		},
		ReadyPath: "/health",
		Progress:  ParseProgress,
		// sglang/srt/observability/metrics_collector.py. Scheduler gauges
		// come from attention-TP rank 0 of each DP group and pipeline stage
		// (metrics_collector.py:1081-1084), labelled tp_rank, pp_rank,
		// dp_rank: the first stage's count each request once.
		Metrics: Metrics{
			Path:             "/metrics",
			Enable:           []string{"--enable-metrics"},
			RequestsWaiting:  Metric{Name: "sglang:num_queue_reqs", Type: Gauge, Match: map[string]string{"pp_rank": "0"}},
			RequestsRunning:  Metric{Name: "sglang:num_running_reqs", Type: Gauge, Match: map[string]string{"pp_rank": "0"}},
			KVCacheUsage:     Metric{Name: "sglang:token_usage", Type: Gauge, Match: map[string]string{"pp_rank": "0"}},
			TimeToFirstToken: Metric{Name: "sglang:time_to_first_token_seconds", Type: Histogram},
			GeneratedTokens:  Metric{Name: "sglang:generation_tokens_total", Type: Counter},
		},
	})
}

// dpAttention reports whether args turn on SGLang's data-parallel
// attention.
func dpAttention(args []string) bool {
	return slices.Contains(args, "--enable-dp-attention")
}

func checkSGLangLayout(l Layout, s Shape) error {
	tp := one(l.Tensor)
	if l.Expert > 1 && (l.Expert > tp || tp%l.Expert != 0) {
		return fmt.Errorf("%s: SGLang's expert parallelism lives inside the tensor world "+
			"(sglang/srt/server_args.py:6573-6585 at v0.5.18), so %s (%d) must divide %s (%d)",
			FieldExpert, FieldExpert, l.Expert, FieldTensor, tp)
	}
	if l.Data > 1 && dpAttention(s.Args) && tp%l.Data != 0 {
		return fmt.Errorf("%s: with --enable-dp-attention SGLang carves the data-parallel ranks out of the tensor world "+
			"(sglang/srt/server_args.py:6559-6565 at v0.5.18), so %s (%d) must divide %s (%d)",
			FieldData, FieldData, l.Data, FieldTensor, tp)
	}
	if l.Data > 1 && !dpAttention(s.Args) && one(s.Nodes) > 1 {
		return fmt.Errorf("%s: llmgw runs SGLang's plain data parallelism on one node only (nodes = %d); "+
			"use --enable-dp-attention in args, or one replica per data-parallel rank", FieldData, s.Nodes)
	}
	return nil
}

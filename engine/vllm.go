package engine

import (
	"fmt"
	"strconv"
)

// vLLM: `vllm serve MODEL --host H --port P --tensor-parallel-size T ...`.
//
// Facts from vLLM v0.28.0 (tag commit
// 2cf0a6915ce544dc493a0990f2ea38d81601128a, read at its merge-base with
// main, 53e211d2923192ea1f7442de93d59cfbb150e089; docs/engines/vllm.md,
// flag table engine/contract/vllm.txt):
//   - The model is serve's positional (vllm/entrypoints/openai/cli_args.py:
//     373-378); a --model in args is moved into the positional slot and
//     then clashes with ours (vllm/utils/argparse_utils.py:251-283), so it
//     is llmgw's too. --served-model-name takes one or more names.
//   - argparse with allow_abbrev (an unambiguous prefix is the flag) and
//     --a_b read as --a-b; a repeated flag is a warning, the last wins.
//   - world_size = pipeline × tensor per data-parallel rank, × data across
//     them (vllm/config/parallel.py:549-551, 833-837). Tensor and pipeline
//     count the GPUs of every node of one replica: with --nnodes each node
//     runs world_size / nnodes workers (parallel.py:709-724).
//   - Expert parallelism is a switch, --enable-expert-parallel: MoE layers
//     then use tensor × data as the expert-parallel size
//     (vllm/model_executor/layers/fused_moe/config.py:1208-1252). So
//     expert_parallel is either 1 (off) or tensor × data.
//   - One replica over nodes, multiprocessing (no Ray): every node runs the
//     same tensor and pipeline sizes with --nnodes N --node-rank i
//     --master-addr HEAD --master-port P, and ranks above 0 add --headless
//     and serve no HTTP (docs/serving/parallelism_scaling.md:139-160;
//     vllm/entrypoints/cli/serve.py:63-71, 210-225).
//   - Data parallel over nodes: every node runs --data-parallel-size D
//     --data-parallel-size-local d --data-parallel-address HEAD
//     --data-parallel-rpc-port P; the others add --headless
//     --data-parallel-start-rank k (serve.py:227-255). llmgw renders that
//     when data_parallel > 1 on several nodes, with whole data-parallel
//     ranks on each node.
//   - The port listens only once the engine is ready; /health answers 200
//     then (vllm/entrypoints/serve/instrumentator/health.py:22-33).
//   - Load progress: tqdm "Loading safetensors checkpoint shards:  50%
//     Completed | 1/2 [...]" on rank 0 (model_loader/weight_utils.py:625).
//   - /metrics on the API port; counters are scraped with _total
//     (vllm/v1/metrics/loggers.py:494-963). vllm:gpu_cache_usage_perc is
//     gone; vllm:kv_cache_usage_perc is a 0–1 fraction.
func init() {
	register(&Descriptor{
		Name: VLLM,
		Pinned: Pinned{Version: "v0.28.0", Commit: "2cf0a6915ce544dc493a0990f2ea38d81601128a",
			Notes: "docs/engines/vllm.md"},
		DefaultExecutable: "vllm",
		prefix:            func(string) []string { return []string{"serve"} },
		Model:             ModelArg{Positional: true},
		HostFlag:          "--host",
		PortFlag:          "--port",
		ServedNameFlag:    "--served-model-name",
		Parallel: ParallelFlags{
			Tensor: "--tensor-parallel-size", Pipeline: "--pipeline-parallel-size",
			Data: "--data-parallel-size", Expert: "--enable-expert-parallel",
		},
		expertSwitch: true,
		layout: layoutRules{
			defaults: tensorThenPipeline,
			check:    checkVLLMLayout,
			why:      "vLLM spans tensor × pipeline GPUs per data-parallel rank, over all its nodes: vllm/config/parallel.py:549-551, 833-837 at v0.28.0",
		},
		MultiNode: &MultiNode{
			Headless: true,
			Flags: []string{"--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless",
				"--data-parallel-size-local", "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-start-rank"},
			Args: vllmMultiNode,
		},
		aliases: map[string]string{
			"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
			"-ep": "--enable-expert-parallel", "--no-enable-expert-parallel": "--enable-expert-parallel",
			"-n": "--nnodes", "-r": "--node-rank", "-dpl": "--data-parallel-size-local",
			"-dpa": "--data-parallel-address", "-dpp": "--data-parallel-rpc-port", "-dpr": "--data-parallel-start-rank",
		},
		underscores: true,
		abbrev:      true,
		owns:        []string{"--model", "--uds"},
		ownsWhy: map[string]string{
			"--model": "the model is serve's positional argument, from the model (the catalog's source)",
			"--uds":   "vLLM would ignore --host and --port, which readiness probes",
		},
		// docs/engines/vllm.md, "CUDA_VISIBLE_DEVICES".
		MIGWarning: "vLLM releases crash on a MIG UUID in CUDA_VISIBLE_DEVICES (vllm-project/vllm#41848; the fix, PR #46132, is open)",
		Adapters: &AdapterRule{
			Flags: []string{"--enable-lora", "--max-loras", "--max-cpu-loras", "--max-lora-rank", "--lora-modules"},
			args:  vllmAdapters,
			Why:   "vllm/engine/arg_utils.py:1409-1424 and vllm/entrypoints/openai/cli_args.py:75 at v0.28.0",
			Listed: &AdapterListing{Path: "/v1/models", parse: parseModelCards,
				Why: "vllm/entrypoints/openai/models/serving.py:149-165 (show_available_models) at 53e211d"},
			Runtime: &AdapterRuntime{
				Env:        map[string]string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
				Inplace:    true,
				LoadPath:   "/v1/load_lora_adapter",
				UnloadPath: "/v1/unload_lora_adapter",
				startArgs:  vllmRuntimeStart,
				blocked:    vllmRuntimeBlocked,
				Why: "vllm/entrypoints/serve/lora/api_router.py:26-75, vllm/entrypoints/serve/lora/protocol.py:7-16, " +
					"vllm/entrypoints/openai/models/serving.py:167-280, vllm/envs.py:1186-1189 at 53e211d",
			},
		},
		ReadyPath: "/health",
		Progress:  ParseProgress,
		// vllm/v1/metrics/loggers.py: every engine metric carries
		// model_name and engine (the engine core's index; one series per
		// data-parallel engine).
		Metrics: Metrics{
			Path:             "/metrics",
			RequestsWaiting:  Metric{Name: "vllm:num_requests_waiting", Type: Gauge},
			RequestsRunning:  Metric{Name: "vllm:num_requests_running", Type: Gauge},
			KVCacheUsage:     Metric{Name: "vllm:kv_cache_usage_perc", Type: Gauge},
			TimeToFirstToken: Metric{Name: "vllm:time_to_first_token_seconds", Type: Histogram},
			GeneratedTokens:  Metric{Name: "vllm:generation_tokens_total", Type: Counter},
			AdapterRequests: AdapterRequestsMetric{Name: "vllm:lora_requests_info",
				Running: "running_lora_adapters", Waiting: "waiting_lora_adapters", Slots: "max_lora"},
		},
	})
}

func checkVLLMLayout(l Layout, s Shape) error {
	if ep := one(l.Tensor) * one(l.Data); l.Expert > 1 && l.Expert != ep {
		return fmt.Errorf("%s: vLLM's expert-parallel size is %s × %s = %d × %d = %d (--enable-expert-parallel takes no size: "+
			"vllm/model_executor/layers/fused_moe/config.py:1208-1252 at v0.28.0); set %s = %d or leave it out, got %d",
			FieldExpert, FieldTensor, FieldData, one(l.Tensor), one(l.Data), ep, FieldExpert, ep, l.Expert)
	}
	if n := one(s.Nodes); n > 1 && l.Data > 1 && l.Data%n != 0 {
		return fmt.Errorf("%s: on %d nodes llmgw spreads vLLM's data-parallel ranks whole over the nodes "+
			"(--data-parallel-size-local on each), so %s must be a multiple of %s (%d), got %d",
			FieldData, n, FieldData, FieldNodes, n, l.Data)
	}
	return nil
}

// vllmMultiNode: one replica's tensor × pipeline group over the nodes, or
// its data-parallel ranks spread over them.
func vllmMultiNode(nodes, rank int, l Layout, leader Leader) []string {
	if l.Data > 1 {
		local := l.Data / nodes
		args := []string{"--data-parallel-size-local", strconv.Itoa(local),
			"--data-parallel-address", leader.Host, "--data-parallel-rpc-port", leader.Port}
		if rank > 0 {
			args = append(args, "--headless", "--data-parallel-start-rank", strconv.Itoa(rank*local))
		}
		return args
	}
	args := []string{"--nnodes", strconv.Itoa(nodes), "--node-rank", strconv.Itoa(rank),
		"--master-addr", leader.Host, "--master-port", leader.Port}
	if rank > 0 {
		args = append(args, "--headless")
	}
	return args
}

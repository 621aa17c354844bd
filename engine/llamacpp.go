package engine

import (
	"regexp"
	"strconv"
)

// GPULayersAll is the -ngl count llmgw gives llama.cpp when it holds
// GPUs: more than any model's layer count, so every layer (and the
// output layer) is offloaded (src/llama-model.cpp:1316-1317, 3517-3527 at
// b4747). -ngl takes integers only at that version ("all" and "auto" fail
// in std::stoi, common/arg.cpp:1618-1628).
const GPULayersAll = "999"

// llama.cpp's server: `llama-server -m FILE --host H --port P -ngl 999
// --metrics ...`.
//
// Facts from llama.cpp b4747 (commit
// c5d91a74006c49376590ef2b67420bc7ce206397; docs/engines/llamacpp.md,
// flag table engine/contract/llamacpp.txt):
//   - -m takes a local GGUF file and uses no network (common/arg.cpp:
//     1752-1762); a hub id there is just a missing file, which llama-server
//     reports only after binding its port, then dies of SIGABRT. So the
//     model is a file the driver finds in its model cache before starting
//     (Model.File; the catalog's source + file).
//   - Without -ngl a CUDA build offloads 0 layers: common_params'
//     n_gpu_layers -1 means "the library default", which is 0 except on
//     Metal (common/common.cpp:1085-1087, src/llama-model.cpp:3781-3803).
//     So the recipe adds -ngl 999 when the process holds GPUs, unless the
//     task's args set -ngl themselves.
//   - One process uses every GPU the CUDA runtime shows it, splitting
//     layers in proportion to free memory (src/llama-model.cpp:1288-1309);
//     there is no tensor-parallel group and no multi-node flag (--rpc needs
//     a GGML_RPC build and separately started servers): no layout fields,
//     nodes > 1 is refused.
//   - Repeats are never an error: a scalar flag keeps its last value
//     (arg.cpp:246-291). Tokens starting "--" read '_' as '-' (arg.cpp:
//     249-252). There is no --flag=value form.
//   - -a/--alias sets the id /v1/models reports (server.cpp:4054-4069).
//   - The port binds before the model loads; every path answers 503 while
//     it loads, /health 200 {"status":"ok"} after (server.cpp:3495-3538).
//   - /metrics answers 501 unless --metrics is given (arg.cpp:2057-2063,
//     server.cpp:3577-3580); the recipe gives it. Names carry the
//     "llamacpp:" prefix; there is no time-to-first-token metric.
//   - Load progress is a row of dots without numbers; the one counted line
//     is "load_tensors: offloaded X/Y layers to GPU" (src/llama-model.cpp:
//     3527), which shows whether -ngl took.
func init() {
	register(&Descriptor{
		Name: LlamaCpp,
		Pinned: Pinned{Version: "b4747", Commit: "c5d91a74006c49376590ef2b67420bc7ce206397",
			Notes: "docs/engines/llamacpp.md"},
		DefaultExecutable: "llama-server",
		Model:             ModelArg{Flag: "-m", File: true},
		HostFlag:          "--host",
		PortFlag:          "--port",
		ServedNameFlag:    "--alias",
		layout: layoutRules{
			defaults: func(l Layout, s Shape) Layout {
				l.Tensor = s.GPUs // not a flag: the GPUs the one process spans
				return l
			},
			noTensor: ": one llama-server splits the model's layers over all the GPUs it holds",
		},
		aliases: map[string]string{
			"--model": "-m", "-a": "--alias",
			"--gpu-layers": "-ngl", "--n-gpu-layers": "-ngl",
		},
		underscores: true,
		defaults: func(in Input) [][]string {
			if in.GPUs > 0 {
				return [][]string{{"-ngl", GPULayersAll}}
			}
			return nil
		},
		ReadyPath: "/health",
		Progress:  parseLlamaCppProgress,
		// examples/server/server.cpp handle_metrics: no labels; "deferred"
		// are requests waiting for a free slot.
		Metrics: Metrics{
			Path:            "/metrics",
			Enable:          []string{"--metrics"},
			RequestsWaiting: Metric{Name: "llamacpp:requests_deferred", Type: Gauge},
			RequestsRunning: Metric{Name: "llamacpp:requests_processing", Type: Gauge},
			KVCacheUsage:    Metric{Name: "llamacpp:kv_cache_usage_ratio", Type: Gauge},
			GeneratedTokens: Metric{Name: "llamacpp:tokens_predicted_total", Type: Counter},
		},
	})
}

var llamaOffloadRE = regexp.MustCompile(`offloaded (\d{1,6})/(\d{1,6}) layers to GPU`)

func parseLlamaCppProgress(line string) (Progress, bool) {
	m := llamaOffloadRE.FindStringSubmatch(line)
	if m == nil {
		return Progress{}, false
	}
	done, err1 := strconv.Atoi(m[1])
	total, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || total < 1 || done > total {
		return Progress{}, false
	}
	return Progress{What: "model layers onto the GPUs", Percent: done * 100 / total, Done: done, Total: total}, true
}

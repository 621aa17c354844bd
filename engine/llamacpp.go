package engine

// llama.cpp's server: `llama-server -m MODEL --host H --port P ...`.
//
// Layout, from llama.cpp b4747 (commit
// c5d91a74006c49376590ef2b67420bc7ce206397; /work/notes/engines/llamacpp.md):
// one process uses every GPU the CUDA runtime shows it, splitting layers in
// proportion to free memory (src/llama-model.cpp:1288-1309); there is no
// tensor-parallel group and no multi-node flag (--rpc needs a GGML_RPC
// build and separately started servers): no layout fields, nodes > 1 is
// refused. The driver binds it to the allocated GPUs through the
// environment.
func init() {
	register(&Descriptor{
		Name: LlamaCpp,
		Pinned: Pinned{Version: "b4747", Commit: "c5d91a74006c49376590ef2b67420bc7ce206397",
			Notes: "/work/notes/engines/llamacpp.md"},
		DefaultExecutable: "llama-server",
		Model:             ModelArg{Flag: "-m"},
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
		aliases:     map[string]string{"--model": "-m", "-a": "--alias"},
		underscores: true,
		ReadyPath:   "/health",
		Progress:    ParseProgress,
		// llama.cpp b4747: examples/server/server.cpp handle_metrics.
		// /metrics answers 501 unless --metrics (common/arg.cpp:2057-2063). No
		// labels, no time-to-first-token metric; "deferred" are requests
		// waiting for a free slot.
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

package engine

// llama.cpp's server: `llama-server -m MODEL ...`.
func init() {
	register(&Descriptor{
		Name:              LlamaCpp,
		DefaultExecutable: "llama-server",
		// llama.cpp spreads layers over every visible GPU on its own; the
		// driver binds it to the allocated ones through the environment.
		Model:          ModelArg{Flag: "-m"},
		HostFlag:       "--host",
		PortFlag:       "--port",
		ServedNameFlag: "--alias",
		ReadyPath:      "/health",
		Progress:       ParseProgress,
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

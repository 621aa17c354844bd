package engine

// Hugging Face text-generation-inference: `text-generation-launcher
// --model-id MODEL ...`.
func init() {
	register(&Descriptor{
		Name:              TGI,
		DefaultExecutable: "text-generation-launcher",
		Model:             ModelArg{Flag: "--model-id"},
		HostFlag:          "--hostname",
		PortFlag:          "--port",
		Parallel:          ParallelFlags{Tensor: "--num-shard"},
		ReadyPath:         "/health",
		Progress:          ParseProgress,
		// TGI v3.3.7: backends/v3/src/{queue,backend,lib}.rs,
		// router/src/server.rs (metrics-exporter-prometheus, no labels,
		// counters without _total). There is no time-to-first-token metric.
		// KV-cache use is the tokens the running batch may grow to over the
		// batch token budget found at warm-up: what is reserved, not what is
		// filled. Generated tokens are recorded per finished request, as a
		// histogram.
		Metrics: Metrics{
			Path:            "/metrics",
			RequestsWaiting: Metric{Name: "tgi_queue_size", Type: Gauge},
			RequestsRunning: Metric{Name: "tgi_batch_current_size", Type: Gauge},
			KVCacheUsage:    Metric{Name: "tgi_batch_current_max_tokens", Type: Gauge, Per: "tgi_batch_max_total_tokens"},
			GeneratedTokens: Metric{Name: "tgi_request_generated_tokens", Type: Histogram, Sum: true},
		},
	})
}

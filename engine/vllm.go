package engine

import "strconv"

// vLLM: `vllm serve MODEL ...`.
func init() {
	register(&Descriptor{
		Name:              VLLM,
		DefaultExecutable: "vllm",
		prefix:            func(string) []string { return []string{"serve"} },
		Model:             ModelArg{Positional: true},
		HostFlag:          "--host",
		PortFlag:          "--port",
		ServedNameFlag:    "--served-model-name",
		Parallel:          ParallelFlags{Tensor: "--tensor-parallel-size"},
		MultiNode: &MultiNode{
			Headless: true,
			Args: func(nodes, rank int, leader Leader) []string {
				args := []string{"--nnodes", strconv.Itoa(nodes), "--node-rank", strconv.Itoa(rank),
					"--master-addr", leader.Host, "--master-port", leader.Port}
				if rank > 0 {
					args = append(args, "--headless")
				}
				return args
			},
		},
		ReadyPath: "/health",
		Progress:  ParseProgress,
		// vLLM v0.28.0: vllm/v1/metrics/loggers.py. Every engine metric
		// carries model_name and engine (the engine core's index; one series
		// per data-parallel engine). Counters are exposed with _total.
		Metrics: Metrics{
			Path:             "/metrics",
			RequestsWaiting:  Metric{Name: "vllm:num_requests_waiting", Type: Gauge},
			RequestsRunning:  Metric{Name: "vllm:num_requests_running", Type: Gauge},
			KVCacheUsage:     Metric{Name: "vllm:kv_cache_usage_perc", Type: Gauge},
			TimeToFirstToken: Metric{Name: "vllm:time_to_first_token_seconds", Type: Histogram},
			GeneratedTokens:  Metric{Name: "vllm:generation_tokens_total", Type: Counter},
		},
	})
}

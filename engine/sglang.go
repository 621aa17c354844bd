package engine

import (
	"path"
	"strconv"
	"strings"
)

// SGLang: `python3 -m sglang.launch_server --model-path MODEL ...`.
func init() {
	register(&Descriptor{
		Name:              SGLang,
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
		Parallel:       ParallelFlags{Tensor: "--tp-size"},
		MultiNode: &MultiNode{
			Headless: true,
			Args: func(nodes, rank int, leader Leader) []string {
				return []string{"--nnodes", strconv.Itoa(nodes), "--node-rank", strconv.Itoa(rank), "--dist-init-addr", leader.Addr}
			},
		},
		ReadyPath: "/health",
		Progress:  ParseProgress,
		// SGLang v0.5.18: python/sglang/srt/observability/metrics_collector.py.
		// /metrics exists only with --enable-metrics (server_args.py:1547).
		// Scheduler gauges come from attention-TP rank 0 of each DP group
		// and pipeline stage (metrics_collector.py:1081-1084), labelled
		// tp_rank, pp_rank, dp_rank: the first stage's count each request
		// once.
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

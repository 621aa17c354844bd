package engine

// Hugging Face text-generation-inference: `text-generation-launcher
// --model-id MODEL --hostname H --port P --num-shard N ...`.
//
// Layout, from TGI v3.3.7 (commit dfb3fbe78e0d1d69251bd33065591c61bafdfaa8;
// /work/notes/engines/tgi.md): --num-shard N starts N shard processes on
// this machine, tensor parallel, each asserting WORLD_SIZE <= the CUDA
// devices it sees (server/text_generation_server/utils/dist.py:48-55).
// There is no pipeline, data or expert parallelism flag, and no multi-node
// flag at all (--master-addr only joins the local shards,
// launcher/src/main.rs:1044-1048, 1596): nodes > 1 is refused.
func init() {
	register(&Descriptor{
		Name: TGI,
		Pinned: Pinned{Version: "v3.3.7", Commit: "dfb3fbe78e0d1d69251bd33065591c61bafdfaa8",
			Notes: "/work/notes/engines/tgi.md"},
		DefaultExecutable: "text-generation-launcher",
		Model:             ModelArg{Flag: "--model-id"},
		HostFlag:          "--hostname",
		PortFlag:          "--port",
		Parallel:          ParallelFlags{Tensor: "--num-shard"},
		layout: layoutRules{
			defaults: func(l Layout, s Shape) Layout {
				if l.Tensor == 0 {
					l.Tensor = s.GPUs
				}
				return l
			},
			why: "TGI starts one shard per GPU: --num-shard is the GPUs of the replica",
		},
		aliases:   map[string]string{"-p": "--port"},
		ReadyPath: "/health",
		Progress:  ParseProgress,
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

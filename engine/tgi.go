package engine

import (
	"regexp"
	"strconv"
)

// Hugging Face text-generation-inference: `text-generation-launcher
// --model-id MODEL --hostname IP --port P --num-shard N ...`.
//
// Facts from TGI v3.3.7 (commit dfb3fbe78e0d1d69251bd33065591c61bafdfaa8;
// docs/engines/tgi.md, flag table engine/contract/tgi.txt):
//   - The launcher's clap parser rejects any flag given twice ("the
//     argument '--port <PORT>' cannot be used multiple times", exit 2)
//     except --cors-allow-origin and --cuda-graphs, which append
//     (launcher/src/main.rs:579-914; clap 4.5.32 parser.rs:1192-1251). So
//     the recipe's own flags may not appear in args, and args may not
//     repeat a flag (CheckArgs), instead of relying on "the last wins".
//   - Every option also reads an environment variable named after it, and
//     the names are generic (PORT, HOSTNAME, MODEL_ID, NUM_SHARD; the TGI
//     image sets PORT=80). The command line wins over the environment, so
//     the recipe passes every setting it owns as a flag, and none of them
//     can come from a stray PORT or HOSTNAME in the task's environment.
//   - --hostname must be an IP literal: the router parses it as an IpAddr
//     and binds 0.0.0.0 on anything else (router/src/server.rs:1906-1912).
//     The driver's host is the port's host IP, and Build refuses a name.
//   - --num-shard N starts N shard processes on this machine, tensor
//     parallel, each asserting WORLD_SIZE <= the CUDA devices it sees
//     (server/text_generation_server/utils/dist.py:48-55). There is no
//     pipeline, data or expert parallelism flag, and no multi-node flag at
//     all (--master-addr only joins the local shards): nodes > 1 is refused.
//   - No --served-model-name: /v1/models reports the --model-id
//     (router/src/server.rs:165-186).
//   - The HTTP port listens only once the model is loaded and warmed up;
//     /health answers 200 then (server.rs:220-240, 2237-2242).
//   - A shard's tqdm output is buffered until it exits; the parseable load
//     progress is the download's "Download: [i/n] -- ETA: …" lines
//     (server/text_generation_server/utils/hub.py:196-231).
//   - Metrics on GET /metrics of the main port (server.rs:1327-1336): no
//     time-to-first-token metric exists; generated tokens are a per-request
//     histogram.
func init() {
	register(&Descriptor{
		Name: TGI,
		Pinned: Pinned{Version: "v3.3.7", Commit: "dfb3fbe78e0d1d69251bd33065591c61bafdfaa8",
			Notes: "docs/engines/tgi.md"},
		DefaultExecutable: "text-generation-launcher",
		Model:             ModelArg{Flag: "--model-id"},
		HostFlag:          "--hostname",
		HostMustBeIP:      true,
		hostWhy:           " (text-generation-launcher v3.3.7 binds 0.0.0.0 for a name: router/src/server.rs:1906-1912)",
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
		aliases:    map[string]string{"-p": "--port", "-e": "--env", "-g": "--graceful-termination-timeout"},
		noRepeats:  true,
		repeatable: []string{"--cors-allow-origin", "--cuda-graphs"},
		ReadyPath:  "/health",
		Progress:   parseTGIProgress,
		// backends/v3/src/{queue,backend,lib}.rs, router/src/server.rs
		// (metrics-exporter-prometheus, no labels, counters without _total).
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

// tgiDownloadRE matches the weight download's progress lines, as the
// launcher relays them ("Download: [2/4] -- ETA: 0:00:12.5").
var tgiDownloadRE = regexp.MustCompile(`Download: \[(\d{1,6})/(\d{1,6})\]`)

func parseTGIProgress(line string) (Progress, bool) {
	m := tgiDownloadRE.FindStringSubmatch(line)
	if m == nil {
		return Progress{}, false
	}
	done, err1 := strconv.Atoi(m[1])
	total, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || total < 1 || done > total {
		return Progress{}, false
	}
	return Progress{What: "weight files downloaded", Percent: done * 100 / total, Done: done, Total: total}, true
}

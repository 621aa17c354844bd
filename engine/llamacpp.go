package engine

import (
	"regexp"
	"strconv"
	"time"
)

// GPULayersAll is the -ngl value llmgw gives llama.cpp when it holds
// GPUs: every layer and the output layer offloaded (common/arg.cpp:2815-2831
// at 80fb11a: "all" sets n_gpu_layers -2). Without -ngl the default is
// "auto" (-1), which fits as many layers as free memory allows; a GPU
// replica that silently runs part of the model on the CPU is what an
// operator does not want.
const GPULayersAll = "all"

// llama.cpp's server: `llama-server -m FILE --host H --port P -ngl all
// --metrics ...`.
//
// Facts from llama.cpp 0.4.0 (commit 80fb11a, the source node-llama-cpp
// 3.21.1 ships and scripts/llama-server.sh builds; docs/engines/llamacpp.md,
// flag table engine/contract/llamacpp.txt), paths in that tree:
//   - -m takes a local GGUF file (common/arg.cpp:3061-3068); a file that
//     is missing or not a GGUF makes llama-server exit 1 at once. So the
//     model is a file the driver finds in its model cache before starting
//     (Model.File; the catalog's source + file).
//   - One process uses every GPU the CUDA runtime shows it; there is no
//     tensor-parallel group and no multi-node flag: no layout fields,
//     nodes > 1 is refused.
//   - A repeat is never an error: it logs "DEPRECATED: argument ...
//     specified multiple times" and the last value wins (arg.cpp:826-831).
//     Tokens starting "--" read '_' as '-' (arg.cpp:819-822). There is no
//     --flag=value form.
//   - -a/--alias sets the id /v1/models reports (arg.cpp:3037-3044).
//   - The port binds before the model loads; /health answers 503
//     {"error":{"message":"Loading model",...}} while it loads, 200 after
//     (tools/server/server-http.cpp:255-270), and stays 200 when every slot
//     is busy (requests beyond the slots wait: requests_deferred).
//   - /metrics answers 501 unless --metrics is given (arg.cpp:3609-3615);
//     the recipe gives it. Names carry the "llamacpp:" prefix
//     (tools/server/server-task.cpp:1522-1616); there is no KV-cache gauge
//     and no time-to-first-token histogram at this version, so both are
//     absent, never zero.
//   - Stopping: the first SIGTERM or SIGINT ends the serving loop and closes
//     the port, then waits in "cleaning up before exit..." for the HTTP
//     handlers, which with a request in flight lasts until its client goes
//     away; a second signal exits at once with status 1
//     (tools/server/server.cpp:25-37, 452-459). So the driver repeats the
//     signal once the port has closed (StopRule). The handler is not
//     async-signal-safe: it calls server_queue::terminate, which locks the
//     task queue's mutex (server-queue.cpp:132-136), and when the signal
//     lands on the main thread while that thread holds it (it does, many
//     times per decode step, with a request in flight) the server
//     deadlocks, port open, generation stopped; gdb showed exactly that
//     stack, and it happened in 8 of 39 stops with a stream in flight
//     here. A second signal is taken by another thread and exits 1. So
//     the driver also repeats the signal when the port is still open 10 s
//     after it.
//   - Load progress: "load_model: loading model 'PATH'" when the load
//     starts and "llama_server: model loaded" when it is done
//     (tools/server/server.cpp), logged just after /health turns 200
//     (server.cpp:486-489), so a task may be Ready before its 100 %
//     event; between them, with a GPU backend,
//     "load_tensors: offloaded X/Y layers to GPU", which shows whether -ngl
//     took. TestRealEngineLines (internal/testing/realengine) holds these
//     against the real server's log.
func init() {
	register(&Descriptor{
		Name: LlamaCpp,
		Pinned: Pinned{Version: "0.4.0", Commit: "80fb11ac73e66d89eae2c6a91d8a77428fa733ed",
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
			"-sps": "--slot-prompt-similarity",
		},
		underscores: true,
		defaults: func(in Input) [][]string {
			if in.GPUs > 0 {
				return [][]string{{"-ngl", GPULayersAll}}
			}
			return nil
		},
		Adapters: &AdapterRule{
			Flags:    []string{"--lora", "--lora-scaled", "--lora-init-without-apply", "--cache-ram"},
			LoadsAll: true,
			args:     llamaCppAdapters,
			Why:      "--lora loads every adapter before the server listens; common/common.cpp:1342-1357 at 80fb11a",
			Listed: &AdapterListing{Path: "/lora-adapters", parse: parseLlamaCppLoraAdapters,
				Why: "tools/server/server-task.cpp server_task_result_get_lora::to_json at 80fb11a"},
		},
		ReadyPath: "/health",
		Progress:  parseLlamaCppProgress,
		// tools/server/server-task.cpp to_metrics: no labels; "deferred"
		// are requests waiting for a free slot.
		Metrics: Metrics{
			Path:            "/metrics",
			Enable:          []string{"--metrics"},
			RequestsWaiting: Metric{Name: "llamacpp:requests_deferred", Type: Gauge},
			RequestsRunning: Metric{Name: "llamacpp:requests_processing", Type: Gauge},
			GeneratedTokens: Metric{Name: "llamacpp:tokens_predicted_total", Type: Counter},
		},
		Sleep: &SleepMode{
			IdleFlag: "--sleep-idle-seconds", StatePath: "/props", StateField: "is_sleeping",
			Why: "common/arg.cpp:3828 (--sleep-idle-seconds), tools/server/server-context.cpp:4583-4618 " +
				"(/props' is_sleeping) at 80fb11a; /props and /metrics do not wake it, /slots and a completion do",
		},
		// A slot is reused for a request when its prompt shares more than
		// this of the request's tokens (common/arg.cpp:3814, default 0.10;
		// tools/server/server-context.cpp get_available_slot at 80fb11a).
		// At 0.10 a slot holding another conversation of the same tenant
		// qualifies (the system prompt is most of every request) and the
		// conversation's own state is computed again; prefix routing puts
		// a tenant's conversations on one replica, so it needs the
		// threshold just under the share a turn's previous turn makes of
		// it (docs/gateway.md, "llama.cpp's slots"; docs/perf.md, "Prefix
		// routing with bounded loads (issue 36)": 75.8–76.5 % of the
		// prompt tokens hit at 0.10, 87.4–88.9 % at 0.85).
		PrefixCache: &FlagDefault{
			Flag: "--slot-prompt-similarity", Value: "0.85",
			Why: "llama-server reuses a slot sharing more than --slot-prompt-similarity of a request " +
				"(common/arg.cpp:3814, tools/server/server-context.cpp get_available_slot at 80fb11a); " +
				"at its default 0.10 a tenant's other conversation takes the slot: docs/gateway.md, \"llama.cpp's slots\"",
		},
		Stop: StopRule{
			RepeatWhenUnserved: true,
			Why: "llama-server waits for its clients after the first stop signal and exits at the second " +
				"(tools/server/server.cpp:25-37 at 80fb11a)",
			RepeatWhenStillServing: 10 * time.Second,
			StillServingWhy: "llama-server's signal handler takes its task queue's lock and hangs when the signal " +
				"interrupts the thread that holds it; a second signal, taken by another thread, exits " +
				"(tools/server/server.cpp:28-37, server-queue.cpp:132-136 at 80fb11a)",
		},
	})
}

var (
	llamaOffloadRE = regexp.MustCompile(`offloaded (\d{1,6})/(\d{1,6}) layers to GPU`)
	// tools/server/server.cpp at 80fb11a: "srv    load_model: loading model
	// 'PATH'" when the load starts, "srv  llama_server: model loaded" when
	// it has (before /health turns 200).
	llamaLoadingRE = regexp.MustCompile(`\bload_model: loading model '`)
	llamaLoadedRE  = regexp.MustCompile(`\bllama_server: model loaded\s*$`)
)

func parseLlamaCppProgress(line string) (Progress, bool) {
	switch {
	case llamaLoadingRE.MatchString(line):
		return Progress{What: "the model", Percent: 0}, true
	case llamaLoadedRE.MatchString(line):
		return Progress{What: "the model", Percent: 100}, true
	}
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

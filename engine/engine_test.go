package engine_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/engine"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", p, diff)
	}
}

func render(c engine.Cmd) string {
	var b strings.Builder
	fmt.Fprintf(&b, "path: %s\n", c.Path)
	for i, a := range c.Args {
		fmt.Fprintf(&b, "arg[%d]: %s\n", i, a)
	}
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "env: %s=%s\n", k, c.Env[k])
	}
	fmt.Fprintf(&b, "line: %s\n", c)
	return b.String()
}

func TestRecipesGolden(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   engine.Input
	}{
		{"vllm", engine.Input{Engine: "vllm", Executable: "/opt/vllm/bin/vllm", Model: "Qwen/Qwen2.5-0.5B-Instruct",
			Host: "10.0.0.7", Port: 23456, Layout: engine.Layout{Tensor: 2}, GPUs: 2, Args: []string{"--max-model-len", "4096"}}},
		{"vllm_served_name", engine.Input{Engine: "vllm", Executable: "vllm", Model: "Qwen/Qwen2.5-72B-Instruct",
			Host: "10.0.0.7", Port: 8000, Layout: engine.Layout{Tensor: 2, Data: 2, Expert: 4}, GPUs: 4, ServedName: "qwen-72b"}},
		{"vllm_2nodes_rank0", engine.Input{Engine: "vllm", Executable: "vllm", Model: "meta-llama/Llama-3.1-405B-Instruct",
			Host: "10.0.0.7", Port: 8000, Layout: engine.Layout{Tensor: 8, Pipeline: 2}, GPUs: 8, ServedName: "llama-405b",
			Nodes: 2, Rank: 0, Leader: "10.0.0.7:24001"}},
		{"vllm_2nodes_rank1", engine.Input{Engine: "vllm", Executable: "vllm", Model: "meta-llama/Llama-3.1-405B-Instruct",
			Host: "10.0.0.8", Port: 8000, Layout: engine.Layout{Tensor: 8, Pipeline: 2}, GPUs: 8, ServedName: "llama-405b",
			Nodes: 2, Rank: 1, Leader: "10.0.0.7:24001"}},
		{"vllm_dp_2nodes_rank1", engine.Input{Engine: "vllm", Executable: "vllm", Model: "deepseek-ai/DeepSeek-V3",
			Host: "10.0.0.8", Port: 8000, Layout: engine.Layout{Tensor: 4, Data: 4, Expert: 16}, GPUs: 8, ServedName: "deepseek-v3",
			Nodes: 2, Rank: 1, Leader: "10.0.0.7:24001"}},
		{"sglang", engine.Input{Engine: "sglang", Executable: "/usr/bin/python3", Model: "meta-llama/Llama-3.1-8B-Instruct",
			Host: "127.0.0.1", Port: 30000, Layout: engine.Layout{Tensor: 4}, GPUs: 4, Args: []string{"--mem-fraction-static", "0.8"}}},
		{"sglang_launcher", engine.Input{Engine: "sglang", Executable: "/opt/sglang/bin/sglang-launch", Model: "/models/llama",
			Host: "127.0.0.1", Port: 30000, Layout: engine.Layout{Tensor: 1}, GPUs: 1}},
		{"sglang_2nodes_rank1", engine.Input{Engine: "sglang", Executable: "python3", Model: "deepseek-ai/DeepSeek-V3",
			Host: "10.0.0.8", Port: 30000, Layout: engine.Layout{Tensor: 16, Expert: 16}, GPUs: 8, ServedName: "deepseek-v3",
			Nodes: 2, Rank: 1, Leader: "10.0.0.7:24001", Args: []string{"--trust-remote-code"}}},
		{"tgi", engine.Input{Engine: "tgi", Executable: "text-generation-launcher", Model: "mistralai/Mistral-7B-Instruct-v0.3",
			Host: "0.0.0.0", Port: 8080, Layout: engine.Layout{Tensor: 8}, GPUs: 8, ServedName: "mistral",
			Args: []string{"--cors-allow-origin", "a", "--cors-allow-origin", "b"}}},
		{"llamacpp", engine.Input{Engine: "llamacpp", Executable: "/usr/local/bin/llama-server", Model: "/models/qwen2.5-0.5b-q4_k_m.gguf",
			Host: "127.0.0.1", Port: 8081, Layout: engine.Layout{Tensor: 1}, GPUs: 1, ServedName: "qwen", Args: []string{"-c", "8192"}}},
		{"llamacpp_ngl", engine.Input{Engine: "llamacpp", Executable: "/usr/local/bin/llama-server", Model: "/models/qwen2.5-0.5b-q4_k_m.gguf",
			Host: "127.0.0.1", Port: 8081, Layout: engine.Layout{Tensor: 2}, GPUs: 2, Args: []string{"-c", "8192", "--n_gpu_layers", "20"}}},
		{"llamacpp_cpu", engine.Input{Engine: "llamacpp", Executable: "llama-server", Model: "/models/tiny.gguf",
			Host: "127.0.0.1", Port: 8081, Layout: engine.Layout{Tensor: 1}}},
		{"command", engine.Input{Engine: "command", Executable: "/opt/my engine/serve", Model: "my-model",
			Host: "127.0.0.1", Port: 9000, Layout: engine.Layout{Tensor: 2, Pipeline: 2}, GPUs: 2, Nodes: 2, Rank: 1,
			Leader: "10.0.0.7:1", Args: []string{"--listen", "it's here"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := engine.Build(c.in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			golden(t, c.name, render(got))
		})
	}
}

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	ok := engine.Input{Engine: "vllm", Executable: "vllm", Model: "m", Host: "127.0.0.1", Port: 8000, Layout: engine.Layout{Tensor: 1}}
	cases := []struct {
		name   string
		modify func(*engine.Input)
		want   string
	}{
		{"unknown engine", func(in *engine.Input) { in.Engine = "triton" }, `engine: unknown engine "triton" (want one of command, llamacpp, sglang, tgi, vllm)`},
		{"no model", func(in *engine.Input) { in.Model = "" }, `model: required for engine "vllm"`},
		{"no executable", func(in *engine.Input) { in.Executable = "" }, "command: no executable to run"},
		{"bad port", func(in *engine.Input) { in.Port = 70000 }, "port: 70000 is not a TCP port"},
		{"zero tp", func(in *engine.Input) { in.Layout.Tensor = 0 }, "tensor_parallel: must be at least 1, got 0"},
		{"owned flag", func(in *engine.Input) { in.Args = []string{"--max-model-len", "8", "-tp", "2"} },
			"args[2]: -tp is set by llmgw from tensor_parallel: set that instead"},
		{"owned flag by prefix", func(in *engine.Input) { in.Args = []string{"--tensor-parallel", "2"} },
			"args[0]: --tensor-parallel is set by llmgw from tensor_parallel: set that instead"},
		{"owned flag with underscores", func(in *engine.Input) { in.Args = []string{"--pipeline_parallel_size=2"} },
			"args[0]: --pipeline_parallel_size=2 is set by llmgw from pipeline_parallel: set that instead"},
		{"owned model flag", func(in *engine.Input) { in.Args = []string{"--model", "other"} },
			"args[0]: --model is set by llmgw: the model is serve's positional argument"},
		{"owned multi-node flag", func(in *engine.Input) { in.Args = []string{"--headless"} },
			"args[0]: --headless is set by llmgw from the replica's nodes and rank"},
		{"served name owned when given", func(in *engine.Input) {
			in.ServedName = "x"
			in.Args = []string{"--served-model-name", "y"}
		}, "args[0]: --served-model-name is set by llmgw to the model's name"},
		{"rank out of range", func(in *engine.Input) { in.Nodes, in.Rank, in.Leader = 2, 2, "h:1" }, "node_rank: 2 is not a rank of a replica of 2 nodes"},
		{"no leader", func(in *engine.Input) { in.Nodes, in.Rank = 2, 1 }, `leader_addr: "" is not host:port`},
		{"bad leader port", func(in *engine.Input) { in.Nodes, in.Rank, in.Leader = 2, 1, "h:x" }, `leader_addr: "h:x": port "x" is not a TCP port`},
		{"tgi repeat", func(in *engine.Input) {
			in.Engine = "tgi"
			in.Args = []string{"--max-total-tokens", "8", "--max-total-tokens=9"}
		}, `args[2]: --max-total-tokens=9 repeats args[0] (--max-total-tokens): engine "tgi" (text-generation-launcher v3.3.7) rejects a flag given twice`},
		{"tgi port by short flag", func(in *engine.Input) {
			in.Engine = "tgi"
			in.Args = []string{"-p", "80"}
		}, "args[0]: -p is set by llmgw to the task's port"},
		{"tgi host name", func(in *engine.Input) { in.Engine, in.Host = "tgi", "localhost" },
			`port: engine "tgi" needs an IP address to serve on, got "localhost"`},
		{"tgi nodes", func(in *engine.Input) { in.Engine, in.Nodes, in.Leader = "tgi", 2, "h:1" },
			`nodes: engine "tgi" runs on one node (text-generation-launcher v3.3.7), got 2`},
		{"tgi pipeline", func(in *engine.Input) { in.Engine, in.Layout.Pipeline = "tgi", 2 },
			`pipeline_parallel: engine "tgi" has no pipeline parallelism (text-generation-launcher v3.3.7) (leave it out), got 2`},
		{"llamacpp nodes", func(in *engine.Input) { in.Engine, in.Nodes, in.Leader = "llamacpp", 2, "h:1" },
			`nodes: engine "llamacpp" runs on one node (llama-server 0.4.0), got 2`},
		{"sglang owned alias", func(in *engine.Input) {
			in.Engine = "sglang"
			in.Args = []string{"--tp", "16"}
		}, "args[0]: --tp is set by llmgw from tensor_parallel: set that instead"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := ok
			c.modify(&in)
			_, err := engine.Build(in)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("got error %v, want %q", err, c.want)
			}
		})
	}
	_, err := engine.Build(engine.Input{Engine: "x"})
	if !errors.Is(err, engine.ErrUnknownEngine) {
		t.Errorf("got %v, want ErrUnknownEngine", err)
	}
	// The command engine needs no model.
	in := ok
	in.Engine, in.Model = "command", ""
	if _, err := engine.Build(in); err != nil {
		t.Errorf("command engine without model: %v", err)
	}
	// Engines whose parser keeps the last of a repeated flag take repeats.
	in = ok
	in.Args = []string{"--max-model-len", "8", "--max-model-len", "9"}
	if _, err := engine.Build(in); err != nil {
		t.Errorf("vllm with a repeated flag: %v", err)
	}
	// Without served_model_name, the served-name flag is the task's.
	in.Args = []string{"--served-model-name", "qwen"}
	if _, err := engine.Build(in); err != nil {
		t.Errorf("vllm with its own served name: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	want := map[string][2]string{
		"vllm":     {"vllm", "/health"},
		"sglang":   {"python3", "/health"},
		"tgi":      {"text-generation-launcher", "/health"},
		"llamacpp": {"llama-server", "/health"},
		"command":  {"", "/health"},
	}
	for _, e := range engine.Engines() {
		got := [2]string{engine.DefaultExecutable(e), engine.DefaultReadyPath(e)}
		if got != want[e] {
			t.Errorf("%s: got %v, want %v", e, got, want[e])
		}
	}
	if len(engine.Engines()) != len(want) {
		t.Errorf("got engines %v, want %d", engine.Engines(), len(want))
	}
}

func TestParseProgress(t *testing.T) {
	t.Parallel()
	cases := []struct {
		line string
		want engine.Progress
		ok   bool
	}{
		{"Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]",
			engine.Progress{What: "safetensors checkpoint shards", Percent: 0, Done: 0, Total: 4}, true},
		{"(VllmWorker rank=0 pid=12) Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.6s/it]",
			engine.Progress{What: "safetensors checkpoint shards", Percent: 50, Done: 2, Total: 4}, true},
		{"[2025-01-01 10:00:00 TP0] Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:06<00:00,  1.5s/it]",
			engine.Progress{What: "safetensors checkpoint shards", Percent: 100, Done: 4, Total: 4}, true},
		{"Loading checkpoint shards:  33%|███▎      | 1/3 [00:01<00:02,  1.10s/it]",
			engine.Progress{What: "checkpoint shards", Percent: 33, Done: 1, Total: 3}, true},
		{"Loading pt checkpoint shards: 25%", engine.Progress{What: "pt checkpoint shards", Percent: 25}, true},
		{"INFO: Started server process [42]", engine.Progress{}, false},
		{"Loading safetensors checkpoint shards: 250% Completed", engine.Progress{}, false},
	}
	for _, c := range cases {
		got, ok := engine.ParseProgress(c.line)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseProgress(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParseProgress(f *testing.F) {
	f.Add("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:00<00:00,  1.80it/s]")
	f.Add("Loading checkpoint shards: 1%|")
	f.Fuzz(func(t *testing.T, line string) {
		p, ok := engine.ParseProgress(line)
		if ok && (p.Percent < 0 || p.Percent > 100) {
			t.Fatalf("percent %d out of range", p.Percent)
		}
	})
}

// TGI reads every option it lacks on the command line from an environment
// variable named after it, and the names are generic (PORT, HOSTNAME; the
// TGI image sets PORT=80). The command line wins, so every setting llmgw
// owns is always on it, whatever the layout.
func TestTGIPassesWhatItsEnvironmentCouldSet(t *testing.T) {
	t.Parallel()
	for _, tp := range []int{1, 4} {
		cmd, err := engine.Build(engine.Input{Engine: "tgi", Executable: "text-generation-launcher", Model: "org/m",
			Host: "10.0.0.7", Port: 8080, Layout: engine.Layout{Tensor: tp}, GPUs: tp})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range [][2]string{{"--model-id", "org/m"}, {"--hostname", "10.0.0.7"}, {"--port", "8080"}, {"--num-shard", fmt.Sprint(tp)}} {
			i := slices.Index(cmd.Args, want[0])
			if i < 0 || i+1 >= len(cmd.Args) || cmd.Args[i+1] != want[1] {
				t.Errorf("tp %d: %s lacks %s %s (TGI would read it from %s)", tp, cmd, want[0], want[1], strings.ToUpper(strings.ReplaceAll(want[0][2:], "-", "_")))
			}
		}
		if len(cmd.Env) != 0 {
			t.Errorf("tgi recipe sets environment %v", cmd.Env)
		}
	}
}

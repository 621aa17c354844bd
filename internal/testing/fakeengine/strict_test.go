package fakeengine

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/engine/contract"
)

func pinned(t *testing.T, engine string) string {
	t.Helper()
	c, err := contract.Load(engine)
	if err != nil {
		t.Fatal(err)
	}
	return c.Spec()
}

func TestStrictMode(t *testing.T) {
	vllm, tgi := pinned(t, "vllm"), pinned(t, "tgi")
	// vLLM loads each --lora-modules path at start: a PEFT directory.
	loraA, loraB := peftDir(t), peftDir(t)
	tests := []struct {
		name       string
		args       string
		env        []string
		wantCode   int
		wantStdout string // the startup line, when the engine starts
		wantStderr string // all of stderr, when it does not
	}{
		{
			name: "vllm accepts the recipe", env: []string{StrictEnv, "vllm", FlagsEnv, "--exit-code 0 --load-seconds 0.5", "CUDA_VISIBLE_DEVICES", "0,1"},
			args:       "serve org/m --host 127.0.0.1 --port 8000 --tensor-parallel-size 2 --max_model_len 64 --served-model-name a",
			wantStdout: "fake-engine: serving model=org/m served_model_name=a host=127.0.0.1 port=8000 tensor_parallel=2 gpus=0,1 load_seconds=0.5 strict=" + vllm + "\n",
		},
		{
			// vLLM keeps the last of a repeated flag, and so does strict
			// mode. An abbreviation (--tensor-par) is accepted unchecked,
			// as vLLM accepts it, and not read.
			name: "repeats take the last", env: []string{StrictEnv, vllm, FlagsEnv, "--exit-code 0"},
			args:       "serve org/m --served-model-name x --served-model-name y -tp 1 --tensor-parallel-size 3 --tensor-par 5",
			wantStdout: "fake-engine: serving model=org/m served_model_name=y host=127.0.0.1 port=8000 tensor_parallel=3 gpus=unset load_seconds=0 strict=" + vllm + "\n",
		},
		{
			name: "tgi by flag", env: []string{FlagsEnv, "--exit-code 0"},
			args:       "--strict " + tgi + " --model-id org/m -p 9000 --num-shard 2 --max-total-tokens 128",
			wantStdout: "fake-engine: serving model=org/m served_model_name=org/m host=127.0.0.1 port=8000 tensor_parallel=2 gpus=unset load_seconds=0 strict=" + tgi + "\n",
		},
		{
			name: "own flags on the command line are the engine's unknown flags", env: []string{StrictEnv, vllm},
			args:       "serve org/m --load-seconds 1",
			wantCode:   2,
			wantStderr: "vllm serve: error: unrecognized arguments: --load-seconds\n",
		},
		{
			name: "vllm takes the LoRA flags llmgw renders", env: []string{StrictEnv, vllm, FlagsEnv, "--exit-code 0"},
			args:       `serve org/m --enable-lora --max-loras 2 --max-cpu-loras 2 --max-lora-rank 32 --lora-modules {"name":"a","path":"` + loraA + `"} {"name":"b","path":"` + loraB + `"}`,
			wantStdout: "fake-engine: serving model=org/m served_model_name=org/m host=127.0.0.1 port=8000 tensor_parallel=0 gpus=unset load_seconds=0 strict=" + vllm + "\n",
		},
		{
			name: "vllm refuses a LoRA rank it has no slot size for", env: []string{StrictEnv, vllm},
			args:       "serve org/m --enable-lora --max-lora-rank 24",
			wantCode:   2,
			wantStderr: "vllm serve: error: argument --max-lora-rank: invalid choice: 24 (choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)\n",
		},
		{
			name: "vllm refuses a slot count that is not a number", env: []string{StrictEnv, vllm},
			args:       "serve org/m --enable-lora --max-loras all",
			wantCode:   2,
			wantStderr: "vllm serve: error: argument --max-loras: invalid int value: 'all'\n",
		},
		{
			name: "tgi refuses a repeat", env: []string{StrictEnv, "vllm"},
			args:       "--strict=tgi --model-id m --num-shard 1 --num-shard 2",
			wantCode:   2,
			wantStderr: "error: the argument '--num-shard <NUM_SHARD>' cannot be used multiple times\n",
		},
		{
			name: "llama.cpp exits 1", args: "--strict llamacpp -m /m.gguf --port=8080",
			wantCode:   1,
			wantStderr: "error: invalid argument: --port=8080\n",
		},
		{
			name: "sglang needs its model", args: "--strict sglang --port 1",
			wantCode:   2,
			wantStderr: "sglang serve: error: the following arguments are required: --model-path/--model\n",
		},
		{
			name: "version not pinned", args: "--strict vllm@v0.1.0 serve m",
			wantCode:   ExitUsage,
			wantStderr: "fake-engine: usage: strict mode \"vllm@v0.1.0\": no contract for vllm@v0.1.0: the pinned contract is " + vllm + " (have " + strings.Join(contractSpecs(), ", ") + ")\nRun 'fake-engine --help' for usage.\n",
		},
		{
			name: "strict without an engine", args: "--strict",
			wantCode:   ExitUsage,
			wantStderr: "fake-engine: usage: --strict needs ENGINE or ENGINE@VERSION (one of " + strings.Join(contractSpecs(), ", ") + ")\nRun 'fake-engine --help' for usage.\n",
		},
		{
			name: "own flags from the environment without strict mode", env: []string{FlagsEnv, "--exit-code 0 --load-seconds 0.5"},
			args:       "serve org/m --load-shards 2",
			wantStdout: "fake-engine: serving model=org/m served_model_name=org/m host=127.0.0.1 port=8000 tensor_parallel=0 gpus=unset load_seconds=0.5\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := <-startRun(t.Context(), tt.args, nil, lookupEnv(tt.env...))
				if got.code != tt.wantCode {
					t.Errorf("Run = %d, want %d\nstderr:\n%s", got.code, tt.wantCode, got.stderr)
				}
				if tt.wantStderr != "" {
					if diff := cmp.Diff(tt.wantStderr, got.stderr); diff != "" {
						t.Errorf("stderr (-want +got):\n%s", diff)
					}
					if got.stdout != "" {
						t.Errorf("stdout %q, want nothing", got.stdout)
					}
					return
				}
				if first, _, _ := strings.Cut(got.stdout, "\n"); first+"\n" != tt.wantStdout {
					t.Errorf("startup line\n got %q\nwant %q", first+"\n", tt.wantStdout)
				}
			})
		})
	}
}

func TestStrictHelp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := <-startRun(t.Context(), "--strict sglang --help", nil, lookupEnv())
		if got.code != 0 || got.stdout != Usage {
			t.Errorf("Run = %d, stdout %q; want 0 and the usage", got.code, got.stdout)
		}
	})
}

// In strict mode the engine is the contract's, so /metrics serves its
// names; --engine in FAKE_ENGINE_FLAGS still wins.
func TestStrictEngine(t *testing.T) {
	env := func(kv ...string) func(string) string {
		l := lookupEnv(kv...)
		return func(k string) string { v, _ := l(k); return v }
	}
	for _, tc := range []struct {
		args  []string
		env   func(string) string
		want  string
		on    bool
		model string
	}{
		{[]string{"--strict", "llamacpp", "--model", "/m.gguf", "--metrics"}, env(), "llamacpp", true, "/m.gguf"},
		{[]string{"--strict", "tgi", "--model-id", "org/m"}, env(), "tgi", false, "org/m"},
		{[]string{"--model-path", "org/m", "--enable-metrics"}, env(StrictEnv, "sglang"), "sglang", true, "org/m"},
		{[]string{"--strict", "llamacpp", "-m", "/m.gguf"}, env(FlagsEnv, "--engine vllm"), "vllm", false, "/m.gguf"},
	} {
		c, cfg, err := parseStrict(tc.args, tc.env)
		if err != nil || c == nil {
			t.Fatalf("parseStrict(%q) = %v, %v", tc.args, c, err)
		}
		if cfg.Engine != tc.want || cfg.MetricsEnabled != tc.on || cfg.Model != tc.model {
			t.Errorf("parseStrict(%q): engine %q metrics %v model %q, want %q %v %q", tc.args, cfg.Engine, cfg.MetricsEnabled, cfg.Model, tc.want, tc.on, tc.model)
		}
	}
}

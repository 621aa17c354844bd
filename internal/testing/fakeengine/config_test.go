package fakeengine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParse(t *testing.T) {
	with := func(f func(*Config)) Config {
		c := Defaults()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		args string
		env  func(string) string
		want Config
	}{
		{
			name: "vllm shape with unknown flags",
			args: "serve Qwen/Qwen2.5-0.5B-Instruct --host 127.0.0.1 --port 8123 --tensor-parallel-size 2 --max-model-len 2048 --gpu-memory-utilization 0.9 --enforce-eager --dtype=bfloat16",
			want: with(func(c *Config) {
				c.Model, c.Port, c.TensorParallel, c.MaxModelLen = "Qwen/Qwen2.5-0.5B-Instruct", 8123, 2, 2048
				c.Ignored = []string{"--gpu-memory-utilization", "0.9", "--enforce-eager", "--dtype=bfloat16"}
			}),
		},
		{
			name: "served model names, one or more",
			args: "serve /models/qwen --served-model-name qwen qwen-small --port=9000 -tp 4",
			want: with(func(c *Config) {
				c.Model, c.ServedNames, c.Port, c.TensorParallel = "/models/qwen", []string{"qwen", "qwen-small"}, 9000, 4
			}),
		},
		{
			name: "underscores spell the same flags",
			args: "serve m --tensor_parallel_size 2 --max_model_len=100 --load_seconds 1.5",
			want: with(func(c *Config) {
				c.Model, c.TensorParallel, c.MaxModelLen, c.LoadTime = "m", 2, 100, 1500*time.Millisecond
			}),
		},
		{
			name: "sglang spelling",
			args: "--model-path meta/llama --tp-size 8 --host 127.0.0.2 --port 30000 --context-length 8192 --served-model-name llama",
			want: with(func(c *Config) {
				c.Model, c.TensorParallel, c.Host, c.Port, c.MaxModelLen, c.ServedNames = "meta/llama", 8, "127.0.0.2", 30000, 8192, []string{"llama"}
				// SGLang's LoRA defaults: 8 adapters a batch, no rank.
				c.Engine, c.MaxLoRAs, c.MaxLoRARank = EngineSGLang, 8, 0
			}),
		},
		{
			name: "tgi spelling",
			args: "--model-id bigscience/bloom --num-shard 2 --hostname 127.0.0.3 --port 8080 --max-total-tokens 1024",
			want: with(func(c *Config) {
				c.Model, c.TensorParallel, c.Host, c.Port, c.MaxModelLen = "bigscience/bloom", 2, "127.0.0.3", 8080, 1024
				c.Engine = EngineTGI
			}),
		},
		{
			name: "llama.cpp spelling",
			args: "-m /models/q4.gguf --alias tiny --host 127.0.0.1 --port 8081 --ctx-size 512 -ngl 99",
			want: with(func(c *Config) {
				c.Model, c.ServedNames, c.Port, c.MaxModelLen = "/models/q4.gguf", []string{"tiny"}, 8081, 512
				c.Ignored = []string{"-ngl", "99"}
				c.Engine = EngineLlamaCpp
			}),
		},
		{
			name: "sglang --tp",
			args: "--model-path m --tp 2",
			want: with(func(c *Config) {
				c.Model, c.TensorParallel, c.Engine, c.MaxLoRAs, c.MaxLoRARank = "m", 2, EngineSGLang, 8, 0
			}),
		},
		{
			name: "metrics switches, batch bounds and an explicit engine",
			args: "--model-path m --enable-metrics --max-running-requests 4 --kv-cache-tokens 100 --engine tgi",
			want: with(func(c *Config) {
				c.Model, c.Engine, c.MetricsEnabled, c.MaxRunning, c.KVCacheTokens = "m", EngineTGI, true, 4, 100
			}),
		},
		{
			name: "--engine before the model flag wins too",
			args: "--engine vllm -m x.gguf --metrics -np 2",
			want: with(func(c *Config) { c.Model, c.MetricsEnabled, c.MaxRunning = "x.gguf", true, 2 }),
		},
		{
			name: "fake-engine flags",
			args: "serve m --load-seconds 2500ms --load-shards 3 --tokens-per-second 0 --max-tokens 7 --embedding-dim 4 --crash-after 3 --exit-code 9 --crash-panic --ignore-sigterm --hang-on-stop --lose-first-stop --expect-gpus 2",
			want: with(func(c *Config) {
				c.Model, c.LoadTime, c.LoadShards, c.TokensPerSecond, c.MaxTokens, c.EmbeddingDim = "m", 2500*time.Millisecond, 3, 0, 7, 4
				c.Crash, c.CrashAfter, c.ExitCode, c.CrashPanic, c.IgnoreSIGTERM, c.ExpectGPUs = true, 3*time.Second, 9, true, true, 2
				c.HangOnStop, c.LoseFirstStop = true, true
			}),
		},
		{
			name: "exit code alone crashes at once",
			args: "serve m --exit-code 4",
			want: with(func(c *Config) { c.Model, c.Crash, c.ExitCode = "m", true, 4 }),
		},
		{
			name: "bool flags take =false and never the next word",
			args: "serve m --ignore-sigterm=false --crash-panic extra",
			want: with(func(c *Config) { c.Model, c.CrashPanic, c.Ignored = "m", true, []string{"extra"} }),
		},
		{
			name: "environment fills what flags leave",
			args: "",
			env:  env("LLMGW_HOST", "127.0.0.9", "LLMGW_PORT", "7000", "LLMGW_MODEL", "env/model"),
			want: with(func(c *Config) { c.Model, c.Host, c.Port = "env/model", "127.0.0.9", 7000 }),
		},
		{
			name: "flags win over the environment",
			args: "serve flag/model --host 127.0.0.1 --port 0",
			env:  env("LLMGW_HOST", "127.0.0.9", "LLMGW_PORT", "7000", "LLMGW_MODEL", "env/model"),
			want: with(func(c *Config) { c.Model, c.Port = "flag/model", 0 }),
		},
		{
			name: "--model and after --",
			args: "serve --model m -- --not-a-flag",
			want: with(func(c *Config) { c.Model, c.Ignored = "m", []string{"--not-a-flag"} }),
		},
		{
			name: "unknown flag before a negative number takes it",
			args: "serve m --seed -1",
			want: with(func(c *Config) { c.Model, c.Ignored = "m", []string{"--seed", "-1"} }),
		},
		{
			name: "help needs no model",
			args: "--help",
			want: with(func(c *Config) { c.Help = true }),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := tt.env
			if getenv == nil {
				getenv = env()
			}
			got, err := Parse(strings.Fields(tt.args), getenv)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.args, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		args string
		env  func(string) string
		want string
	}{
		{"serve", nil, "no model"},
		{"--port 8000", nil, "no model"},
		{"serve m --port", nil, "--port needs a value"},
		{"serve m --port 70000", nil, `--port "70000"`},
		{"serve m --port http", nil, `--port "http"`},
		{"serve m --tensor-parallel-size 0", nil, "--tensor-parallel-size"},
		{"serve m --load-seconds -1", nil, "--load-seconds"},
		{"serve m --load-seconds forever", nil, "--load-seconds"},
		{"serve m --tokens-per-second NaN", nil, "--tokens-per-second"},
		{"serve m --exit-code 256", nil, "--exit-code"},
		{"serve m --max-tokens 0", nil, "--max-tokens"},
		{"serve m --expect-gpus -1", nil, "--expect-gpus"},
		{"serve m --ignore-sigterm=maybe", nil, "--ignore-sigterm"},
		{"serve m --host=", nil, "empty --host"},
		{"serve m", env("LLMGW_PORT", "eighty"), "LLMGW_PORT"},
		{"serve m --engine triton", nil, `--engine "triton": want one of llamacpp, sglang, tgi, vllm`},
		{"serve m --max-num-seqs 0", nil, "--max-num-seqs"},
		{"serve m --kv-cache-tokens x", nil, "--kv-cache-tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			getenv := tt.env
			if getenv == nil {
				getenv = env()
			}
			_, err := Parse(strings.Fields(tt.args), getenv)
			if !errors.Is(err, ErrUsage) {
				t.Fatalf("Parse(%q) = %v, want an ErrUsage", tt.args, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) = %q, want it to mention %q", tt.args, err, tt.want)
			}
		})
	}
}

func TestModelID(t *testing.T) {
	tests := []struct {
		cfg       Config
		id        string
		wantNames []string
	}{
		{Config{Model: "org/m"}, "org/m", []string{"org/m"}},
		{Config{Model: "org/m", ServedNames: []string{"a", "b"}}, "a", []string{"a", "b"}},
	}
	for _, tt := range tests {
		if got := tt.cfg.ModelID(); got != tt.id {
			t.Errorf("ModelID() = %q, want %q", got, tt.id)
		}
		if diff := cmp.Diff(tt.wantNames, tt.cfg.names()); diff != "" {
			t.Errorf("names() (-want +got):\n%s", diff)
		}
	}
}

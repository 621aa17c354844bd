package fakeengine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrUsage marks a command line fake-engine cannot serve from.
var ErrUsage = errors.New("usage")

// Config is what one fake-engine process serves and how it misbehaves.
type Config struct {
	// Model is the model id or path as given (vLLM's positional MODEL,
	// --model, --model-path, --model-id, -m or LLMGW_MODEL).
	Model string
	// ServedNames are the ids the engine answers to (--served-model-name,
	// --alias). Empty means Model.
	ServedNames []string
	Host        string
	Port        int
	// TensorParallel is the tensor-parallel size given on the command line;
	// 0 when none was.
	TensorParallel int
	// MaxModelLen bounds prompt plus completion tokens of one request.
	MaxModelLen int

	// LoadTime is how long /health answers 503 after start.
	LoadTime time.Duration
	// LoadShards is the number of checkpoint shards the load progress
	// lines count.
	LoadShards int
	// TokensPerSecond paces generation; 0 generates without pacing.
	TokensPerSecond float64
	// MaxTokens is the completion length when a request gives none.
	MaxTokens int
	// EmbeddingDim is the length of /v1/embeddings vectors when a request
	// gives no dimensions.
	EmbeddingDim int

	// Engine is the engine whose /metrics fake-engine serves, with its real
	// names (vllm, sglang, tgi, llamacpp): --engine, else the engine whose
	// spelling of the model flag the command line used (--model-path:
	// sglang, --model-id: tgi, -m: llamacpp; vLLM's otherwise).
	Engine string
	// MetricsEnabled is SGLang's --enable-metrics or llama.cpp's --metrics:
	// as impersonated, those two serve /metrics only with it.
	MetricsEnabled bool
	// MaxRunning bounds the requests generating at once, as an engine's
	// batch does (vLLM's --max-num-seqs, SGLang's --max-running-requests,
	// TGI's --max-batch-size, llama.cpp's --parallel slots); the rest wait.
	// 0: no bound.
	MaxRunning int
	// KVCacheTokens is the size of the simulated KV cache in tokens: a
	// running request holds its prompt and what it has generated.
	KVCacheTokens int

	// Crash makes the engine exit with ExitCode once CrashAfter has passed
	// since start. Set by --crash-after or --exit-code.
	Crash      bool
	CrashAfter time.Duration
	ExitCode   int
	// CrashPanic writes a Python traceback, as a crashing engine would,
	// before exiting.
	CrashPanic bool
	// IgnoreSIGTERM makes SIGTERM a no-op; SIGINT still shuts down.
	IgnoreSIGTERM bool
	// HangOnStop stops as llama.cpp's server 0.4.0 does: the first SIGTERM
	// or SIGINT closes the port and waits for the requests in flight to end
	// on their own (a stream goes on until its client leaves); a second
	// signal exits 1 at once.
	HangOnStop bool
	// LoseFirstStop loses the first SIGTERM or SIGINT as llama.cpp's server
	// 0.4.0 sometimes does (its handler deadlocks on the task queue's
	// lock): nothing said, the port stays open; a second one exits 1 at
	// once.
	LoseFirstStop bool
	// ExpectGPUs, when 0 or more, is the exact number of GPUs the engine
	// must see through CUDA_VISIBLE_DEVICES. -1 when not given.
	ExpectGPUs int
	// HostGPUs are the host's GPU UUIDs in PCI bus order, the order CUDA
	// numbers them in under CUDA_DEVICE_ORDER=PCI_BUS_ID (--host-gpus).
	// With them, CUDA_VISIBLE_DEVICES is resolved as CUDA would (see
	// ResolveGPUs); without, its entries are taken as they are.
	HostGPUs []string

	// LoRAModules are vLLM's --lora-modules; LoRAFiles llama.cpp's --lora
	// files (adapters.go). EnableLoRA is vLLM's --enable-lora.
	LoRAModules []Adapter
	LoRAFiles   []Adapter
	EnableLoRA  bool
	// MaxLoRAs and MaxLoRARank are vLLM's --max-loras (default 1) and
	// --max-lora-rank (default 16): the max_lora label of
	// vllm:lora_requests_info, and the rank bound an adapter's r must
	// keep to (vllm/config/lora.py at 53e211d).
	MaxLoRAs, MaxLoRARank int
	// MaxCPULoRAs is vLLM's --max-cpu-loras, its CPU cache of adapters;
	// 0: max_loras, as vLLM defaults it (vllm/config/lora.py:118-123).
	MaxCPULoRAs int
	// LoRASwap and LoRALoad are how long moving an adapter into a GPU
	// slot, and loading one from its path into the CPU cache, take the
	// GPU, and PrefillTokensPerSecond the pace of prefill (0: none): the
	// model of lorasched.go, for a vLLM with --enable-lora. Assumed, not
	// measured (fake-engine flags).
	LoRASwap, LoRALoad     time.Duration
	PrefillTokensPerSecond float64
	// RuntimeLoRA is vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING read as vLLM
	// reads it ("1" or "true" in any case, spaces around ignored;
	// vllm/envs.py:1186-1189): POST /v1/load_lora_adapter and
	// /v1/unload_lora_adapter exist only with it (loraruntime.go).
	RuntimeLoRA bool
	// SGLang's LoRA flags (sglanglora.go): LoRAPaths are --lora-paths
	// (PATH, NAME=PATH or {"lora_name","lora_path","pinned"}), which turn
	// --enable-lora on; LoRATargetModules --lora-target-modules;
	// MaxLoadedLoRAs --max-loaded-loras (0: none). For SGLang MaxLoRAs is
	// --max-loras-per-batch (default 8) and MaxLoRARank has no default
	// (0). DataParallel and DPAttention are --dp-size and
	// --enable-dp-attention, which decide whether a runtime load passes.
	LoRAPaths         []Adapter
	LoRATargetModules []string
	MaxLoadedLoRAs    int
	DataParallel      int
	DPAttention       bool

	// Ignored holds the arguments fake-engine does not know, in order.
	Ignored []string
	// Help asks for the usage text.
	Help bool
}

// ModelID is the id the engine reports in /v1/models and in responses.
func (c Config) ModelID() string {
	if len(c.ServedNames) > 0 {
		return c.ServedNames[0]
	}
	return c.Model
}

// names are the ids a request's "model" may name.
func (c Config) names() []string {
	if len(c.ServedNames) > 0 {
		return c.ServedNames
	}
	return []string{c.Model}
}

// Defaults is the configuration before any argument or environment.
func Defaults() Config {
	return Config{
		Host:            "127.0.0.1",
		Port:            8000,
		MaxModelLen:     4096,
		LoadShards:      5,
		TokensPerSecond: 50,
		MaxTokens:       16,
		EmbeddingDim:    16,
		Engine:          EngineVLLM,
		KVCacheTokens:   16384,
		ExitCode:        1,
		ExpectGPUs:      -1,
		MaxLoRAs:        1,
		MaxLoRARank:     16,
	}
}

// Parse reads a command line in vLLM's shape (`serve MODEL --host H --port P
// --tensor-parallel-size N ...`), or SGLang's, TGI's or llama.cpp's
// spellings of the same, plus fake-engine's own flags. Flags it does not
// know are kept in Config.Ignored: one followed by a word that is not a flag
// takes that word as its value. getenv supplies LLMGW_HOST, LLMGW_PORT and
// LLMGW_MODEL for what the flags leave unset.
func Parse(args []string, getenv func(string) string) (Config, error) {
	c := Defaults()
	var hostSet, portSet, crashSet, exitSet, engineSet, slotsSet, rankSet bool
	var positional []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !isFlag(arg) {
			positional = append(positional, arg)
			continue
		}
		name, val, hasVal := strings.Cut(arg, "=")
		name = normalizeFlag(name)
		value := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%w: flag %s needs a value", ErrUsage, name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "-h", "--help":
			c.Help = true
		case "--model", "--model-path", "--model-id", "-m":
			c.Model, err = value()
			if e := engineByModelFlag[name]; e != "" && !engineSet {
				c.Engine = e
			}
		case "--engine":
			if c.Engine, err = value(); err == nil && !slices.Contains(Engines, c.Engine) {
				err = fmt.Errorf("%w: --engine %q: want one of %s", ErrUsage, c.Engine, strings.Join(Engines, ", "))
			}
			engineSet = true
		case "--enable-metrics", "--metrics":
			c.MetricsEnabled, err = boolValue(name, val, hasVal)
		case "--max-num-seqs", "--max-running-requests", "--max-batch-size":
			c.MaxRunning, err = intValue(name, value, 1, 1<<20)
		case "--parallel", "-np":
			// llama.cpp's: std::stoi reads a number's start ("2slots" is 2).
			c.MaxRunning, err = intValue(name, stoiPrefix(value), 1, 1<<20)
		case "--kv-cache-tokens":
			c.KVCacheTokens, err = intValue(name, value, 1, 1<<30)
		case "--served-model-name":
			var v string
			if v, err = value(); err == nil {
				// vLLM takes one or more names.
				c.ServedNames = append(c.ServedNames, v)
				for i+1 < len(args) && !isFlag(args[i+1]) && !hasVal {
					i++
					c.ServedNames = append(c.ServedNames, args[i])
				}
			}
		case "--enable-lora":
			c.EnableLoRA, err = boolValue(name, val, hasVal)
		case "--lora-modules":
			// vLLM's: one or more items.
			var v string
			if v, err = value(); err == nil {
				items := []string{v}
				for i+1 < len(args) && !isFlag(args[i+1]) && !hasVal {
					i++
					items = append(items, args[i])
				}
				for _, it := range items {
					var a Adapter
					if a, err = parseLoRAModule(it); err != nil {
						break
					}
					c.LoRAModules = append(c.LoRAModules, a)
				}
			}
		case "--lora":
			// llama.cpp's: comma-separated files.
			var v string
			if v, err = value(); err == nil {
				for p := range strings.SplitSeq(v, ",") {
					c.LoRAFiles = append(c.LoRAFiles, Adapter{Path: p})
				}
			}
		case "--max-loras", "--max-loras-per-batch":
			c.MaxLoRAs, err = intValue(name, value, 1, 1<<20)
			slotsSet = true
		case "--max-lora-rank":
			c.MaxLoRARank, err = intValue(name, value, 1, 1<<20)
			rankSet = true
		case "--lora-paths", "--lora-target-modules":
			// SGLang's: zero or more items. SGLang keeps the last
			// occurrence's; here they add up, as strict mode spells
			// the items of one occurrence (--flag=ITEM each).
			items := []string{}
			if hasVal {
				items = append(items, val)
			}
			for i+1 < len(args) && !isFlag(args[i+1]) && !hasVal {
				i++
				items = append(items, args[i])
			}
			if name == "--lora-target-modules" {
				c.LoRATargetModules = append(c.LoRATargetModules, items...)
				break
			}
			for _, it := range items {
				var a Adapter
				if a, err = parseLoRAPath(it); err != nil {
					break
				}
				c.LoRAPaths = append(c.LoRAPaths, a)
			}
		case "--max-loaded-loras":
			c.MaxLoadedLoRAs, err = intValue(name, value, 1, 1<<20)
		case "--dp-size", "--data-parallel-size":
			c.DataParallel, err = intValue(name, value, 1, 1<<16)
		case "--enable-dp-attention":
			c.DPAttention, err = boolValue(name, val, hasVal)
		case "--max-cpu-loras":
			c.MaxCPULoRAs, err = intValue(name, value, 1, 1<<20)
		case "--fake-lora-swap":
			c.LoRASwap, err = secondsValue(name, value)
		case "--fake-lora-load":
			c.LoRALoad, err = secondsValue(name, value)
		case "--prefill-tokens-per-second":
			c.PrefillTokensPerSecond, err = floatValue(name, value, 0, 1e9)
		case "--lora-init-without-apply":
			// llama.cpp's; the adapters' scales stay 1 either way.
		case "--alias":
			var v string
			if v, err = value(); err == nil {
				c.ServedNames = append(c.ServedNames, v)
			}
		case "--host", "--hostname":
			c.Host, err = value()
			hostSet = true
		case "--port":
			c.Port, err = intValue(name, value, 0, 65535)
			portSet = true
		case "--tensor-parallel-size", "-tp", "--tp", "--tp-size", "--num-shard":
			c.TensorParallel, err = intValue(name, value, 1, 1<<16)
		case "--max-model-len", "--context-length", "--ctx-size", "--max-total-tokens":
			c.MaxModelLen, err = intValue(name, value, 1, 1<<24)
		case "--load-seconds":
			c.LoadTime, err = secondsValue(name, value)
		case "--load-shards":
			c.LoadShards, err = intValue(name, value, 1, 1<<16)
		case "--tokens-per-second":
			c.TokensPerSecond, err = floatValue(name, value, 0, 1e9)
		case "--max-tokens":
			c.MaxTokens, err = intValue(name, value, 1, 1<<24)
		case "--embedding-dim":
			c.EmbeddingDim, err = intValue(name, value, 1, 1<<16)
		case "--crash-after":
			c.CrashAfter, err = secondsValue(name, value)
			crashSet = true
		case "--exit-code":
			c.ExitCode, err = intValue(name, value, 0, 255)
			exitSet = true
		case "--crash-panic":
			c.CrashPanic, err = boolValue(name, val, hasVal)
		case "--ignore-sigterm":
			c.IgnoreSIGTERM, err = boolValue(name, val, hasVal)
		case "--hang-on-stop":
			c.HangOnStop, err = boolValue(name, val, hasVal)
		case "--lose-first-stop":
			c.LoseFirstStop, err = boolValue(name, val, hasVal)
		case "--expect-gpus":
			c.ExpectGPUs, err = intValue(name, value, 0, 1<<16)
		case "--host-gpus":
			var v string
			if v, err = value(); err == nil {
				c.HostGPUs = VisibleGPUs(v)
				for _, g := range c.HostGPUs {
					if !strings.HasPrefix(g, "GPU-") {
						err = fmt.Errorf("%w: --host-gpus %q: want GPU UUIDs (GPU-...), comma-separated", ErrUsage, v)
						break
					}
				}
			}
		default:
			c.Ignored = append(c.Ignored, arg)
			if !hasVal && i+1 < len(args) && !isFlag(args[i+1]) {
				i++
				c.Ignored = append(c.Ignored, args[i])
			}
		}
		if err != nil {
			return Config{}, err
		}
	}
	if len(positional) > 0 && positional[0] == "serve" {
		positional = positional[1:]
	}
	if len(positional) > 0 && c.Model == "" {
		c.Model, positional = positional[0], positional[1:]
	}
	c.Ignored = append(c.Ignored, positional...)

	if v := getenv("LLMGW_HOST"); v != "" && !hostSet {
		c.Host = v
	}
	if v := getenv("LLMGW_PORT"); v != "" && !portSet {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 65535 {
			return Config{}, fmt.Errorf("%w: LLMGW_PORT=%q is not a port", ErrUsage, v)
		}
		c.Port = p
	}
	if v := getenv("LLMGW_MODEL"); v != "" && c.Model == "" {
		c.Model = v
	}
	switch strings.ToLower(strings.TrimSpace(getenv(RuntimeLoRAEnv))) {
	case "1", "true":
		c.RuntimeLoRA = true
	}
	if c.Engine == EngineSGLang {
		// server_args.py:2889-2921, 9342-9347 at v0.5.18.
		if !slotsSet {
			c.MaxLoRAs = 8
		}
		if !rankSet {
			c.MaxLoRARank = 0
		}
		if len(c.LoRAPaths) > 0 {
			c.EnableLoRA = true
		}
	}
	c.Crash = crashSet || exitSet
	if c.Help {
		return c, nil
	}
	if c.Model == "" {
		return Config{}, fmt.Errorf("%w: no model: give `serve MODEL`, --model or LLMGW_MODEL", ErrUsage)
	}
	if c.Host == "" {
		return Config{}, fmt.Errorf("%w: empty --host", ErrUsage)
	}
	for _, n := range c.ServedNames {
		if n == "" {
			return Config{}, fmt.Errorf("%w: empty served model name", ErrUsage)
		}
	}
	if c.MaxCPULoRAs > 0 && c.MaxCPULoRAs < c.MaxLoRAs {
		// vLLM's LoRAConfig refuses it (vllm/config/lora.py:120-123).
		return Config{}, fmt.Errorf("%w: --max-cpu-loras: max_cpu_loras (%d) must be >= max_loras (%d)", ErrUsage, c.MaxCPULoRAs, c.MaxLoRAs)
	}
	return c, nil
}

// The engines fake-engine impersonates, as llmgw's engine package names
// them.
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineTGI      = "tgi"
	EngineLlamaCpp = "llamacpp"
)

// Engines lists the engines --engine takes.
var Engines = []string{EngineLlamaCpp, EngineSGLang, EngineTGI, EngineVLLM}

// engineByModelFlag is the engine each model flag's spelling belongs to
// (vLLM's --model and positional MODEL are the default).
var engineByModelFlag = map[string]string{"--model-path": EngineSGLang, "--model-id": EngineTGI, "-m": EngineLlamaCpp}

// isFlag reports whether arg is spelled as a flag: a dash and more, and not
// a negative number.
func isFlag(arg string) bool {
	if len(arg) < 2 || arg[0] != '-' {
		return false
	}
	_, err := strconv.ParseFloat(arg, 64)
	return err != nil
}

// normalizeFlag spells --max_model_len as --max-model-len, as vLLM's own
// parser accepts both.
func normalizeFlag(name string) string {
	dashes := len(name) - len(strings.TrimLeft(name, "-"))
	return name[:dashes] + strings.ReplaceAll(name[dashes:], "_", "-")
}

func intValue(name string, value func() (string, error), lo, hi int) (int, error) {
	s, err := value()
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s %q: want a whole number from %d to %d", ErrUsage, name, s, lo, hi)
	}
	return n, nil
}

// stoiPrefix gives what C++'s std::stoi reads of a value: leading white
// space, a sign and the digits after it; the rest is ignored.
func stoiPrefix(value func() (string, error)) func() (string, error) {
	return func() (string, error) {
		s, err := value()
		if err != nil {
			return s, err
		}
		t := strings.TrimLeft(s, " \t\n\v\f\r")
		n := 0
		if n < len(t) && (t[n] == '+' || t[n] == '-') {
			n++
		}
		for n < len(t) && t[n] >= '0' && t[n] <= '9' {
			n++
		}
		if n == 0 || t[n-1] < '0' || t[n-1] > '9' {
			return s, nil // no number: intValue says so
		}
		return t[:n], nil
	}
}

func floatValue(name string, value func() (string, error), lo, hi float64) (float64, error) {
	s, err := value()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < lo || f > hi {
		return 0, fmt.Errorf("%w: %s %q: want a number from %g to %g", ErrUsage, name, s, lo, hi)
	}
	return f, nil
}

// secondsValue reads a number of seconds ("2.5") or a Go duration ("2500ms").
func secondsValue(name string, value func() (string, error)) (time.Duration, error) {
	s, err := value()
	if err != nil {
		return 0, err
	}
	const most = 1e6 // seconds: about 11 days
	if f, ferr := strconv.ParseFloat(s, 64); ferr == nil {
		if math.IsNaN(f) || f < 0 || f > most {
			return 0, fmt.Errorf("%w: %s %q: want 0 to %g seconds", ErrUsage, name, s, float64(most))
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > most*time.Second {
		return 0, fmt.Errorf("%w: %s %q: want seconds (2.5) or a duration (2500ms) up to %g seconds", ErrUsage, name, s, float64(most))
	}
	return d, nil
}

// boolValue reads --flag or --flag=true|false; a bool flag never takes the
// next argument.
func boolValue(name, val string, hasVal bool) (bool, error) {
	if !hasVal {
		return true, nil
	}
	b, err := strconv.ParseBool(val)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%q: want true or false", ErrUsage, name, val)
	}
	return b, nil
}

// Usage is the text --help prints.
const Usage = `fake-engine: an OpenAI-compatible stand-in for inference engines.

Usage:
  fake-engine serve MODEL [--host H] [--port P] [--tensor-parallel-size N] [flags]
  fake-engine --strict ENGINE[@VERSION] ENGINE-ARGS...

Engine flags (vLLM spelling first, then SGLang, TGI and llama.cpp's):
  MODEL, --model, --model-path, --model-id, -m   model id or path (else LLMGW_MODEL)
  --served-model-name NAME..., --alias NAME      ids the engine answers to
  --host, --hostname H                           listen address (else LLMGW_HOST, else 127.0.0.1)
  --port P                                       listen port, 0 for any (else LLMGW_PORT, else 8000)
  --tensor-parallel-size, -tp, --tp, --tp-size, --num-shard N
  --max-model-len, --context-length, --ctx-size, --max-total-tokens N  (default 4096)
  --max-num-seqs, --max-running-requests, --max-batch-size, --parallel, -np N
                                                 requests generating at once; the rest wait
  --enable-metrics, --metrics                    SGLang's and llama.cpp's switch for /metrics
  --enable-lora --lora-modules ITEM...           vLLM's LoRA adapters (name=path or {"name","path"}):
                                                 each checked as vLLM loads it (adapter_config.json,
                                                 its r against --max-lora-rank, the weights file);
                                                 listed in /v1/models with their parent, served by name
  --max-loras N, --max-lora-rank R               vLLM's adapter slots (max_lora of
                                                 vllm:lora_requests_info) and rank bound
  --max-cpu-loras N                              vLLM's CPU cache of adapters (default max_loras)
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True          vLLM's POST /v1/load_lora_adapter and
                                                 /v1/unload_lora_adapter, refusing as vLLM does
  --lora FILE,... [--lora-init-without-apply]    llama.cpp's adapters: each file must be there;
                                                 listed at GET /lora-adapters
  --enable-lora --lora-paths ITEM...             SGLang's adapters (PATH, name=path or
  --max-loras-per-batch N --max-lora-rank R      {"lora_name","lora_path"}), with its start checks;
  --lora-target-modules M... --max-loaded-loras  POST /load_lora_adapter and /unload_lora_adapter,
                                                 refusing as SGLang v0.5.18 does

Fake-engine flags:
  --load-seconds S        /health answers 503 for S seconds, logging load progress (default 0)
  --load-shards N         shards the progress lines count (default 5)
  --tokens-per-second R   generation pace, 0 for none (default 50)
  --max-tokens N          completion length when a request gives none (default 16)
  --embedding-dim N       embedding length when a request gives none (default 16)
  --engine NAME           serve /metrics with NAME's metric names: vllm, sglang, tgi, llamacpp
                          (default: the engine whose model flag was used, else vllm)
  --kv-cache-tokens N     size of the simulated KV cache (default 16384); with --enable-lora
                          (vLLM), also of its prefix cache
  --prefill-tokens-per-second R
                          with --enable-lora (vLLM): prefill pace, 0 for none (default 0)
  --fake-lora-swap S      with --enable-lora (vLLM): GPU time to move an adapter into a slot
                          (default 0; an assumption, not a measurement)
  --fake-lora-load S      with --enable-lora (vLLM): GPU time to load an adapter from its path
                          into the CPU cache (default 0; an assumption)
  --crash-after S         exit with --exit-code S seconds after start
  --exit-code N           code to exit with (default 1); alone, exit at once
  --crash-panic           write a Python traceback to stderr before exiting
  --ignore-sigterm        keep running on SIGTERM (SIGINT still stops)
  --hang-on-stop          stop as llama-server 0.4.0 does: the first SIGTERM/SIGINT closes the port
                          and waits for requests in flight; a second one exits 1 at once
  --lose-first-stop       lose the first SIGTERM/SIGINT as llama-server 0.4.0 sometimes does (port
                          still open); a second one exits 1 at once
  --expect-gpus N         exit 3 unless the engine sees exactly N GPUs through CUDA_VISIBLE_DEVICES
  --host-gpus UUID,...    the host's GPUs in PCI bus order: resolve CUDA_VISIBLE_DEVICES as CUDA
                          does (indices need CUDA_DEVICE_ORDER=PCI_BUS_ID) and report UUIDs

Seconds are numbers (2.5) or durations (2500ms). Other flags are ignored.
FAKE_ENGINE_FLAGS adds fake-engine flags from the environment.

Strict mode (--strict first, or FAKE_ENGINE_STRICT=ENGINE[@VERSION]) checks the
command line as the engine's own parser at its pinned version would (vllm, sglang,
tgi, llamacpp; engine/contract) and fails as it would, with its message and exit
status. fake-engine flags then go in FAKE_ENGINE_FLAGS only.
`

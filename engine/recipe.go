// Package engine turns an inference engine's name and a task's settings
// into the command line that starts the engine: vLLM, SGLang, Hugging Face
// TGI, llama.cpp's server, or any command. It is pure: no I/O, no
// environment lookups, no PATH search; the driver resolves executables and
// hands them in.
package engine

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Engine names as task configs spell them.
const (
	VLLM     = "vllm"
	SGLang   = "sglang"
	TGI      = "tgi"
	LlamaCpp = "llamacpp"
	Command  = "command"
)

// ErrUnknownEngine is returned for an engine name no recipe knows.
var ErrUnknownEngine = errors.New("unknown engine")

type recipe struct {
	// defaultExe is the executable looked up on PATH when neither the task
	// nor the plugin config names one.
	defaultExe string
	readyPath  string
	build      func(in Input) ([]string, map[string]string)
}

var recipes = map[string]recipe{
	VLLM: {defaultExe: "vllm", readyPath: "/health", build: func(in Input) ([]string, map[string]string) {
		return []string{"serve", in.Model,
			"--host", in.Host,
			"--port", strconv.Itoa(in.Port),
			"--tensor-parallel-size", strconv.Itoa(in.TensorParallel)}, nil
	}},
	SGLang: {defaultExe: "python3", readyPath: "/health", build: func(in Input) ([]string, map[string]string) {
		var args []string
		// A Python interpreter runs the launcher module; anything else is
		// taken to be a launcher (a wrapper script or a venv entry point)
		// that accepts launch_server's arguments itself.
		if strings.HasPrefix(path.Base(in.Executable), "python") {
			args = append(args, "-m", "sglang.launch_server")
		}
		return append(args,
			"--model-path", in.Model,
			"--host", in.Host,
			"--port", strconv.Itoa(in.Port),
			"--tp-size", strconv.Itoa(in.TensorParallel)), nil
	}},
	TGI: {defaultExe: "text-generation-launcher", readyPath: "/health", build: func(in Input) ([]string, map[string]string) {
		return []string{"--model-id", in.Model,
			"--hostname", in.Host,
			"--port", strconv.Itoa(in.Port),
			"--num-shard", strconv.Itoa(in.TensorParallel)}, nil
	}},
	LlamaCpp: {defaultExe: "llama-server", readyPath: "/health", build: func(in Input) ([]string, map[string]string) {
		// llama.cpp spreads layers over every visible GPU on its own; the
		// driver binds it to the allocated ones through the environment.
		return []string{"-m", in.Model,
			"--host", in.Host,
			"--port", strconv.Itoa(in.Port)}, nil
	}},
	Command: {defaultExe: "", readyPath: "/health", build: func(in Input) ([]string, map[string]string) {
		return nil, map[string]string{
			"LLMGW_HOST":            in.Host,
			"LLMGW_PORT":            strconv.Itoa(in.Port),
			"LLMGW_MODEL":           in.Model,
			"LLMGW_TENSOR_PARALLEL": strconv.Itoa(in.TensorParallel),
		}
	}},
}

// Engines lists the engine names, sorted.
func Engines() []string {
	out := make([]string, 0, len(recipes))
	for k := range recipes {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Known reports whether engine has a recipe.
func Known(engine string) bool {
	_, ok := recipes[engine]
	return ok
}

// DefaultExecutable is the executable name looked up on PATH for engine
// when nothing else names one; empty for the command engine, which needs
// an explicit command.
func DefaultExecutable(engine string) string { return recipes[engine].defaultExe }

// DefaultReadyPath is the HTTP path that answers 2xx once engine serves.
func DefaultReadyPath(engine string) string { return recipes[engine].readyPath }

// Input is what a recipe needs.
type Input struct {
	Engine string
	// Executable is the resolved program to run.
	Executable string
	// Model is a model id (for example a Hugging Face repository) or a
	// local path.
	Model string
	// Host and Port are the address the engine must serve on.
	Host string
	Port int
	// TensorParallel is the number of GPUs one model replica spans (≥ 1).
	TensorParallel int
	// Args are appended after the recipe's own arguments.
	Args []string
}

// Cmd is a command line ready to run.
type Cmd struct {
	Path string
	// Args excludes the program name.
	Args []string
	// Env holds variables the recipe sets for the engine.
	Env map[string]string
}

// Build returns the command line for in. Errors name the field at fault.
func Build(in Input) (Cmd, error) {
	r, ok := recipes[in.Engine]
	if !ok {
		return Cmd{}, fmt.Errorf("engine: %w %q (want one of %s)", ErrUnknownEngine, in.Engine, strings.Join(Engines(), ", "))
	}
	if in.Executable == "" {
		return Cmd{}, errors.New("command: no executable to run")
	}
	if in.Model == "" && in.Engine != Command {
		return Cmd{}, fmt.Errorf("model: required for engine %q", in.Engine)
	}
	if in.Host == "" {
		return Cmd{}, errors.New("port: no host address to serve on")
	}
	if in.Port <= 0 || in.Port > 65535 {
		return Cmd{}, fmt.Errorf("port: %d is not a TCP port", in.Port)
	}
	if in.TensorParallel < 1 {
		return Cmd{}, fmt.Errorf("tensor_parallel: must be at least 1, got %d", in.TensorParallel)
	}
	args, env := r.build(in)
	// The flags that turn the engine's /metrics on, before the task's own
	// (both engines that need one take a repeat of it).
	args = append(args, metricsByEngine[in.Engine].Enable...)
	args = append(args, in.Args...)
	return Cmd{Path: in.Executable, Args: args, Env: env}, nil
}

// String renders the command line with shell-style quoting where needed,
// for events and logs.
func (c Cmd) String() string {
	parts := make([]string, 0, len(c.Args)+1)
	parts = append(parts, quote(c.Path))
	for _, a := range c.Args {
		parts = append(parts, quote(a))
	}
	return strings.Join(parts, " ")
}

func quote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, needsQuote) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func needsQuote(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("-_./:=,@+", r)
}

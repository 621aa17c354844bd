// Package engine is the one home of every inference engine llmgw runs:
// vLLM, SGLang, Hugging Face TGI, llama.cpp's server, or any command. Each
// engine is one Descriptor, in a file of its own (vllm.go, sglang.go,
// tgi.go, llamacpp.go, command.go), holding what the driver, the renderer,
// the docs and the tests need to know about it: its executable, how it
// takes the model, its address, served-name, parallel and multi-node
// flags, its readiness path, its load-progress lines and its metrics.
// Adding an engine is adding one such file (and its golden testdata).
//
// The package is pure: no I/O, no environment lookups, no PATH search; the
// driver resolves executables and hands them in.
package engine

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Engine names as task configs and catalogs spell them.
const (
	VLLM     = "vllm"
	SGLang   = "sglang"
	TGI      = "tgi"
	LlamaCpp = "llamacpp"
	Command  = "command"
)

// ErrUnknownEngine is returned for an engine name no descriptor knows.
var ErrUnknownEngine = errors.New("unknown engine")

// Descriptor is everything llmgw knows about one engine. Flag fields hold
// the engine's own spelling; "" means the engine has no such flag.
type Descriptor struct {
	// Name is how task configs and catalogs name the engine.
	Name string
	// Pinned names the engine version the flags below were read from, and
	// where (for docs and error messages).
	Pinned Pinned
	// DefaultExecutable is looked up on PATH when neither the task nor the
	// plugin config names one; "" for an engine that needs an explicit
	// command (and has no entry in the plugin's engines block).
	DefaultExecutable string

	// Model is how the engine takes the model.
	Model ModelArg
	// HostFlag and PortFlag take the address the engine serves on.
	HostFlag, PortFlag string
	// ServedNameFlag takes the name the engine answers to in requests and
	// /v1/models.
	ServedNameFlag string
	// Parallel holds the engine's parallelism flags.
	Parallel ParallelFlags
	// MultiNode is how one replica spans several nodes; nil when the engine
	// runs on one node only.
	MultiNode *MultiNode

	// MIGWarning, when set, is the task event the driver adds when it
	// starts the engine on a MIG instance: what is known to break.
	MIGWarning string

	// ReadyPath is the HTTP path that answers 2xx once the engine serves.
	ReadyPath string
	// Progress recognises the engine's load-progress log lines.
	Progress func(line string) (Progress, bool)
	// Metrics is where and under which names the engine exports its
	// Prometheus metrics (metrics.go), read from its source at the pinned
	// version (docs/engines/<engine>.md cites file and line).
	Metrics Metrics
	// Stop is what the driver knows of how the engine stops.
	Stop StopRule
	// Sleep is how the engine frees its model when idle and loads it
	// again on the next request, where llmgw drives it; nil where it does
	// not.
	Sleep *SleepMode
	// PrefixCache is what the engine is given, unless the args set it,
	// when the gateways route the model's requests by prefix
	// (gatewayapi.RoutingPrefix), so that a conversation's next turn finds
	// its state where it arrives; nil where nothing is needed.
	PrefixCache *FlagDefault
	// Adapters is how the engine serves the LoRA adapters a catalog model
	// lists (adapters.go); nil where llmgw renders none.
	Adapters *AdapterRule

	// layout holds the engine's parallelism rules.
	layout layoutRules
	// layoutEnv: the engine is told its layout through the environment
	// (the command engine), so it has every kind of parallelism.
	layoutEnv bool

	// HostMustBeIP: the engine takes only an IP literal as its host.
	HostMustBeIP bool
	hostWhy      string
	// expertSwitch: Parallel.Expert is a switch (no count), given when
	// Layout.Expert > 1.
	expertSwitch bool

	// Flag spelling, for CheckArgs: aliases maps another spelling of a
	// flag to the one the descriptor uses; underscores: the engine reads
	// --a_b as --a-b; abbrev: the engine takes an unambiguous prefix of a
	// long flag for the flag (argparse's allow_abbrev); noRepeats: the
	// engine rejects a flag given twice, except those in repeatable;
	// owns: flags llmgw sets (or keeps unset) beyond the fields above.
	aliases     map[string]string
	underscores bool
	abbrev      bool
	noRepeats   bool
	repeatable  []string
	owns        []string
	ownsWhy     map[string]string
	// owned and ownedServed are what Owned returns, and ownedLong the
	// long spellings of those flags, computed by register.
	owned, ownedServed []string
	ownedLong          []spelling
	// defaults returns flags (each with its values) the recipe adds unless
	// the task's args set them.
	defaults func(in Input) [][]string

	// prefix returns the arguments before the model (vLLM's "serve" verb,
	// SGLang's "-m sglang.launch_server" under a Python interpreter), given
	// the resolved executable.
	prefix func(exe string) []string
	// env returns variables the engine gets from the recipe.
	env func(in Input) map[string]string
}

// StopRule is how an engine stops, beyond "it exits at the stop signal".
type StopRule struct {
	// RepeatWhenUnserved: an engine that has closed its port after the
	// stop signal but has not exited is sent the signal once more, which
	// it answers by exiting at once. For an engine whose first signal
	// waits for its clients to go away (llama.cpp's server with a request
	// in flight) instead of the stop's whole timeout.
	RepeatWhenUnserved bool
	// Why is the task event's explanation of the second signal.
	Why string
	// RepeatWhenStillServing, when above zero: an engine that still
	// accepts connections this long after the stop signal, without having
	// exited, has not acted on it, and is sent it once more. For an engine
	// whose handler can lose the first signal (llama.cpp's server
	// deadlocks in it when the signal lands on the thread holding its
	// task queue's lock). Longer than the engine takes to close its port
	// when it does act on the signal.
	RepeatWhenStillServing time.Duration
	// StillServingWhy is the task event's explanation of that signal.
	StillServingWhy string
}

// Pinned is the engine version a descriptor was written against.
type Pinned struct {
	Version string // a release tag ("v3.3.7")
	Commit  string // the tag's commit
	// Notes is where the facts were collected (docs/driver.md cites them).
	Notes string
}

// ModelArg is how an engine takes its model.
type ModelArg struct {
	// Flag precedes the model on the command line.
	Flag string
	// Positional: the model is an argument of its own right after the
	// prefix (vLLM's `serve MODEL`). With neither Flag nor Positional the
	// model is not on the command line at all (the command engine reads
	// it from its environment).
	Positional bool
	// Optional: the engine may run without a model (the command engine).
	Optional bool
	// File: the engine loads one local file, which the driver finds in
	// its model cache from the catalog's source and file (llama.cpp's
	// GGUF), instead of fetching a model id itself.
	File bool
}

// ParallelFlags are an engine's parallelism flags, each taking a count.
type ParallelFlags struct {
	Tensor, Pipeline, Data, Expert string
}

// MultiNode describes how an engine spans nodes.
type MultiNode struct {
	// Args returns the flags of the shard of rank rank (0 is the leader)
	// of a replica of nodes shards laid out as l, given the leader's
	// rendezvous address. Nil for an engine that reads its position from
	// the environment only (the command engine).
	Args func(nodes, rank int, l Layout, leader Leader) []string
	// Flags are every flag Args may return: llmgw's to set, never a
	// task's args'.
	Flags []string
	// Headless: ranks above 0 serve no HTTP, so nothing probes them.
	Headless bool
}

// Leader is the rendezvous address of a multi-node replica's rank 0, as
// strings: they may be interpolations the task's environment resolves
// (${LLMGW_LEADER_HOST}).
type Leader struct {
	Host, Port, Addr string
}

var registry = map[string]*Descriptor{}

// register adds d to the registry; each engine's file calls it once, from
// init.
func register(d *Descriptor) {
	if d.Name == "" || registry[d.Name] != nil {
		panic("engine: descriptor registered twice or without a name: " + d.Name)
	}
	if d.Progress == nil {
		d.Progress = func(string) (Progress, bool) { return Progress{}, false }
	}
	d.owned, d.ownedServed = d.ownedFlags(false), d.ownedFlags(true)
	d.ownedLong = d.ownedSpellings()
	registry[d.Name] = d
}

// Lookup returns the descriptor of the engine named name.
func Lookup(name string) (*Descriptor, bool) {
	d, ok := registry[name]
	return d, ok
}

// Descriptors returns every descriptor, sorted by name.
func Descriptors() []*Descriptor {
	out := make([]*Descriptor, 0, len(registry))
	for _, name := range Engines() {
		out = append(out, registry[name])
	}
	return out
}

// Engines lists the engine names, sorted.
func Engines() []string {
	out := make([]string, 0, len(registry))
	for k := range registry {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Known reports whether engine has a descriptor.
func Known(engine string) bool {
	_, ok := registry[engine]
	return ok
}

// Unknown is the error for an engine name no descriptor knows.
func Unknown(name string) error {
	return fmt.Errorf("%w %q (want one of %s)", ErrUnknownEngine, name, strings.Join(Engines(), ", "))
}

// DefaultExecutable is the executable name looked up on PATH for engine
// when nothing else names one; empty for the command engine, which needs
// an explicit command, and for an unknown engine.
func DefaultExecutable(engine string) string {
	if d, ok := registry[engine]; ok {
		return d.DefaultExecutable
	}
	return ""
}

// DefaultReadyPath is the HTTP path that answers 2xx once engine serves.
func DefaultReadyPath(engine string) string {
	if d, ok := registry[engine]; ok {
		return d.ReadyPath
	}
	return ""
}

// ParseProgressFor recognises load progress in one log line of engine's,
// with that engine's parser (the shared checkpoint-shard one for an
// unknown or empty engine name).
func ParseProgressFor(engine, line string) (Progress, bool) {
	if d, ok := registry[engine]; ok {
		return d.Progress(line)
	}
	return ParseProgress(line)
}

// Input is what a recipe needs.
type Input struct {
	Engine string
	// Executable is the resolved program to run.
	Executable string
	// Model is a model id (for example a Hugging Face repository) or a
	// local path; for an engine that loads one local file (Model.File),
	// the file's resolved path.
	Model string
	// Host and Port are the address the engine must serve on.
	Host string
	Port int
	// Layout is the replica's parallelism, resolved: Tensor ≥ 1 (see
	// Descriptor.Resolve and Defaults).
	Layout Layout
	// GPUs is how many GPUs the process was given (0: none).
	GPUs int
	// ServedName, when set, is the name the engine answers to.
	ServedName string
	// Nodes is the replica's shard count (0 or 1: one node); Rank is this
	// shard's, 0 the leader; Leader is the leader's rendezvous address,
	// host:port, which ranks of a multi-node replica need.
	Nodes, Rank int
	Leader      string
	// Args are appended after the recipe's own arguments. They may not set
	// a flag the recipe sets (CheckArgs).
	Args []string
}

// FlagDefault is a flag and the value llmgw gives it, and why.
type FlagDefault struct {
	Flag, Value string
	// Why cites where the value was measured and the flag read.
	Why string
}

// SleepMode is an engine's own sleep: after IdleFlag's seconds without a
// request it frees its model and context, keeping its process, port and
// GPUs, and the next request loads them again.
type SleepMode struct {
	// IdleFlag takes the seconds without a request before it sleeps.
	IdleFlag string
	// StatePath answers JSON whose boolean StateField is true while the
	// engine sleeps, without waking it.
	StatePath, StateField string
	// Why cites where this was read.
	Why string
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
	d, ok := registry[in.Engine]
	if !ok {
		return Cmd{}, fmt.Errorf("engine: %w", Unknown(in.Engine))
	}
	if in.Executable == "" {
		return Cmd{}, errors.New("command: no executable to run")
	}
	if in.Model == "" && !d.Model.Optional {
		return Cmd{}, fmt.Errorf("model: required for engine %q", in.Engine)
	}
	if in.Host == "" {
		return Cmd{}, errors.New("port: no host address to serve on")
	}
	if d.HostMustBeIP && !isIPLiteral(in.Host) {
		return Cmd{}, fmt.Errorf("port: engine %q needs an IP address to serve on, got %q%s", in.Engine, in.Host, d.hostWhy)
	}
	if in.Port <= 0 || in.Port > 65535 {
		return Cmd{}, fmt.Errorf("port: %d is not a TCP port", in.Port)
	}
	if in.Layout.Tensor < 1 {
		return Cmd{}, fmt.Errorf("tensor_parallel: must be at least 1, got %d", in.Layout.Tensor)
	}
	nodes := one(in.Nodes)
	if err := d.CheckFields(Layout{Pipeline: in.Layout.Pipeline, Data: in.Layout.Data, Expert: in.Layout.Expert}, nodes); err != nil {
		return Cmd{}, err
	}
	if in.Rank < 0 || in.Rank >= nodes {
		return Cmd{}, fmt.Errorf("node_rank: %d is not a rank of a replica of %d nodes", in.Rank, nodes)
	}
	var leader Leader
	if nodes > 1 && d.MultiNode.Args != nil {
		var err error
		if leader, err = splitLeader(in.Leader); err != nil {
			return Cmd{}, err
		}
	}

	var args []string
	if d.prefix != nil {
		args = append(args, d.prefix(in.Executable)...)
	}
	switch {
	case d.Model.Positional:
		args = append(args, in.Model)
	case d.Model.Flag != "":
		args = append(args, d.Model.Flag, in.Model)
	}
	args = appendFlag(args, d.HostFlag, in.Host)
	args = appendFlag(args, d.PortFlag, strconv.Itoa(in.Port))
	args = appendFlag(args, d.Parallel.Tensor, strconv.Itoa(in.Layout.Tensor))
	if in.Layout.Pipeline > 1 {
		args = appendFlag(args, d.Parallel.Pipeline, strconv.Itoa(in.Layout.Pipeline))
	}
	if in.Layout.Data > 1 {
		args = appendFlag(args, d.Parallel.Data, strconv.Itoa(in.Layout.Data))
	}
	if in.Layout.Expert > 1 && d.Parallel.Expert != "" {
		if d.expertSwitch {
			args = append(args, d.Parallel.Expert)
		} else {
			args = append(args, d.Parallel.Expert, strconv.Itoa(in.Layout.Expert))
		}
	}
	if in.ServedName != "" {
		args = appendFlag(args, d.ServedNameFlag, in.ServedName)
	}
	if nodes > 1 && d.MultiNode.Args != nil {
		args = append(args, d.MultiNode.Args(nodes, in.Rank, in.Layout, leader)...)
	}
	if err := d.CheckArgs(in.Args, in.ServedName != ""); err != nil {
		return Cmd{}, err
	}
	// Defaults the task's args may set themselves: the flags that turn the
	// engine's /metrics on, then the descriptor's own (llama.cpp's -ngl).
	given := d.flagSet(in.Args)
	for _, f := range d.Metrics.Enable {
		if !given[d.canon(f)] {
			args = append(args, f)
		}
	}
	if d.defaults != nil {
		for _, def := range d.defaults(in) {
			if !given[d.canon(def[0])] {
				args = append(args, def...)
			}
		}
	}
	var env map[string]string
	if d.env != nil {
		env = d.env(in)
	}
	args = append(args, in.Args...)
	return Cmd{Path: in.Executable, Args: args, Env: env}, nil
}

// splitLeader splits host:port ([v6]:port) into the leader's parts.
func splitLeader(addr string) (Leader, error) {
	i := strings.LastIndexByte(addr, ':')
	if i <= 0 || i == len(addr)-1 {
		return Leader{}, fmt.Errorf("leader_addr: %q is not host:port", addr)
	}
	host, port := addr[:i], addr[i+1:]
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return Leader{}, fmt.Errorf("leader_addr: %q: port %q is not a TCP port", addr, port)
	}
	return Leader{Host: host, Port: port, Addr: addr}, nil
}

// isIPLiteral reports whether s is an IPv4 dotted quad or looks like an
// IPv6 address (hex digits, colons and dots, at least two colons).
func isIPLiteral(s string) bool {
	if strings.Count(s, ":") >= 2 {
		return strings.Trim(s, "0123456789abcdefABCDEF:.") == ""
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 255 || p == "" || (len(p) > 1 && p[0] == '0') {
			return false
		}
	}
	return true
}

// appendFlag appends flag and value when the engine has the flag.
func appendFlag(args []string, flag, value string) []string {
	if flag == "" {
		return args
	}
	return append(args, flag, value)
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

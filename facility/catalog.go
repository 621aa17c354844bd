package facility

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/weightsapi"
)

// Catalog is the desired state: the models to serve and how.
type Catalog struct {
	Models []Model
}

// Model is one served model and its replicas.
type Model struct {
	Name   string
	Source string // what the engine loads, such as "meta-llama/Llama-3.1-70B-Instruct"
	// File is, for an engine that loads one local file (llama.cpp), the
	// file within Source (a hub repository the driver's model cache holds,
	// or a local directory): "qwen2.5-0.5b-instruct-q4_k_m.gguf". Empty
	// when Source is the file's absolute path.
	File string
	// Weights, when set, says where the model's weights come from (a hub
	// repository at a revision with its files, URLs, or a path on the
	// nodes): each node's store (the driver) fetches them once, the
	// replica's task names them, and placement prefers nodes that hold
	// them (Node.Weights, by Weights.Key()). Nil: the engine finds its
	// weights itself (source, file and the node's model cache).
	Weights *weightsapi.Source `json:",omitempty"`
	// WeightsBytes is the weights' size when the catalog says it
	// (weights { bytes = … }); the planner's estimate of a fetch takes the
	// size a node that holds them reports first.
	WeightsBytes int64 `json:",omitempty"`
	// WarmSpares is how many nodes beyond those serving the model keep its
	// weights fetched, so that a replacement or a scale-up need not wait
	// for a fetch (warm_spares).
	WarmSpares int `json:",omitempty"`
	// Adapters are the model's LoRA adapters (adapter blocks), served by
	// every replica beside the base model, in the catalog's order (the
	// order llama.cpp numbers them in); adapters.go.
	Adapters []Adapter `json:",omitempty"`
	// MaxAdapters is how many adapters one replica holds on its GPUs at
	// once (max_adapters: vLLM's --max-loras, SGLang's
	// --max-loras-per-batch); 0: all of them. llama.cpp loads every adapter
	// at start, so for it a max_adapters below the adapters' count is
	// refused.
	MaxAdapters int `json:",omitempty"`
	// AdapterLoading is how an engine with a runtime adapter API gets the
	// adapters (adapter_loading): "" (or AdapterLoadingRuntime) through
	// that API, loaded by the controller; AdapterLoadingStart on its
	// command line, as every other engine, with the API left off where
	// the engine has a switch for it (AdapterPlan).
	AdapterLoading string `json:",omitempty"`
	Replicas       int
	// Profiles in order of preference: a replica takes the first that fits.
	Profiles []Profile
	// MaxSurge is how many of the model's replicas may have a second copy
	// being brought up at once while they roll to a changed profile or move
	// (out of a drained domain, off unhealthy GPUs); default 1.
	MaxSurge int
	// MaxUnavailable is how many of the model's replicas a roll or move
	// may take out of service before their new copy serves, when there is
	// no room to surge; default 0 (new copy first, always).
	MaxUnavailable int
	// Priority orders the models when the budgets cannot give every one
	// what it wants (0–100, higher first; the parser's default is
	// DefaultPriority): see Autoscale and docs/controller.md, "Autoscaling".
	Priority int
	// Autoscale, when set, lets the replica count follow demand between its
	// Min and Max; Replicas is then Min (the parser sets it), the count a
	// model starts at. Nil: Replicas is a fixed count.
	Autoscale *Autoscale `json:",omitempty"`
	// Routing is how the gateways choose a replica for each request
	// (gatewayapi.RoutingPrefix, gatewayapi.RoutingLeastOutstanding); empty
	// is the gateways' default, least-outstanding. docs/gateway.md, "Prefix
	// routing".
	Routing string `json:",omitempty"`
	Pos     Pos
}

// Profile is one way to run a replica of a model.
type Profile struct {
	Name   string
	Engine string // vllm, sglang, tgi, llamacpp, command, … (the driver checks it)
	GPU    string // GPU model, such as "NVIDIA H200"
	GPUs   int    // per node (per shard)
	Nodes  int    // shards; > 1 is a multi-node replica, one shard per node
	// TensorParallel, PipelineParallel, DataParallel and ExpertParallel
	// are the replica's layout, replica-wide (all nodes together); 0 is
	// the engine's default (engine.Descriptor.Resolve). Validate checks
	// they add up to Nodes × GPUs as the engine counts them.
	TensorParallel, PipelineParallel, DataParallel, ExpertParallel int
	// Watts is the declared draw of one shard; 0 derives it as GPUs × the
	// node's GPU power limit.
	Watts float64
	// MinWatts is the least power limit a GPU serving the profile may be
	// capped to (min_watts, per GPU); 0: none, the GPU's own minimum. The
	// controller's power caps never lower one of its GPUs below it
	// (docs/power.md, "Power caps").
	MinWatts float64 `json:",omitempty"`
	CPUCores int     // per shard
	MemoryGB int     // per shard
	// KeepWithin is the level a multi-node replica is placed whole inside.
	KeepWithin Level
	// Spread lists the levels the model's replicas spread over, in priority
	// order. The parser defaults it to rack, pdu.
	Spread []Level
	// Fabric, when set, is a prefix the node's fabric must have.
	Fabric string
	// Pool is the Nomad node pool; "" is DefaultPool, AllPools any.
	Pool string
	Args []string // engine arguments
	// EngineVersion is the engine release the profile runs (engine_version),
	// whose contract checks Args when llmgw has it; "" is the version llmgw
	// pins. Where llmgw has no contract for it, only CheckArgs applies and
	// Warnings says so. It steers only the check: nothing rendered carries it.
	EngineVersion string `json:",omitempty"`
	// SkipArgsCheck is check_args = false: Args are not walked by any
	// contract (CheckArgs, llmgw's own flags, still applies); Warnings says
	// so.
	SkipArgsCheck bool              `json:",omitempty"`
	Env           map[string]string // engine environment
	// EnvFromVariable are engine environment variables whose values are
	// items of Nomad Variables: Nomad reads them when it starts the task
	// (a template in the job), so that secrets stay out of the catalog,
	// the jobs and the controller. Sorted by Name.
	EnvFromVariable []VariableEnv `json:",omitempty"`
	Ready           string        // readiness path; "" is the engine's default
	// Weight is the gateway's traffic weight for a replica of this profile.
	Weight int
	Pos    Pos
}

// VariableEnv is one engine environment variable read from a Nomad
// Variable: env_from_variable "HF_TOKEN" { variable = "nomad/jobs", key =
// "hf_token" } in a profile.
type VariableEnv struct {
	Name     string // the environment variable
	Variable string // the Nomad Variable's path
	Key      string // the item of the Variable
	Pos      Pos
}

// DefaultSpread is the spread of a profile that names none.
func DefaultSpread() []Level { return []Level{LevelRack, LevelPDU} }

// ShardWatts returns the draw of one shard of p on a node whose GPU of p's
// model has the given power limit.
func (p Profile) ShardWatts(powerLimit float64) float64 {
	if p.Watts > 0 {
		return p.Watts
	}
	return float64(p.GPUs) * powerLimit
}

// minWattsProblem says why min_watts is more than the profile's declared
// draw per GPU (watts / gpus), or "" when it is not (or either is unset):
// a floor above what the profile says it draws could hold a domain over
// its limit that the declared draw admitted.
func (p Profile) minWattsProblem() string {
	if p.MinWatts <= 0 || p.Watts <= 0 || p.GPUs < 1 {
		return ""
	}
	if per := p.Watts / float64(p.GPUs); p.MinWatts > per {
		return fmt.Sprintf("min_watts %v is more than the profile's declared draw per GPU (watts %v / gpus %d = %v)", p.MinWatts, p.Watts, p.GPUs, per)
	}
	return ""
}

// pool returns the profile's pool with the default applied.
func (p Profile) pool() string {
	if p.Pool == "" {
		return DefaultPool
	}
	return p.Pool
}

// ReplicaID names replica i of a model: "<model>-<i>".
func ReplicaID(model string, i int) string { return model + "-" + strconv.Itoa(i) }

// ProfileFingerprint returns a short, stable fingerprint of what a replica's
// jobs are rendered from: the model's name and source, and the profile's
// name, engine, gpu, gpus, nodes, cpu_cores, memory_gb, fabric, pool, args,
// env, env_from_variable (the references, not the values) and ready; and, when set, the model's file and the profile's
// tensor_parallel, pipeline_parallel, data_parallel and expert_parallel,
// and the model's weights (weightsapi's Key, or the path). The controller keeps it in job meta llmgw.profile_fp and
// replaces a replica whose fingerprint no longer matches. Fields that only
// steer placement, traffic or power (replicas, watts, min_watts,
// keep_within, spread, weight; the weights' bytes, warm_spares) are left out, so changing them moves nothing that runs.
func ProfileFingerprint(m Model, p Profile) string {
	h := sha256.New()
	put := func(k, v string) {
		// Length-prefixed, so no two inputs encode the same.
		h.Write([]byte(strconv.Itoa(len(k)) + ":" + k + strconv.Itoa(len(v)) + ":" + v + ";"))
	}
	put("v", "1")
	put("model", m.Name)
	put("source", m.Source)
	put("profile", p.Name)
	put("engine", p.Engine)
	put("gpu", p.GPU)
	put("gpus", strconv.Itoa(p.GPUs))
	put("nodes", strconv.Itoa(p.Nodes))
	put("cpu_cores", strconv.Itoa(p.CPUCores))
	put("memory_gb", strconv.Itoa(p.MemoryGB))
	put("fabric", p.Fabric)
	put("pool", p.pool())
	put("ready", p.Ready)
	// Added after the first fingerprints: only when set, so that a
	// profile that does not use them keeps its fingerprint.
	for _, f := range []struct {
		k string
		v int
	}{{"tensor_parallel", p.TensorParallel}, {"pipeline_parallel", p.PipelineParallel},
		{"data_parallel", p.DataParallel}, {"expert_parallel", p.ExpertParallel}} {
		if f.v != 0 {
			put(f.k, strconv.Itoa(f.v))
		}
	}
	if m.File != "" {
		put("file", m.File)
	}
	// The weights the task fetches: only when set, as the layout above.
	// Their key names the bytes (repository, revision, files; URLs and
	// sha256); a path has none and is itself what the task is given.
	if w := m.Weights; w != nil {
		if k := w.Key(); k != "" {
			put("weights", k)
		} else {
			put("weights_path", w.Path)
		}
	}
	// A model that sleeps when idle runs its engine with the sleep flag
	// from idle_after (render): only when set, as the layout above.
	// The adapters the engine loads, as the recipe renders them (not their
	// scales, which only the requests carry): only when set, as the layout
	// above. Where the controller loads them into the running engine
	// (engine.PlanAdapters), only what the engine starts with and cannot
	// change while it runs, its slots and rank bound: adding or removing
	// an adapter then changes no job.
	if plan, err := m.AdapterPlan(p); err == nil && plan.Runtime {
		put("adapters_runtime", plan.Key)
	} else if len(m.Adapters) > 0 {
		put("adapters", strconv.Itoa(len(m.Adapters)))
		for _, a := range m.Adapters {
			// An adapter the stores fetch by its key (the bytes it names),
			// as the model's weights above.
			where := a.Weights.Path
			if a.Fetched() {
				where = "weights:" + a.Weights.Key()
			}
			put(a.Name, where+"\x00"+strconv.Itoa(a.Rank))
		}
		put("max_adapters", strconv.Itoa(m.MaxAdapters))
	}
	if a := m.Autoscale; a.Sleeps() {
		put("sleep_after", strconv.FormatInt(int64(a.IdleAfter/time.Second), 10))
	}
	put("args", strconv.Itoa(len(p.Args)))
	for _, a := range p.Args {
		put("arg", a)
	}
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	put("env", strconv.Itoa(len(keys)))
	for _, k := range keys {
		put(k, p.Env[k])
	}
	// Only when set, as the layout above: the reference, never the value
	// (a rotated secret restarts the task through its template).
	if len(p.EnvFromVariable) > 0 {
		put("env_from_variable", strconv.Itoa(len(p.EnvFromVariable)))
		for _, v := range p.EnvFromVariable {
			put(v.Name, v.Variable+"\x00"+v.Key)
		}
	}
	sum := h.Sum(nil)
	return hex.EncodeToString(sum[:8])
}

// Validate reports every problem with the catalog, each an *Error at the
// model or profile.
func (c Catalog) Validate() error {
	var errs []error
	models := map[string]Pos{}
	// Names requests use: every model's, then every adapter's as it comes.
	names := map[string]string{}
	for _, m := range c.Models {
		if _, dup := names[m.Name]; !dup {
			names[m.Name] = fmt.Sprintf("model %q at %s", m.Name, m.Pos)
		}
	}
	for _, m := range c.Models {
		bad := func(format string, args ...any) {
			errs = append(errs, errAt(m.Pos, fmt.Sprintf("model %q: ", m.Name)+fmt.Sprintf(format, args...)))
		}
		if err := checkName("model", m.Name); err != nil {
			errs = append(errs, errAt(m.Pos, err.Error()))
		}
		// The name is the served name and the source the model argument on
		// the engine's command line, where a leading '-' reads as a flag.
		if strings.HasPrefix(m.Name, "-") {
			bad("name starts with '-': engines would read --served-model-name %s as a flag", m.Name)
		}
		if strings.HasPrefix(m.Source, "-") {
			bad("source %q starts with '-': engines would read it as a flag (write a path as ./%s)", m.Source, m.Source)
		}
		if p, dup := models[m.Name]; dup {
			bad("duplicate model (first at %s)", p)
		} else {
			models[m.Name] = m.Pos
		}
		if err := checkInt("replicas", m.Replicas, 0, maxCount); err != nil {
			bad("%v", err)
		}
		if err := checkInt("priority", m.Priority, 0, MaxPriority); err != nil {
			bad("%v", err)
		}
		for _, msg := range m.validateWeights() {
			bad("%s", msg)
		}
		errs = append(errs, m.validateAdapters(names)...)
		if a := m.Autoscale; a != nil {
			for _, msg := range a.validate() {
				errs = append(errs, errAt(a.Pos, fmt.Sprintf("model %q: autoscale: %s", m.Name, msg)))
			}
		}
		if len(m.Profiles) == 0 {
			bad("no profile")
		}
		profiles := map[string]Pos{}
		for _, p := range m.Profiles {
			if err := p.validate(m.Name); err != nil {
				errs = append(errs, err)
			}
			if strings.TrimSpace(p.Engine) != "" {
				if err := p.checkEngine(m); err != nil {
					errs = append(errs, errAt(p.Pos, fmt.Sprintf("profile %s/%s: %v", m.Name, p.Name, err)))
				}
			}
			if m.Autoscale.Sleeps() {
				if d, ok := engine.Lookup(p.Engine); ok && d.Sleep == nil {
					errs = append(errs, errAt(m.Autoscale.Pos, fmt.Sprintf("model %q: autoscale: when_idle = %q: profile %s runs %s, which has no sleep llmgw drives (llama.cpp's %s only); use when_idle = %q",
						m.Name, IdleSleep, p.Name, p.Engine, "--sleep-idle-seconds", IdleStop)))
				}
			}
			if q, dup := profiles[p.Name]; dup {
				errs = append(errs, errAt(p.Pos, fmt.Sprintf("profile %s/%s: duplicate (first at %s)", m.Name, p.Name, q)))
			} else {
				profiles[p.Name] = p.Pos
			}
		}
	}
	return errors.Join(errs...)
}

// Warnings are what the catalog passes with but an operator should know,
// each naming file:line: a profile whose args were not checked against an
// engine contract (check_args = false, or an engine_version llmgw has no
// contract for). `llmgw plan`, the controller's catalog load and its
// catalog and plan views show them.
func (c Catalog) Warnings() []string {
	var out []string
	for _, m := range c.Models {
		out = append(out, m.Warnings()...)
	}
	return out
}

// Warnings are the catalog's warnings about the model's profiles.
func (m Model) Warnings() []string {
	var out []string
	for _, p := range m.Profiles {
		if w := p.argsWarning(); w != "" {
			out = append(out, fmt.Sprintf("%s: profile %s/%s: %s", p.Pos, m.Name, p.Name, w))
		}
	}
	return out
}

// argsWarning says why the profile's args were not checked against a
// contract, or "" when they were (or there are none to check).
func (p Profile) argsWarning() string {
	have := engine.ContractVersions(p.Engine)
	switch {
	case len(have) == 0:
		return "" // command, or an unknown engine (an error of its own)
	case p.SkipArgsCheck:
		return fmt.Sprintf("check_args = false: args are not checked against engine %q's contract, only for flags llmgw sets", p.Engine)
	case p.EngineVersion != "" && !engine.HasContract(p.Engine, p.EngineVersion):
		return fmt.Sprintf("engine_version %q: llmgw has no contract for %s %s (it has %s), so args were not checked against a contract, only for flags llmgw sets",
			p.EngineVersion, p.Engine, p.EngineVersion, strings.Join(have, ", "))
	}
	return ""
}

func (p Profile) validate(model string) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, errAt(p.Pos, fmt.Sprintf("profile %s/%s: ", model, p.Name)+fmt.Sprintf(format, args...)))
	}
	if err := checkName("profile", p.Name); err != nil {
		bad("%v", err)
	}
	if strings.TrimSpace(p.Engine) == "" {
		bad("engine is required")
	}
	if p.GPU == "" {
		bad("gpu is required")
	}
	if err := checkInt("gpus", p.GPUs, 1, maxCount); err != nil {
		bad("%v", err)
	}
	if err := checkInt("nodes", p.Nodes, 1, maxCount); err != nil {
		bad("%v", err)
	}
	if err := checkWatts("watts", p.Watts, false); err != nil {
		bad("%v", err)
	}
	if err := checkWatts("min_watts", p.MinWatts, false); err != nil {
		bad("%v", err)
	} else if msg := p.minWattsProblem(); msg != "" {
		bad("%s", msg)
	}
	if err := checkInt("cpu_cores", p.CPUCores, 0, maxCPU); err != nil {
		bad("%v", err)
	}
	if err := checkInt("memory_gb", p.MemoryGB, 0, maxMemGB); err != nil {
		bad("%v", err)
	}
	if !p.KeepWithin.Valid() {
		bad("keep_within: %v", ErrUnknownLevel)
	}
	seen := map[Level]bool{}
	for _, l := range p.Spread {
		if !l.Valid() {
			bad("spread: %v", ErrUnknownLevel)
			continue
		}
		if seen[l] {
			bad("spread lists %s twice", l)
		}
		seen[l] = true
	}
	if p.Fabric != "" {
		if err := checkValue(p.Fabric); err != nil {
			bad("fabric: %v", err)
		}
	}
	if p.Pool != "" {
		if err := checkValue(p.Pool); err != nil {
			bad("pool: %v", err)
		}
	}
	if p.Weight < 0 {
		bad("weight must not be negative, got %d", p.Weight)
	}
	return errors.Join(errs...)
}

package driver

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
)

// Config is the plugin's configuration: the `config {}` block of
// `plugin "nomad-driver-llmgw"` in the Nomad client's agent configuration.
type Config struct {
	// Engines maps engine names to executables; absent or empty entries
	// fall back to the engine's default looked up on PATH.
	Engines Engines `codec:"engines"`
	// ModelCache becomes HF_HOME for engines whose task environment does
	// not set it, so that every engine on the node shares downloads.
	ModelCache string `codec:"model_cache"`
	// HubURL, StoreBudgetBytes, MaxConcurrentFetches and
	// FetchBytesPerSecond configure the node's model store (model_cache)
	// for tasks with a weights block: see the weights package.
	HubURL               string `codec:"hub_url"`
	StoreBudgetBytes     int64  `codec:"store_budget_bytes"`
	MaxConcurrentFetches int    `codec:"max_concurrent_fetches"`
	FetchBytesPerSecond  int64  `codec:"fetch_bytes_per_second"`
	// ReadyTimeout and ReadyInterval are the readiness defaults for tasks
	// whose ready block does not set them.
	ReadyTimeout  time.Duration `codec:"ready_timeout"`
	ReadyInterval time.Duration `codec:"ready_interval"`
	// StopTimeout is how long an engine the driver stops by itself (it
	// missed its readiness deadline) gets between SIGTERM and SIGKILL.
	StopTimeout time.Duration `codec:"stop_timeout"`
	// ExtraEnv is set for every engine; the task's environment wins.
	ExtraEnv map[string]string `codec:"extra_env"`
	// CgroupParent is the cgroup v2 directory under which each engine
	// gets its own cgroup (resource limits, OOM-kill detection, killing
	// stray workers) when Nomad names no cgroup v2 partition for the
	// task; empty disables it.
	CgroupParent string `codec:"cgroup_parent"`
	// NomadCgroup puts the engine's cgroup in the partition of the
	// cgroup Nomad names for the task (LinuxResources.cpuset_cgroup on a
	// cgroup v2 client: nomad.slice/share.slice or reserve.slice), so
	// that reserved cores are kept as for Nomad's own drivers.
	NomadCgroup bool `codec:"nomad_cgroup"`
	// ResourceLimits says what happens when the host cannot enforce a
	// task's resources: "enforce" refuses the task, "best_effort" starts
	// it with what can be enforced and a task event naming the rest.
	ResourceLimits string `codec:"resource_limits"`
	// CPUHardLimit caps each engine at its cpu share with cpu.max (as
	// the exec driver's cpu_hard_limit), besides the cpu.weight it
	// always gets.
	CPUHardLimit bool `codec:"cpu_hard_limit"`

	// AllowedCommands are the executables (absolute paths or globs)
	// tasks may run besides each engine's own configured executable;
	// AllowAnyCommand lifts the check.
	AllowedCommands []string `codec:"allowed_commands"`
	AllowAnyCommand bool     `codec:"allow_any_command"`
	// DefaultUser is who engines run as when the task sets no user;
	// AllowedUsers (names or globs) are the other users a task's user may
	// name; no engine runs as uid 0 unless AllowRoot.
	DefaultUser  string   `codec:"default_user"`
	AllowedUsers []string `codec:"allowed_users"`
	AllowRoot    bool     `codec:"allow_root"`
	// SupplementaryGroups are added to every engine's groups (for a
	// group-readable model cache).
	SupplementaryGroups []string `codec:"supplementary_groups"`
	// EnvDenylist (names or globs) are variables a job may not set in the
	// engine's environment, unless AllowedEnv names them.
	EnvDenylist []string `codec:"env_denylist"`
	AllowedEnv  []string `codec:"allowed_env"`
}

// Engines holds the executable of each engine that has a default one
// (every engine but command), by engine name: the plugin config's
// engines block, whose attributes are the engine descriptors' names.
type Engines map[string]string

// Executable returns the configured executable for engine, or the
// engine's default.
func (e Engines) Executable(name string) string {
	if v := e[name]; v != "" {
		return v
	}
	return engine.DefaultExecutable(name)
}

// enginesSpec is the engines block: one string attribute per engine with
// a default executable.
func enginesSpec() *hclspec.Spec {
	attrs := map[string]*hclspec.Spec{}
	for _, d := range engine.Descriptors() {
		if d.DefaultExecutable != "" {
			attrs[d.Name] = hclspec.Attr(d.Name, "string")
		}
	}
	return hclspec.Object(attrs)
}

// Defaults of the plugin configuration.
const (
	DefaultReadyTimeout  = 30 * time.Minute
	DefaultReadyInterval = time.Second
	DefaultStopTimeout   = 30 * time.Second
	DefaultCgroupParent  = "/sys/fs/cgroup/llmgw.slice"
	DefaultUser          = "nobody"
)

// resource_limits values.
const (
	LimitsEnforce    = "enforce"
	LimitsBestEffort = "best_effort"
)

// DefaultEnvDenylist is env_denylist's default: variables that make an
// allowed executable load or run code the job chose, which would make
// allowed_commands meaningless. Why each is there is in docs/driver.md.
var DefaultEnvDenylist = []string{
	"LD_*",            // the dynamic loader: LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, …
	"GCONV_PATH",      // glibc loads iconv modules from it
	"BASH_ENV", "ENV", // shells source the file they name
	"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", // Python imports from there
}

func listLiteral(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func strDefault(name, lit string) *hclspec.Spec {
	return hclspec.Default(hclspec.Attr(name, "string"), hclspec.Literal(lit))
}

// ConfigSpec is the schema Nomad evaluates the plugin's config block
// against.
func ConfigSpec() *hclspec.Spec {
	return hclspec.Object(map[string]*hclspec.Spec{
		"engines":                hclspec.Block("engines", false, enginesSpec()),
		"model_cache":            hclspec.Attr("model_cache", "string"),
		"hub_url":                hclspec.Attr("hub_url", "string"),
		"store_budget_bytes":     hclspec.Attr("store_budget_bytes", "number"),
		"max_concurrent_fetches": hclspec.Attr("max_concurrent_fetches", "number"),
		"fetch_bytes_per_second": hclspec.Attr("fetch_bytes_per_second", "number"),
		"ready_timeout":          strDefault("ready_timeout", `"30m"`),
		"ready_interval":         strDefault("ready_interval", `"1s"`),
		"stop_timeout":           strDefault("stop_timeout", `"30s"`),
		"extra_env":              hclspec.Attr("extra_env", "map(string)"),
		"cgroup_parent":          strDefault("cgroup_parent", `"`+DefaultCgroupParent+`"`),
		"nomad_cgroup":           hclspec.Default(hclspec.Attr("nomad_cgroup", "bool"), hclspec.Literal("true")),
		"resource_limits":        strDefault("resource_limits", `"`+LimitsEnforce+`"`),
		"cpu_hard_limit":         hclspec.Attr("cpu_hard_limit", "bool"),

		"allowed_commands":     hclspec.Attr("allowed_commands", "list(string)"),
		"allow_any_command":    hclspec.Attr("allow_any_command", "bool"),
		"default_user":         strDefault("default_user", `"`+DefaultUser+`"`),
		"allowed_users":        hclspec.Attr("allowed_users", "list(string)"),
		"allow_root":           hclspec.Attr("allow_root", "bool"),
		"supplementary_groups": hclspec.Attr("supplementary_groups", "list(string)"),
		"env_denylist":         hclspec.Default(hclspec.Attr("env_denylist", "list(string)"), hclspec.Literal(listLiteral(DefaultEnvDenylist))),
		"allowed_env":          hclspec.Attr("allowed_env", "list(string)"),
	})
}

// DecodeConfig decodes and checks what Nomad sent in SetConfig.
func DecodeConfig(msgpack []byte) (Config, error) {
	var c Config
	if err := hclspec.Decode(ConfigSpec(), msgpack, &c); err != nil {
		return Config{}, fmt.Errorf("nomad-driver-llmgw config: %w", err)
	}
	if err := c.validate(); err != nil {
		return Config{}, fmt.Errorf("nomad-driver-llmgw config: %w", err)
	}
	return c, nil
}

func (c *Config) validate() error {
	if c.ReadyTimeout <= 0 {
		return fmt.Errorf("ready_timeout: must be positive, got %s", c.ReadyTimeout)
	}
	if c.ReadyInterval < 100*time.Millisecond {
		return fmt.Errorf("ready_interval: %s is too short (minimum 100ms)", c.ReadyInterval)
	}
	if c.StopTimeout <= 0 {
		return fmt.Errorf("stop_timeout: must be positive, got %s", c.StopTimeout)
	}
	if c.ModelCache != "" && !path.IsAbs(c.ModelCache) {
		return fmt.Errorf("model_cache: %q is not an absolute path", c.ModelCache)
	}
	if c.HubURL != "" {
		if u, err := url.Parse(c.HubURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("hub_url: %q is not an http(s) URL", c.HubURL)
		}
	}
	if c.StoreBudgetBytes < 0 {
		return fmt.Errorf("store_budget_bytes: %d is negative", c.StoreBudgetBytes)
	}
	if c.MaxConcurrentFetches < 0 || c.MaxConcurrentFetches > 64 {
		return fmt.Errorf("max_concurrent_fetches: %d is not between 0 (the default, 2) and 64", c.MaxConcurrentFetches)
	}
	if c.FetchBytesPerSecond < 0 {
		return fmt.Errorf("fetch_bytes_per_second: %d is negative", c.FetchBytesPerSecond)
	}
	if c.CgroupParent != "" && !path.IsAbs(c.CgroupParent) {
		return fmt.Errorf("cgroup_parent: %q is not an absolute path", c.CgroupParent)
	}
	if err := checkEnv("extra_env", c.ExtraEnv); err != nil {
		return err
	}
	return c.validatePolicy()
}

// DefaultConfig is what a plugin uses before SetConfig: the schema's
// defaults.
func DefaultConfig() Config {
	return Config{
		ReadyTimeout:  DefaultReadyTimeout,
		ReadyInterval: DefaultReadyInterval,
		StopTimeout:   DefaultStopTimeout,
		CgroupParent:  DefaultCgroupParent,
		NomadCgroup:   true,

		ResourceLimits: LimitsEnforce,
		DefaultUser:    DefaultUser,
		EnvDenylist:    slices.Clone(DefaultEnvDenylist),
	}
}

// TaskConfig is a task's `config {}` block.
type TaskConfig struct {
	Engine         string            `codec:"engine"`
	Model          string            `codec:"model"`
	Command        string            `codec:"command"`
	Args           []string          `codec:"args"`
	Port           string            `codec:"port"`
	Ready          *ReadyConfig      `codec:"ready"`
	TensorParallel int               `codec:"tensor_parallel"`
	Env            map[string]string `codec:"env"`

	// The replica's layout beyond tensor_parallel, replica-wide; 0 is the
	// engine's default (1 once tensor_parallel is given).
	PipelineParallel int `codec:"pipeline_parallel"`
	DataParallel     int `codec:"data_parallel"`
	ExpertParallel   int `codec:"expert_parallel"`
	// ServedModelName is the name the engine answers to, passed with the
	// engine's served-name flag (llmgw's controller sets the catalog's
	// model name).
	ServedModelName string `codec:"served_model_name"`
	// ModelFile is, for an engine that loads one local file (llama.cpp),
	// the file within model: a Hugging Face repository in the model cache,
	// or an absolute directory.
	ModelFile string `codec:"model_file"`
	// Nodes, NodeRank and LeaderAddr place the task in a multi-node
	// replica: its shard count, its rank (0 the leader) and the leader's
	// rendezvous address, host:port (llmgw's controller renders
	// "${LLMGW_LEADER_ADDR}").
	Nodes      int    `codec:"nodes"`
	NodeRank   int    `codec:"node_rank"`
	LeaderAddr string `codec:"leader_addr"`
	// Weights, when set, names where the model's weights come from: the
	// driver makes the node's model store (model_cache) hold them,
	// fetching once per node, before the engine starts, and hands the
	// engine the store's directory.
	Weights *WeightsConfig `codec:"weights"`
	// Adapters are the LoRA adapters the engine loads at start (adapter
	// blocks), rendered onto its command line by the driver
	// (engine.AdapterArgs) after it checked them where it can: a
	// llama.cpp adapter that does not fit the model is left out, with a
	// task event (adapters.go). MaxAdapters is how many one replica holds
	// on its GPUs at once (0: all).
	Adapters    []AdapterConfig `codec:"adapter"`
	MaxAdapters int             `codec:"max_adapters"`
}

// WeightsConfig is a task's weights block: model (a hub repository
// "org/name") at revision with files, or urls.
type WeightsConfig struct {
	// Revision of the repository model names; "main" when empty.
	Revision string `codec:"revision"`
	// Files of the repository (exact paths or patterns); model_file
	// alone when empty.
	Files []string `codec:"files"`
	// URLs fetched instead of a hub repository, each checked against
	// SHA256[its file name] where given.
	URLs   []string          `codec:"urls"`
	SHA256 map[string]string `codec:"sha256"`
}

// ReadyConfig is the readiness probe of a task.
type ReadyConfig struct {
	Path     string        `codec:"path"`
	Interval time.Duration `codec:"interval"`
	Timeout  time.Duration `codec:"timeout"`
	// Skip turns probing off: the task is ready once its engine runs. For
	// processes that serve no HTTP, such as the non-leader ranks of a
	// multi-node vLLM replica (--headless).
	Skip bool `codec:"skip"`
}

// TaskConfigSpec is the schema of a task's config block.
func TaskConfigSpec() *hclspec.Spec {
	return hclspec.Object(map[string]*hclspec.Spec{
		"engine":  hclspec.RequiredAttr("engine", "string"),
		"model":   hclspec.Attr("model", "string"),
		"command": hclspec.Attr("command", "string"),
		"args":    hclspec.Attr("args", "list(string)"),
		"port":    hclspec.Attr("port", "string"),
		"ready": hclspec.Block("ready", false, hclspec.Object(map[string]*hclspec.Spec{
			"path":     hclspec.Attr("path", "string"),
			"interval": hclspec.Attr("interval", "string"),
			"timeout":  hclspec.Attr("timeout", "string"),
			"skip":     hclspec.Attr("skip", "bool"),
		})),
		"tensor_parallel":   hclspec.Attr("tensor_parallel", "number"),
		"pipeline_parallel": hclspec.Attr("pipeline_parallel", "number"),
		"data_parallel":     hclspec.Attr("data_parallel", "number"),
		"expert_parallel":   hclspec.Attr("expert_parallel", "number"),
		"served_model_name": hclspec.Attr("served_model_name", "string"),
		"model_file":        hclspec.Attr("model_file", "string"),
		"nodes":             hclspec.Attr("nodes", "number"),
		"node_rank":         hclspec.Attr("node_rank", "number"),
		"leader_addr":       hclspec.Attr("leader_addr", "string"),
		"env":               hclspec.Attr("env", "map(string)"),
		"adapter": hclspec.BlockList("adapter", 0, engine.MaxAdapters, hclspec.Object(map[string]*hclspec.Spec{
			"name":    hclspec.RequiredAttr("name", "string"),
			"path":    hclspec.Attr("path", "string"),
			"source":  hclspec.Attr("source", "string"),
			"weights": weightsSpec(),
			"rank":    hclspec.Attr("rank", "number"),
		})),
		"max_adapters": hclspec.Attr("max_adapters", "number"),
		"weights":      weightsSpec(),
	})
}

// weightsSpec is the schema of a weights block: a task's, or an adapter's.
func weightsSpec() *hclspec.Spec {
	return hclspec.Block("weights", false, hclspec.Object(map[string]*hclspec.Spec{
		"revision": hclspec.Attr("revision", "string"),
		"files":    hclspec.Attr("files", "list(string)"),
		"urls":     hclspec.Attr("urls", "list(string)"),
		"sha256":   hclspec.Attr("sha256", "map(string)"),
	}))
}

// ErrBadTaskConfig is wrapped by every task config error.
var ErrBadTaskConfig = errors.New("bad llmgw task config")

// DecodeTaskConfig decodes and checks a task's config. Errors name the
// field at fault.
func DecodeTaskConfig(msgpack []byte) (TaskConfig, error) {
	var tc TaskConfig
	if err := hclspec.Decode(TaskConfigSpec(), msgpack, &tc); err != nil {
		return TaskConfig{}, fmt.Errorf("%w: %w", ErrBadTaskConfig, err)
	}
	if len(tc.Adapters) == 0 {
		tc.Adapters = nil // no adapter block
	}
	if err := tc.validate(); err != nil {
		return TaskConfig{}, fmt.Errorf("%w: %w", ErrBadTaskConfig, err)
	}
	return tc, nil
}

func (tc *TaskConfig) validate() error {
	if tc.Engine == FetchEngine {
		return tc.validateFetch()
	}
	d, ok := engine.Lookup(tc.Engine)
	if !ok {
		return fmt.Errorf("engine: unknown engine %q (want one of %s, or %s)", tc.Engine, strings.Join(engine.Engines(), ", "), FetchEngine)
	}
	if tc.Model == "" && !d.Model.Optional {
		return fmt.Errorf("model: required for engine %q (a model id such as \"Qwen/Qwen2.5-0.5B-Instruct\" or a local path)", tc.Engine)
	}
	if d.DefaultExecutable == "" && tc.Command == "" {
		return fmt.Errorf("command: required for engine %q (the executable to run)", tc.Engine)
	}
	if tc.Port == "" {
		return errors.New("port: required (the label of a port in the group's network block)")
	}
	if tc.TensorParallel < 0 {
		return fmt.Errorf("tensor_parallel: must be 0 (one per allocated GPU) or more, got %d", tc.TensorParallel)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"pipeline_parallel", tc.PipelineParallel}, {"data_parallel", tc.DataParallel}, {"expert_parallel", tc.ExpertParallel}, {"nodes", tc.Nodes}} {
		if f.v < 0 {
			return fmt.Errorf("%s: must be 0 (the default) or more, got %d", f.name, f.v)
		}
	}
	if err := d.CheckFields(engine.Layout{Pipeline: tc.PipelineParallel, Data: tc.DataParallel, Expert: tc.ExpertParallel}, max(tc.Nodes, 1)); err != nil {
		return err
	}
	if n := max(tc.Nodes, 1); tc.NodeRank < 0 || tc.NodeRank >= n {
		return fmt.Errorf("node_rank: %d is not a rank of a replica of %d nodes", tc.NodeRank, n)
	}
	if tc.Nodes > 1 && d.MultiNode.Args != nil && tc.LeaderAddr == "" {
		return fmt.Errorf("leader_addr: required with nodes = %d (the leader's host:port)", tc.Nodes)
	}
	if tc.ModelFile != "" {
		if !d.Model.File {
			return fmt.Errorf("model_file: engine %q loads a model id or path (model), not one file", tc.Engine)
		}
		if path.IsAbs(tc.ModelFile) || path.Clean(tc.ModelFile) != tc.ModelFile || tc.ModelFile == ".." || strings.HasPrefix(tc.ModelFile, "../") {
			return fmt.Errorf("model_file: %q must be a clean relative path within model", tc.ModelFile)
		}
	}
	if err := d.CheckArgs(tc.Args, tc.ServedModelName != ""); err != nil {
		return err
	}
	if len(tc.Adapters) > 0 || tc.MaxAdapters != 0 {
		if len(tc.Adapters) == 0 {
			return fmt.Errorf("max_adapters: %d without an adapter block", tc.MaxAdapters)
		}
		for _, a := range tc.Adapters {
			if err := a.validate(); err != nil {
				return err
			}
		}
		if _, err := engine.AdapterArgs(tc.Engine, adapterSpec(tc.Adapters, tc.MaxAdapters)); err != nil {
			return err
		}
		if err := engine.CheckAdapterArgs(tc.Engine, tc.Args); err != nil {
			return err
		}
	}
	if r := tc.Ready; r != nil {
		if r.Path != "" && !strings.HasPrefix(r.Path, "/") {
			return fmt.Errorf("ready.path: %q must start with /", r.Path)
		}
		if r.Interval != 0 && r.Interval < 100*time.Millisecond {
			return fmt.Errorf("ready.interval: %s is too short (minimum 100ms)", r.Interval)
		}
	}
	for i, a := range tc.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("args[%d]: contains a NUL byte", i)
		}
	}
	return checkEnv("env", tc.Env)
}

func checkEnv(field string, env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%s: bad variable name %q", field, k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%s.%s: value contains a NUL byte", field, k)
		}
	}
	return nil
}

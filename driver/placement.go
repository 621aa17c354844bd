package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// envHFHome is the model cache variable the driver sets when unset.
const envHFHome = "HF_HOME"

// resolveLayout fills the task's layout with the engine's defaults for
// the allocated GPUs (tensor_parallel = 0: one per allocated GPU, 1 with
// none) and checks that one node's share of it fits in them. Giving
// tensor_parallel leaves pipeline_parallel at 1 unless it is given too; a
// layout may use fewer GPUs than were allocated.
func resolveLayout(d *engine.Descriptor, tc TaskConfig, gpus []string) (engine.Layout, error) {
	given := engine.Layout{Tensor: tc.TensorParallel, Pipeline: tc.PipelineParallel, Data: tc.DataParallel, Expert: tc.ExpertParallel}
	if given.Tensor > 0 && given.Pipeline == 0 {
		given.Pipeline = 1
	}
	nodes := max(tc.Nodes, 1)
	n := len(gpus)
	l := d.Defaults(given, engine.Shape{GPUs: max(n, 1), Nodes: nodes, Args: tc.Args})
	need := d.PerNode(l, nodes, tc.Args)
	what := fmt.Sprintf("tensor_parallel: %d", l.Tensor)
	if world := d.World(l, tc.Args); world != l.Tensor || nodes > 1 {
		what = fmt.Sprintf("the layout (tensor %d, pipeline %d, data %d) over %d node(s): %d GPUs a node", l.Tensor, max(l.Pipeline, 1), max(l.Data, 1), nodes, need)
	}
	switch {
	case need > n && n == 0 && need > 1:
		return engine.Layout{}, fmt.Errorf(`%s needs %d GPUs but the task was allocated none (request them with device "nvidia/gpu" { count = %d })`, what, need, need)
	case need > n && n > 0:
		return engine.Layout{}, fmt.Errorf("%s is more than the %d GPUs allocated to the task (%s)", what, n, strings.Join(gpus, ","))
	case d.World(l, tc.Args)%nodes != 0:
		return engine.Layout{}, fmt.Errorf("%s does not split evenly over nodes = %d", what, nodes)
	}
	return l, nil
}

// resolvePort finds the host address and port of the group network port
// labelled label: first in the task's port mappings (the group network
// block), then in the allocated networks' reserved and dynamic ports.
func resolvePort(res *driverpb.Resources, label string) (host string, port int, err error) {
	var labels []string
	for _, pm := range res.GetPorts() {
		if pm.GetLabel() == label {
			return hostOr(pm.GetHostIp()), int(pm.GetValue()), nil
		}
		labels = append(labels, pm.GetLabel())
	}
	for _, nw := range res.GetAllocatedResources().GetNetworks() {
		for _, ports := range [][]*driverpb.NetworkPort{nw.GetReservedPorts(), nw.GetDynamicPorts()} {
			for _, p := range ports {
				if p.GetLabel() == label {
					return hostOr(nw.GetIp()), int(p.GetValue()), nil
				}
				labels = append(labels, p.GetLabel())
			}
		}
	}
	if len(labels) == 0 {
		return "", 0, fmt.Errorf(`port: no port labelled %q: the group has no network ports (add network { port %q {} } to the group)`, label, label)
	}
	sort.Strings(labels)
	return "", 0, fmt.Errorf("port: no port labelled %q in the group's network (have: %s)", label, strings.Join(dedup(labels), ", "))
}

func hostOr(ip string) string {
	if ip == "" {
		return "127.0.0.1"
	}
	return ip
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// lookPath finds an executable as a shell would with the given PATH.
func lookPath(name, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		if err := isExecutable(name); err != nil {
			return "", err
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found on PATH (%s)", name, pathEnv)
}

// isExecutable says why p cannot be run: it does not exist, is a
// directory, or has no execute bit (the rule exec.LookPath applies).
func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("executable %q: %w", p, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("executable %q is a directory", p)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("executable %q: %w", p, fs.ErrPermission)
	}
	return nil
}

// plan is everything StartTask decided before launching.
type plan struct {
	cmd            engine.Cmd
	env            []string
	gpus           []string // the allocated devices' UUIDs, in CUDA's order
	gpu            gpuPlan
	notes          []string // task events: what the driver ignored or changed
	tensorParallel int
	layout         engine.Layout
	host           string
	port           int
	readyPath      string
	readySkip      bool
	readyInterval  int64 // nanoseconds
	readyTimeout   int64 // nanoseconds
	// exe is the canonical path of the executable (checked against
	// allowed_commands; what the supervisor executes); cmd.Path is the
	// path as found, the engine's argv[0].
	exe          string
	user         engineUser
	userEnv      map[string]string
	limits       supervisor.Limits
	cgroupParent string
	// adapters are the LoRA adapters on the engine's command line, in
	// their order (llama.cpp's ids); badAdapters those left out.
	adapters    []AdapterConfig
	badAdapters []badAdapter
}

// makePlan resolves a decoded task config against what Nomad allocated and
// the plugin's configuration. topo reads the host's GPU topology from the
// driver's NVML (nil, or an error, when it has none).
func makePlan(conf Config, task *driverpb.TaskConfig, tc TaskConfig, topo func() (nvmlseam.Topology, error)) (plan, error) {
	var pl plan
	d, ok := engine.Lookup(tc.Engine)
	if !ok {
		return plan{}, fmt.Errorf("engine: %w", engine.Unknown(tc.Engine))
	}
	gp, err := planGPUs(task.GetDeviceEnv(), tc.Engine, topo)
	if err != nil {
		return plan{}, err
	}
	pl.gpu, pl.gpus, pl.notes = gp, gp.bind.UUIDs, gp.notes
	lay, err := resolveLayout(d, tc, pl.gpus)
	if err != nil {
		return plan{}, err
	}
	pl.layout, pl.tensorParallel = lay, lay.Tensor
	pl.host, pl.port, err = resolvePort(task.GetResources(), tc.Port)
	if err != nil {
		return plan{}, err
	}
	taskDir := filepath.Join(task.GetAllocDir(), task.GetName())
	pl.user, err = resolveUser(conf, task.GetUser())
	if err != nil {
		return plan{}, err
	}
	if err := checkEnvPolicy(conf, task.GetEnv(), tc.Env, os.LookupEnv); err != nil {
		return plan{}, err
	}
	pathEnv := os.Getenv("PATH")
	if v, ok := task.GetEnv()["PATH"]; ok {
		pathEnv = v
	}
	if v, ok := tc.Env["PATH"]; ok {
		pathEnv = v
	}
	resolved, exe, err := resolveCommand(conf, tc, taskDir, pathEnv)
	if err != nil {
		return plan{}, err
	}
	pl.exe = exe
	field := "engines." + tc.Engine
	if tc.Command != "" {
		field = "command"
	}
	if err := checkAccess(exe, pl.user, accessX); err != nil {
		return plan{}, fmt.Errorf("%s: %w (engines run as default_user, or the task's user where allowed_users lets it)", field, err)
	}
	if _, err := os.Stat(taskDir); err == nil {
		if err := checkAccess(taskDir, pl.user, accessX); err != nil {
			return plan{}, fmt.Errorf("user: %w (the engine runs in the task dir: Nomad's data_dir and alloc dir must be traversable by the engine's user)", err)
		}
	}
	pl.userEnv = userEnv(conf, task.GetEnv(), tc.Env, pl.user, taskDir, os.LookupEnv)
	pl.limits = limitsFor(conf, task.GetResources())
	pl.cgroupParent = cgroupParentFor(conf, task.GetResources())
	model := tc.Model
	if d.Model.File {
		if model, err = resolveModelFile(tc.Model, tc.ModelFile, modelCacheDir(conf, task, tc)); err != nil {
			return plan{}, err
		}
		field := "model_file"
		if tc.ModelFile == "" {
			field = "model"
		}
		if err := checkAccess(model, pl.user, accessR); err != nil {
			return plan{}, fmt.Errorf("%s: %w (engines run as default_user, or the task's user where allowed_users lets it: the model cache must be readable by it)", field, err)
		}
	}
	args := tc.Args
	if len(tc.Adapters) > 0 {
		// The engines load every adapter at start and exit, base model
		// included, on one they cannot load: one that is not there, or
		// (llama.cpp) does not fit the model, is left out.
		readable := func(p string) error { return checkAccess(p, pl.user, accessR) }
		if tc.Engine == engine.LlamaCpp {
			pl.adapters, pl.badAdapters = checkGGUFAdapters(model, tc.Adapters, readable)
		} else {
			pl.adapters, pl.badAdapters = checkPEFTAdapters(tc.Adapters, readable)
		}
		if len(pl.adapters) > 0 {
			extra, err := engine.AdapterArgs(tc.Engine, adapterSpec(pl.adapters, tc.MaxAdapters))
			if err != nil {
				return plan{}, err
			}
			args = append(slices.Clone(tc.Args), extra...)
		}
	}
	pl.cmd, err = engine.Build(engine.Input{
		Engine: tc.Engine, Executable: resolved, Model: model,
		Host: pl.host, Port: pl.port, Layout: lay, GPUs: len(pl.gpus),
		ServedName: tc.ServedModelName,
		Nodes:      tc.Nodes, Rank: tc.NodeRank, Leader: tc.LeaderAddr,
		Args: args,
	})
	if err != nil {
		return plan{}, err
	}
	pl.readyPath = engine.DefaultReadyPath(tc.Engine)
	pl.readySkip = tc.Ready != nil && tc.Ready.Skip
	pl.readyInterval = int64(conf.ReadyInterval)
	pl.readyTimeout = int64(conf.ReadyTimeout)
	if r := tc.Ready; r != nil {
		if r.Path != "" {
			pl.readyPath = r.Path
		}
		if r.Interval > 0 {
			pl.readyInterval = int64(r.Interval)
		}
		if r.Timeout > 0 {
			pl.readyTimeout = int64(r.Timeout)
		}
	}
	var notes []string
	pl.env, notes = engineEnv(conf, task, tc, pl)
	pl.notes = append(pl.notes, notes...)
	return pl, nil
}

// engineEnv layers the engine's environment: the plugin's extra_env, the
// task environment Nomad built (host variables, NOMAD_*, device variables),
// the task config's env, the engine user's HOME, USER and LOGNAME (where
// neither the operator nor the job set them), the model cache, then what
// the driver decides: the recipe's variables and the GPUs (gpuEnv). It
// returns an event for each GPU variable a layer set that the driver
// overrode.
func engineEnv(conf Config, task *driverpb.TaskConfig, tc TaskConfig, pl plan) ([]string, []string) {
	env := map[string]string{}
	for _, m := range []map[string]string{conf.ExtraEnv, task.GetEnv(), tc.Env, pl.userEnv} {
		for k, v := range m {
			env[k] = v
		}
	}
	if _, ok := env[envHFHome]; !ok && conf.ModelCache != "" {
		env[envHFHome] = conf.ModelCache
	}
	for k, v := range pl.cmd.Env {
		env[k] = v
	}
	// The task environment holds the device plugin's variables too (Nomad
	// copies them in); only what it adds beyond them is the task's own.
	own := map[string]string{}
	for k, v := range task.GetEnv() {
		if dv, ok := task.GetDeviceEnv()[k]; !ok || dv != v {
			own[k] = v
		}
	}
	notes := gpuEnv(env, pl.gpu, []envLayer{
		{"the plugin's extra_env", conf.ExtraEnv},
		{"the task environment (the job's env block or the client's host environment)", own},
		{"the task config's env", tc.Env},
	})
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, notes
}

// errNotRunning is returned when an operation needs a running engine.
var errNotRunning = errors.New("task is not running")

package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
	"github.com/llmgw/llmgw/weights"
)

// PluginName is the driver's name: jobs say driver = "llmgw".
const PluginName = "llmgw"

// fingerprintEvery is how often the driver looks for engines on PATH again.
const fingerprintEvery = 30 * time.Second

// storeCheckEvery is how often the fingerprint looks whether the node's
// model store changed.
const storeCheckEvery = 2 * time.Second

// supervisorStartTimeout bounds how long StartTask waits for the
// supervisor to report the engine's start.
const supervisorStartTimeout = 30 * time.Second

// tailLines is how many output lines the supervisor keeps for exit events.
const tailLines = 20

// Plugin is the llmgw task driver: the BasePlugin and Driver services.
type Plugin struct {
	basepb.UnimplementedBasePluginServer
	driverpb.UnimplementedDriverServer

	ctx     context.Context // the plugin process's lifetime
	cancel  context.CancelFunc
	log     hclog.Logger
	version string
	exe     string // this binary, re-executed as the supervisor
	self    string // the driver's own binary, run in FetchMode by fetch tasks

	// now is the clock of readiness and stop deadlines (tests set it).
	now func() time.Time

	mu     sync.RWMutex
	conf   Config
	tasks  map[string]*taskHandle
	events *broker
	gpu    *gpuMeter
	// storeChanged wakes the fingerprint when a task's fetch ends, so
	// the node's attributes say at once that it holds the model.
	storeChanged chan struct{}
}

// LeanSupervisor returns the lean supervisor installed beside the driver
// binary self (llmgw-supervisor, whose process holds ~2 MiB instead of the
// driver's gRPC and NVML code), or why it cannot be run there: then the
// driver supervises tasks with self, re-executed in supervisor mode.
func LeanSupervisor(self string) (string, error) {
	p := filepath.Join(filepath.Dir(self), "llmgw-supervisor")
	if err := isExecutable(p); err != nil {
		return "", err
	}
	return p, nil
}

// New returns the driver. exe is what each task's supervisor runs: the
// lean supervisor (LeanSupervisor) or the plugin binary itself; background
// work lives as long as ctx.
func New(ctx context.Context, log hclog.Logger, version, exe string) *Plugin {
	ctx, cancel := context.WithCancel(ctx)
	self, err := os.Executable()
	if err != nil {
		self = exe
	}
	p := &Plugin{ctx: ctx, cancel: cancel, log: log, version: version, exe: exe, self: self, now: time.Now,
		conf: DefaultConfig(), tasks: map[string]*taskHandle{}, storeChanged: make(chan struct{}, 1)}
	p.events = newBroker(func(ev *driverpb.DriverTaskEvent) {
		log.Warn("task event dropped: no room in a subscriber's queue", "task_id", ev.GetTaskId(), "message", ev.GetMessage())
	})
	p.gpu = newGPUMeter(log, nvmlseam.Open)
	// Open NVML now, so that the first Ready event does not wait for it.
	go p.gpu.init()
	return p
}

func (p *Plugin) config() Config {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.conf
}

// PluginInfo implements BasePlugin.
func (p *Plugin) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Type:              basepb.PluginType_DRIVER,
		PluginApiVersions: []string{nomadplugin.APIVersion},
		PluginVersion:     p.version,
		Name:              PluginName,
	}, nil
}

// ConfigSchema implements BasePlugin.
func (p *Plugin) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Spec: ConfigSpec()}, nil
}

// SetConfig implements BasePlugin.
func (p *Plugin) SetConfig(_ context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	c, err := DecodeConfig(req.GetMsgpackConfig())
	if err != nil {
		p.log.Error("rejecting configuration", "error", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	p.mu.Lock()
	p.conf = c
	p.mu.Unlock()
	p.log.Info("configured", "model_cache", c.ModelCache, "ready_timeout", c.ReadyTimeout.String(),
		"ready_interval", c.ReadyInterval.String(), "cgroup_parent", c.CgroupParent)
	return &basepb.SetConfigResponse{}, nil
}

// Init implements Driver.
func (p *Plugin) Init(context.Context, *driverpb.InitRequest) (*driverpb.InitResponse, error) {
	return &driverpb.InitResponse{}, nil
}

// TaskConfigSchema implements Driver.
func (p *Plugin) TaskConfigSchema(context.Context, *driverpb.TaskConfigSchemaRequest) (*driverpb.TaskConfigSchemaResponse, error) {
	return &driverpb.TaskConfigSchemaResponse{Spec: TaskConfigSpec()}, nil
}

// Capabilities implements Driver.
func (p *Plugin) Capabilities(context.Context, *driverpb.CapabilitiesRequest) (*driverpb.CapabilitiesResponse, error) {
	return &driverpb.CapabilitiesResponse{Capabilities: &driverpb.DriverCapabilities{
		SendSignals:           true,
		Exec:                  true,
		FsIsolation:           driverpb.DriverCapabilities_NONE,
		NetworkIsolationModes: []driverpb.NetworkIsolationSpec_NetworkIsolationMode{driverpb.NetworkIsolationSpec_HOST},
		MountConfigs:          driverpb.DriverCapabilities_NO_MOUNTS,
	}}, nil
}

// Fingerprint implements Driver: healthy, with the driver's version and
// the engines found on PATH, at once and again whenever that changes.
func (p *Plugin) Fingerprint(_ *driverpb.FingerprintRequest, stream driverpb.Driver_FingerprintServer) error {
	tick := time.NewTicker(fingerprintEvery)
	defer tick.Stop()
	// The store's records change when any process fetches or evicts (a
	// fetch task, another task's StartTask): a stat every few seconds
	// sends the change without waiting for the tick.
	storeTick := time.NewTicker(storeCheckEvery)
	defer storeTick.Stop()
	var storeSeen time.Time
	var last *driverpb.FingerprintResponse
	for {
		fp := p.fingerprint()
		maps.Copy(fp.Attributes, weightsAttributes(p.config(), last.GetAttributes()))
		if last == nil || !sameAttrs(fp, last) {
			if err := stream.Send(fp); err != nil {
				return err
			}
			last = fp
		}
		// Wait for the tick, a fetch's end, or a change of the store's
		// records; an unchanged store's stat waits on.
	wait:
		for {
			select {
			case <-stream.Context().Done():
				return nil
			case <-p.ctx.Done():
				return nil
			case <-tick.C:
				break wait
			case <-p.storeChanged:
				break wait
			case <-storeTick.C:
				if t := storeModified(p.config()); !t.Equal(storeSeen) {
					storeSeen = t
					break wait
				}
			}
		}
	}
}

func (p *Plugin) fingerprint() *driverpb.FingerprintResponse {
	conf := p.config()
	attrs := map[string]*structspb.Attribute{
		"driver.llmgw.version": {Value: &structspb.Attribute_StringVal{StringVal: p.version}},
	}
	var found []string
	for _, d := range engine.Descriptors() {
		e := d.Name
		if d.DefaultExecutable == "" {
			continue // needs a task's command: nothing to find
		}
		if path, err := lookPath(conf.Engines.Executable(e), os.Getenv("PATH")); err == nil {
			found = append(found, e)
			attrs["driver.llmgw.engine."+e] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: path}}
		}
	}
	attrs["driver.llmgw.engines"] = &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: strings.Join(found, ",")}}
	return &driverpb.FingerprintResponse{
		Attributes:        attrs,
		Health:            driverpb.FingerprintResponse_HEALTHY,
		HealthDescription: "Healthy",
	}
}

func sameAttrs(a, b *driverpb.FingerprintResponse) bool {
	if len(a.GetAttributes()) != len(b.GetAttributes()) {
		return false
	}
	for k, v := range a.GetAttributes() {
		w, ok := b.GetAttributes()[k]
		if !ok || v.GetStringVal() != w.GetStringVal() {
			return false
		}
	}
	return true
}

func (p *Plugin) task(id string) (*taskHandle, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	h, ok := p.tasks[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "task %q not found", id)
	}
	return h, nil
}

// eventFunc reports a task event; at is when it happened, the zero time
// meaning now.
type eventFunc func(at time.Time, msg string, annotations map[string]string)

// emitter returns the event function of one task.
func (p *Plugin) emitter(cfg *driverpb.TaskConfig) eventFunc {
	return func(at time.Time, msg string, ann map[string]string) {
		if at.IsZero() {
			at = time.Now()
		}
		p.events.publish(&driverpb.DriverTaskEvent{
			TaskId:      cfg.GetId(),
			AllocId:     cfg.GetAllocId(),
			TaskName:    cfg.GetName(),
			Timestamp:   timestamppb.New(at),
			Message:     msg,
			Annotations: ann,
		})
	}
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// stateDirFor is where a task's supervisor and driver files live: in the
// task's private dir, one folder per task invocation.
func stateDirFor(cfg *driverpb.TaskConfig) (string, error) {
	if cfg.GetAllocDir() == "" {
		return "", errors.New("task config has no alloc_dir")
	}
	id := cfg.GetId()
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	id = unsafeChars.ReplaceAllString(id, "_")
	if id == "" {
		return "", errors.New("task config has no id")
	}
	name := unsafeChars.ReplaceAllString(cfg.GetName(), "_")
	return filepath.Join(cfg.GetAllocDir(), cfg.GetName(), "private", "llmgw", name+"-"+id), nil
}

// cgroupName is the name of the engine's cgroup directory of task id: one
// per task invocation.
func cgroupName(id string) string {
	return unsafeChars.ReplaceAllString(strings.ReplaceAll(id, "/", "."), "_") + ".scope"
}

// StartTask implements Driver.
func (p *Plugin) StartTask(ctx context.Context, req *driverpb.StartTaskRequest) (*driverpb.StartTaskResponse, error) {
	cfg := req.GetTask()
	if cfg.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "StartTask: task config has no id")
	}
	if _, err := p.task(cfg.GetId()); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "task %q is already started", cfg.GetId())
	}
	log := p.log.With("task_id", cfg.GetId(), "alloc_id", cfg.GetAllocId(), "task", cfg.GetName())
	emit := p.emitter(cfg)
	// refuse reports why the task does not start, as a task event and
	// as StartTask's (non-recoverable) error. Nothing was started.
	refuse := func(err error) (*driverpb.StartTaskResponse, error) {
		log.Error("not starting the task", "error", err)
		emit(time.Time{}, "Not started: "+err.Error(), nil)
		return nil, nomadplugin.RecoverableError(err, false)
	}
	tc, err := DecodeTaskConfig(cfg.GetMsgpackDriverConfig())
	if err != nil {
		return refuse(err)
	}
	conf := p.config()
	if tc.Engine == FetchEngine {
		return p.startFetch(cfg, tc, conf, emit, refuse)
	}
	var held weights.Model
	if tc.Weights != nil {
		// The store fetches what the node lacks (once for the node,
		// resuming a cut fetch) before anything starts: StartTask
		// waits for it, its steps task events. A failure is
		// recoverable: Nomad's restart policy tries again (the fetch
		// resumes), then reschedules.
		fctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(p.ctx, cancel)
		held, err = ensureWeights(fctx, conf, cfg, &tc, emit)
		stop()
		cancel()
		select {
		case p.storeChanged <- struct{}{}:
		default:
		}
		if errors.Is(err, ErrBadTaskConfig) {
			return refuse(err)
		}
		if err != nil {
			log.Error("weights not fetched", "error", err)
			emit(time.Time{}, "Weights not fetched: "+err.Error(), nil)
			return nil, nomadplugin.RecoverableError(err, true)
		}
	}
	var fetchBad []badAdapter
	var adapterKeys []string
	if slices.ContainsFunc(tc.Adapters, AdapterConfig.fetched) {
		// The adapters the store fetches, as the weights above, each
		// step a task event naming the adapter; one that cannot be
		// fetched is left out and the engine starts without it.
		fctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(p.ctx, cancel)
		fetchBad, adapterKeys = fetchAdapters(fctx, conf, cfg, &tc, emit)
		stop()
		cancel()
		select {
		case p.storeChanged <- struct{}{}:
		default:
		}
		if err := ctx.Err(); err != nil {
			return nil, nomadplugin.RecoverableError(fmt.Errorf("fetching the LoRA adapters: %w", err), true)
		}
		if err := p.ctx.Err(); err != nil {
			return nil, nomadplugin.RecoverableError(fmt.Errorf("fetching the LoRA adapters: the plugin is stopping: %w", err), true)
		}
	}
	pl, err := makePlan(conf, cfg, tc, p.gpu.topology)
	if err != nil {
		return refuse(fmt.Errorf("%w: %w", ErrBadTaskConfig, err))
	}
	pl.badAdapters = append(fetchBad, pl.badAdapters...)
	stateDir, err := stateDirFor(cfg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, nomadplugin.RecoverableError(fmt.Errorf("create state dir: %w", err), true)
	}
	if err := protectPrivateDir(stateDir, pl.user); err != nil {
		return nil, nomadplugin.RecoverableError(err, true)
	}
	uid, gid, groups := pl.user.credentials()
	spec := supervisor.Spec{
		Engine: tc.Engine,
		Path:   pl.exe, Argv0: pl.cmd.Path, Args: pl.cmd.Args, Env: pl.env,
		Dir:    filepath.Join(cfg.GetAllocDir(), cfg.GetName()),
		Stdout: cfg.GetStdoutPath(), Stderr: cfg.GetStderrPath(),
		TailLines: tailLines, UID: uid, GID: gid, Groups: groups,
		NoNewPrivs: true, Limits: pl.limits,
	}
	if pl.cgroupParent != "" {
		spec.CgroupParent = pl.cgroupParent
		spec.CgroupName = cgroupName(cfg.GetId())
	}
	if _, err := os.Stat(spec.Dir); err != nil {
		spec.Dir = stateDir
	}
	for _, n := range pl.notes {
		log.Warn("GPU binding", "note", n)
		emit(time.Time{}, n, map[string]string{"gpus": strings.Join(pl.gpus, ","), "cuda_visible_devices": strings.Join(pl.gpu.bind.Visible, ",")})
	}
	for _, b := range pl.badAdapters {
		ann := map[string]string{"adapter": b.Name, "cause": b.err.Error()}
		if b.Path != "" {
			ann["path"] = b.Path
		}
		if b.fetched() {
			if src, err := b.source(); err == nil {
				ann["source"] = src.String()
			}
		}
		log.Error("LoRA adapter left out", "adapter", b.Name, "path", b.Path, "source", ann["source"], "error", b.err)
		emit(time.Time{}, fmt.Sprintf("LoRA adapter %q not loaded: %v", b.Name, b.err), ann)
	}
	if len(pl.badAdapters) > 0 {
		loaded := make([]string, len(pl.adapters))
		for i, a := range pl.adapters {
			loaded[i] = a.Name
			if tc.Engine == engine.LlamaCpp {
				// llama.cpp numbers them in their order.
				loaded[i] = fmt.Sprintf("%s (id %d)", a.Name, i)
			}
		}
		if len(loaded) == 0 {
			loaded = []string{"none: the base model alone"}
		}
		emit(time.Time{}, "LoRA adapters loaded: "+strings.Join(loaded, ", "), nil)
	}
	started := p.now().UTC()
	l, err := supervisor.Launch(p.exe, stateDir, spec, supervisorStartTimeout)
	var lerr *supervisor.LimitsError
	if errors.As(err, &lerr) {
		return refuse(fmt.Errorf("resources: this host cannot enforce the task's resources: %s (set resource_limits = %q in the plugin config to start engines without the limits the host cannot enforce)",
			strings.Join(lerr.Unenforced, "; "), LimitsBestEffort))
	}
	if err != nil {
		log.Error("engine did not start", "error", err)
		return nil, nomadplugin.RecoverableError(fmt.Errorf("start %s: %w", tc.Engine, err), true)
	}
	st := driverState{
		Version:    handleVersion,
		StateDir:   stateDir,
		Supervisor: l.Started.Supervisor, Engine: l.Started.Engine,
		EngineName: tc.Engine, Model: tc.Model, Command: pl.cmd.String(),
		GPUs: pl.gpus, CUDAVisible: pl.gpu.bind.Visible, TensorParallel: pl.tensorParallel,
		Host: pl.host, Port: pl.port,
		ReadyPath:     pl.readyPath,
		ReadySkip:     pl.readySkip,
		ReadyInterval: time.Duration(pl.readyInterval),
		ReadyTimeout:  time.Duration(pl.readyTimeout),
		StopTimeout:   conf.StopTimeout,
		StartedAt:     started,
		Cgroup:        l.Started.Cgroup, CgroupError: l.Started.CgroupError,
		OOMError: l.Started.OOMError,
		User:     pl.user.Name, UID: uid, GID: gid, Groups: groups,
		Limits: l.Started.Limits, Unenforced: l.Started.Unenforced,
		WeightsKey: held.Key, AdapterKeys: adapterKeys,
	}
	if leased := slices.DeleteFunc(append([]string{held.Key}, adapterKeys...), func(k string) bool { return k == "" }); len(leased) > 0 {
		// The model and the adapters stay on the node while the task's
		// supervisor lives, whatever becomes of this plugin.
		if store, err := openStore(conf); err == nil {
			for _, k := range leased {
				if err := store.Acquire(k, cfg.GetId(), l.Started.Supervisor.Pid); err != nil {
					log.Warn("model store lease", "key", k, "error", err)
				}
			}
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode driver state: %w", err)
	}
	h := newHandle(cfg.GetId(), cfg, st, log, emit, l.Reaped)
	h.gpu, h.now = p.gpu, p.now
	p.mu.Lock()
	p.tasks[cfg.GetId()] = h
	p.mu.Unlock()

	visible := strings.Join(pl.gpu.bind.Visible, ",")
	gpuText := "no GPU"
	if len(pl.gpus) > 0 {
		gpuText = fmt.Sprintf("GPUs %s (tensor parallel %d)", strings.Join(pl.gpus, ","), pl.tensorParallel)
		if visible != strings.Join(pl.gpus, ",") {
			gpuText += " as CUDA_VISIBLE_DEVICES=" + visible
		}
	}
	log.Info("engine started", "engine", tc.Engine, "pid", st.Engine.Pid, "supervisor_pid", st.Supervisor.Pid,
		"gpus", strings.Join(pl.gpus, ","), "cuda_visible_devices", visible, "gpu_numbering", pl.gpu.source, "command", st.Command)
	emit(time.Time{}, fmt.Sprintf("Started %s on %s: %s", tc.Engine, gpuText, st.Command), map[string]string{
		"engine": tc.Engine, "command": st.Command, "gpus": strings.Join(pl.gpus, ","), "cuda_visible_devices": visible,
		"tensor_parallel": fmt.Sprint(pl.tensorParallel), "pid": fmt.Sprint(st.Engine.Pid),
		"url": h.url(), "user": pl.user.String(), "executable": pl.exe,
		"resource_limits": strings.Join(st.Limits, ", "),
	})
	if len(st.Unenforced) > 0 {
		emit(time.Time{}, fmt.Sprintf("Resources not enforced (resource_limits = %q): %s", conf.ResourceLimits, strings.Join(st.Unenforced, "; ")), nil)
	}
	h.start(p.ctx)

	return &driverpb.StartTaskResponse{
		Result: driverpb.StartTaskResponse_SUCCESS,
		Handle: &driverpb.TaskHandle{
			Version:     handleVersion,
			Config:      cfg,
			State:       driverpb.TaskState_RUNNING,
			DriverState: data,
		},
	}, nil
}

// RecoverTask implements Driver: re-attach to a task from its handle.
func (p *Plugin) RecoverTask(_ context.Context, req *driverpb.RecoverTaskRequest) (*driverpb.RecoverTaskResponse, error) {
	hd := req.GetHandle()
	cfg := hd.GetConfig()
	if cfg == nil {
		return nil, status.Error(codes.InvalidArgument, "RecoverTask: handle has no task config")
	}
	id := req.GetTaskId()
	if id == "" {
		id = cfg.GetId()
	}
	if _, err := p.task(id); err == nil {
		return &driverpb.RecoverTaskResponse{}, nil
	}
	if hd.GetVersion() != handleVersion {
		return nil, status.Errorf(codes.FailedPrecondition, "RecoverTask %s: handle version %d, this driver reads version %d", id, hd.GetVersion(), handleVersion)
	}
	var st driverState
	if err := json.Unmarshal(hd.GetDriverState(), &st); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "RecoverTask %s: decode driver state: %v", id, err)
	}
	if st.Version != handleVersion {
		return nil, status.Errorf(codes.FailedPrecondition, "RecoverTask %s: driver state version %d, this driver reads version %d", id, st.Version, handleVersion)
	}
	if st.StateDir == "" || st.Supervisor.Pid <= 0 || st.Engine.Pid <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "RecoverTask %s: driver state lacks the state dir or pids", id)
	}
	if _, err := os.Stat(st.StateDir); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "RecoverTask %s: state dir: %v", id, err)
	}
	log := p.log.With("task_id", id, "alloc_id", cfg.GetAllocId(), "task", cfg.GetName())
	h := newHandle(id, cfg, st, log, p.emitter(cfg), nil)
	h.gpu, h.now = p.gpu, p.now
	h.restore()
	p.mu.Lock()
	if _, ok := p.tasks[id]; ok { // recovered concurrently
		p.mu.Unlock()
		return &driverpb.RecoverTaskResponse{}, nil
	}
	p.tasks[id] = h
	p.mu.Unlock()
	log.Info("recovered task", "engine_pid", st.Engine.Pid, "supervisor_pid", st.Supervisor.Pid,
		"supervisor_alive", st.Supervisor.Alive(), "ready", h.ready)
	h.start(p.ctx)
	return &driverpb.RecoverTaskResponse{}, nil
}

// WaitTask implements Driver.
func (p *Plugin) WaitTask(ctx context.Context, req *driverpb.WaitTaskRequest) (*driverpb.WaitTaskResponse, error) {
	h, err := p.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	return h.wait(ctx)
}

// StopTask implements Driver.
func (p *Plugin) StopTask(ctx context.Context, req *driverpb.StopTaskRequest) (*driverpb.StopTaskResponse, error) {
	h, err := p.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig := syscall.SIGTERM
	if s := req.GetSignal(); s != "" {
		sig, err = parseSignal(s)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	timeout := req.GetTimeout().AsDuration()
	h.log.Info("stopping engine", "signal", sig.String(), "timeout", timeout.String())
	if err := h.stop(ctx, timeout, sig); err != nil {
		return nil, fmt.Errorf("stop task %s: %w", req.GetTaskId(), err)
	}
	return &driverpb.StopTaskResponse{}, nil
}

// DestroyTask implements Driver.
func (p *Plugin) DestroyTask(ctx context.Context, req *driverpb.DestroyTaskRequest) (*driverpb.DestroyTaskResponse, error) {
	h, err := p.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if !h.exited() {
		if !req.GetForce() {
			return nil, status.Errorf(codes.FailedPrecondition, "task %s is still running: stop it first or destroy with force", req.GetTaskId())
		}
		if err := h.stop(ctx, 0, syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("destroy task %s: %w", req.GetTaskId(), err)
		}
	}
	h.shutdown()
	if leased := slices.DeleteFunc(append([]string{h.st.WeightsKey}, h.st.AdapterKeys...), func(k string) bool { return k == "" }); len(leased) > 0 {
		if store, err := openStore(p.config()); err == nil {
			for _, k := range leased {
				if err := store.Release(k, req.GetTaskId()); err != nil {
					h.log.Warn("model store lease", "key", k, "error", err)
				}
			}
		}
	}
	// Whatever a supervisor that died between recording the exit and
	// removing the engine's cgroup left: an exited engine's processes
	// are all gone, so this finds nothing in the common case.
	if _, err := h.cleanup(); err != nil {
		h.log.Warn("clean up after the engine", "error", err)
	}
	p.mu.Lock()
	delete(p.tasks, req.GetTaskId())
	p.mu.Unlock()
	if err := os.RemoveAll(h.st.StateDir); err != nil {
		h.log.Warn("remove state dir", "error", err)
	}
	h.log.Info("destroyed task")
	return &driverpb.DestroyTaskResponse{}, nil
}

// InspectTask implements Driver.
func (p *Plugin) InspectTask(_ context.Context, req *driverpb.InspectTaskRequest) (*driverpb.InspectTaskResponse, error) {
	h, err := p.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	ts, attrs := h.status()
	maps.Copy(attrs, h.gpuAttributes())
	maps.Copy(attrs, h.engineMetricsAttributes())
	return &driverpb.InspectTaskResponse{Task: ts, Driver: &driverpb.TaskDriverStatus{Attributes: attrs}}, nil
}

// TaskEvents implements Driver.
func (p *Plugin) TaskEvents(_ *driverpb.TaskEventsRequest, stream driverpb.Driver_TaskEventsServer) error {
	ch, cancel := p.events.subscribe()
	defer cancel()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-p.ctx.Done():
			return nil
		case ev := <-ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// SignalTask implements Driver: the signal goes to the engine's main
// process.
func (p *Plugin) SignalTask(_ context.Context, req *driverpb.SignalTaskRequest) (*driverpb.SignalTaskResponse, error) {
	h, err := p.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := h.signalEngine(sig); err != nil {
		if errors.Is(err, errNotRunning) {
			return nil, status.Errorf(codes.FailedPrecondition, "signal task %s: %v", req.GetTaskId(), err)
		}
		return nil, err
	}
	return &driverpb.SignalTaskResponse{}, nil
}

// Shutdown implements Driver: the plugin stops watching; engines keep
// running and are recovered by the next plugin process.
func (p *Plugin) Shutdown(context.Context, *driverpb.ShutdownRequest) (*driverpb.ShutdownResponse, error) {
	p.log.Info("shutting down; engines keep running")
	p.Close()
	return &driverpb.ShutdownResponse{}, nil
}

// Close ends the plugin's background work (not the engines).
func (p *Plugin) Close() {
	p.cancel()
	p.mu.RLock()
	hs := make([]*taskHandle, 0, len(p.tasks))
	for _, h := range p.tasks {
		hs = append(hs, h)
	}
	p.mu.RUnlock()
	for _, h := range hs {
		h.shutdown()
	}
	p.gpu.close()
}

var signals = map[string]syscall.Signal{
	"SIGABRT": syscall.SIGABRT, "SIGALRM": syscall.SIGALRM, "SIGCONT": syscall.SIGCONT, "SIGHUP": syscall.SIGHUP,
	"SIGINT": syscall.SIGINT, "SIGKILL": syscall.SIGKILL, "SIGQUIT": syscall.SIGQUIT, "SIGSTOP": syscall.SIGSTOP,
	"SIGTERM": syscall.SIGTERM, "SIGTSTP": syscall.SIGTSTP, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
	"SIGWINCH": syscall.SIGWINCH, "SIGPIPE": syscall.SIGPIPE,
}

// parseSignal accepts SIGTERM, TERM or a number.
func parseSignal(s string) (syscall.Signal, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(u, "SIG") {
		u = "SIG" + u
	}
	if sig, ok := signals[u]; ok {
		return sig, nil
	}
	if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	names := make([]string, 0, len(signals))
	for k := range maps.Keys(signals) {
		names = append(names, k)
	}
	sort.Strings(names)
	return 0, fmt.Errorf("signal: unknown signal %q (want one of %s, or a number)", s, strings.Join(names, ", "))
}

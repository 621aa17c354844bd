package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/internal/atomicfile"
	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/weights"
)

// FetchEngine is the engine of a task that only fetches a model's weights
// into the node's store and exits: a warm spare's fetch (the controller's
// batch job on a node that serves nothing of the model), or a replica's
// prestart task. The driver runs `nomad-driver-llmgw fetch` (FetchMode)
// under a supervisor, as it runs engines, so the fetch goes on through a
// plugin or client restart and a stop ends it; each of its steps is a task
// event, and the task succeeds when the model is whole on the node.
const FetchEngine = "fetch"

// FetchMode is the driver binary's subcommand that runs one fetch:
// `nomad-driver-llmgw fetch <spec file>`.
const FetchMode = "fetch"

// fetchSpecFile is the fetch's spec in the task's state dir.
const fetchSpecFile = "fetch.json"

// fetchSpec is what FetchMain is asked to fetch, and with what store.
type fetchSpec struct {
	Store struct {
		Dir            string `json:"dir"`
		HubURL         string `json:"hub_url,omitempty"`
		BudgetBytes    int64  `json:"budget_bytes,omitempty"`
		MaxConcurrent  int    `json:"max_concurrent,omitempty"`
		BytesPerSecond int64  `json:"bytes_per_second,omitempty"`
	} `json:"store"`
	Source weights.Source `json:"source"`
	// TokenFile is the task's secrets/hub-token (read if present).
	TokenFile string `json:"token_file,omitempty"`
}

func (tc *TaskConfig) validateFetch() error {
	if tc.Weights == nil {
		return errors.New("weights: required for engine \"fetch\" (what to fetch into the node's model store)")
	}
	if tc.Command != "" || len(tc.Args) > 0 || len(tc.Env) > 0 {
		return errors.New("command, args, env: engine \"fetch\" runs the driver's own fetch; set none of them")
	}
	_, err := weightsSource(*tc)
	return err
}

// startFetch starts a fetch task: the driver's own binary in FetchMode
// under a supervisor, as root (the store is the driver's; the task chooses
// nothing it runs but the source), with no GPU and no port.
func (p *Plugin) startFetch(cfg *driverpb.TaskConfig, tc TaskConfig, conf Config, emit eventFunc,
	refuse func(error) (*driverpb.StartTaskResponse, error)) (*driverpb.StartTaskResponse, error) {
	src, err := weightsSource(tc)
	if err != nil {
		return refuse(fmt.Errorf("%w: %w", ErrBadTaskConfig, err))
	}
	if conf.ModelCache == "" {
		return refuse(fmt.Errorf("%w: engine \"fetch\": the plugin config sets no model_cache, the node's model store", ErrBadTaskConfig))
	}
	stateDir, err := stateDirFor(cfg)
	if err != nil {
		return refuse(err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, nomadplugin.RecoverableError(fmt.Errorf("create state dir: %w", err), true)
	}
	var fs fetchSpec
	fs.Store.Dir, fs.Store.HubURL, fs.Store.BudgetBytes = conf.ModelCache, conf.HubURL, conf.StoreBudgetBytes
	fs.Store.MaxConcurrent, fs.Store.BytesPerSecond = conf.MaxConcurrentFetches, conf.FetchBytesPerSecond
	fs.Source = src
	taskDir := filepath.Join(cfg.GetAllocDir(), cfg.GetName())
	fs.TokenFile = filepath.Join(taskDir, hubTokenFile)
	specPath := filepath.Join(stateDir, fetchSpecFile)
	if err := atomicfile.WriteJSON(specPath, fs); err != nil {
		return nil, nomadplugin.RecoverableError(err, true)
	}
	root := uint32(0)
	spec := supervisor.Spec{
		Engine: FetchEngine,
		Path:   p.self, Args: []string{FetchMode, specPath},
		Env:    fetchEnv(hubToken(cfg)),
		Dir:    taskDir,
		Stdout: cfg.GetStdoutPath(), Stderr: cfg.GetStderrPath(),
		TailLines: tailLines, UID: &root, GID: &root, NoNewPrivs: true,
	}
	if _, err := os.Stat(spec.Dir); err != nil {
		spec.Dir = stateDir
	}
	started := p.now().UTC()
	l, err := supervisor.Launch(p.exe, stateDir, spec, supervisorStartTimeout)
	if err != nil {
		return nil, nomadplugin.RecoverableError(fmt.Errorf("start fetch: %w", err), true)
	}
	st := driverState{
		Version: handleVersion, StateDir: stateDir,
		Supervisor: l.Started.Supervisor, Engine: l.Started.Engine,
		EngineName: FetchEngine, Model: src.String(), Command: p.self + " " + FetchMode + " " + specPath,
		ReadySkip: true, ReadyInterval: conf.ReadyInterval, ReadyTimeout: conf.ReadyTimeout,
		StopTimeout: conf.StopTimeout, StartedAt: started, User: "root",
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode driver state: %w", err)
	}
	log := p.log.With("task_id", cfg.GetId(), "alloc_id", cfg.GetAllocId(), "task", cfg.GetName())
	h := newHandle(cfg.GetId(), cfg, st, log, emit, l.Reaped)
	h.gpu, h.now = p.gpu, p.now
	p.mu.Lock()
	p.tasks[cfg.GetId()] = h
	p.mu.Unlock()
	log.Info("fetch started", "source", src.String(), "pid", st.Engine.Pid)
	emit(time.Time{}, "Started the fetch of "+src.String()+" into the node's model store "+conf.ModelCache,
		map[string]string{"engine": FetchEngine, "key": src.Key(), "pid": fmt.Sprint(st.Engine.Pid)})
	h.start(p.ctx)
	return &driverpb.StartTaskResponse{
		Result: driverpb.StartTaskResponse_SUCCESS,
		Handle: &driverpb.TaskHandle{Version: handleVersion, Config: cfg, State: driverpb.TaskState_RUNNING, DriverState: data},
	}, nil
}

// fetchEnv is the fetch's environment: the task's hub token (HF_TOKEN),
// the plugin's own proxy settings (a mirror behind a proxy), the CA bundle
// variables, and nothing else of the job's.
func fetchEnv(token string) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if token != "" {
		env = append(env, hubTokenEnv+"="+token)
	}
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// FetchMain is `nomad-driver-llmgw fetch <spec file>`: it fetches the
// spec's source into the store, printing each step on stdout as an event
// line the supervisor turns into a task event, and exits 0 when the model
// is whole on the node, 1 when it is not, 2 on a bad spec. SIGTERM or
// SIGINT stops it: what was fetched stays, and the next fetch resumes.
func FetchMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: nomad-driver-llmgw fetch <spec file>")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		return 2
	}
	var fs fetchSpec
	if err := json.Unmarshal(b, &fs); err != nil {
		fmt.Fprintln(os.Stderr, "fetch: spec:", err)
		return 2
	}
	store, err := weights.Open(weights.Config{Dir: fs.Store.Dir, HubURL: fs.Store.HubURL, BudgetBytes: fs.Store.BudgetBytes,
		MaxConcurrent: fs.Store.MaxConcurrent, BytesPerSecond: fs.Store.BytesPerSecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		return 2
	}
	token := os.Getenv(hubTokenEnv)
	if b, err := os.ReadFile(fs.TokenFile); err == nil && strings.TrimSpace(string(b)) != "" {
		token = strings.TrimSpace(string(b))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	say := func(msg string, ann map[string]string) {
		line, _ := json.Marshal(supervisor.Event{Message: msg, Annotations: ann})
		fmt.Println(supervisor.EventLinePrefix + string(line))
	}
	m, err := store.Ensure(ctx, fs.Source, token, func(e weights.Event) { say(e.Message, e.Annotations) })
	if err != nil {
		say("Weights not fetched: "+err.Error(), nil)
		return 1
	}
	fmt.Printf("weights whole in %s (%d bytes)\n", m.Dir, m.Bytes)
	return 0
}

package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/driver"
	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

const (
	driverPkg = "github.com/llmgw/llmgw/cmd/nomad-driver-llmgw"
	enginePkg = "github.com/llmgw/llmgw/cmd/fake-engine"
)

// plugin is one driver plugin process with its event collector.
type plugin struct {
	*plugintest.Instance
	events *eventLog
}

// startPlugin launches the built driver and configures it with body.
// buildDriver builds the driver and, into the same directory, the lean
// supervisor it starts for each task.
func buildDriver(t *testing.T) string {
	t.Helper()
	sup := plugintest.Build(t, "github.com/llmgw/llmgw/cmd/llmgw-supervisor")
	drv := plugintest.Build(t, driverPkg)
	if filepath.Dir(sup) != filepath.Dir(drv) {
		t.Fatalf("driver %s and supervisor %s built into different directories", drv, sup)
	}
	return drv
}

func startPlugin(t *testing.T, body string) *plugin {
	t.Helper()
	inst := plugintest.Start(t, buildDriver(t), plugintest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := inst.Configure(ctx, body); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	p := &plugin{Instance: inst, events: &eventLog{}}
	p.events.collect(t, inst.Driver)
	return p
}

// eventLog collects every task event of one TaskEvents stream.
type eventLog struct {
	mu  sync.Mutex
	evs []*driverpb.DriverTaskEvent
}

func (l *eventLog) collect(t *testing.T, d driverpb.DriverClient) {
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := d.TaskEvents(ctx, &driverpb.TaskEventsRequest{})
	if err != nil {
		cancel()
		t.Fatalf("TaskEvents: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.evs = append(l.evs, ev)
			l.mu.Unlock()
		}
	}()
}

func (l *eventLog) all() []*driverpb.DriverTaskEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*driverpb.DriverTaskEvent(nil), l.evs...)
}

// wait polls for an event of taskID whose message contains substr.
func (l *eventLog) wait(t *testing.T, taskID, substr string, timeout time.Duration) *driverpb.DriverTaskEvent {
	t.Helper()
	var found *driverpb.DriverTaskEvent
	wait.For(t, fmt.Sprintf("an event %q for %s", substr, taskID), func() (bool, string) {
		var msgs []string
		for _, ev := range l.all() {
			if ev.GetTaskId() == taskID && strings.Contains(ev.GetMessage(), substr) {
				found = ev
				return true, ""
			}
			msgs = append(msgs, ev.GetTaskId()+": "+ev.GetMessage())
		}
		return false, "events:\n" + strings.Join(msgs, "\n")
	}, wait.Within(timeout), wait.Every(20*time.Millisecond))
	return found
}

// fifo is a Nomad-style log FIFO with a reader collecting what arrives.
type fifo struct {
	path string
	mu   sync.Mutex
	data []byte
	f    *os.File
}

func newFIFO(t *testing.T, path string) *fifo {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	ff := &fifo{path: path}
	ff.open(t)
	return ff
}

// open starts a reader. It opens the FIFO read-write so that reads block
// for data rather than seeing end-of-file while no writer is attached.
func (ff *fifo) open(t *testing.T) {
	f, err := os.OpenFile(ff.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open fifo: %v", err)
	}
	ff.mu.Lock()
	ff.f = f
	ff.mu.Unlock()
	done := make(chan struct{})
	t.Cleanup(func() { ff.closeReader(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				ff.mu.Lock()
				ff.data = append(ff.data, buf[:n]...)
				ff.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
}

func (ff *fifo) closeReader() {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.f != nil {
		_ = ff.f.Close()
		ff.f = nil
	}
}

func (ff *fifo) String() string {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return string(ff.data)
}

func (ff *fifo) wait(t *testing.T, substr string, timeout time.Duration) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%q in %s", substr, filepath.Base(ff.path)), func() (bool, string) {
		got := ff.String()
		return strings.Contains(got, substr), "got:\n" + got
	}, wait.Within(timeout), wait.Every(20*time.Millisecond))
}

// task is one task config as a Nomad client would build it.
type task struct {
	cfg            *driverpb.TaskConfig
	stdout, stderr *fifo
	port           int
}

type taskOpts struct {
	body  string   // the task's config {} body; %PORT% and %ENGINE% are replaced
	gpus  []string // put in the device env as nomad-device-nvml does; one by default
	noGPU bool     // allocate no GPU at all
	// deviceEnv, when set, is the device environment as a device plugin
	// returned it (the GPU tier's real Reserve); gpus is then unused.
	deviceEnv map[string]string
	label     string // port label; "http" by default
	noLog     bool   // no FIFOs
}

var taskSeq struct {
	sync.Mutex
	n int
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func encodeTaskConfig(t testing.TB, body string) []byte {
	t.Helper()
	b, err := hclspec.EncodeHCL(driver.TaskConfigSpec(), "task.hcl", []byte(body), nil)
	if err != nil {
		t.Fatalf("encode task config: %v\n%s", err, body)
	}
	return b
}

func newTask(t *testing.T, o taskOpts) *task {
	t.Helper()
	taskSeq.Lock()
	taskSeq.n++
	n := taskSeq.n
	taskSeq.Unlock()
	allocID := fmt.Sprintf("0000000%d-aaaa-bbbb-cccc-dddddddddddd", n%10)
	name := fmt.Sprintf("engine%d", n)
	allocDir := filepath.Join(t.TempDir(), allocID)
	logs := filepath.Join(allocDir, "alloc", "logs")
	for _, d := range []string{logs, filepath.Join(allocDir, name, "local"), filepath.Join(allocDir, name, "private")} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	tk := &task{port: freePort(t)}
	label := o.label
	if label == "" {
		label = "http"
	}
	body := strings.ReplaceAll(o.body, "%PORT%", label)
	body = strings.ReplaceAll(body, "%ENGINE%", plugintest.Build(t, enginePkg))
	cfg := &driverpb.TaskConfig{
		Id:                  fmt.Sprintf("%s/%s/%08x", allocID, name, n),
		Name:                name,
		AllocId:             allocID,
		AllocDir:            allocDir,
		MsgpackDriverConfig: encodeTaskConfig(t, body),
		Env: map[string]string{
			"PATH":           os.Getenv("PATH"),
			"NOMAD_TASK_DIR": filepath.Join(allocDir, name, "local"),
		},
		DeviceEnv: map[string]string{},
		Resources: &driverpb.Resources{Ports: []*driverpb.PortMapping{
			{Label: "http", Value: int32(tk.port), HostIp: "127.0.0.1"},
			{Label: "metrics", Value: int32(freePort(t)), HostIp: "127.0.0.1"},
		}},
	}
	for k, v := range o.deviceEnv {
		cfg.DeviceEnv[k] = v
		cfg.Env[k] = v
	}
	if len(o.gpus) == 0 && !o.noGPU && o.deviceEnv == nil {
		o.gpus = []string{"GPU-0"}
	}
	if len(o.gpus) > 0 {
		// As nomad-device-nvml's Reserve would on a host whose whole GPUs
		// are these, in this PCI bus order; Nomad copies the device
		// environment into the task's.
		var boards []nvmlseam.Board
		for i, id := range o.gpus {
			if !nvmlseam.IsMIG(id) {
				boards = append(boards, nvmlseam.Board{UUID: id, BusID: fmt.Sprintf("00000000:%02X:00.0", 0x10+i)})
			}
		}
		bind, err := nvmlseam.NewTopology(boards).Bind(o.gpus)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range bind.Env() {
			cfg.DeviceEnv[k] = v
			cfg.Env[k] = v
		}
	}
	if !o.noLog {
		tk.stdout = newFIFO(t, filepath.Join(logs, "."+name+".stdout.fifo"))
		tk.stderr = newFIFO(t, filepath.Join(logs, "."+name+".stderr.fifo"))
		cfg.StdoutPath, cfg.StderrPath = tk.stdout.path, tk.stderr.path
	}
	tk.cfg = cfg
	return tk
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// start starts tk and makes sure the engine is killed when the test ends.
func (p *plugin) start(t *testing.T, tk *task) *driverpb.TaskHandle {
	t.Helper()
	resp, err := p.Driver.StartTask(ctxT(t, 40*time.Second), &driverpb.StartTaskRequest{Task: tk.cfg})
	if err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	st := decodeState(t, resp.GetHandle())
	t.Cleanup(func() {
		if st.Engine.Alive() {
			_ = syscall.Kill(-st.Engine.Pid, syscall.SIGKILL)
		}
		// The supervisor records the exit in the task dir after the engine
		// dies; wait for it to finish before the test's temp dir goes.
		wait.Until(t, "the supervisor to exit after its engine", func() bool { return !st.Supervisor.Alive() })
	})
	return resp.GetHandle()
}

// stateView is the part of driver_state the tests look at.
type stateView struct {
	Version    int        `json:"version"`
	StateDir   string     `json:"state_dir"`
	Supervisor procfs.Ref `json:"supervisor"`
	Engine     procfs.Ref `json:"engine"`
}

func decodeState(t *testing.T, h *driverpb.TaskHandle) stateView {
	t.Helper()
	if h.GetConfig() == nil {
		t.Fatal("handle does not echo the task config: Nomad would have nothing to recover")
	}
	var st stateView
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		t.Fatalf("decode driver state: %v", err)
	}
	if h.GetVersion() != 1 || st.Version != 1 {
		t.Fatalf("handle version %d, state version %d; want 1 and 1", h.GetVersion(), st.Version)
	}
	return st
}

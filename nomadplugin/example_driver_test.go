package nomadplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// sleepDriver is a minimal task driver (driver = "sleep"): its tasks run no
// process, they last the duration their task config asks for and then exit
// with status 0. Small as it is, it keeps the contract the Nomad client
// relies on: StartTask returns a handle that echoes the task's config and
// carries what RecoverTask needs, RecoverTask is idempotent, WaitTask can be
// called any number of times, and a bad task config is a non-recoverable
// error.
type sleepDriver struct {
	basepb.UnimplementedBasePluginServer
	driverpb.UnimplementedDriverServer

	mu    sync.Mutex
	tasks map[string]*sleepTask
}

func newSleepDriver() *sleepDriver { return &sleepDriver{tasks: map[string]*sleepTask{}} }

// sleepTaskConfig is a task's config {} block: duration = "90s".
type sleepTaskConfig struct {
	Duration time.Duration `codec:"duration"`
}

var sleepTaskSpec = hclspec.Object(map[string]*hclspec.Spec{
	"duration": hclspec.RequiredAttr("duration", "string"),
})

// sleepState is the handle's driver state: all RecoverTask needs to track
// the task again in a new plugin process.
type sleepState struct {
	Started time.Time `json:"started"`
	End     time.Time `json:"end"`
}

// sleepTask is one tracked task. done is closed, and result set before,
// when its time is up (timer fires) or it is stopped.
type sleepTask struct {
	id, name string
	state    sleepState
	timer    *time.Timer
	once     sync.Once
	done     chan struct{}
	result   *driverpb.ExitResult
}

func (t *sleepTask) finish(res *driverpb.ExitResult) {
	t.once.Do(func() {
		t.result = res
		close(t.done)
	})
}

func (t *sleepTask) exited() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

func (d *sleepDriver) PluginInfo(context.Context, *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Type:              basepb.PluginType_DRIVER,
		PluginApiVersions: []string{nomadplugin.APIVersion},
		PluginVersion:     "0.1.0",
		Name:              "sleep",
	}, nil
}

// ConfigSchema is empty: the driver takes no agent configuration, and an
// empty object (unlike no schema at all) accepts an empty config {} block.
func (d *sleepDriver) ConfigSchema(context.Context, *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Spec: hclspec.Object(map[string]*hclspec.Spec{})}, nil
}

func (d *sleepDriver) SetConfig(context.Context, *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	return &basepb.SetConfigResponse{}, nil
}

func (d *sleepDriver) TaskConfigSchema(context.Context, *driverpb.TaskConfigSchemaRequest) (*driverpb.TaskConfigSchemaResponse, error) {
	return &driverpb.TaskConfigSchemaResponse{Spec: sleepTaskSpec}, nil
}

func (d *sleepDriver) Capabilities(context.Context, *driverpb.CapabilitiesRequest) (*driverpb.CapabilitiesResponse, error) {
	return &driverpb.CapabilitiesResponse{Capabilities: &driverpb.DriverCapabilities{
		FsIsolation:  driverpb.DriverCapabilities_NONE,
		MountConfigs: driverpb.DriverCapabilities_NO_MOUNTS,
	}}, nil
}

// Fingerprint reports the driver healthy and keeps the stream open; a
// driver whose health changes sends a new message each time.
func (d *sleepDriver) Fingerprint(_ *driverpb.FingerprintRequest, stream driverpb.Driver_FingerprintServer) error {
	if err := stream.Send(&driverpb.FingerprintResponse{
		Health: driverpb.FingerprintResponse_HEALTHY, HealthDescription: "ready",
	}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// TaskEvents has no events to send; it holds the stream until the client
// closes it.
func (d *sleepDriver) TaskEvents(_ *driverpb.TaskEventsRequest, stream driverpb.Driver_TaskEventsServer) error {
	<-stream.Context().Done()
	return nil
}

func (d *sleepDriver) StartTask(_ context.Context, req *driverpb.StartTaskRequest) (*driverpb.StartTaskResponse, error) {
	task := req.GetTask()
	var tc sleepTaskConfig
	if err := hclspec.Decode(sleepTaskSpec, task.GetMsgpackDriverConfig(), &tc); err != nil {
		// Retrying cannot fix a bad config: say so.
		return nil, nomadplugin.RecoverableError(fmt.Errorf("sleep task config: %w", err), false)
	}
	now := time.Now()
	st := sleepState{Started: now, End: now.Add(tc.Duration)}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if !d.track(task.GetId(), task.GetName(), st) {
		return nil, status.Errorf(codes.AlreadyExists, "task %q is already started", task.GetId())
	}
	return &driverpb.StartTaskResponse{Handle: &driverpb.TaskHandle{
		Version: 1, Config: task, State: driverpb.TaskState_RUNNING, DriverState: data,
	}}, nil
}

// RecoverTask tracks a task again from the handle Nomad kept, after a
// client restart or a plugin crash; a task already tracked is fine.
func (d *sleepDriver) RecoverTask(_ context.Context, req *driverpb.RecoverTaskRequest) (*driverpb.RecoverTaskResponse, error) {
	h := req.GetHandle()
	if h.GetConfig() == nil {
		return nil, status.Error(codes.InvalidArgument, "handle has no task config")
	}
	var st sleepState
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "driver state: %v", err)
	}
	d.track(req.GetTaskId(), h.GetConfig().GetName(), st)
	return &driverpb.RecoverTaskResponse{}, nil
}

// track starts tracking a task; false if it is tracked already.
func (d *sleepDriver) track(id, name string, st sleepState) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.tasks[id]; ok {
		return false
	}
	t := &sleepTask{id: id, name: name, state: st, done: make(chan struct{})}
	t.timer = time.AfterFunc(time.Until(st.End), func() { t.finish(&driverpb.ExitResult{ExitCode: 0}) })
	d.tasks[id] = t
	return true
}

func (d *sleepDriver) task(id string) (*sleepTask, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.tasks[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no task %q", id)
	}
	return t, nil
}

func (d *sleepDriver) WaitTask(ctx context.Context, req *driverpb.WaitTaskRequest) (*driverpb.WaitTaskResponse, error) {
	t, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		return &driverpb.WaitTaskResponse{Result: t.result}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// StopTask ends the task as if the signal had killed it (there is no
// process to signal; the timeout has nothing to wait for).
func (d *sleepDriver) StopTask(_ context.Context, req *driverpb.StopTaskRequest) (*driverpb.StopTaskResponse, error) {
	t, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	t.timer.Stop()
	t.finish(&driverpb.ExitResult{ExitCode: 128 + 15, Signal: 15}) // SIGTERM
	return &driverpb.StopTaskResponse{}, nil
}

func (d *sleepDriver) DestroyTask(_ context.Context, req *driverpb.DestroyTaskRequest) (*driverpb.DestroyTaskResponse, error) {
	t, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if !t.exited() && !req.GetForce() {
		return nil, status.Errorf(codes.FailedPrecondition, "task %q is still running; stop it first", t.id)
	}
	t.timer.Stop()
	t.finish(&driverpb.ExitResult{ExitCode: 128 + 9, Signal: 9}) // SIGKILL, if it still ran
	d.mu.Lock()
	delete(d.tasks, t.id)
	d.mu.Unlock()
	return &driverpb.DestroyTaskResponse{}, nil
}

func (d *sleepDriver) InspectTask(_ context.Context, req *driverpb.InspectTaskRequest) (*driverpb.InspectTaskResponse, error) {
	t, err := d.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	ts := &driverpb.TaskStatus{Id: t.id, Name: t.name, State: driverpb.TaskState_RUNNING,
		StartedAt: timestamppb.New(t.state.Started)}
	if t.exited() {
		ts.State, ts.Result = driverpb.TaskState_EXITED, t.result
	}
	return &driverpb.InspectTaskResponse{Task: ts}, nil
}

// A driver plugin's main: serve the driver until the Nomad client is done
// with it. Put the binary in the client's plugin_dir, name it in a
// plugin "<binary>" {} block, and give a task driver = "sleep" and
// config { duration = "90s" }.
func ExampleServeDriver() {
	d := newSleepDriver()
	nomadplugin.ServeDriver(d, d, nomadplugin.NewLogger("nomad-driver-sleep"))
}

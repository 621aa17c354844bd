package nomadplugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/hclspec"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// These tests hold the example plugins to what their comments promise, over
// the real transport: each is launched from this test binary by plugintest.

func startExample(t *testing.T, name string) (*plugintest.Instance, context.Context) {
	t.Helper()
	inst := plugintest.Start(t, self(t), plugintest.Options{Env: []string{"EXAMPLE_PLUGIN=" + name}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return inst, ctx
}

func TestWidgetDevice(t *testing.T) {
	inst, ctx := startExample(t, "widget")
	if inst.Device == nil {
		t.Fatalf("no device stub dispensed for plugin type %v", inst.Info.GetType())
	}
	// The schema is the plugin's: a block without the required ids fails
	// where the Nomad client evaluates it, before SetConfig.
	if err := inst.Configure(ctx, `model = "w9"`); err == nil || !strings.Contains(err.Error(), `"ids" is required`) {
		t.Fatalf("config without the required ids: got %v, want an error naming ids", err)
	}
	// Bytes that do not decode against the schema are the plugin's to refuse.
	if _, err := inst.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: []byte{0xc1}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("SetConfig with bad msgpack: got %v, want InvalidArgument", err)
	}
	if _, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"w-0"}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Reserve before SetConfig: got %v, want FailedPrecondition", err)
	}
	if err := inst.Configure(ctx, `ids = ["w-0", "w-1", "w-2"]`); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"w-2", "w-0"}})
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"WIDGET_VISIBLE_DEVICES": "w-0,w-2"}, res.GetContainerRes().GetEnvs()); diff != "" {
		t.Errorf("reservation env (-want +got):\n%s", diff)
	}
	if _, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"w-7"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Reserve of an unknown device: got %v, want InvalidArgument", err)
	}
	stats, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(10 * time.Millisecond)})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	for range 2 {
		msg, err := stats.Recv()
		if err != nil {
			t.Fatalf("Stats stream: %v", err)
		}
		g := msg.GetGroups()
		if len(g) != 1 || g[0].GetName() != "w1" || len(g[0].GetInstanceStats()) != 3 {
			t.Fatalf("stats: got %v, want one w1 group with 3 devices", msg)
		}
		if got := g[0].GetInstanceStats()["w-1"].GetSummary().GetStringVal().GetValue(); got != "idle" {
			t.Errorf("w-1 summary: got %q, want idle", got)
		}
	}
}

// startSleep encodes a task config for the sleep driver as the Nomad client
// would and starts a task with it.
func startSleep(ctx context.Context, t *testing.T, inst *plugintest.Instance, id, body string) (*driverpb.StartTaskResponse, error) {
	t.Helper()
	schema, err := inst.Driver.TaskConfigSchema(ctx, &driverpb.TaskConfigSchemaRequest{})
	if err != nil {
		t.Fatalf("TaskConfigSchema: %v", err)
	}
	data, err := hclspec.EncodeHCL(schema.GetSpec(), "task.hcl", []byte(body), nil)
	if err != nil {
		t.Fatalf("encode task config %q: %v", body, err)
	}
	return inst.Driver.StartTask(ctx, &driverpb.StartTaskRequest{Task: &driverpb.TaskConfig{
		Id: id, Name: "nap", MsgpackDriverConfig: data,
	}})
}

func TestSleepDriver(t *testing.T) {
	inst, ctx := startExample(t, "sleep")
	if inst.Driver == nil {
		t.Fatalf("no driver stub dispensed for plugin type %v", inst.Info.GetType())
	}
	if err := inst.Configure(ctx, ``); err != nil {
		t.Fatalf("Configure with an empty block: %v", err)
	}

	_, err := startSleep(ctx, t, inst, "bad", `duration = "soon"`)
	if rec, ok := nomadplugin.IsRecoverable(err); !ok || rec || !strings.Contains(err.Error(), "duration") {
		t.Fatalf("bad duration: got %v (recoverable %t, detail %t), want a non-recoverable error naming duration", err, rec, ok)
	}

	// A task whose time is already up exits 0, and WaitTask says so again.
	if _, err := startSleep(ctx, t, inst, "short", `duration = "0s"`); err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	for range 2 {
		w, err := inst.Driver.WaitTask(ctx, &driverpb.WaitTaskRequest{TaskId: "short"})
		if err != nil || w.GetResult().GetExitCode() != 0 || w.GetResult().GetSignal() != 0 {
			t.Fatalf("WaitTask(short): got %v, %v; want exit 0", w, err)
		}
	}

	// A long task: its handle recovers in a second plugin process, and it
	// stops on StopTask.
	start, err := startSleep(ctx, t, inst, "long", `duration = "1h"`)
	if err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	h := start.GetHandle()
	if h.GetConfig().GetId() != "long" || h.GetState() != driverpb.TaskState_RUNNING || len(h.GetDriverState()) == 0 {
		t.Fatalf("handle: got %v, want one that echoes the config, RUNNING, with driver state", h)
	}
	if _, err := startSleep(ctx, t, inst, "long", `duration = "1h"`); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second StartTask of one id: got %v, want AlreadyExists", err)
	}
	if _, err := inst.Driver.DestroyTask(ctx, &driverpb.DestroyTaskRequest{TaskId: "long"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DestroyTask of a running task without force: got %v, want FailedPrecondition", err)
	}

	other, octx := startExample(t, "sleep")
	for range 2 { // idempotent
		if _, err := other.Driver.RecoverTask(octx, &driverpb.RecoverTaskRequest{TaskId: "long", Handle: h}); err != nil {
			t.Fatalf("RecoverTask: %v", err)
		}
	}
	in, err := other.Driver.InspectTask(octx, &driverpb.InspectTaskRequest{TaskId: "long"})
	if err != nil || in.GetTask().GetState() != driverpb.TaskState_RUNNING || in.GetTask().GetName() != "nap" {
		t.Fatalf("InspectTask after recovery: got %v, %v; want nap RUNNING", in, err)
	}

	if _, err := inst.Driver.StopTask(ctx, &driverpb.StopTaskRequest{TaskId: "long", Signal: "SIGTERM"}); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	w, err := inst.Driver.WaitTask(ctx, &driverpb.WaitTaskRequest{TaskId: "long"})
	if err != nil || w.GetResult().GetSignal() != 15 {
		t.Fatalf("WaitTask after StopTask: got %v, %v; want signal 15", w, err)
	}
	if _, err := inst.Driver.DestroyTask(ctx, &driverpb.DestroyTaskRequest{TaskId: "long"}); err != nil {
		t.Fatalf("DestroyTask of a stopped task: %v", err)
	}
	if _, err := inst.Driver.InspectTask(ctx, &driverpb.InspectTaskRequest{TaskId: "long"}); status.Code(err) != codes.NotFound {
		t.Errorf("InspectTask after DestroyTask: got %v, want NotFound", err)
	}
}

package nomadplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/nomadplugin"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The widget device plugin of ExampleServeDevice, loaded and driven the
// way a Nomad client does it. Here the plugin binary is this example's own
// test binary, whose TestMain runs ExampleServeDevice when plugintest
// launches it; a plugin's own tests launch its real binary instead:
//
//	bin := plugintest.Build(t, "example.com/widget/cmd/nomad-device-widget")
//	inst := plugintest.Start(t, bin, plugintest.Options{})
func Example_plugintest() {
	bin, err := os.Executable()
	if err != nil {
		fmt.Println(err)
		return
	}
	inst, err := plugintest.Launch(bin, plugintest.Options{Env: []string{"EXAMPLE_PLUGIN=widget"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer inst.Kill()
	fmt.Println("loaded", inst.Info.GetName(), inst.Info.GetType(), inst.Info.GetPluginApiVersions())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The inside of the agent's plugin "nomad-device-widget" { config { … } } block.
	if err := inst.Configure(ctx, `ids = ["w-0", "w-1"]`); err != nil {
		fmt.Println(err)
		return
	}
	stream, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fp, err := stream.Recv()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range fp.GetDeviceGroup() {
		fmt.Printf("%s/%s/%s:", g.GetVendor(), g.GetDeviceType(), g.GetDeviceName())
		for _, d := range g.GetDevices() {
			fmt.Printf(" %s healthy=%t", d.GetID(), d.GetHealthy())
		}
		fmt.Println()
	}
	res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"w-1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.GetContainerRes().GetEnvs())
	// Output:
	// loaded widget DEVICE [v0.1.0]
	// example/widget/w1: w-0 healthy=true w-1 healthy=true
	// map[WIDGET_VISIBLE_DEVICES:w-1]
}

func ExampleRecoverableError() {
	// In a driver's StartTask: a port already taken may be free on the next
	// try, a task config that names no model never will.
	busy := nomadplugin.RecoverableError(errors.New("engine port 8000 busy"), true)
	bad := nomadplugin.RecoverableError(errors.New("task config: model is required"), false)
	for _, err := range []error{busy, bad} {
		st := status.Convert(err)
		recoverable, ok := nomadplugin.IsRecoverable(err)
		fmt.Printf("%s: %q recoverable=%t (detail present: %t)\n", st.Code(), st.Message(), recoverable, ok)
	}
	// Output:
	// FailedPrecondition: "engine port 8000 busy" recoverable=true (detail present: true)
	// FailedPrecondition: "task config: model is required" recoverable=false (detail present: true)
}

func ExampleIsRecoverable() {
	// Errors without the detail, plain or gRPC, carry no verdict.
	for _, err := range []error{
		errors.New("plain"),
		status.Error(codes.InvalidArgument, "bad request"),
		fmt.Errorf("wrapped: %w", nomadplugin.RecoverableError(errors.New("try again"), true)),
	} {
		recoverable, ok := nomadplugin.IsRecoverable(err)
		fmt.Println(recoverable, ok)
	}
	// Output:
	// false false
	// false false
	// true true
}

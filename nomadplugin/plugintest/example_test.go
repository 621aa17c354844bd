package plugintest_test

import (
	"testing"

	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The shape of a device plugin's own test: build the plugin's binary once,
// launch it as a Nomad client would, configure it from the inside of a
// config {} block and call its RPCs. The nomadplugin package example runs
// these steps against a plugin served from its own test binary.
func ExampleStart() {
	testFingerprint := func(t *testing.T) {
		bin := plugintest.Build(t, "example.com/widget/cmd/nomad-device-widget")
		inst := plugintest.Start(t, bin, plugintest.Options{}) // killed when the test ends
		if err := inst.Configure(t.Context(), `ids = ["w-0", "w-1"]`); err != nil {
			t.Fatalf("SetConfig: %v", err)
		}
		stream, err := inst.Device.Fingerprint(t.Context(), &devicepb.FingerprintRequest{})
		if err != nil {
			t.Fatalf("Fingerprint: %v", err)
		}
		fp, err := stream.Recv()
		if err != nil {
			t.Fatalf("first fingerprint: %v", err)
		}
		if groups := fp.GetDeviceGroup(); len(groups) != 1 || len(groups[0].GetDevices()) != 2 {
			t.Errorf("got %v, want one device group of 2 devices", groups)
		}
	}
	_ = testFingerprint // in a _test.go file: func TestFingerprint(t *testing.T) { … }
}

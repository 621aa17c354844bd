package devices_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goversion "github.com/hashicorp/go-version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/llmgw/llmgw/devices"
	"github.com/llmgw/llmgw/nomadplugin/pb/basepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/devicepb"
	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

var update = flag.Bool("update", false, "rewrite golden files")

const pkg = "github.com/llmgw/llmgw/cmd/nomad-device-nvml"

// start launches the built plugin binary and configures it with body.
func start(t *testing.T, body string) *plugintest.Instance {
	t.Helper()
	inst := plugintest.Start(t, plugintest.Build(t, pkg), plugintest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := inst.Configure(ctx, body); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return inst
}

// firstFingerprint opens the fingerprint stream and returns its first
// message and the stream.
func firstFingerprint(t *testing.T, inst *plugintest.Instance) (*devicepb.FingerprintResponse, devicepb.DevicePlugin_FingerprintClient) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	stream, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
	if err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	fp, err := stream.Recv()
	if err != nil {
		t.Fatalf("first fingerprint: %v", err)
	}
	return fp, stream
}

// render is a stable text form of a fingerprint for golden files.
func render(fp *devicepb.FingerprintResponse) string {
	var b strings.Builder
	for _, g := range fp.GetDeviceGroup() {
		fmt.Fprintf(&b, "group %s/%s/%s\n", g.GetVendor(), g.GetDeviceType(), g.GetDeviceName())
		keys := make([]string, 0, len(g.GetAttributes()))
		for k := range g.GetAttributes() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			a := g.GetAttributes()[k]
			var v string
			switch x := a.GetValue().(type) {
			case *structspb.Attribute_IntVal:
				v = fmt.Sprint(x.IntVal)
			case *structspb.Attribute_FloatVal:
				v = fmt.Sprint(x.FloatVal)
			case *structspb.Attribute_StringVal:
				v = fmt.Sprintf("%q", x.StringVal)
			case *structspb.Attribute_BoolVal:
				v = fmt.Sprint(x.BoolVal)
			default:
				v = "<nil>"
			}
			fmt.Fprintf(&b, "  attr %s = %s %s\n", k, v, a.GetUnit())
		}
		for _, d := range g.GetDevices() {
			fmt.Fprintf(&b, "  device %s healthy=%v %q pci=%s\n", d.GetID(), d.GetHealthy(), d.GetHealthDescription(), d.GetHwLocality().GetPciBusId())
		}
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

func TestPluginInfo(t *testing.T) {
	inst := plugintest.Start(t, plugintest.Build(t, pkg), plugintest.Options{})
	info := inst.Info
	if info.GetType() != basepb.PluginType_DEVICE || info.GetName() != "nvml" {
		t.Fatalf("got type %v name %q, want DEVICE nvml", info.GetType(), info.GetName())
	}
	if diff := cmp.Diff([]string{"v0.1.0"}, info.GetPluginApiVersions()); diff != "" {
		t.Errorf("api versions (-want +got):\n%s", diff)
	}
	if _, err := goversion.NewVersion(info.GetPluginVersion()); err != nil {
		t.Errorf("plugin_version %q does not parse as Nomad requires: %v", info.GetPluginVersion(), err)
	}
}

func TestFingerprintMockSystems(t *testing.T) {
	for _, sys := range devices.MockSystems() {
		t.Run(sys, func(t *testing.T) {
			inst := start(t, fmt.Sprintf(`mock { system = %q }`, sys))
			fp, _ := firstFingerprint(t, inst)
			if n := len(fp.GetDeviceGroup()); n != 1 {
				t.Fatalf("got %d groups, want 1", n)
			}
			g := fp.GetDeviceGroup()[0]
			if n := len(g.GetDevices()); n != 8 {
				t.Fatalf("got %d devices, want 8", n)
			}
			for _, d := range g.GetDevices() {
				if !d.GetHealthy() {
					t.Errorf("device %s unhealthy: %s", d.GetID(), d.GetHealthDescription())
				}
			}
			golden(t, "fingerprint_"+sys, render(fp))
		})
	}
}

func TestSeedMakesIDsUniqueAndStable(t *testing.T) {
	ids := func(seed string) []string {
		inst := start(t, fmt.Sprintf(`mock {
  system = "dgxh200"
  seed   = %q
}`, seed))
		fp, _ := firstFingerprint(t, inst)
		var out []string
		for _, d := range fp.GetDeviceGroup()[0].GetDevices() {
			out = append(out, d.GetID())
		}
		inst.Kill()
		return out
	}
	a1, a2, b := ids("node-a"), ids("node-a"), ids("node-b")
	if diff := cmp.Diff(a1, a2); diff != "" {
		t.Errorf("IDs changed across plugin restarts (-first +second):\n%s", diff)
	}
	for _, id := range b {
		for _, other := range a1 {
			if id == other {
				t.Errorf("seed node-b reuses ID %s of seed node-a", id)
			}
		}
	}
}

func TestIgnoredGPUs(t *testing.T) {
	m, err := devices.NewMockNVML(devices.MockConfig{System: "dgxh100", Seed: "x"})
	if err != nil {
		t.Fatal(err)
	}
	ignored := []string{m.GPUs()[0].UUID, m.GPUs()[6].UUID}
	inst := start(t, fmt.Sprintf(`
ignored_gpu_ids = [%q, %q]
mock {
  system = "dgxh100"
  seed   = "x"
}`, ignored[0], ignored[1]))
	fp, _ := firstFingerprint(t, inst)
	var got []string
	for _, d := range fp.GetDeviceGroup()[0].GetDevices() {
		got = append(got, d.GetID())
	}
	var want []string
	for i, g := range m.GPUs() {
		if i != 0 && i != 6 {
			want = append(want, g.UUID)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("devices (-want +got):\n%s", diff)
	}
}

func TestMIG(t *testing.T) {
	inst := start(t, `mock {
  system = "dgxh200"
  gpus   = 2
  mig    = { "1" = ["3g.71gb", "2g.35gb", "1g.18gb"] }
}`)
	fp, _ := firstFingerprint(t, inst)
	golden(t, "fingerprint_mig", render(fp))
	var names []string
	for _, g := range fp.GetDeviceGroup() {
		names = append(names, fmt.Sprintf("%s x%d", g.GetDeviceName(), len(g.GetDevices())))
	}
	want := []string{"NVIDIA H200 x1", "NVIDIA H200 MIG 1g.18gb x1", "NVIDIA H200 MIG 2g.35gb x1", "NVIDIA H200 MIG 3g.71gb x1"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("groups (-want +got):\n%s", diff)
	}
}

func TestStats(t *testing.T) {
	inst := start(t, `mock {
  system      = "dgxh200"
  power_watts = 350
}`)
	firstFingerprint(t, inst)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(100 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the first sample and one interval later
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("stats %d: %v", i, err)
		}
		if n := len(resp.GetGroups()); n != 1 {
			t.Fatalf("got %d stats groups, want 1", n)
		}
		g := resp.GetGroups()[0]
		if g.GetName() != "NVIDIA H200" || len(g.GetInstanceStats()) != 8 {
			t.Fatalf("group %q with %d instances, want NVIDIA H200 with 8", g.GetName(), len(g.GetInstanceStats()))
		}
		for id, s := range g.GetInstanceStats() {
			p := s.GetStats().GetAttributes()["power_draw"]
			if p.GetFloatNumeratorVal().GetValue() != 350 || p.GetFloatDenominatorVal().GetValue() != 700 || p.GetUnit() != "W" {
				t.Errorf("%s power_draw = %v/%v %s, want 350/700 W", id, p.GetFloatNumeratorVal().GetValue(), p.GetFloatDenominatorVal().GetValue(), p.GetUnit())
			}
			if s.GetSummary().GetUnit() != "W" {
				t.Errorf("%s summary unit %q, want W", id, s.GetSummary().GetUnit())
			}
			attrs := s.GetStats().GetAttributes()
			for _, k := range []string{"temperature", "gpu_utilization", "memory_utilization", "memory", "ecc_errors_corrected", "ecc_errors_uncorrected", "energy"} {
				if attrs[k] == nil {
					t.Errorf("%s: stat %s missing", id, k)
				}
			}
			if got := attrs["memory"].GetIntDenominatorVal().GetValue(); got != 144384 {
				t.Errorf("%s memory total %d MiB, want 144384", id, got)
			}
		}
	}
}

func TestStatsMIGUsesParentPower(t *testing.T) {
	inst := start(t, `mock {
  system = "dgxa100"
  gpus   = 1
  mig    = { "0" = ["3g.20gb", "3g.20gb"] }
}`)
	firstFingerprint(t, inst)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := inst.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	g := resp.GetGroups()[0]
	if g.GetName() != "NVIDIA A100-SXM4-40GB MIG 3g.20gb" || len(g.GetInstanceStats()) != 2 {
		t.Fatalf("got group %q with %d instances", g.GetName(), len(g.GetInstanceStats()))
	}
	for id, s := range g.GetInstanceStats() {
		if got := s.GetStats().GetAttributes()["power_draw"].GetFloatDenominatorVal().GetValue(); got != 400 {
			t.Errorf("%s: power limit %v, want the parent's 400 W", id, got)
		}
		if s.GetSummary().GetUnit() != "MiB" {
			t.Errorf("%s: summary unit %q, want MiB (memory) for a MIG instance", id, s.GetSummary().GetUnit())
		}
	}
}

func TestReserve(t *testing.T) {
	inst := start(t, `mock {
  system = "dgxb200"
  seed   = "r"
}`)
	fp, _ := firstFingerprint(t, inst)
	devs := fp.GetDeviceGroup()[0].GetDevices()
	ctx := t.Context()
	res, err := inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{devs[6].GetID(), devs[3].GetID()}})
	if err != nil {
		t.Fatal(err)
	}
	// The fingerprint lists devices in NVML index order, which the mock's
	// PCI buses follow: device 3 is CUDA index 3.
	list := devs[3].GetID() + "," + devs[6].GetID()
	want := map[string]string{
		"CUDA_VISIBLE_DEVICES": "3,6", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		"NVIDIA_VISIBLE_DEVICES": list, "LLMGW_GPU_UUIDS": list, "LLMGW_GPU_GROUP": "nvidia/gpu/NVIDIA B200",
	}
	if diff := cmp.Diff(want, res.GetContainerRes().GetEnvs()); diff != "" {
		t.Errorf("envs (-want +got):\n%s", diff)
	}
	if n := len(res.GetContainerRes().GetDevices()); n != 0 {
		t.Errorf("mock mode returned %d device specs, want none", n)
	}
	_, err = inst.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: []string{"GPU-not-here"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unknown device: GPU-not-here") {
		t.Errorf("unknown ID: got %v, want InvalidArgument naming GPU-not-here", err)
	}
}

func TestBadConfig(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"unknown mock system", `mock { system = "dgxz9" }`, `mock.system: unknown mock system "dgxz9"`},
		{"bad duration", `fingerprint_period = "soon"`, `fingerprint_period`},
		{"too short period", `fingerprint_period = "10ms"`, `fingerprint_period: 10ms is too short`},
		{"bad recovery", `health_recovery = "-5m"`, `health_recovery`},
		{"negative power", `mock {
  system      = "dgxh200"
  power_watts = -10
}`, `mock.power_watts: must be zero or more`},
		{"power above limit", `mock {
  system      = "dgxa100"
  power_watts = 500
}`, `mock.power_watts: 500 W is above the dgxa100 board limit of 400 W`},
		{"too many gpus", `mock {
  system = "dgxh100"
  gpus   = 9
}`, `mock.gpus: 9 is out of range`},
		{"fractional gpus", `mock {
  system = "dgxh100"
  gpus   = 1.5
}`, `gpus`},
		{"bad MIG profile", `mock {
  system = "dgxh200"
  mig    = { "0" = ["9g.1tb"] }
}`, `mock.mig["0"]: unknown MIG profile "9g.1tb"`},
		{"too many MIG slices", `mock {
  system = "dgxh200"
  mig    = { "0" = ["4g.71gb", "4g.71gb"] }
}`, `need 8 slices`},
		{"negative xid", `ignored_xids = [-1]`, `ignored_xids`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inst := plugintest.Start(t, plugintest.Build(t, pkg), plugintest.Options{})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := inst.Configure(ctx, tc.body)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			// Not half-configured: the device RPCs still refuse to run.
			stream, err := inst.Device.Fingerprint(ctx, &devicepb.FingerprintRequest{})
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("Fingerprint after a rejected config: got %v, want FailedPrecondition", err)
			}
		})
	}
}

func TestNoNVMLLibraryMeansNoDevices(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this host has an NVIDIA driver; the no-library case cannot be shown here")
	}
	inst := start(t, ``)
	fp, _ := firstFingerprint(t, inst)
	if n := len(fp.GetDeviceGroup()); n != 0 {
		t.Fatalf("got %d device groups on a host without NVML, want 0", n)
	}
	if !inst.WaitLog("NVML library not found", 5*time.Second) {
		t.Errorf("no log line saying NVML is missing; log:\n%s", inst.Logs())
	}
}

// TestFingerprintFollowsHealthBothWays breaks two mock GPUs through the
// mock's events file and watches the fingerprint stream of the real binary
// report both unhealthy, then the one with a transient XID healthy again
// after health_recovery while the one with a fatal XID stays unhealthy.
func TestFingerprintFollowsHealthBothWays(t *testing.T) {
	events := filepath.Join(t.TempDir(), "events")
	inst := start(t, fmt.Sprintf(`
health_recovery = "2s"
mock {
  system      = "dgxh100"
  seed        = "h"
  events_file = %q
}`, events))
	fp, stream := firstFingerprint(t, inst)
	fatal := fp.GetDeviceGroup()[0].GetDevices()[4].GetID()
	transient := fp.GetDeviceGroup()[0].GetDevices()[6].GetID()
	lines := fatal + " xid 79\n" + transient + " xid 94\n" + transient + " xid 13\n"
	if err := os.WriteFile(events, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	next := func() map[string]string {
		t.Helper()
		fp, err := stream.Recv()
		if err != nil {
			t.Fatalf("fingerprint stream: %v", err)
		}
		out := map[string]string{}
		for _, d := range fp.GetDeviceGroup()[0].GetDevices() {
			if !d.GetHealthy() {
				out[d.GetID()] = d.GetHealthDescription()
			}
		}
		return out
	}
	both := map[string]string{fatal: "XID 79: GPU has fallen off the bus", transient: "XID 94: contained ECC error"}
	// The two events may reach the stream in one message or two.
	got := next()
	if len(got) == 1 {
		got = next()
	}
	if diff := cmp.Diff(both, got); diff != "" {
		t.Fatalf("after the events (-want +got unhealthy):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{fatal: "XID 79: GPU has fallen off the bus"}, next()); diff != "" {
		t.Fatalf("after health_recovery (-want +got unhealthy):\n%s", diff)
	}
}

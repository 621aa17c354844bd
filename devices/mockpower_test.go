package devices

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/llmgw/llmgw/internal/nvmlseam"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

func TestMockPowerLimits(t *testing.T) {
	m := newMock(t, MockConfig{System: "dgxh200", PowerWatts: ptr(500.0)})
	g := m.GPUs()[0]
	lo, hi, ret := g.GetPowerManagementLimitConstraints()
	if ret != nvml.SUCCESS || lo != 200000 || hi != 700000 {
		t.Fatalf("constraints: %d..%d mW (%s), want 200000..700000", lo, hi, nvml.ErrorString(ret))
	}
	if def, ret := g.GetPowerManagementDefaultLimit(); ret != nvml.SUCCESS || def != 700000 {
		t.Fatalf("default limit: %d mW (%s), want 700000", def, nvml.ErrorString(ret))
	}
	if ret := g.SetPowerManagementLimit(400000); ret != nvml.SUCCESS {
		t.Fatalf("set 400 W: %s", nvml.ErrorString(ret))
	}
	if lim, _ := g.GetEnforcedPowerLimit(); lim != 400000 {
		t.Fatalf("enforced limit after setting 400 W: %d mW", lim)
	}
	if p, _ := g.GetPowerUsage(); p != 400000 {
		t.Fatalf("draw of a 500 W load under a 400 W cap: %d mW, want 400000", p)
	}
	for _, bad := range []uint32{199999, 700001, 0} {
		if ret := g.SetPowerManagementLimit(bad); ret != nvml.ERROR_INVALID_ARGUMENT {
			t.Errorf("set %d mW: %s, want %s", bad, nvml.ErrorString(ret), nvml.ErrorString(nvml.ERROR_INVALID_ARGUMENT))
		}
	}
	if lim, _ := g.GetEnforcedPowerLimit(); lim != 400000 {
		t.Fatalf("a refused limit changed the enforced one: %d mW", lim)
	}
	if ret := g.SetPowerManagementLimit(700000); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	if p, _ := g.GetPowerUsage(); p != 500000 {
		t.Fatalf("draw with the cap lifted: %d mW, want 500000", p)
	}

	denied := newMock(t, MockConfig{System: "dgxa100", DenyPowerLimit: true}).GPUs()[0]
	if ret := denied.SetPowerManagementLimit(300000); ret != nvml.ERROR_NO_PERMISSION {
		t.Fatalf("deny_power_limit: set answered %s, want %s", nvml.ErrorString(ret), nvml.ErrorString(nvml.ERROR_NO_PERMISSION))
	}
	if lim, _ := denied.GetEnforcedPowerLimit(); lim != 400000 {
		t.Fatalf("a denied limit changed the enforced one: %d mW", lim)
	}
}

func TestMockDrawConfig(t *testing.T) {
	if _, err := NewMockNVML(MockConfig{System: "dgxh200", Draw: "wobbly"}); err == nil || err.Error() != `mock.draw: "wobbly" is not a draw mode (want "fixed" or "load")` {
		t.Fatalf("bad draw mode: %v", err)
	}
	m := newMock(t, MockConfig{System: "dgxh100", Draw: DrawLoad})
	// Nothing in this test process names the mock's UUIDs: idle.
	if p, _ := m.GPUs()[0].GetPowerUsage(); p != 70000 {
		t.Fatalf("idle draw in load mode: %d mW, want 10%% of 700 W", p)
	}
	m = newMock(t, MockConfig{System: "dgxh100", Draw: DrawLoad, PowerWatts: ptr(90.0)})
	if p, _ := m.GPUs()[0].GetPowerUsage(); p != 90000 {
		t.Fatalf("idle draw from power_watts in load mode: %d mW, want 90000", p)
	}
}

// TestBurnCPUHelper is not a test: TestMockDrawFollowsLoad runs the test
// binary as a child that burns one CPU through it, for at most a minute or
// until its stdin closes.
func TestBurnCPUHelper(t *testing.T) {
	if os.Getenv("LLMGW_TEST_BURN_CPU") != "1" {
		t.Skip("helper process for TestMockDrawFollowsLoad")
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	deadline := time.After(time.Minute)
	x := 0
	for {
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
		select {
		case <-stop:
			return
		case <-deadline:
			return
		default:
		}
	}
}

func TestMockDrawFollowsLoad(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("needs Linux's /proc: %v", err)
	}
	m := newMock(t, MockConfig{System: "dgxh200", GPUs: ptr(2), Draw: DrawLoad})
	busy, other := m.GPUs()[0], m.GPUs()[1]
	draw := func(g *MockGPU) uint32 {
		p, ret := g.GetPowerUsage()
		if ret != nvml.SUCCESS {
			t.Fatal(nvml.ErrorString(ret))
		}
		return p
	}
	waitDraw := func(what string, g *MockGPU, ok func(mw uint32) bool) uint32 {
		t.Helper()
		var p uint32
		wait.For(t, what, func() (bool, string) {
			p = draw(g)
			return ok(p), fmt.Sprintf("draw of %s at %d mW", g.UUID, p)
		}, wait.Every(100*time.Millisecond))
		return p
	}
	if p := draw(busy); p != 70000 {
		t.Fatalf("before any load: %d mW, want the 70 W idle draw", p)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestBurnCPUHelper$")
	cmd.Env = append(os.Environ(), "LLMGW_TEST_BURN_CPU=1", nvmlseam.EnvUUIDs+"="+busy.UUID)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	stopChild := func() {
		if exited {
			return
		}
		exited = true
		_ = stdin.Close()
		_ = cmd.Wait()
	}
	t.Cleanup(stopChild)

	// One busy CPU is 100%; on a shared machine the child may get less.
	// A quarter of it lifts the draw by at least 157 W over idle.
	p := waitDraw("under load", busy, func(mw uint32) bool { return mw >= 70000+157500 })
	t.Logf("draw of the GPU whose process burns a CPU: %d W (idle 70 W)", p/1000)
	if q := draw(other); q != 70000 {
		t.Errorf("the other GPU, whose UUID no process names, draws %d mW; want idle", q)
	}

	if ret := busy.SetPowerManagementLimit(200000); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}
	waitDraw("under a 200 W cap", busy, func(mw uint32) bool { return mw == 200000 })
	for range 5 {
		if q := draw(busy); q > 200000 {
			t.Fatalf("draw %d mW above the 200 W cap", q)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ret := busy.SetPowerManagementLimit(700000); ret != nvml.SUCCESS {
		t.Fatal(nvml.ErrorString(ret))
	}

	stopChild()
	waitDraw("after the load ended", busy, func(mw uint32) bool { return mw == 70000 })
}

func ptr[T any](v T) *T { return &v }

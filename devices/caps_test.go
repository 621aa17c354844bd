package devices

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/structspb"
)

// capsRig is a manager with power caps on a mock, reading its variables
// from a fake Nomad.
type capsRig struct {
	t    *testing.T
	m    *MockNVML
	nc   *api.Client
	pc   PowerCaps
	mgr  *Manager
	stop func()
}

func newCapsRig(t *testing.T, mc MockConfig, pc PowerCaps) *capsRig {
	t.Helper()
	srv := nomadfake.New()
	t.Cleanup(srv.Close)
	return newCapsRigAt(t, mc, pc, srv.URL(), srv.Client(t))
}

// newCapsRigAt is newCapsRig on the Nomad at addr, written to through nc.
func newCapsRigAt(t *testing.T, mc MockConfig, pc PowerCaps, addr string, nc *api.Client) *capsRig {
	t.Helper()
	pc.NomadAddr = addr
	if pc.NodeName == "" {
		pc.NodeName = "node-1"
	}
	if pc.Lease == 0 {
		pc.Lease = time.Hour
	}
	if err := pc.validate(); err != nil {
		t.Fatal(err)
	}
	r := &capsRig{t: t, m: newMock(t, mc), nc: nc, pc: pc}
	r.start()
	return r
}

// start runs a new manager (a new plugin process) on the rig's mock.
func (r *capsRig) start() {
	r.t.Helper()
	cfg := testConfig()
	cfg.HealthEvents = false
	mgr := NewManager(r.m, cfg, hclog.New(&hclog.LoggerOptions{Output: io.Discard}), true)
	if err := mgr.enableCaps(r.pc); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = mgr.Run(ctx)
	}()
	stopped := false
	r.mgr = mgr
	r.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	r.t.Cleanup(r.stop)
}

func (r *capsRig) uuid(i int) string { return r.m.GPUs()[i].UUID }

// put writes the node's caps variable; items alternate key, value.
func (r *capsRig) put(kv ...string) {
	r.t.Helper()
	items := api.VariableItems{}
	for i := 0; i+1 < len(kv); i += 2 {
		items[kv[i]] = kv[i+1]
	}
	if _, _, err := r.nc.Variables().Update(&api.Variable{Path: r.pc.Prefix + "/" + r.pc.NodeName, Items: items}, nil); err != nil {
		r.t.Fatal(err)
	}
}

func (r *capsRig) beat(lease string) {
	r.t.Helper()
	items := api.VariableItems{"at": time.Now().String()}
	if lease != "" {
		items["lease"] = lease
	}
	if _, _, err := r.nc.Variables().Update(&api.Variable{Path: r.pc.Prefix + "/" + devicesapi.Heartbeat, Items: items}, nil); err != nil {
		r.t.Fatal(err)
	}
}

func (r *capsRig) limitMW(i int) uint32 {
	mw, _ := r.m.GPUs()[i].GetEnforcedPowerLimit()
	return mw
}

// capStat is a GPU's power_cap stat.
func (r *capsRig) capStat(i int) string {
	for _, grp := range r.mgr.Stats() {
		if st, ok := grp.GetInstanceStats()[r.uuid(i)]; ok {
			return st.GetStats().GetAttributes()["power_cap"].GetStringVal().GetValue()
		}
	}
	return ""
}

// waitFor waits (wait.For) until cond holds, naming the GPUs' states if
// it never does.
func (r *capsRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	wait.For(r.t, what, func() (bool, string) {
		if cond() {
			return true, ""
		}
		return false, "GPU states: " + r.states()
	})
}

func (r *capsRig) states() string {
	var out []string
	for i := range r.m.GPUs() {
		out = append(out, fmt.Sprintf("[%d] %d mW %q", i, r.limitMW(i), r.capStat(i)))
	}
	return strings.Join(out, ", ")
}

func TestPowerCapsApplied(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(3)}, PowerCaps{})
	fp0 := r.waitFingerprint()
	r.put("cap."+r.uuid(0), "450", "cap."+r.uuid(1), "300.5", "fallback."+r.uuid(1), "250", "note", "other items are left alone")
	r.waitFor("caps in place", func() bool { return r.limitMW(0) == 450000 && r.limitMW(1) == 300500 })
	if got := r.capStat(0); got != "capped 450 W by controller" {
		t.Errorf("GPU 0 power_cap %q", got)
	}
	if got := r.capStat(1); got != "capped 300.5 W by controller" {
		t.Errorf("GPU 1 power_cap %q", got)
	}
	if got := r.capStat(2); got != "default" || r.limitMW(2) != 700000 {
		t.Errorf("GPU 2, named by no item: %d mW, power_cap %q; want its 700 W default", r.limitMW(2), got)
	}
	stats := statAttrs(t, r, 0)
	for k, want := range map[string]float64{"enforced_power_limit": 450, "default_power_limit": 700, "min_power_limit": 200, "max_power_limit": 700} {
		if got := stats[k].GetFloatNumeratorVal().GetValue(); got != want || stats[k].GetUnit() != "W" {
			t.Errorf("stat %s = %v %s, want %v W", k, got, stats[k].GetUnit(), want)
		}
	}
	if fp, _, _ := r.mgr.Current(); fp != fp0 {
		t.Errorf("caps changed the fingerprint")
	}

	// A cap removed from the variable is lifted to the default.
	r.put("cap."+r.uuid(1), "300.5")
	r.waitFor("GPU 0's cap lifted", func() bool { return r.limitMW(0) == 700000 })
	if got := r.capStat(0); got != "default" {
		t.Errorf("GPU 0 power_cap after its cap went: %q", got)
	}

	r.measureApply("fake Nomad on loopback, mock NVML")
}

// measureApply logs the apply bound: from the controller's write returning
// to the limit in place (the blocking query wakes, the plugin reads the
// variable, NVML's set), over 20 writes. It asserts nothing about time.
func (r *capsRig) measureApply(where string) {
	r.t.Helper()
	var took []time.Duration
	for i := range 20 {
		w := 300 + float64(i)
		start := time.Now()
		r.put("cap."+r.uuid(1), fmt.Sprint(w))
		// Polled every 100µs (not wait.For's 10ms), so the poll adds little.
		wait.For(r.t, fmt.Sprintf("cap %v W in place", w), func() (bool, string) {
			mw := r.limitMW(1)
			return mw == uint32(w*1000), fmt.Sprintf("GPU 1 at %d mW", mw)
		}, wait.Every(100*time.Microsecond))
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	r.t.Logf("write-to-cap-in-place over %d writes (%s): median %s, max %s",
		len(took), where, took[len(took)/2].Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond))
}

// TestPowerCapsAppliedRealNomad measures the apply bound against a real
// Nomad server on loopback (NOMAD_BIN).
func TestPowerCapsAppliedRealNomad(t *testing.T) {
	bin := os.Getenv("NOMAD_BIN")
	if bin == "" {
		t.Skip("NOMAD_BIN is not set: no real Nomad to measure against")
	}
	c, err := localnomad.New(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Server.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	r := newCapsRigAt(t, MockConfig{System: "dgxh200", GPUs: ptr(2)}, PowerCaps{}, c.Server.Addr(), c.API)
	r.waitFingerprint()
	r.put("cap."+r.uuid(0), "450")
	r.waitFor("first cap", func() bool { return r.limitMW(0) == 450000 })
	r.measureApply("real Nomad server ($NOMAD_BIN) on loopback, mock NVML")
	if _, err := r.nc.Variables().Delete(r.pc.Prefix+"/"+r.pc.NodeName, nil); err != nil {
		t.Fatal(err)
	}
	r.waitFor("defaults restored", func() bool { return r.limitMW(0) == 700000 && r.limitMW(1) == 700000 })
}

func (r *capsRig) waitFingerprint() any {
	r.t.Helper()
	r.waitFor("first scan", func() bool { _, _, ready := r.mgr.Current(); return ready && len(r.mgr.boards()) > 0 })
	fp, _, _ := r.mgr.Current()
	return fp
}

func statAttrs(t *testing.T, r *capsRig, i int) map[string]*structspb.StatValue {
	t.Helper()
	for _, grp := range r.mgr.Stats() {
		if st, ok := grp.GetInstanceStats()[r.uuid(i)]; ok {
			return st.GetStats().GetAttributes()
		}
	}
	t.Fatalf("no stats for GPU %d", i)
	return nil
}

func TestPowerCapsOutOfRangeNothingApplied(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(3)}, PowerCaps{})
	r.put("cap."+r.uuid(0), "450")
	r.waitFor("first cap", func() bool { return r.limitMW(0) == 450000 })

	r.put("cap."+r.uuid(0), "400", "cap."+r.uuid(1), "150", "cap."+r.uuid(2), "500")
	r.waitFor("refusal reported", func() bool { return strings.HasPrefix(r.capStat(1), "error:") })
	if got, want := r.capStat(1), "error: cap 150 W is outside the GPU's limits 200-700 W"; got != want {
		t.Errorf("GPU 1 power_cap %q, want %q", got, want)
	}
	for i, want := range []uint32{450000, 700000, 700000} {
		if got := r.limitMW(i); got != want {
			t.Errorf("GPU %d: %d mW after a refused version, want %d (nothing applied)", i, got, want)
		}
	}
	if got := r.capStat(0); !strings.HasPrefix(got, "error: not applied: "+r.uuid(1)+": cap 150 W is outside") {
		t.Errorf("GPU 0 power_cap %q; want it to say the version was not applied and why", got)
	}

	// A value that is not a number refuses the version, naming the item.
	r.put("cap."+r.uuid(0), "400", "cap."+r.uuid(2), "lots")
	want := "error: llmgw/power-caps/node-1: item cap." + r.uuid(2) + ` = "lots" is not a power in watts (a number above zero)`
	r.waitFor("bad value reported", func() bool { return r.capStat(2) == want })
	if r.limitMW(0) != 450000 {
		t.Errorf("GPU 0 at %d mW after a version with a bad item; want 450 W kept", r.limitMW(0))
	}

	// The next good version applies.
	r.put("cap."+r.uuid(0), "400", "cap."+r.uuid(1), "250")
	r.waitFor("good version", func() bool { return r.limitMW(0) == 400000 && r.limitMW(1) == 250000 })
}

func TestPowerCapsRefusedByGPUPutsBack(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(3)}, PowerCaps{})
	r.waitFingerprint()
	// Caps apply in UUID order: make the last in that order refuse, so the
	// ones before it are set and must be put back.
	order := []int{0, 1, 2}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(r.uuid(a), r.uuid(b)) })
	last := order[2]
	r.m.GPUs()[last].Update(func(g *MockGPU) { g.SetLimitErr = nvml.ERROR_NO_PERMISSION })
	r.put("cap."+r.uuid(0), "400", "cap."+r.uuid(1), "400", "cap."+r.uuid(2), "400")
	r.waitFor("refusal reported", func() bool { return strings.HasPrefix(r.capStat(last), "error:") })
	if got, want := r.capStat(last), "error: set 400 W: "+nvml.ErrorString(nvml.ERROR_NO_PERMISSION); got != want {
		t.Errorf("refusing GPU's power_cap %q, want %q", got, want)
	}
	for i := range 3 {
		if got := r.limitMW(i); got != 700000 {
			t.Errorf("GPU %d at %d mW: a version one GPU refused must leave every GPU as it was", i, got)
		}
	}
	first := order[0]
	if got := r.capStat(first); !strings.Contains(got, "not applied: "+r.uuid(last)+" refused 400 W: "+nvml.ErrorString(nvml.ERROR_NO_PERMISSION)) {
		t.Errorf("GPU set then put back says %q", got)
	}
}

func TestPowerCapsNoPermission(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxa100", GPUs: ptr(1), DenyPowerLimit: true}, PowerCaps{})
	r.put("cap."+r.uuid(0), "300")
	r.waitFor("refusal reported", func() bool { return r.capStat(0) == "error: set 300 W: "+nvml.ErrorString(nvml.ERROR_NO_PERMISSION) })
	if r.limitMW(0) != 400000 {
		t.Fatalf("limit %d mW", r.limitMW(0))
	}
}

func TestPowerCapsLeaseLossFallback(t *testing.T) {
	fb := 600.0
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(4)}, PowerCaps{Lease: time.Second, FallbackWatts: &fb})
	r.waitFingerprint()
	r.beat("")
	r.put(
		"cap."+r.uuid(0), "450", "fallback."+r.uuid(0), "400", // fallback below the cap
		"cap."+r.uuid(1), "500", // no fallback of its own; fallback_watts 600 is looser than its cap
		// GPU 2: no cap; fallback_watts applies
		"fallback."+r.uuid(3), "100", // below the GPU's 200 W minimum: held to it
	)
	// No heartbeat follows: within the 1s lease the controller is lost.
	r.waitFor("fallback caps", func() bool {
		return r.capStat(0) == "fallback 400 W: controller lost" && r.capStat(1) == "fallback 500 W: controller lost" &&
			r.capStat(2) == "fallback 600 W: controller lost" && r.capStat(3) == "fallback 200 W: controller lost"
	})
	for i, want := range []uint32{400000, 500000, 600000, 200000} {
		if got := r.limitMW(i); got != want {
			t.Errorf("GPU %d fallback: %d mW, want %d", i, got, want)
		}
	}

	// The heartbeat moves again (with a long lease in it): the controller's
	// caps apply again.
	r.beat("1h")
	r.waitFor("controller caps back", func() bool {
		return r.capStat(0) == "capped 450 W by controller" && r.capStat(1) == "capped 500 W by controller" &&
			r.capStat(2) == "default" && r.capStat(3) == "default"
	})
	for i, want := range []uint32{450000, 500000, 700000, 700000} {
		if got := r.limitMW(i); got != want {
			t.Errorf("GPU %d with the controller back: %d mW, want %d", i, got, want)
		}
	}
}

func TestPowerCapsLeaseLossKeepsCapsWithoutFallback(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(2)}, PowerCaps{Lease: time.Second})
	r.waitFingerprint()
	r.put("cap."+r.uuid(0), "450")
	r.waitFor("controller lost", func() bool { return r.capStat(0) == "fallback 450 W: controller lost" })
	if r.limitMW(0) != 450000 || r.limitMW(1) != 700000 || r.capStat(1) != "default" {
		t.Fatalf("with no fallback anywhere, lease loss must keep caps and add none: %s", r.states())
	}
}

func TestPowerCapsVariableDeletedRestoresDefaults(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(2)}, PowerCaps{})
	r.put("cap."+r.uuid(0), "450", "cap."+r.uuid(1), "350")
	r.waitFor("caps", func() bool { return r.limitMW(0) == 450000 && r.limitMW(1) == 350000 })
	if _, err := r.nc.Variables().Delete(r.pc.Prefix+"/"+r.pc.NodeName, nil); err != nil {
		t.Fatal(err)
	}
	r.waitFor("defaults restored", func() bool { return r.limitMW(0) == 700000 && r.limitMW(1) == 700000 })
	r.waitFor("states", func() bool { return r.capStat(0) == "default" && r.capStat(1) == "default" })
}

func TestPowerCapsRestartKeepsCaps(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(2)}, PowerCaps{})
	r.put("cap."+r.uuid(0), "450")
	r.waitFor("cap", func() bool { return r.limitMW(0) == 450000 })
	r.stop()
	if r.limitMW(0) != 450000 {
		t.Fatalf("stopping the plugin lifted the cap: %d mW", r.limitMW(0))
	}

	// A new process whose Nomad does not answer keeps the cap and says
	// what NVML shows.
	live := r.pc
	r.pc.NomadAddr = "http://127.0.0.1:1"
	r.start()
	r.waitFingerprint()
	if got := r.capStat(0); got != "limit 450 W, not set by llmgw" || r.limitMW(0) != 450000 {
		t.Fatalf("restart without Nomad: %d mW, power_cap %q; want the 450 W cap kept", r.limitMW(0), got)
	}
	r.stop()

	r.pc = live
	r.start()
	r.waitFor("restarted plugin reports the cap as the controller's", func() bool { return r.capStat(0) == "capped 450 W by controller" })
	if r.limitMW(0) != 450000 {
		t.Fatalf("after restart: %d mW", r.limitMW(0))
	}
}

func TestPowerCapsConfig(t *testing.T) {
	for _, c := range []struct{ hcl, err string }{
		{`power_caps { lease = "500ms" }`, "power_caps.lease: 500ms is too short (minimum 1s)"},
		{`power_caps { fallback_watts = 0 }`, "power_caps.fallback_watts: must be above zero, got 0"},
		{`power_caps { token_file = "/nonexistent/token" }`, "power_caps.token_file: open /nonexistent/token: no such file or directory"},
		{`power_caps { variable_prefix = "llmgw/power caps" }`, `power_caps: variable path "llmgw/power caps/`},
		{`power_caps { share_interval = "10ms" }`, "power_caps.share_interval: 10ms is out of range (100ms to 1m)"},
		{`power_caps { share_hold = "500ms" }`, "power_caps.share_hold: 500ms is too short (minimum 1s)"},
	} {
		_, err := decodeHCL(t, c.hcl)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: got %v, want %q", c.hcl, err, c.err)
		}
	}
	got, err := decodeHCL(t, `power_caps { node_name = "n7" }`)
	if err != nil {
		t.Fatal(err)
	}
	pc := got.PowerCaps
	if pc.Namespace != "default" || pc.Prefix != "llmgw/power-caps" || pc.Lease != 45*time.Second || pc.FallbackWatts != nil || pc.NodeName != "n7" ||
		pc.ShareInterval != time.Second || pc.ShareHold != 30*time.Second {
		t.Fatalf("defaults: %+v", *pc)
	}
}

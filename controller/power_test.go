package controller

import (
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// hiLo is two models of one GPU each, declared at the GPU's limit: "hi"
// (priority 80, one replica) and "lo" (priority 10, two).
const hiLo = `
model "hi" {
  source   = "org/hi"
  replicas = 1
  priority = 80
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 700
  }
}
model "lo" {
  source   = "org/lo"
  replicas = 2
  priority = 10
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 700
  }
}
`

// One node of 4 H200s (300 W base) under a PDU of 1.8 kW that counts
// measured: declared, it admits two 700 W replicas (2.4 kW for three).
const measuredPDU = `
headroom = 0
measured {
  min_samples = 3
}
budget "pdu=p1" {
  watts = 1800
  count = "measured"
}
`

// TestMeasuredAdmissionAndCaps runs the power part against the Nomad fake
// with device stats as nomad-device-nvml reports them: a PDU counting
// measured admits the third replica declared draw refused once the shards'
// draw is learned; a spike toward its limit caps the lower-priority
// model's GPUs (and the idle one) in the node's caps variable, leaving the
// higher-priority one alone, with fallbacks and a heartbeat; the caps lift
// once the draw stays low past the hold.
func TestMeasuredAdmissionAndCaps(t *testing.T) {
	measuredAdmissionAndCaps(t, nil, 6*time.Minute)
}

// TestPowerCapHoldFromConfig is TestMeasuredAdmissionAndCaps with
// llmgw.hcl's power_cap_hold at 30s: the caps lift a minute after the
// spike, where the default hold (5 minutes) would keep them.
func TestPowerCapHoldFromConfig(t *testing.T) {
	measuredAdmissionAndCaps(t, func(o *Options) { o.Config.PowerCapHold = 30 * time.Second }, time.Minute)
}

// gpuStats makes n1's 4 H200s report draw watts each in the fake's client
// stats, with the power limits (200–700 W) and cap state nomad-device-nvml
// reports beside it: "default", or for the last GPU refusal when set.
func gpuStats(t *testing.T, e *env, draw float64, refusal string) {
	t.Helper()
	node := e.NodeIDs["n1"]
	f := func(v float64) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v, Unit: "W"} }
	for i := range 4 {
		id := fmt.Sprintf("n1-gpu%d", i)
		if err := e.Fake.SetPowerDraw(node, id, draw); err != nil {
			t.Fatal(err)
		}
		state := "default"
		if refusal != "" && i == 3 {
			state = refusal
		}
		if err := e.Fake.SetDeviceStats(node, id, map[string]*api.StatValue{
			devicesapi.StatEnforcedLimit: f(700), devicesapi.StatDefaultLimit: f(700),
			devicesapi.StatMinLimit: f(200), devicesapi.StatMaxLimit: f(700),
			devicesapi.StatPowerCap: {StringVal: &state},
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// gpusByModel tells n1's GPUs apart by the allocations holding them: hi's,
// lo's, and those no replica holds.
func gpusByModel(e *env) (hi string, lo, idle map[string]bool) {
	lo, idle = map[string]bool{}, map[string]bool{"n1-gpu0": true, "n1-gpu1": true, "n1-gpu2": true, "n1-gpu3": true}
	for _, a := range e.Fake.Allocations("") {
		if a.DesiredStatus != api.AllocDesiredStatusRun || a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				for _, id := range d.DeviceIDs {
					delete(idle, id)
					if strings.Contains(a.JobID, "-hi-") {
						hi = id
					} else {
						lo[id] = true
					}
				}
			}
		}
	}
	return hi, lo, idle
}

// measuredAdmissionAndCaps runs the loop with the controller's options
// changed by mod (when not nil), moving the clock by advance once the
// spike has ended.
func measuredAdmissionAndCaps(t *testing.T, mod func(*Options), advance time.Duration) {
	e := newEnv(t, []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 4}}, hiLo, measuredPDU)
	draw := func(w float64) { t.Helper(); gpuStats(t, e, w, "") }
	draw(250)
	c := e.start("ctl", func(o *Options) {
		o.PowerInterval = 20 * time.Millisecond
		if mod != nil {
			mod(o)
		}
	})

	live := func() (n int, models string) {
		jobs := e.LiveJobs()
		var ms []string
		for _, j := range jobs {
			ms = append(ms, j.Model)
		}
		return len(jobs), strings.Join(ms, ",")
	}
	// Declared: two replicas fit (300 + 2 × 700 W), by priority hi first.
	wait.For(t, "two replicas placed by declared draw", func() (bool, string) {
		e.ServeAll()
		n, ms := live()
		return n == 2, ms
	})
	var fac controllerapi.FacilityView

	// Once three samples of lo/h1 and hi/h1 are in (250 W each, counted at
	// 275 W), the third replica fits: 300 + 3 × 275 W.
	wait.For(t, "the third replica placed by measured draw", func() (bool, string) {
		e.ServeAll()
		n, ms := live()
		return n == 3, ms
	})
	var pdu controllerapi.DomainView
	wait.For(t, "the facility view to count the third replica", func() (bool, string) {
		ctlharness.Call(t, http.MethodGet, c.URL+"/v1/facility", "", nil, &fac)
		for _, d := range fac.Domains {
			if d.Domain == "pdu=p1" {
				pdu = d
			}
		}
		return pdu.DeclaredWatts == 300+3*700, fmt.Sprintf("%+v", pdu)
	})
	// Committed is the node's measured draw (300 + 4 × 250 W), above the
	// shards' learned draw (300 + 3 × 275 W).
	if pdu.Count != "measured" || pdu.Committed != 1300 || !strings.Contains(pdu.Explain, "admitted 1.3 kW measured (declared would be 2.4 kW) of 1.8 kW") {
		t.Errorf("pdu=p1 after measured admission: %+v", pdu)
	}

	// A spike: every GPU at 600 W, the PDU at 2.7 kW. The idle GPU and lo's
	// two go down (floors 200 W) until the bound holds: 300 + 700 (hi,
	// uncapped) + 200 (idle) + 2 × 300 (lo) = 1.8 kW.
	draw(600)
	hiGPU, loGPUs, idle := gpusByModel(e)
	if hiGPU == "" || len(loGPUs) != 2 || len(idle) != 1 {
		t.Fatalf("GPUs: hi %q, lo %v, idle %v", hiGPU, loGPUs, idle)
	}
	capsVar := func() map[string]string {
		v := e.Fake.Variable("default", "llmgw/power-caps/n1")
		if v == nil {
			return nil
		}
		return v.Items
	}
	wait.For(t, "lo's GPUs capped in n1's caps variable", func() (bool, string) {
		items := capsVar()
		for id := range loGPUs {
			if items[devicesapi.CapItem+id] != "300" {
				return false, fmt.Sprint(items)
			}
		}
		return true, ""
	})
	items := capsVar()
	if _, capped := items[devicesapi.CapItem+hiGPU]; capped {
		t.Errorf("hi's GPU %s capped: %v", hiGPU, items)
	}
	for id := range loGPUs {
		if items[devicesapi.FallbackItem+id] == "" {
			t.Errorf("lo's GPU %s has no fallback: %v", id, items)
		}
	}
	if hb := e.Fake.Variable("default", "llmgw/power-caps/_heartbeat"); hb == nil || hb.Items["lease"] != "15s" {
		t.Errorf("heartbeat %+v, want one with lease 15s", hb)
	}
	// n1's share (format 2): the PDU's 1.8 kW less n1's 300 W base at
	// most, every GPU on it with its priority and floor; hi's GPU keeps
	// the most.
	share, err := devicesapi.ParseShare("n1", items)
	if err != nil || share.Watts <= 0 || share.Watts > 1500 {
		t.Errorf("n1's share %+v (%v), want one of at most 1,500 W: %v", share, err, items)
	}
	if g := share.GPUs[hiGPU]; g.Priority != 80 || g.Floor != 200 {
		t.Errorf("hi's GPU in the share: %+v, want priority 80, floor 200", g)
	}
	for id := range loGPUs {
		if g := share.GPUs[id]; g.Priority != 10 || g.Floor != 200 {
			t.Errorf("lo's GPU %s in the share: %+v, want priority 10, floor 200", id, g)
		}
	}
	// The round records its view just after it writes the variable: wait
	// for it.
	var pv controllerapi.PowerView
	wait.For(t, "the cap events in the power view", func() (bool, string) {
		pv = controllerapi.PowerView{}
		ctlharness.Call(t, http.MethodGet, c.URL+"/v1/power", "", nil, &pv)
		for _, ev := range pv.Events {
			if ev.Kind == "cap" && ev.Domain == "pdu=p1" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events %+v", pv.Events)
	})
	var capEvents int
	for _, ev := range pv.Events {
		if ev.Kind == "cap" && ev.Domain == "pdu=p1" && loGPUs[ev.GPU] && ev.Model == "lo" {
			capEvents++
		}
	}
	if capEvents != 2 || len(pv.Learned) == 0 {
		t.Errorf("power view: %d cap events on lo's GPUs, want 2; learned %+v; events %+v", capEvents, pv.Learned, pv.Events)
	}
	// The view names n1's share, as the variable holds it, over all its GPUs.
	var n1 []controllerapi.NodeShare
	for _, s := range pv.Shares {
		if s.Node == "n1" {
			n1 = append(n1, s)
		}
	}
	if len(n1) != 1 || n1[0].ShareWatts <= 0 || n1[0].ShareWatts > 1500 || n1[0].GPUs != len(share.GPUs) || n1[0].DrawWatts <= 0 {
		t.Errorf("power view's shares %+v: want n1's once, of at most 1,500 W over its %d GPUs, with their draw", pv.Shares, len(share.GPUs))
	}

	// The spike ends; past the hold (5 minutes under 85 % of the limit,
	// unless mod set power_cap_hold) the caps lift.
	draw(150)
	wait.For(t, "a round to see the draw low", func() (bool, string) {
		var pv controllerapi.PowerView
		ctlharness.Call(t, http.MethodGet, c.URL+"/v1/power", "", nil, &pv)
		for _, d := range pv.Domains {
			if d.Domain == "pdu=p1" {
				return d.DrawWatts < 1000, fmt.Sprint(d)
			}
		}
		return false, "no pdu=p1"
	})
	e.Clock.Advance(advance)
	wait.For(t, "the caps lifted", func() (bool, string) {
		items := capsVar()
		for k := range items {
			if strings.HasPrefix(k, devicesapi.CapItem) {
				return false, fmt.Sprint(items)
			}
		}
		return items != nil, fmt.Sprint(items)
	})

	// Without a budget over it, llmgw no longer manages the node's power:
	// its caps variable goes, and its plugin restores the default limits.
	e.WriteFacility("headroom = 0\n")
	if code, body := ctlharness.Call(t, http.MethodPost, c.URL+"/v1/reload", "", nil, nil); code != http.StatusOK {
		t.Fatalf("POST /v1/reload: %d %s", code, body)
	}
	wait.For(t, "n1's caps variable deleted", func() (bool, string) {
		items := capsVar()
		return items == nil, fmt.Sprint(items)
	})
}

// TestCapFloorIsTheProfilesMinWatts: a GPU is never capped below its
// profile's min_watts, even where its minimum limit would allow it. The
// PDU of TestMeasuredAdmissionAndCaps, with lo's profile floored at 450 W:
// in the spike the idle GPU goes to its minimum (200 W), lo's two stop at
// 450 W, and the rest comes off hi, whose GPU would otherwise stay
// uncapped.
func TestCapFloorIsTheProfilesMinWatts(t *testing.T) {
	floored := strings.Replace(hiLo, "  priority = 10\n  profile \"h1\" {\n", "  priority = 10\n  profile \"h1\" {\n    min_watts = 450\n", 1)
	if floored == hiLo {
		t.Fatal("the catalog has no lo profile to floor")
	}
	e := newEnv(t, []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 4}}, floored, measuredPDU)
	draw := func(w float64) { t.Helper(); gpuStats(t, e, w, "") }
	draw(250)
	c := e.start("ctl", func(o *Options) { o.PowerInterval = 20 * time.Millisecond })
	wait.For(t, "three replicas placed by measured draw", func() (bool, string) {
		e.ServeAll()
		jobs := e.LiveJobs()
		return len(jobs) == 3, fmt.Sprint(jobs)
	})

	draw(600)
	hiGPU, loGPUs, idle := gpusByModel(e)
	if hiGPU == "" || len(loGPUs) != 2 || len(idle) != 1 {
		t.Fatalf("GPUs: hi %q, lo %v, idle %v", hiGPU, loGPUs, idle)
	}
	capOf := func(items map[string]string, id string) float64 {
		var w float64
		if v, ok := items[devicesapi.CapItem+id]; !ok {
			return 700 // uncapped: its default limit
		} else if _, err := fmt.Sscan(v, &w); err != nil {
			t.Fatalf("cap of %s: %q: %v", id, v, err)
		}
		return w
	}
	var items map[string]string
	wait.For(t, "hi's GPU capped once lo's are at their floor", func() (bool, string) {
		items = nil
		if v := e.Fake.Variable("default", "llmgw/power-caps/n1"); v != nil {
			items = v.Items
		}
		// A round that already saw both of lo's replicas on their GPUs
		// (their floors written): one before it may cap hi while one of
		// lo's GPUs still counts as idle.
		for id := range loGPUs {
			if items[devicesapi.FloorItem+id] != "450" {
				return false, fmt.Sprint(items)
			}
		}
		return capOf(items, hiGPU) < 700, fmt.Sprint(items)
	})
	for id := range loGPUs {
		if got := capOf(items, id); got != 450 {
			t.Errorf("lo's GPU %s capped at %v W, want its profile's min_watts, 450 W: %v", id, got, items)
		}
	}
	for id := range idle {
		if got := capOf(items, id); got != 200 {
			t.Errorf("the idle GPU %s capped at %v W, want its minimum limit, 200 W: %v", id, got, items)
		}
	}
	// The bound holds: 300 W base + every cap ≤ the 1.8 kW limit.
	bound := 300.0
	for i := range 4 {
		bound += capOf(items, fmt.Sprintf("n1-gpu%d", i))
	}
	if bound > 1800 {
		t.Errorf("base and caps add up to %v W, over the 1.8 kW limit: %v", bound, items)
	}
	// A round records its view just after it writes the caps variable:
	// wait for the view of a round that had lo's GPUs' model.
	wait.For(t, "GET /v1/power to give lo's GPUs their profile's floor", func() (bool, string) {
		var pv controllerapi.PowerView
		ctlharness.Call(t, http.MethodGet, c.URL+"/v1/power", "", nil, &pv)
		var bad []string
		for _, g := range pv.GPUs {
			want := 200.0
			if loGPUs[g.UUID] {
				want = 450
			}
			if g.FloorWatts != want {
				bad = append(bad, fmt.Sprintf("GPU %s (%s) floor %v W, want %v W", g.UUID, g.Model, g.FloorWatts, want))
			}
		}
		return len(pv.GPUs) == 4 && len(bad) == 0, fmt.Sprintf("%d GPUs; %v", len(pv.GPUs), bad)
	})
}

// A GPU whose plugin reports a cap it could not set (NVML's error in its
// power_cap stat) makes the measured domain holding it admit as declared,
// with a refused event naming the GPU and the error; once the error clears,
// the domain counts measured again and the third replica fits.
func TestRefusedCapAdmitsDeclared(t *testing.T) {
	e := newEnv(t, []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 4}}, hiLo, measuredPDU)
	stats := func(refuse bool) {
		t.Helper()
		if refuse {
			gpuStats(t, e, 250, "error: Insufficient Permissions")
		} else {
			gpuStats(t, e, 250, "")
		}
	}
	stats(true)
	c := e.start("ctl", func(o *Options) { o.PowerInterval = 20 * time.Millisecond })
	pdu := func() controllerapi.DomainView {
		var fac controllerapi.FacilityView
		ctlharness.Call(t, http.MethodGet, c.URL+"/v1/facility", "", nil, &fac)
		for _, d := range fac.Domains {
			if d.Domain == "pdu=p1" {
				return d
			}
		}
		return controllerapi.DomainView{}
	}
	// Both models' draw learned and counted, the refusal seen: the view
	// counts the PDU declared, and two replicas are all it admits.
	wait.For(t, "the learned draw counted and the PDU admitting declared", func() (bool, string) {
		e.ServeAll()
		var pv controllerapi.PowerView
		ctlharness.Call(t, http.MethodGet, c.URL+"/v1/power", "", nil, &pv)
		counted := 0
		for _, l := range pv.Learned {
			if l.Counted {
				counted++
			}
		}
		d := pdu()
		return counted == 2 && len(pv.Refused) == 1 && d.Count == "declared" && len(e.LiveJobs()) == 2, fmt.Sprintf("counted %d, refused %+v, pdu %+v, %d jobs", counted, pv.Refused, d, len(e.LiveJobs()))
	})
	if n := len(e.LiveJobs()); n != 2 {
		t.Fatalf("%d replicas with a cap refused, want the 2 declared admits", n)
	}
	var pv controllerapi.PowerView
	ctlharness.Call(t, http.MethodGet, c.URL+"/v1/power", "", nil, &pv)
	found := false
	for _, ev := range pv.Events {
		if ev.Kind == "refused" && ev.Domain == "pdu=p1" && strings.Contains(ev.Reason, "n1-gpu3") && strings.Contains(ev.Reason, "Insufficient Permissions") {
			found = true
		}
	}
	if !found || pv.Refused[0].Domain != "pdu=p1" {
		t.Errorf("refusal: %+v, events %+v", pv.Refused, pv.Events)
	}

	stats(false)
	wait.For(t, "the third replica once caps work again", func() (bool, string) {
		e.ServeAll()
		d := pdu()
		return len(e.LiveJobs()) == 3 && d.Count == "measured", fmt.Sprintf("%d jobs, pdu %+v", len(e.LiveJobs()), d)
	})
}

// TestCapsVariableOfANodeWithNothingToCap is the demo's case: a node in a
// budgeted domain, its plugin taking caps, drawing far under the budget,
// so that none of its GPUs needs a cap or a fallback. Its caps variable is
// written all the same (the plugin must know the controller manages the
// node), with the managed item alone: the Nomad fake, like Nomad, refuses
// a variable without items, which had left the node without one and the
// controller logging "power caps not written" every round.
func TestCapsVariableOfANodeWithNothingToCap(t *testing.T) {
	e := newEnv(t, []ctlharness.Node{{Name: "n1", Rack: "r1", PDU: "p1", GPUs: 4}}, hiLo, "headroom = 0\nbudget \"pdu=p1\" {\n  watts = 10000\n}\n")
	gpuStats(t, e, 100, "")
	e.start("ctl", func(o *Options) { o.PowerInterval = 20 * time.Millisecond })
	// The heartbeat is written in the same round as the nodes' caps, after
	// them: once it exists, n1's variable has been written or refused.
	wait.For(t, "the caps heartbeat", func() (bool, string) {
		return e.Fake.Variable("default", "llmgw/power-caps/_heartbeat") != nil, ""
	})
	v := e.Fake.Variable("default", "llmgw/power-caps/n1")
	if v == nil {
		t.Fatal("n1's caps variable was not written (a variable without items is refused by Nomad)")
	}
	if want := map[string]string{devicesapi.ManagedItem: "true"}; !maps.Equal(map[string]string(v.Items), want) {
		t.Errorf("n1's caps variable holds %v, want %v", v.Items, want)
	}
}

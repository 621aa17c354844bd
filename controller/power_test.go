package controller

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
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

// measuredAdmissionAndCaps runs the loop with the controller's options
// changed by mod (when not nil), moving the clock by advance once the
// spike has ended.
func measuredAdmissionAndCaps(t *testing.T, mod func(*Options), advance time.Duration) {
	e := newEnv(t, []nodeDef{{"n1", "r1", "p1", 4}}, hiLo, measuredPDU)
	node := e.nodes["n1"]
	draw := func(w float64) {
		t.Helper()
		for i := range 4 {
			id := fmt.Sprintf("n1-gpu%d", i)
			if err := e.fake.SetPowerDraw(node, id, w); err != nil {
				t.Fatal(err)
			}
			f := func(v float64) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v, Unit: "W"} }
			state := "default"
			if err := e.fake.SetDeviceStats(node, id, map[string]*api.StatValue{
				devicesapi.StatEnforcedLimit: f(700), devicesapi.StatDefaultLimit: f(700),
				devicesapi.StatMinLimit: f(200), devicesapi.StatMaxLimit: f(700),
				devicesapi.StatPowerCap: {StringVal: &state},
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	draw(250)
	c := e.start("ctl", func(o *Options) {
		o.PowerInterval = 20 * time.Millisecond
		if mod != nil {
			mod(o)
		}
	})

	live := func() (n int, models string) {
		jobs := e.liveJobs()
		var ms []string
		for _, j := range jobs {
			ms = append(ms, j.Model)
		}
		return len(jobs), strings.Join(ms, ",")
	}
	// Declared: two replicas fit (300 + 2 × 700 W), by priority hi first.
	wait.For(t, "two replicas placed by declared draw", func() (bool, string) {
		e.serveAll()
		n, ms := live()
		return n == 2, ms
	})
	var fac controllerapi.FacilityView

	// Once three samples of lo/h1 and hi/h1 are in (250 W each, counted at
	// 275 W), the third replica fits: 300 + 3 × 275 W.
	wait.For(t, "the third replica placed by measured draw", func() (bool, string) {
		e.serveAll()
		n, ms := live()
		return n == 3, ms
	})
	var pdu controllerapi.DomainView
	wait.For(t, "the facility view to count the third replica", func() (bool, string) {
		call(t, http.MethodGet, c.url+"/v1/facility", "", nil, &fac)
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
	hiGPU, loGPUs := "", map[string]bool{}
	for _, a := range e.fake.Allocations("") {
		if a.DesiredStatus != api.AllocDesiredStatusRun || a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				for _, id := range d.DeviceIDs {
					if strings.Contains(a.JobID, "-hi-") {
						hiGPU = id
					} else {
						loGPUs[id] = true
					}
				}
			}
		}
	}
	if hiGPU == "" || len(loGPUs) != 2 {
		t.Fatalf("GPUs: hi %q, lo %v", hiGPU, loGPUs)
	}
	capsVar := func() map[string]string {
		v := e.fake.Variable("default", "llmgw/power-caps/n1")
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
	if hb := e.fake.Variable("default", "llmgw/power-caps/_heartbeat"); hb == nil || hb.Items["lease"] != "15s" {
		t.Errorf("heartbeat %+v, want one with lease 15s", hb)
	}
	// The round records its view just after it writes the variable: wait
	// for it.
	var pv controllerapi.PowerView
	wait.For(t, "the cap events in the power view", func() (bool, string) {
		pv = controllerapi.PowerView{}
		call(t, http.MethodGet, c.url+"/v1/power", "", nil, &pv)
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

	// The spike ends; past the hold (5 minutes under 85 % of the limit,
	// unless mod set power_cap_hold) the caps lift.
	draw(150)
	wait.For(t, "a round to see the draw low", func() (bool, string) {
		var pv controllerapi.PowerView
		call(t, http.MethodGet, c.url+"/v1/power", "", nil, &pv)
		for _, d := range pv.Domains {
			if d.Domain == "pdu=p1" {
				return d.DrawWatts < 1000, fmt.Sprint(d)
			}
		}
		return false, "no pdu=p1"
	})
	e.clock.Advance(advance)
	wait.For(t, "the caps lifted", func() (bool, string) {
		items := capsVar()
		for k := range items {
			if strings.HasPrefix(k, devicesapi.CapItem) {
				return false, fmt.Sprint(items)
			}
		}
		return items != nil, fmt.Sprint(items)
	})
}

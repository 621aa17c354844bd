package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The arithmetic of TestPowerCapsOnRealNomad. One node (node_base_watts
// 300) with 4 mock H200s (limit 700 W, minimum 200 W) whose draw follows
// their engines' CPU: 270 W idle (power_watts), 270 + 430 W × the CPU
// share their processes use, up to 700 W. PDU p1's budget is 1,650 W,
// counted measured, no headroom.
//
//   - Idle the node measures 300 + 4 × 270 = 1,380 W. Declared, a replica
//     counts 700 W (1 GPU × power_limit): max(1380, 300 + 700) fits, a
//     second (300 + 1400 = 1700 W) does not: declared admits 1 replica.
//   - Measured, a replica counts its learned idle draw (about 270 W) × 1.1:
//     300 + 3 × ~300 fits, so all three of the catalog run.
//   - The caps engage at 95 % (1,567.5 W): 188 W over idle, a fifth of a
//     CPU busy in the engines. The allocator holds 300 + Σ (cap, or 700 W
//     uncapped) ≤ 1,650: the GPU no replica holds goes to its 200 W floor
//     first, then both of lo's to (1650 − 300 − 700 − 200) / 2 = 225 W, and
//     hi's GPU keeps its 700 W.
//   - Capped and idle the node draws 300 + 270 + 200 + 2 × 225 = 1,220 W,
//     under the lift threshold (85 %: 1,402.5 W), so the caps lift after
//     power_cap_hold; uncapped and idle again (1,380 W) it stays under 95 %.
const (
	capsBudget   = 1650.0
	capsBase     = 300.0
	capsEngage   = 0.95 * capsBudget
	capsIdleW    = 270
	capsDeclared = 700.0 // a replica's declared draw: 1 GPU × power_limit
	capsGPUMax   = 700.0
	capsNode     = "gpu-1"
)

const capsCatalog = `
model "hi" {
  source   = %[1]q
  priority = 80
  replicas = 1
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    args   = ["-np", "1", "-c", "2048"]
  }
}
model "lo" {
  source   = %[1]q
  priority = 20
  replicas = 2
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    args   = ["-np", "1", "-c", "2048"]
  }
}
`

// min_samples 20: the rule's P95 over 20 samples is the 19th, so one
// sample taken while an engine loads its model does not make the learned
// draw that of a busy GPU.
const capsFacility = `
headroom = 0
count    = "measured"
measured {
  min_samples = 20
}
budget "pdu=p1" { watts = 1650 }
`

// TestPowerCapsOnRealNomad runs measured admission and GPU power caps
// end to end on a real Nomad: one client whose nomad-device-nvml shows 4
// mock H200s with draw = "load" and takes caps through power_caps, the
// llmgw controller binary polling power every 2 s, and llama.cpp's real
// server as the engine of two models (hi, priority 80, one replica; lo,
// priority 20, two). Checked from Nomad's API and the controller's:
//
//   - PDU p1, counted measured, runs 3 replicas where declared admits 1
//     (its declared_watts over its limit, its committed_watts under);
//   - a load spike sent straight to the engines drives the GPUs' draw over
//     the caps' engage threshold; caps land on lo's GPUs (and the unused
//     one), not hi's, in the node's caps variable and in the GPUs'
//     enforced_power_limit in Nomad's client stats; once they are in place
//     every sampled domain draw is under the limit. The node also holds
//     its share (format 2, issue 38), reading its GPUs every second: its
//     own caps may come before any sample shows the domain over the engage
//     line, and then they must be the node's ("by node share"); the share
//     with the node's base is within the limit;
//   - after the spike, past power_cap_hold (20 s here), the caps lift: the
//     variable has no cap. items and every GPU is back at 700 W.
func TestPowerCapsOnRealNomad(t *testing.T) {
	in := installRealEngine(t, "Hello world!")
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	bin := plugintest.Build(t, llmgwPkg)
	c := nomadtest.Start(t)
	c.AddClient(nomadtest.ClientOptions{
		Name:      capsNode,
		PluginDir: plugins,
		Meta: map[string]string{
			"llmgw.site": "lab", "llmgw.room": "a", "llmgw.row": "r1", "llmgw.rack": "k1", "llmgw.pdu": "p1",
		},
		Plugins: map[string]string{
			"nomad-device-nvml": fmt.Sprintf(`
    mock {
      system      = "dgxh200"
      gpus        = 4
      seed        = "caps-loop"
      draw        = "load"
      power_watts = %d
    }
    power_caps {
      nomad_addr = %q
      node_name  = %q
      lease      = "1m"
    }`, capsIdleW, c.Server.Addr(), capsNode),
			"nomad-driver-llmgw": `
    ready_timeout = "2m"` + localnomad.DriverPolicy(in.Binary),
		},
	})
	c.WaitReady(2 * time.Minute)
	nodeID := c.NodeID(capsNode)

	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ llamacpp = %q }", in.Binary),
		fmt.Sprintf(capsCatalog, in.Model), capsFacility, "power_interval = \"2s\"\npower_cap_hold = \"20s\"\n")
	startCtlBinary(t, bin, ctlConfigPath(cfg), "ctl")
	base := "http://" + cfg.Listen
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "healthz: " + resp.Status
	})

	// Measured admission: all three run, where declared admits one.
	waitServing(t, base, 8*time.Minute, "hi-0", "lo-0", "lo-1")
	jobs, _, err := c.API.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, j := range jobs {
		if strings.HasPrefix(j.ID, render.JobIDPrefix) && j.Status == "running" {
			live++
		}
	}
	declaredAdmits := int(math.Floor((capsBudget - capsBase) / capsDeclared))
	if live != 3 || declaredAdmits >= live {
		t.Errorf("Nomad runs %d llmgw jobs; want 3, more than the %d declared counting admits", live, declaredAdmits)
	}
	pdu := facilityDomain(t, base, "pdu=p1")
	if pdu.Count != "measured" || pdu.DeclaredWatts <= pdu.LimitWatts || pdu.Committed > pdu.LimitWatts {
		t.Errorf("pdu=p1 in GET /v1/facility: count %q, declared %.0f W, committed %.0f W, limit %.0f W; want measured, declared over the limit, committed within it",
			pdu.Count, pdu.DeclaredWatts, pdu.Committed, pdu.LimitWatts)
	}
	t.Logf("admitted: %d replicas measured, %d declared; %s", live, declaredAdmits, pdu.Explain)
	var pv controllerapi.PowerView
	getJSON(t, base+"/v1/power", &pv)
	t.Logf("learned: %+v", pv.Learned)

	// Which GPU serves which model, from the allocations' devices.
	gpuModel, addrs := capsEngines(t, c)
	var loGPUs, hiGPUs []string
	for id, m := range gpuModel {
		if m == "lo" {
			loGPUs = append(loGPUs, id)
		} else {
			hiGPUs = append(hiGPUs, id)
		}
	}
	sort.Strings(loGPUs)
	if len(loGPUs) != 2 || len(hiGPUs) != 1 || len(addrs) != 3 {
		t.Fatalf("GPUs by model %v, engines %v: want 2 of lo's, 1 of hi's, 3 engines", gpuModel, addrs)
	}

	// Idle before the spike: no caps (engine starts may have set some,
	// which lift after the hold).
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		items, err := capsItems(c)
		if err != nil {
			return false, err.Error()
		}
		var caps []string
		for k, v := range items {
			if strings.HasPrefix(k, devicesapi.CapItem) {
				caps = append(caps, k+"="+v)
			}
		}
		return items != nil && len(caps) == 0, fmt.Sprintf("caps variable %v (nil: not written yet)", items)
	})

	// The spike comes through the gateway (the llmgw gateway binary,
	// discovering the replicas from Nomad): one long stream at a time for
	// each replica of each model, so that least-outstanding gives every
	// engine one, bounded in count and time; the domain's draw is sampled
	// from Nomad's client stats every half second while it runs.
	gw := startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s")
	for _, model := range []string{"hi", "lo"} {
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(
				`{"model":"`+model+`","max_tokens":1,"messages":[{"role":"user","content":"Hi."}]}`))
			if err != nil {
				return false, err.Error()
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK, fmt.Sprintf("the gateway answered %s for %s: %.200s", resp.Status, model, b)
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	spikeStart := time.Now()
	for _, model := range []string{"hi", "lo", "lo"} {
		wg.Go(func() {
			for range 100 {
				if ctx.Err() != nil {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(
					`{"model":"`+model+`","stream":true,"max_tokens":100000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on."}]}`))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	var (
		firstOver, capped   time.Time
		byShare             bool // the caps first in place were the node's share caps
		maxDraw, maxCapped  float64
		overAfterCaps       []string
		samples, capSamples int
		last                string
	)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil && (capped.IsZero() || capSamples < 20) {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		st, err := deviceStatAttrs(c, nodeID)
		if err != nil {
			last = err.Error()
			continue
		}
		now := time.Now()
		draw, ok := capsBase, true
		var parts []string
		for _, id := range slices.Sorted(maps.Keys(st)) {
			a := st[id]
			d, lim := a[devicesapi.StatPowerDraw], a[devicesapi.StatEnforcedLimit]
			if d.FloatNumeratorVal == nil || lim.FloatNumeratorVal == nil {
				ok = false
				break
			}
			draw += *d.FloatNumeratorVal
			parts = append(parts, fmt.Sprintf("%s(%s) %.0f/%.0f W", id[:12], gpuModel[id], *d.FloatNumeratorVal, *lim.FloatNumeratorVal))
		}
		if !ok || len(st) != 4 {
			last = fmt.Sprintf("client stats of %d GPUs, not all with a draw and a limit", len(st))
			continue
		}
		samples++
		last = fmt.Sprintf("domain %.0f W: %s", draw, strings.Join(parts, ", "))
		maxDraw = math.Max(maxDraw, draw)
		if firstOver.IsZero() && draw >= capsEngage {
			firstOver = now
			t.Logf("first sample over the engage threshold (%.1f W) %s into the spike: %s", capsEngage, now.Sub(spikeStart).Round(time.Millisecond), last)
		}
		if !capped.IsZero() {
			capSamples++
			maxCapped = math.Max(maxCapped, draw)
			if draw > capsBudget {
				overAfterCaps = append(overAfterCaps, last)
			}
			continue
		}
		all, share := true, false
		for _, id := range loGPUs {
			// The plugin's word: a limit under the default, set by the
			// controller ("capped 225 W by controller") or by the node
			// holding its share ("capped 224 W by node share 1348 W").
			lim, state := st[id][devicesapi.StatEnforcedLimit].FloatNumeratorVal, st[id][devicesapi.StatPowerCap].StringVal
			if lim == nil || *lim >= capsGPUMax || state == nil || !strings.HasPrefix(*state, "capped ") {
				all = false
			}
			if state != nil && strings.Contains(*state, " by node share ") {
				share = true
			}
		}
		if all {
			capped, byShare = now, share
			t.Logf("caps in place on lo's GPUs %s into the spike: %s", now.Sub(spikeStart).Round(time.Millisecond), last)
		}
	}
	cancel()
	wg.Wait()
	spikeEnd := time.Now()
	if capped.IsZero() {
		t.Fatalf("no caps on lo's GPUs within the spike (%d samples, max domain draw %.0f W of %.0f W, engage at %.1f W); last: %s",
			samples, maxDraw, capsBudget, capsEngage, last)
	}
	if firstOver.IsZero() || firstOver.After(capped) {
		if !byShare {
			t.Errorf("caps in place at %s without a sample over the engage threshold before (first over: %v), and not the node's share caps", capped.Format(time.StampMilli), firstOver)
		} else {
			t.Logf("the node's share caps in place at %s, before any sample over %.1f W (first over: %v): the node caps itself at 95 %% of its share, reading its GPUs every second",
				capped.Format(time.StampMilli), capsEngage, firstOver)
		}
	} else {
		t.Logf("from the first sample over %.1f W to the caps in place: %s (power_interval 2s; Nomad's client stats every 1s)",
			capsEngage, capped.Sub(firstOver).Round(time.Millisecond))
	}
	t.Logf("max domain draw %.0f W in %d samples (limit %.0f W); after the caps %.0f W in %d samples", maxDraw, samples, capsBudget, maxCapped, capSamples)
	if len(overAfterCaps) > 0 {
		t.Errorf("domain over its %.0f W limit with the caps in place, %d of %d samples: %v", capsBudget, len(overAfterCaps), capSamples, overAfterCaps)
	}

	// The caps in the variable and the controller's view: lo's GPUs capped
	// by pdu=p1, at or above their floor; hi's not capped.
	items, err := capsItems(c)
	if err != nil {
		t.Fatal(err)
	}
	getJSON(t, base+"/v1/power", &pv)
	for _, id := range hiGPUs {
		if v, ok := items[devicesapi.CapItem+id]; ok {
			t.Errorf("hi's GPU %s capped at %s W while lo's could still come down: %v", id, v, items)
		}
	}
	for _, id := range loGPUs {
		if _, ok := items[devicesapi.CapItem+id]; !ok {
			t.Errorf("lo's GPU %s has no cap in the variable: %v", id, items)
		}
	}
	// The node's share (format 2): with its base, within the PDU's limit;
	// hi's GPU at a higher priority than lo's.
	if sh, err := devicesapi.ParseShare("caps variable", items); err != nil || sh.Watts <= 0 || capsBase+sh.Watts > capsBudget {
		t.Errorf("node share %+v (%v): want one with base %.0f W + share within %.0f W", sh, err, capsBase, capsBudget)
	} else {
		for _, hi := range hiGPUs {
			for _, lo := range loGPUs {
				if sh.GPUs[hi].Priority <= sh.GPUs[lo].Priority {
					t.Errorf("share items: hi's GPU at priority %d, lo's at %d", sh.GPUs[hi].Priority, sh.GPUs[lo].Priority)
				}
			}
		}
	}
	engaged := false
	for _, d := range pv.Domains {
		if d.Domain == "pdu=p1" {
			engaged = d.Engaged
			if d.BoundWatts > d.LimitWatts {
				t.Errorf("pdu=p1's caps leave a bound of %.0f W over its %.0f W limit: %+v", d.BoundWatts, d.LimitWatts, d)
			}
			t.Logf("GET /v1/power: %+v", d)
		}
	}
	if !engaged {
		t.Errorf("pdu=p1 not engaged in GET /v1/power during the spike: %+v", pv.Domains)
	}
	events := map[string]int{}
	for _, ev := range pv.Events {
		if ev.Domain == "pdu=p1" && ev.Model == "lo" {
			events[ev.Kind]++
		}
	}
	if events["cap"] == 0 {
		t.Errorf("no cap event for lo on pdu=p1 in GET /v1/power: %+v", pv.Events)
	}
	t.Logf("caps variable during the spike: %v", items)

	// After the spike, past the hold: no caps, every GPU at its default.
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		items, err := capsItems(c)
		if err != nil {
			return false, err.Error()
		}
		for k := range items {
			if strings.HasPrefix(k, devicesapi.CapItem) {
				return false, fmt.Sprintf("still capped: %v", items)
			}
		}
		return true, ""
	})
	for id := range gpuModel {
		waitCapStat(t, c, nodeID, id, "default", capsGPUMax)
	}
	t.Logf("caps lifted %s after the spike ended (power_cap_hold 20s)", time.Since(spikeEnd).Round(time.Second))
	getJSON(t, base+"/v1/power", &pv)
	lifts := 0
	for _, ev := range pv.Events {
		if ev.Domain == "pdu=p1" && ev.Model == "lo" && ev.Kind == "lift" {
			lifts++
		}
	}
	if lifts == 0 {
		t.Errorf("no lift event for lo on pdu=p1 in GET /v1/power: %+v", pv.Events)
	}
}

// facilityDomain is one domain of GET /v1/facility.
func facilityDomain(t *testing.T, base, name string) controllerapi.DomainView {
	t.Helper()
	var fv controllerapi.FacilityView
	getJSON(t, base+"/v1/facility", &fv)
	for _, d := range fv.Domains {
		if d.Domain == name {
			return d
		}
	}
	t.Fatalf("no %s in GET /v1/facility: %+v", name, fv.Domains)
	return controllerapi.DomainView{}
}

// capsItems reads the node's power-caps variable: nil when it does not
// exist (yet).
func capsItems(c *nomadtest.Cluster) (map[string]string, error) {
	v, _, err := c.API.Variables().Read(devicesapi.NodeCapsPath(devicesapi.PowerCapsPrefix, capsNode), nil)
	if err != nil {
		if strings.Contains(err.Error(), "not found") {
			return nil, nil
		}
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	return v.Items, nil
}

// capsEngines returns, from Nomad, the model each GPU of a running llmgw
// allocation serves and every such allocation's engine address.
func capsEngines(t *testing.T, c *nomadtest.Cluster) (map[string]string, []string) {
	t.Helper()
	gpus := map[string]string{}
	var addrs []string
	for _, stub := range runningLLMGWAllocs(t, c.API) {
		a, _, err := c.API.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		model := a.Job.Meta[render.MetaModel]
		for _, task := range a.AllocatedResources.Tasks {
			for _, d := range task.Devices {
				for _, id := range d.DeviceIDs {
					gpus[id] = model
				}
			}
		}
		addrs = append(addrs, allocAddr(t, a))
	}
	return gpus, addrs
}

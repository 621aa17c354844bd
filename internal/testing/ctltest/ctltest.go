// Package ctltest is the standard facility of the tests of llmgw ctl and
// of the web console, on the one controller test harness
// (internal/testing/ctlharness): a real controller against the Nomad fake
// on two rows of two racks of two 4-GPU nodes, power budgets, a hold in
// the facility file, and a catalog with a model that cannot be placed.
//
// By default the test holds the leader lock itself, so the controller
// stands by and places nothing on its own: Start runs its passes until the
// replicas settle, with a clock that never moves, so that every table the
// API serves is the same from run to run. With Lead the controller leads
// and reconciles by itself, as in production. With Autoscale the catalog
// has an autoscaled model too, and the controller reads its demand from a
// test gateway before each pass. With Power a PDU counts measured and
// draws near its limit, and the controller (leading) caps its GPUs.
package ctltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller"
	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// Epoch is the time on the fake's and the controller's clock, which never
// moves (unless the controller leads).
var Epoch = ctlharness.Epoch

// BaseWatts is every node's base draw; each GPU reports IdleGPUWatts.
const (
	BaseWatts    = ctlharness.BaseWatts
	IdleGPUWatts = 60
	GPU          = ctlharness.GPU
)

// Site is every node's site.
const Site = "ams1"

// Nodes is the fleet: rows r01 and r02, two racks each, two nodes per
// rack, each node on its own PDU.
var Nodes = []ctlharness.Node{
	{Name: "n01", Row: "r01", Rack: "r01-k01", PDU: "p01-a", GPUs: 4}, {Name: "n02", Row: "r01", Rack: "r01-k01", PDU: "p01-b", GPUs: 4},
	{Name: "n03", Row: "r01", Rack: "r01-k02", PDU: "p02-a", GPUs: 4}, {Name: "n04", Row: "r01", Rack: "r01-k02", PDU: "p02-b", GPUs: 4},
	{Name: "n05", Row: "r02", Rack: "r02-k01", PDU: "p03-a", GPUs: 4}, {Name: "n06", Row: "r02", Rack: "r02-k01", PDU: "p03-b", GPUs: 4},
	{Name: "n07", Row: "r02", Rack: "r02-k02", PDU: "p04-a", GPUs: 4}, {Name: "n08", Row: "r02", Rack: "r02-k02", PDU: "p04-b", GPUs: 4},
}

// Catalog: alpha spreads three single-GPU replicas over racks, beta is one
// two-node replica kept within a rack, gamma wants more GPUs than a node
// has and is never placed.
const Catalog = `
model "alpha" {
  source   = "org/alpha-8b"
  replicas = 3
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
  }
}
model "beta" {
  source   = "org/beta-70b"
  replicas = 1
  profile "x2n" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 2
    nodes       = 2
    keep_within = "rack"
    watts       = 900
  }
}
model "gamma" {
  source   = "org/gamma-405b"
  replicas = 1
  profile "h8" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 8
    watts  = 5600
  }
}
`

// Autoscaled is the model Options.Autoscale adds to the catalog: between
// one and three single-GPU replicas, four outstanding requests each.
const Autoscaled = `
model "delta" {
  source   = "org/delta-8b"
  priority = 70
  autoscale {
    min = 1
    max = 3
    target { outstanding_per_replica = 4 }
  }
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
  }
}
`

// Demand is what the test gateway of Options.Autoscale reports: requests
// outstanding per model.
var Demand = map[string]int64{"alpha": 3, "beta": 1, "delta": 6}

// Facility: a row budget, a budget per rack and one PDU's, and rack
// r02-k02 held in the file.
const Facility = `
headroom = 0.05
budget "row=r01"      { watts = 9000 }
budget "rack=r01-k01" { watts = 3500 }
budget "rack=r01-k02" { watts = 3500 }
budget "rack=r02-k01" { watts = 3500 }
budget "rack=r02-k02" { watts = 3500 }
budget "pdu=p01-a"    { watts = 1200 }
hold "rack=r02-k02" {
  reason = "PDU swap"
}
`

// Options change Start's set-up.
type Options struct {
	// Token is the controller's api_token: every API call but /healthz,
	// /metrics and the console's files needs it (Start's own reads send
	// it; Env.Call sends the token it is given). Without it the controller
	// runs with insecure_writes.
	Token string
	// Lead lets the controller take the leader lock and reconcile on its
	// own, on the real clock, instead of the test driving its passes.
	Lead bool
	// Autoscale adds the model Autoscaled to the catalog and a gateway
	// reporting Demand, which the controller reads before each pass Start
	// and Pass run (leading, on its own interval).
	Autoscale bool
	// Power makes PDU p01-a count measured (PowerFacility) and every GPU
	// report power limits and a cap state as nomad-device-nvml does, with
	// n01's GPUs drawing CappedGPUWatts: near the PDU's limit, so that its
	// caps engage. Caps are decided by the leader: Power implies Lead.
	Power bool
}

// PowerFacility is Facility with PDU p01-a counting measured (three
// samples suffice), for Options.Power.
const PowerFacility = `
headroom = 0.05
measured {
  min_samples = 3
}
budget "row=r01"      { watts = 9000 }
budget "rack=r01-k01" { watts = 3500 }
budget "rack=r01-k02" { watts = 3500 }
budget "rack=r02-k01" { watts = 3500 }
budget "rack=r02-k02" { watts = 3500 }
budget "pdu=p01-a"    {
  watts = 1200
  count = "measured"
}
hold "rack=r02-k02" {
  reason = "PDU swap"
}
`

// CappedGPUWatts is what each of n01's GPUs draws with Options.Power: its
// PDU p01-a then draws 300 + 4 × 200 = 1,100 W, under its 1,140 W limit
// (1,200 W less 5 % headroom) but at least 95 % of it (1,083 W), so its
// caps engage.
const CappedGPUWatts = 200

// GPU power limits every GPU reports with Options.Power, W.
const (
	GPUMinWatts     = 200
	GPUDefaultWatts = 700
)

// Env is a running controller on the fake: the harness's Env (T, Fake,
// NodeIDs, …) with the controller.
type Env struct {
	*ctlharness.Env
	Controller *controller.Controller
	// URL is the controller API's base URL (an httptest server).
	URL  string
	ctl  *ctlharness.Ctl
	opts Options
}

// Start runs a controller against a new fake with the test fleet, catalog
// and facility, and waits until its replicas settle. Everything stops when
// the test ends.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Power {
		opts.Lead = true
	}
	catalog, fac := Catalog, Facility
	if opts.Autoscale {
		catalog += Autoscaled
	}
	if opts.Power {
		fac = PowerFacility
	}
	h := ctlharness.New(t, ctlharness.Spec{
		Nodes: Nodes, Catalog: catalog, Facility: fac, Site: Site,
		// A leading controller learns, keeps history and rounds as time
		// passes: it runs on the real clock.
		RealTime: opts.Lead, LogLevel: slog.LevelWarn,
		Fake: []nomadfake.Option{nomadfake.WithAutoRun(true)},
	})
	for _, n := range Nodes {
		id := h.NodeIDs[n.Name]
		for _, g := range ctlharness.GPUIDs(n) {
			w := float64(IdleGPUWatts)
			if opts.Power && n.Name == "n01" {
				w = CappedGPUWatts
			}
			if err := h.Fake.SetPowerDraw(id, g, w); err != nil {
				t.Fatal(err)
			}
			if opts.Power {
				if err := h.Fake.SetDeviceStats(id, g, limitStats()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	h.Config.APIToken = opts.Token
	// Without a token the API takes writes only in insecure mode (its
	// server is on loopback).
	h.Config.InsecureWrites = opts.Token == ""
	if opts.Autoscale {
		gw := httptest.NewServer(http.HandlerFunc(serveDemand))
		t.Cleanup(gw.Close)
		h.Config.Autoscale = &config.Autoscale{Interval: time.Hour, Timeout: 5 * time.Second, Gateways: []string{gw.URL}}
		if opts.Lead {
			h.Config.Autoscale.Interval = time.Second
		}
	}
	if !opts.Lead {
		h.HoldLock()
	}
	e := &Env{Env: h, opts: opts}
	e.ctl = h.Start("ctl-test", func(s ctlharness.Setup) (ctlharness.Controller, error) {
		c, err := controller.New(controller.Options{
			Config: s.Config, Nomad: s.Nomad, Identity: s.Name, Now: s.Now, Logger: s.Logger,
			PowerInterval: 50 * time.Millisecond, LockTTL: ctlharness.LockTTL,
			// nomadfake's allocations have loopback addresses no engine serves:
			// reading them would put errors in the tables the tests compare.
			EngineMetricsInterval: time.Hour,
		})
		if err != nil {
			return nil, err
		}
		e.Controller = c
		if opts.Autoscale {
			return readsDemand{c}, nil
		}
		return c, nil
	})
	e.ctl.NotYet = notYet
	e.URL = e.ctl.URL
	e.settle()
	return e
}

// notYet is a pass's error while the controller has not read every list
// of Nomad, or its own last writes, yet.
func notYet(err error) bool {
	return errors.Is(err, controller.ErrNotSynced) || errors.Is(err, controller.ErrBehind)
}

// readsDemand is a controller with Options.Autoscale whose passes (Start's
// and Pass's) read the test gateway's demand first.
type readsDemand struct{ *controller.Controller }

func (c readsDemand) Pass(ctx context.Context) error {
	c.ReadSignals(ctx)
	return c.Controller.Pass(ctx)
}

// limitStats are the stats nomad-device-nvml adds beside a GPU's draw
// when it manages caps: its limits and who set the enforced one.
func limitStats() map[string]*api.StatValue {
	w := func(v float64) *api.StatValue { return &api.StatValue{FloatNumeratorVal: &v, Unit: "W"} }
	state := "default"
	return map[string]*api.StatValue{
		devicesapi.StatEnforcedLimit: w(GPUDefaultWatts), devicesapi.StatDefaultLimit: w(GPUDefaultWatts),
		devicesapi.StatMinLimit: w(GPUMinWatts), devicesapi.StatMaxLimit: w(GPUDefaultWatts),
		devicesapi.StatPowerCap: {StringVal: &state},
	}
}

// StartUnread runs a controller with the test catalog and facility whose
// Nomad never answers (its address refuses connections), so that it never
// reads Nomad: the API's answers before a controller's first read. Only
// URL, Controller and T are set.
func StartUnread(t testing.TB) *Env {
	t.Helper()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // its address now refuses connections
	h := ctlharness.New(t, ctlharness.Spec{Catalog: Catalog, Facility: Facility, Site: Site, LogLevel: slog.LevelError})
	e := &Env{Env: h}
	e.ctl = h.StartAt("ctl-unread", gone.URL, &ctlharness.Tap{}, func(s ctlharness.Setup) (ctlharness.Controller, error) {
		c, err := controller.New(controller.Options{
			Config: s.Config, Nomad: s.Nomad, Identity: s.Name, Now: s.Now, Logger: s.Logger,
			LockTTL: ctlharness.LockTTL, EngineMetricsInterval: time.Hour,
		})
		e.Controller = c
		return c, err
	})
	e.URL = e.ctl.URL
	return e
}

// serveDemand answers a gateway's demand (gatewayapi.DemandPath) with Demand.
func serveDemand(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != gatewayapi.DemandPath {
		http.NotFound(w, r)
		return
	}
	d := gatewayapi.Demand{SampledAt: Epoch, StartedAt: Epoch.Add(-time.Hour), WindowSeconds: 30, Models: []gatewayapi.ModelDemand{}}
	for _, m := range []string{"alpha", "beta", "delta"} {
		d.Models = append(d.Models, gatewayapi.ModelDemand{Model: m, State: gatewayapi.StateServing, Outstanding: Demand[m], ArrivalRate: float64(Demand[m])})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d)
}

// settle waits until every node's power has been read; then, standing
// by, it runs passes until one writes nothing (the harness's Settle); and
// then it waits (standing by: passing before each look) until the
// replicas are the same twice in a row and none is on its way, so that
// the tables the tests compare are the same from run to run.
func (e *Env) settle() {
	e.T.Helper()
	wait.For(e.T, "every node's power reading", func() (bool, string) {
		var nodes []controllerapi.NodeView
		if code, body := e.Call(http.MethodGet, "/v1/nodes", e.opts.Token, nil, &nodes); code != http.StatusOK {
			return false, body
		}
		if len(nodes) != len(Nodes) {
			return false, fmt.Sprintf("%d nodes", len(nodes))
		}
		for _, n := range nodes {
			if n.Measured == 0 {
				return false, n.Name + " not measured"
			}
		}
		return true, ""
	})
	if !e.opts.Lead {
		e.Settle(e.ctl)
	}
	last, stable := "", 0
	wait.For(e.T, "the replicas to settle", func() (bool, string) {
		if !e.opts.Lead {
			e.Pass()
		}
		_, body := e.Call(http.MethodGet, "/v1/replicas", e.opts.Token, nil, nil)
		moving := strings.Contains(body, `"pending"`) || strings.Contains(body, `"starting"`) || strings.Contains(body, `"partial"`)
		if body == last && !moving {
			stable++
		} else {
			stable = 0
		}
		last = body
		return stable >= 2, body
	})
}

// Pass runs one pass of a standing-by controller (with Autoscale, after
// it read the gateway's demand), again while it has not caught up with
// Nomad.
func (e *Env) Pass() {
	e.T.Helper()
	e.Env.Pass(e.ctl)
}

// Call sends one request to the controller API (ctlharness.Call): body,
// when not nil, is sent as JSON, and a 2xx answer is decoded into out when
// out is not nil. It returns the status code and the raw body.
func (e *Env) Call(method, path, token string, body, out any) (int, string) {
	e.T.Helper()
	return ctlharness.Call(e.T, method, e.URL+path, token, body, out)
}

// Artifacts returns the folder for a test's output files: under
// $LLMGW_TEST_ARTIFACTS when set (kept after the test), else a temporary
// folder.
func Artifacts(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("LLMGW_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

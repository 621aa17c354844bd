// Package ctltest runs a real controller against the Nomad fake
// (internal/testing/nomadfake) on a small facility — two rows of two racks of two
// 4-GPU nodes, power budgets, a hold in the facility file, and a catalog
// with a model that cannot be placed — for the tests of llmgw ctl and of
// the web console.
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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

// Epoch is the time on the fake's and the controller's clock, which never
// moves.
var Epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// BaseWatts is every node's base draw; each GPU reports IdleGPUWatts.
const (
	BaseWatts    = 300
	IdleGPUWatts = 60
	GPU          = "NVIDIA H200"
)

// Node is one node of the test fleet.
type Node struct {
	Name, Row, Rack, PDU string
	GPUs                 int
}

// Nodes is the fleet: rows r01 and r02, two racks each, two nodes per
// rack, each node on its own PDU.
var Nodes = []Node{
	{"n01", "r01", "r01-k01", "p01-a", 4}, {"n02", "r01", "r01-k01", "p01-b", 4},
	{"n03", "r01", "r01-k02", "p02-a", 4}, {"n04", "r01", "r01-k02", "p02-b", 4},
	{"n05", "r02", "r02-k01", "p03-a", 4}, {"n06", "r02", "r02-k01", "p03-b", 4},
	{"n07", "r02", "r02-k02", "p04-a", 4}, {"n08", "r02", "r02-k02", "p04-b", 4},
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

// Env is a running controller on the fake.
type Env struct {
	T          testing.TB
	Fake       *nomadfake.Server
	Controller *controller.Controller
	// URL is the controller API's base URL (an httptest server).
	URL     string
	NodeIDs map[string]string
	opts    Options
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("controller: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Start runs a controller against a new fake with the test fleet, catalog
// and facility, and waits until its replicas settle. Everything stops when
// the test ends.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	if opts.Power {
		opts.Lead = true
	}
	now := func() time.Time { return Epoch }
	fakeOpts := []nomadfake.Option{nomadfake.WithAutoRun(true)}
	if !opts.Lead {
		fakeOpts = append(fakeOpts, nomadfake.WithClock(now))
	} else {
		now = time.Now
	}
	fake := nomadfake.New(fakeOpts...)
	t.Cleanup(fake.Close)
	e := &Env{T: t, Fake: fake, NodeIDs: map[string]string{}, opts: opts}
	for _, n := range Nodes {
		var ids []string
		for i := range n.GPUs {
			ids = append(ids, fmt.Sprintf("%s-gpu%d", n.Name, i))
		}
		id := fake.AddNode(nomadfake.NodeSpec{
			Name: n.Name,
			Meta: map[string]string{
				"llmgw.site": "ams1", "llmgw.room": "a", "llmgw.row": n.Row,
				"llmgw.rack": n.Rack, "llmgw.pdu": n.PDU,
			},
			Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(GPU, 700, 143771, ids...)},
		})
		e.NodeIDs[n.Name] = id
		for _, g := range ids {
			w := float64(IdleGPUWatts)
			if opts.Power && n.Name == "n01" {
				w = CappedGPUWatts
			}
			if err := fake.SetPowerDraw(id, g, w); err != nil {
				t.Fatal(err)
			}
			if opts.Power {
				if err := fake.SetDeviceStats(id, g, limitStats()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	dir := t.TempDir()
	cfg := config.Default(dir)
	cfg.NodeBaseWatts = BaseWatts
	cfg.APIToken = opts.Token
	// Without a token the API takes writes only in insecure mode (its
	// server is on loopback).
	cfg.InsecureWrites = opts.Token == ""
	cfg.Reconcile.Interval = time.Second
	catalog := Catalog
	var gateways []string
	if opts.Autoscale {
		catalog += Autoscaled
		gw := httptest.NewServer(http.HandlerFunc(serveDemand))
		t.Cleanup(gw.Close)
		gateways = []string{gw.URL}
		cfg.Autoscale = &config.Autoscale{Interval: time.Hour, Timeout: 5 * time.Second, Gateways: gateways}
		if opts.Lead {
			cfg.Autoscale.Interval = time.Second
		}
	}
	facility := Facility
	if opts.Power {
		facility = PowerFacility
	}
	for path, src := range map[string]string{cfg.Catalog: catalog, cfg.Facility: facility} {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !opts.Lead {
		holdLock(t, fake)
	}
	client, err := api.NewClient(fake.Config())
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Options{
		Config: cfg, Nomad: client, Identity: "ctl-test", Now: now,
		Logger:        slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PowerInterval: 50 * time.Millisecond, LockTTL: 10 * time.Second,
		// nomadfake's allocations have loopback addresses no engine serves:
		// reading them would put errors in the tables the tests compare.
		EngineMetricsInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Controller = c
	e.URL = serve(t, c, client)
	e.settle()
	return e
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

// serve runs c until the test ends, its API on a loopback server whose URL
// it returns; the test's end stops c, then closes the server and client.
func serve(t testing.TB, c *controller.Controller, client *api.Client) string {
	srv := httptest.NewServer(c.Handler())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
		client.Close()
	})
	return srv.URL
}

// StartUnread runs a controller with the test catalog and facility whose
// Nomad never answers (its address refuses connections), so that it never
// reads Nomad: the API's answers before a controller's first read. Only
// URL, Controller and T are set.
func StartUnread(t testing.TB) *Env {
	t.Helper()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // its address now refuses connections
	dir := t.TempDir()
	cfg := config.Default(dir)
	cfg.InsecureWrites = true // its server is on loopback
	for path, src := range map[string]string{cfg.Catalog: Catalog, cfg.Facility: Facility} {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	client, err := api.NewClient(&api.Config{Address: gone.URL})
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Options{
		Config: cfg, Nomad: client, Identity: "ctl-unread", LockTTL: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), EngineMetricsInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, Controller: c, URL: serve(t, c, client)}
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

// holdLock takes the controller's leader lock for the test, so that the
// controller stands by.
func holdLock(t testing.TB, fake *nomadfake.Server) {
	t.Helper()
	locks, err := fake.Client(t).Locks(api.WriteOptions{}, api.Variable{
		Path: store.LeaderPath, Items: api.VariableItems{"holder": "test"},
		Lock: &api.VariableLock{TTL: "10s", LockDelay: "10s"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Acquire(t.Context()); err != nil {
		t.Fatalf("test leader lock: %v", err)
	}
}

// settle waits until every node's power has been read, then (standing
// by) runs passes, or (leading) waits, until the replicas are the same
// twice in a row and none is on its way.
func (e *Env) settle() {
	e.T.Helper()
	e.WaitFor("every node's power reading", func() (bool, string) {
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
	last, stable := "", 0
	e.WaitFor("the replicas to settle", func() (bool, string) {
		if !e.opts.Lead {
			if e.opts.Autoscale {
				e.Controller.ReadSignals(context.Background())
			}
			err := e.Controller.Pass(context.Background())
			if errors.Is(err, controller.ErrNotSynced) || errors.Is(err, controller.ErrBehind) {
				return false, err.Error()
			}
			if err != nil {
				e.T.Fatalf("pass: %v", err)
			}
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

// Pass runs one pass of a standing-by controller, retrying while it
// has not caught up with Nomad.
func (e *Env) Pass() {
	e.T.Helper()
	e.WaitFor("a pass", func() (bool, string) {
		if e.opts.Autoscale {
			e.Controller.ReadSignals(context.Background())
		}
		err := e.Controller.Pass(context.Background())
		if errors.Is(err, controller.ErrNotSynced) || errors.Is(err, controller.ErrBehind) {
			return false, err.Error()
		}
		if err != nil {
			e.T.Fatalf("pass: %v", err)
		}
		return true, ""
	})
}

// WaitFor polls cond until it holds, failing the test after 30 s with
// cond's last description of what it saw.
func (e *Env) WaitFor(what string, cond func() (bool, string)) {
	e.T.Helper()
	WaitFor(e.T, what, cond)
}

// WaitFor polls cond until it holds, failing the test after 30 s (generous,
// for a loaded 2-core machine) with cond's last description.
func WaitFor(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last saw: %s", what, saw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Call sends one request to the controller API; body, when not nil, is
// sent as JSON, and a 2xx answer is decoded into out when out is not nil.
// It returns the status code and the raw body.
func (e *Env) Call(method, path, token string, body, out any) (int, string) {
	e.T.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.T.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.T.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			e.T.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, string(raw)
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

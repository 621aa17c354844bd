package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/httpjson"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// The autoscaler wired into the controller, over the Nomad fake. Signal
// rounds are run by the test (signalRound) on the fake clock, one a
// second, and passes by hand (the test holds the leader lock): nothing
// depends on how fast the machine is.

// chatCatalog is one autoscaled model of single-GPU replicas: 4
// outstanding requests per replica, a 5 s up window, a 1 minute down
// window.
const chatCatalog = `
model "chat" {
  source   = "org/chat"
  priority = 60
  autoscale {
    min         = 2
    max         = 5
    target { outstanding_per_replica = 4 }
    up_window   = "5s"
    down_window = "1m"
    max_step    = 2
  }
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
  }
}
`

// roomBudget lets the six nodes (300 W each) draw three 500 W replicas.
const roomBudget = `
headroom = 0
budget "room=a" { watts = 3400 }
`

// fakeGateway serves a gateway's demand (gatewayapi.DemandPath) as the test
// sets it, or fails.
type fakeGateway struct {
	srv *httptest.Server
	mu  sync.Mutex
	d   map[string]gatewayapi.ModelDemand
	err int // an HTTP status to answer instead; 0: the demand
}

func newFakeGateway(t *testing.T) *fakeGateway {
	t.Helper()
	g := &fakeGateway{d: map[string]gatewayapi.ModelDemand{}}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != gatewayapi.DemandPath {
			http.NotFound(w, r)
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.err != 0 {
			http.Error(w, "test: gateway failing", g.err)
			return
		}
		d := gatewayapi.Demand{SampledAt: time.Now(), StartedAt: time.Now().Add(-time.Hour), WindowSeconds: 30, Models: []gatewayapi.ModelDemand{}}
		for _, m := range sortedKeys(g.d) {
			d.Models = append(d.Models, g.d[m])
		}
		httpjson.Write(w, http.StatusOK, d)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// set sets a model's outstanding requests (and as many arriving per
// second).
func (g *fakeGateway) set(model string, outstanding int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.d[model] = gatewayapi.ModelDemand{Model: model, State: gatewayapi.StateServing, Outstanding: outstanding, ArrivalRate: float64(outstanding)}
}

func (g *fakeGateway) fail(status int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = status
}

// scaleEnv is an env whose controller reads demand from one fake gateway,
// with signal rounds the test runs.
type scaleEnv struct {
	*env
	gw *fakeGateway
	c  *ctl
	st *signalState
}

func newScaleEnv(t *testing.T, catalog, fac string) *scaleEnv {
	t.Helper()
	e := newEnv(t, sixNodes, catalog, fac)
	// Rounds come from the test: the controller's own loop waits an hour.
	e.Config.Autoscale = &config.Autoscale{Interval: time.Hour, Timeout: 5 * time.Second}
	gw := newFakeGateway(t)
	e.HoldLock()
	c := e.start("ctl", func(o *Options) {
		o.Gateways = func(context.Context) ([]string, error) { return []string{gw.srv.URL}, nil }
	})
	return &scaleEnv{env: e, gw: gw, c: c, st: c.newSignalState()}
}

// rounds advances the clock by a second and runs a signal round, n times.
func (s *scaleEnv) rounds(n int) {
	for range n {
		s.Clock.Advance(time.Second)
		s.c.signalRound(context.Background(), s.st)
	}
}

// model reads GET /v1/models/{name}.
func (s *scaleEnv) model(name string) controllerapi.ModelView {
	s.T.Helper()
	var mv controllerapi.ModelView
	if code, body := ctlharness.Call(s.T, http.MethodGet, s.c.URL+"/v1/models/"+name, "", nil, &mv); code != http.StatusOK {
		s.T.Fatalf("GET /v1/models/%s: %d %s", name, code, body)
	}
	return mv
}

// scaled runs the pass after one that changed a count: as the job
// list's change would in production, it shows the scaler the new count.
func (s *scaleEnv) scaled() {
	s.T.Helper()
	if n := s.Pass(s.c); n != 0 {
		s.T.Errorf("the pass after a scale sent %d job writes", n)
	}
}

// settleServing places what the controller wants and serves it.
func (s *scaleEnv) settleServing() {
	s.T.Helper()
	s.Settle(s.c)
	s.ServeAll()
	s.Pass(s.c)
}

func (s *scaleEnv) slots(model string) []string {
	var out []string
	for _, j := range s.LiveJobs() {
		if j.Model == model {
			out = append(out, j.Replica)
		}
	}
	return out
}

// Demand up: the count follows it by the up window, max_step at a time,
// as far as the room's budget allows; the rest is explained.
func TestDemandScalesUpWithinTheBudget(t *testing.T) {
	s := newScaleEnv(t, chatCatalog, roomBudget)
	s.settleServing()
	if got := s.slots("chat"); len(got) != 2 {
		t.Fatalf("chat starts with %v, want its min of 2 slots", got)
	}
	if mv := s.model("chat"); mv.Wanted != 2 || mv.Has != 2 || mv.Serving != 2 || mv.Min != 2 || mv.Max != 5 || !mv.Autoscale {
		t.Errorf("chat at the start: %+v", mv)
	}

	// 12 outstanding: 3 replicas over the up window (not a panic: that
	// takes twice the count).
	s.gw.set("chat", 12)
	s.rounds(6)
	if n := s.Pass(s.c); n != 1 {
		t.Errorf("the scale up sent %d job writes, want one create", n)
	}
	mv := s.model("chat")
	if mv.Decision == nil || mv.Decision.Rule != "up" || mv.Wanted != 3 || mv.Has != 3 {
		t.Fatalf("after 12 outstanding for the up window: %+v %+v", mv, mv.Decision)
	}
	if !strings.Contains(mv.Reason, "up 2→3: 3.0 replicas needed over up_window 5s by outstanding_per_replica = 4") {
		t.Errorf("reason %q", mv.Reason)
	}
	s.scaled()
	if mv.Signals == nil || mv.Signals.Outstanding.Value == nil || *mv.Signals.Outstanding.Value != 12 || mv.Signals.Outstanding.Source != controllerapi.SourceGateways {
		t.Errorf("signals %+v", mv.Signals)
	}
	s.ServeAll()

	// 20 outstanding: 5 wanted, but the room holds three.
	s.gw.set("chat", 20)
	s.rounds(6)
	if n := s.Pass(s.c); n != 0 {
		t.Errorf("a scale up past the budget sent %d job writes", n)
	}
	mv = s.model("chat")
	if mv.Wanted != 5 || mv.Has != 3 || mv.Serving != 3 {
		t.Errorf("wanted %d, has %d, serving %d; want 5, 3, 3", mv.Wanted, mv.Has, mv.Serving)
	}
	if !strings.HasPrefix(mv.Explain, "wants 5, has 3: room=a would draw") {
		t.Errorf("explain %q, want the room's budget", mv.Explain)
	}
	if got := s.slots("chat"); len(got) != 3 {
		t.Errorf("chat's jobs: %v, want the 3 the room's budget holds", got)
	}
	// A replica's explain says it too.
	var d controllerapi.ReplicaDetail
	if code, body := ctlharness.Call(t, http.MethodGet, s.c.URL+"/v1/replicas/chat-0", "", nil, &d); code != http.StatusOK || d.Scale == nil ||
		!strings.HasPrefix(d.Scale.Explain, "wants 5, has 3: room=a would draw") || !strings.Contains(d.Scale.Reason, "up 3→5") {
		t.Errorf("GET /v1/replicas/chat-0: %d scale %+v (%s)", code, d.Scale, body)
	}

	m := s.c.metrics
	for _, tc := range []struct {
		what string
		got  float64
		want float64
	}{
		{"desired", testutil.ToFloat64(m.modelDesired.WithLabelValues("chat")), 5},
		{"serving", testutil.ToFloat64(m.modelServing.WithLabelValues("chat")), 3},
		{"events min", testutil.ToFloat64(m.scaleEvents.WithLabelValues("chat", "min")), 1},
		{"events up", testutil.ToFloat64(m.scaleEvents.WithLabelValues("chat", "up")), 1},
		{"signal", testutil.ToFloat64(m.modelSignal.WithLabelValues("chat", controllerapi.SignalOutstanding)), 20},
	} {
		if tc.got != tc.want {
			t.Errorf("metric %s = %g, want %g", tc.what, tc.got, tc.want)
		}
	}
	if mv.LastChange == nil || mv.LastChange.From != 2 || mv.LastChange.To != 3 || mv.LastChange.Reason != "up" {
		t.Errorf("last change %+v", mv.LastChange)
	}
	h, ok := s.c.History("chat")
	if !ok || len(h.Points) != 12 || h.Points[11].Wanted != 3 || *h.Points[11].Outstanding != 20 {
		t.Errorf("history: %v %+v", ok, h.Points)
	}
}

// A gateway that does not answer, or no gateway at all, is a missing
// signal: the count holds, and the API says why.
func TestMissingSignalHolds(t *testing.T) {
	s := newScaleEnv(t, chatCatalog, roomBudget)
	s.settleServing()
	s.gw.set("chat", 0)
	s.rounds(3)
	s.gw.fail(http.StatusInternalServerError)
	s.rounds(70) // past the down window: with readings it would go down
	if n := s.Pass(s.c); n != 0 {
		t.Errorf("a pass on missing data sent %d job writes", n)
	}
	mv := s.model("chat")
	if mv.Decision == nil || mv.Decision.Rule != "stale" || mv.Wanted != 2 {
		t.Fatalf("decision %+v, wanted %d; want a stale hold at 2", mv.Decision, mv.Wanted)
	}
	for _, want := range []string{"holds at 2: outstanding_per_replica's signal is missing (gateway " + s.gw.srv.URL, "500", "counts never move on missing data"} {
		if !strings.Contains(mv.Decision.Reason, want) {
			t.Errorf("reason %q lacks %q", mv.Decision.Reason, want)
		}
	}
	if mv.Signals == nil || mv.Signals.Outstanding.Value != nil || !strings.Contains(mv.Signals.Outstanding.Error, s.gw.srv.URL) {
		t.Errorf("signals: %+v", mv.Signals)
	}
	var sv controllerapi.SignalsView
	ctlharness.Call(t, http.MethodGet, s.c.URL+"/v1/signals", "", nil, &sv)
	found := false
	for _, src := range sv.Sources {
		if src.Source == controllerapi.SourceGateways && src.Name == s.gw.srv.URL {
			found = !src.OK && strings.Contains(src.Error, "500")
		}
	}
	if !found {
		t.Errorf("GET /v1/signals does not report the failing gateway: %+v", sv.Sources)
	}

	// No gateway at all: missing too, and said so.
	s.c.opts.Gateways = func(context.Context) ([]string, error) { return nil, nil }
	s.rounds(1)
	s.Pass(s.c)
	if mv := s.model("chat"); mv.Decision == nil || !strings.Contains(mv.Decision.Reason, "no gateway to read demand from") || mv.Wanted != 2 {
		t.Errorf("with no gateway: %+v", mv.Decision)
	}

	// A gateway that answers but does not know the model.
	s.gw.fail(0)
	s.gw.mu.Lock()
	delete(s.gw.d, "chat")
	s.gw.mu.Unlock()
	s.c.opts.Gateways = func(context.Context) ([]string, error) { return []string{s.gw.srv.URL}, nil }
	s.rounds(1)
	s.Pass(s.c)
	if mv := s.model("chat"); mv.Decision == nil || !strings.Contains(mv.Decision.Reason, "no gateway knows model chat") || mv.Wanted != 2 {
		t.Errorf("with chat unknown to the gateway: %+v", mv.Decision)
	}
	if got := s.slots("chat"); len(got) != 2 {
		t.Errorf("chat's slots moved on missing data: %v", got)
	}
}

// A pin overrides the autoscaler until it expires; then the autoscaler
// decides again (and, the pin having raised the count, waits a down
// window before it lowers it). The pin lives in Nomad Variables.
func TestPinOverridesAndExpires(t *testing.T) {
	s := newScaleEnv(t, chatCatalog, `headroom = 0`)
	s.settleServing()
	s.gw.set("chat", 4) // one replica's worth: chat stays at its min
	s.rounds(6)
	s.Pass(s.c)

	const tok = ""
	for _, tc := range []struct {
		body any
		code int
		want string
	}{
		{controllerapi.PinRequest{Replicas: 9}, http.StatusBadRequest, "outside model chat's autoscale min 2 and max 5"},
		{controllerapi.PinRequest{Replicas: 4, For: "10s"}, http.StatusBadRequest, "outside 1m0s to 168h"},
		{controllerapi.PinRequest{Replicas: 4, For: "soon"}, http.StatusBadRequest, "is not a duration"},
	} {
		if code, body := ctlharness.Call(t, http.MethodPut, s.c.URL+"/v1/models/chat/pin", tok, tc.body, nil); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("PUT pin %+v: %d %s; want %d with %q", tc.body, code, body, tc.code, tc.want)
		}
	}
	if code, body := ctlharness.Call(t, http.MethodPut, s.c.URL+"/v1/models/chta/pin", tok, controllerapi.PinRequest{Replicas: 3}, nil); code != http.StatusNotFound || !strings.Contains(body, "chat") {
		t.Errorf("PUT pin of a mistyped model: %d %s", code, body)
	}
	var p controllerapi.Pin
	if code, body := ctlharness.Call(t, http.MethodPut, s.c.URL+"/v1/models/chat/pin", tok, controllerapi.PinRequest{Replicas: 4, For: "2m", Reason: "launch"}, &p); code != http.StatusOK {
		t.Fatalf("PUT pin: %d %s", code, body)
	}
	if want := s.Clock.Now().Add(2 * time.Minute); !p.Until.Equal(want) || p.Replicas != 4 || p.SetBy != CallerInsecure {
		t.Errorf("pin %+v, want 4 until %s, set by %s", p, want, CallerInsecure)
	}
	if v := s.Fake.Variable("default", store.PinsPath); v == nil || !strings.Contains(v.Items["pins"], `"model":"chat"`) {
		t.Errorf("the pin is not in Nomad Variables: %v", v)
	}
	s.rounds(1)
	if n := s.Pass(s.c); n != 2 {
		t.Errorf("the pin's pass sent %d job writes, want 2 creates", n)
	}
	mv := s.model("chat")
	if mv.Wanted != 4 || mv.Pin == nil || mv.Decision == nil || mv.Decision.Want != 2 || mv.Decision.Rule != "hold" {
		t.Fatalf("pinned: %+v, decision %+v", mv, mv.Decision)
	}
	if !strings.HasPrefix(mv.Reason, "pinned at 4 by "+CallerInsecure+" until ") || !strings.Contains(mv.Reason, "(launch) (llmgw ctl scale); without the pin the autoscaler would want 2: holds at 2") {
		t.Errorf("reason %q", mv.Reason)
	}
	s.scaled()
	s.ServeAll()
	s.rounds(1)
	s.Pass(s.c)
	if mv := s.model("chat"); mv.Wanted != 4 || mv.Has != 4 || mv.Serving != 4 {
		t.Errorf("pinned, served: wanted %d, has %d, serving %d", mv.Wanted, mv.Has, mv.Serving)
	}
	if got := testutil.ToFloat64(s.c.metrics.scaleEvents.WithLabelValues("chat", "pin")); got != 1 {
		t.Errorf("pin events %g, want 1", got)
	}

	// Past its expiry the autoscaler decides again: the count went up two
	// minutes ago, more than the down window, and the down window's most
	// is one replica's worth: down to 2 (4 less max_step).
	s.rounds(121)
	if n := s.Pass(s.c); n != 2 {
		t.Errorf("the pass after the pin expired sent %d job writes, want 2 stops", n)
	}
	mv = s.model("chat")
	if mv.Pin != nil || mv.Decision == nil || mv.Decision.Rule != "down" || mv.Wanted != 2 || mv.Has != 2 || len(mv.Stopped) != 2 {
		t.Errorf("after the pin expired: pin %+v, decision %+v, %+v", mv.Pin, mv.Decision, mv)
	}
	if v := s.Fake.Variable("default", store.PinsPath); v != nil && strings.Contains(v.Items["pins"], "chat") {
		t.Errorf("the expired pin is still stored: %v", v.Items)
	}
	if got := testutil.ToFloat64(s.c.metrics.scaleEvents.WithLabelValues("chat", "down")); got != 1 {
		t.Errorf("down events %g, want 1", got)
	}

	// Release: 404 when there is none.
	if code, _ := ctlharness.Call(t, http.MethodDelete, s.c.URL+"/v1/models/chat/pin", tok, nil, nil); code != http.StatusNotFound {
		t.Errorf("DELETE a pin that expired: %d, want 404", code)
	}
}

// Pins survive a restart: they are in Nomad, and a new controller reads
// them.
func TestPinSurvivesRestart(t *testing.T) {
	s := newScaleEnv(t, chatCatalog, `headroom = 0`)
	s.settleServing()
	if code, body := ctlharness.Call(t, http.MethodPut, s.c.URL+"/v1/models/chat/pin", "", controllerapi.PinRequest{Replicas: 3}, nil); code != http.StatusOK {
		t.Fatalf("PUT pin: %d %s", code, body)
	}
	s.c.Stop()
	c2 := s.start("ctl-2", func(o *Options) {
		o.Gateways = func(context.Context) ([]string, error) { return nil, nil }
	})
	s.Pass(c2)
	var mv controllerapi.ModelView
	ctlharness.Call(t, http.MethodGet, c2.URL+"/v1/models/chat", "", nil, &mv)
	if mv.Wanted != 3 || mv.Pin == nil || mv.Pin.Replicas != 3 {
		t.Errorf("after a restart: wanted %d, pin %+v; want the pin's 3", mv.Wanted, mv.Pin)
	}
}

// A scale down drains through the gateway before the engine stops: the
// victim's job is stopped as every stop is, and Nomad deregisters its
// service first and keeps it running for the group's shutdown_delay. A
// real gateway discovery (gateway.NomadSource) over the fake, which
// models that order (nomadfake.WithShutdownDelay; e2e asserts it of a
// real Nomad), drops the victim while its allocation still runs; the
// allocation ends only once the shutdown_delay has passed.
func TestScaleDownDrainsThroughTheGatewayBeforeStop(t *testing.T) {
	e := newEnv(t, sixNodes, chatCatalog, `headroom = 0`, nomadfake.WithShutdownDelay(true))
	e.Config.Autoscale = &config.Autoscale{Interval: time.Hour, Timeout: 5 * time.Second}
	gw := newFakeGateway(t)
	e.HoldLock()
	c := e.start("ctl", func(o *Options) {
		o.Gateways = func(context.Context) ([]string, error) { return []string{gw.srv.URL}, nil }
	})
	s := &scaleEnv{env: e, gw: gw, c: c, st: c.newSignalState()}

	// The gateway's own discovery, over the same Nomad.
	var mu sync.Mutex
	var snap gateway.Snapshot
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		src := &gateway.NomadSource{Client: e.API, CheckInterval: 50 * time.Millisecond}
		_ = src.Run(ctx, func(sn gateway.Snapshot) {
			mu.Lock()
			snap = sn
			mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	routed := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, in := range snap.Instances {
			out = append(out, in.Replica)
		}
		sort.Strings(out)
		return out
	}

	s.settleServing()
	s.gw.set("chat", 12) // three replicas
	s.rounds(6)
	s.Pass(c)
	s.scaled()
	s.ServeAll()
	s.Pass(c)
	wait.For(t, "the gateway to route to chat's three replicas", func() (bool, string) {
		got := routed()
		return slices.Equal(got, []string{"chat-0", "chat-1", "chat-2"}), fmt.Sprint(got)
	})

	// Demand falls to one replica's worth: after the down window, down to
	// the min of 2.
	s.gw.set("chat", 4)
	s.rounds(70) // the down window, and the up window before it
	if n := s.Pass(c); n != 1 {
		t.Fatalf("the scale down sent %d job writes, want one stop", n)
	}
	mv := s.model("chat")
	if mv.Decision == nil || mv.Decision.Rule != "down" || len(mv.Stopped) != 1 {
		t.Fatalf("decision %+v, stopped %v", mv.Decision, mv.Stopped)
	}
	victim := mv.Stopped[0]
	var victimJob string
	for _, a := range e.Fake.Allocations("") {
		if a.DesiredStatus == api.AllocDesiredStatusStop && strings.HasPrefix(a.JobID, "llmgw-"+victim+"-") {
			victimJob = a.JobID
		}
	}
	if victimJob == "" {
		t.Fatalf("no stopped allocation of %s", victim)
	}
	wait.For(t, "the gateway to stop routing to "+victim, func() (bool, string) {
		got := routed()
		return len(got) == 2 && !slices.Contains(got, victim), fmt.Sprint(got)
	})
	for _, a := range e.Fake.Allocations(victimJob) {
		if a.DesiredStatus != api.AllocDesiredStatusStop || a.ClientStatus != api.AllocClientStatusRunning {
			t.Errorf("%s's allocation once the gateway dropped it: desired %s, client %s; want it stopping and still running (draining)",
				victim, a.DesiredStatus, a.ClientStatus)
		}
	}
	group := e.Fake.Allocations(victimJob)[0].Job.TaskGroups[0]
	if group.ShutdownDelay == nil || *group.ShutdownDelay != e.Config.Driver.ShutdownDelay || len(group.Services) == 0 {
		t.Fatalf("the victim's group: shutdown_delay %v, services %d; want the configured %s and its service", group.ShutdownDelay, len(group.Services), e.Config.Driver.ShutdownDelay)
	}
	e.Clock.Advance(*group.ShutdownDelay)
	e.Fake.Tick()
	for _, a := range e.Fake.Allocations(victimJob) {
		if a.ClientStatus != api.AllocClientStatusComplete {
			t.Errorf("%s's allocation after shutdown_delay: client %s, want complete", victim, a.ClientStatus)
		}
	}
}

// A pin and its release answer once the controller's view shows them, so
// that the read right after (llmgw ctl scale, then llmgw ctl models) does.
func TestPinShowsInTheNextRead(t *testing.T) {
	s := newScaleEnv(t, chatCatalog, `headroom = 0`)
	s.settleServing()
	code, raw := ctlharness.Call(t, http.MethodPut, s.c.URL+"/v1/models/chat/pin", "", controllerapi.PinRequest{Replicas: 4, Reason: "launch"}, nil)
	if code != http.StatusOK || strings.Contains(raw, "warning") {
		t.Fatalf("PUT pin: %d %s, want 200 without a warning", code, raw)
	}
	if mv := s.model("chat"); mv.Pin == nil || mv.Pin.Replicas != 4 {
		t.Errorf("right after the pin: pin %+v, want 4", mv.Pin)
	}
	code, raw = ctlharness.Call(t, http.MethodDelete, s.c.URL+"/v1/models/chat/pin", "", nil, nil)
	if code != http.StatusOK || strings.Contains(raw, "warning") {
		t.Fatalf("DELETE pin: %d %s, want 200 without a warning", code, raw)
	}
	if mv := s.model("chat"); mv.Pin != nil {
		t.Errorf("right after the release: pin %+v, want none", mv.Pin)
	}
}

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller"
	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The autoscaler end to end: a real Nomad, the controller in-process, the
// gateway as a Nomad job (jobs/gateway.nomad.hcl), which the controller
// finds by its llmgw-gateway registration and reads demand from, and
// fake-engine replicas that answer slowly, so that a bounded load holds
// requests outstanding at the gateway.

// The engines' timing: each loads for autoscaleLoad seconds and generates
// autoscaleTPS tokens a second, so a request for autoscaleTokens tokens is
// outstanding for about ten seconds.
const (
	autoscaleLoad   = 5
	autoscaleTPS    = 4
	autoscaleTokens = 40
)

// autoscaleCatalog: chat follows outstanding requests, two per replica,
// between 1 and 3 (a 5 s up window, the 1 m down window's minimum, no
// panic); nap may go to zero and does after a minute without a request.
// Both have one priority, so that neither takes the other's place.
var autoscaleCatalog = fmt.Sprintf(`
model "chat" {
  source   = "org/chat"
  priority = 60
  autoscale {
    min             = 1
    max             = 3
    target { outstanding_per_replica = 2 }
    up_window       = "5s"
    down_window     = "1m"
    max_step        = 2
    panic_threshold = 10
  }
  profile "x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 1000
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds %[1]d --tokens-per-second %[2]d" }
  }
}
model "nap" {
  source   = "org/nap"
  priority = 60
  autoscale {
    min         = 0
    max         = 1
    target { outstanding_per_replica = 1 }
    up_window   = "5s"
    down_window = "1m"
    idle_after  = "1m"
  }
  profile "x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 50
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds %[1]d" }
  }
}
`, autoscaleLoad, autoscaleTPS)

// autoscaleFiles is controllerFiles with the autoscaler's settings: signals
// every second, and a shutdown_delay, so that a stopped replica is seen
// deregistered while its engine still runs.
func autoscaleFiles(t *testing.T, addr, engine string) config.Config {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"catalog.hcl":  autoscaleCatalog,
		"facility.hcl": "headroom = 0\n",
		"llmgw.hcl": fmt.Sprintf(`
nomad { address = %q }
listen          = %q
node_base_watts = 300
driver {
  ready_interval = "500ms"
  ready_timeout  = "2m"
  kill_timeout   = "10s"
  shutdown_delay = "5s"
  check_interval = "1s"
  check_timeout  = "1s"
  engines        = { vllm = %q }
  # fake-engine checks every command line as vLLM's parser would.
  env            = { FAKE_ENGINE_STRICT = %q }
}
reconcile {
  interval         = "5s"
  partial_deadline = "1m"
}
autoscale {
  interval = "1s"
  timeout  = "2s"
}
`, addr, freeAddr(t), engine, strictVLLM),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(filepath.Join(dir, "llmgw.hcl"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runGatewayJob runs jobs/gateway.nomad.hcl (raw_exec, this build's llmgw)
// and returns its URL once Nomad lists it as llmgw-gateway and it answers
// its demand.
func runGatewayJob(t *testing.T, client *api.Client, bin string) string {
	t.Helper()
	src, err := os.ReadFile("../jobs/gateway.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(freeAddr(t), "127.0.0.1:")
	job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL:       string(src),
		Variables:    fmt.Sprintf("llmgw_bin = %q\nnomad_addr = %q\nport = %s\n", bin, client.Address(), port),
		Canonicalize: true,
	})
	if err != nil {
		t.Fatalf("parse jobs/gateway.nomad.hcl: %v", err)
	}
	if _, _, err := client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register jobs/gateway.nomad.hcl: %v", err)
	}
	t.Cleanup(func() { _, _, _ = client.Jobs().Deregister(*job.ID, true, nil) })
	var url string
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		gws, err := gateway.NomadGateways(context.Background(), client, "")
		if err != nil {
			return false, err.Error()
		}
		url = ""
		for _, u := range gws {
			if strings.HasSuffix(u, ":"+port) {
				url = u
			}
		}
		if url == "" {
			return false, fmt.Sprintf("llmgw-gateway registrations %v", gws)
		}
		_, err = gateway.DemandClient{}.Read(context.Background(), url)
		return err == nil, fmt.Sprint(err)
	})
	return url
}

func getModel(t *testing.T, base, name string) controller.ModelView {
	t.Helper()
	var m controller.ModelView
	getJSON(t, base+"/v1/models/"+name, &m)
	return m
}

// load keeps n requests for model in flight through the gateway until
// stop, each for about autoscaleTokens/autoscaleTPS seconds: bounded by
// max requests per worker and by the test's own deadline.
type load struct {
	stop chan struct{}
	wg   sync.WaitGroup
	sent atomic.Int64
	bad  atomic.Int64
}

func startLoad(t *testing.T, gw, model string, n, max int) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hold on"}],"max_tokens":%d}`, model, autoscaleTokens)
	for range n {
		l.wg.Go(func() {
			client := http.Client{Timeout: 2 * time.Minute}
			for range max {
				select {
				case <-l.stop:
					return
				default:
				}
				l.sent.Add(1)
				resp, err := client.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					l.bad.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					l.bad.Add(1)
				}
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

// end stops the load and waits for its requests in flight.
func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// TestAutoscaleOverRealNomad: a model at zero woken by a request held at
// the gateway, answered once its replica loaded; a scale up within the up
// window plus the load time; a budget that stops the next scale up, said
// in explain; and, the load gone, a scale down after the down window that
// deregisters the victim's service before its engine stops, and the model
// at zero going back to zero.
func TestAutoscaleOverRealNomad(t *testing.T) {
	c, engine := rackClients(t)
	bin := plugintest.Build(t, llmgwPkg)
	cfg := autoscaleFiles(t, c.Server.Addr(), engine)
	_, base, _ := runController(t, cfg, "ctl")
	gw := runGatewayJob(t, c.API, bin)
	t.Logf("gateway job at %s", gw)

	waitServing(t, base, 3*time.Minute, "chat-0")
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		var sv controller.SignalsView
		getJSON(t, base+"/v1/signals", &sv)
		for _, s := range sv.Sources {
			if s.Source == controller.SourceGateways && s.Name == gw && s.OK {
				return true, ""
			}
		}
		return false, fmt.Sprintf("sources %+v", sv.Sources)
	})
	if m := getModel(t, base, "nap"); m.Wanted != 0 || m.Has != 0 || m.Decision == nil || m.Decision.Rule != "hold" {
		t.Fatalf("nap at the start: wanted %d, has %d, decision %+v; want held at zero", m.Wanted, m.Has, m.Decision)
	}

	// 1. Wake from zero: the gateway holds a request for nap; the queued
	// demand wakes it; the request is answered by its first replica.
	sent := time.Now()
	type answer struct {
		status  int
		replica string
		err     error
		at      time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		client := http.Client{Timeout: 3 * time.Minute}
		resp, err := client.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("nap", false)))
		if err != nil {
			answered <- answer{err: err, at: time.Now()}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered <- answer{status: resp.StatusCode, replica: resp.Header.Get(replicaHeader), at: time.Now()}
	}()
	var woke time.Time
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		m := getModel(t, base, "nap")
		if m.LastChange != nil && m.LastChange.Reason == "wake" {
			woke = m.LastChange.At
			return true, ""
		}
		return false, fmt.Sprintf("nap: wanted %d, decision %+v", m.Wanted, m.Decision)
	})
	var a answer
	select {
	case a = <-answered:
	case <-time.After(3 * time.Minute):
		t.Fatal("the request held for nap got no answer in 3m")
	}
	if a.err != nil || a.status != http.StatusOK || a.replica != "nap-0" {
		t.Fatalf("the request for nap at zero: %d from %q (%v); want 200 from nap-0", a.status, a.replica, a.err)
	}
	if a.at.Sub(sent) < autoscaleLoad*time.Second {
		t.Errorf("nap's first request was answered %s after it was sent, sooner than its engine loads (%ds)", a.at.Sub(sent), autoscaleLoad)
	}
	t.Logf("wake from zero: nap woken %s after its first request was held; the request answered by nap-0 %s after it was sent (engine load %ds)",
		woke.Sub(sent).Round(100*time.Millisecond), a.at.Sub(sent).Round(100*time.Millisecond), autoscaleLoad)

	// 2. Scale up: 3 requests outstanding, 2 a replica: chat goes to 2
	// by the 5 s up window's mean, and the new replica serves after its
	// load.
	l := startLoad(t, gw, "chat", 3, 30)
	loadStart := time.Now()
	var up controller.ScaleEvent
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		m := getModel(t, base, "chat")
		if m.LastChange != nil && m.LastChange.Reason == "up" && m.LastChange.To == 2 {
			up = *m.LastChange
			return true, ""
		}
		return false, fmt.Sprintf("chat: wanted %d, has %d, decision %+v, signals %+v", m.Wanted, m.Has, m.Decision, m.Signals)
	})
	waitServing(t, base, 3*time.Minute, "chat-0", "chat-1")
	servedUp := time.Now()
	if servedUp.Sub(up.At) < autoscaleLoad*time.Second {
		t.Errorf("chat-1 served %s after the scale up, sooner than its engine loads (%ds)", servedUp.Sub(up.At), autoscaleLoad)
	}
	t.Logf("scale up 1→2: decided %s after the load began (up_window 5s), chat-1 serving %s after (engine load %ds): %s",
		up.At.Sub(loadStart).Round(100*time.Millisecond), servedUp.Sub(loadStart).Round(100*time.Millisecond), autoscaleLoad, up.Detail)

	// 3. A budget one replica short: with 6 outstanding chat wants 3, and
	// the room's budget, set now to what runs plus less than another
	// replica's draw, stops it; explain says so.
	var nodes []controller.NodeView
	getJSON(t, base+"/v1/nodes", &nodes)
	draw := 0.0
	for _, n := range nodes {
		draw += n.Committed
	}
	budget := draw + 150
	if err := os.WriteFile(cfg.Facility, fmt.Appendf(nil, "headroom = 0\nbudget \"room=a\" { watts = %.0f }\n", budget), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := apiCall(t, http.MethodPost, base+"/v1/reload", `{}`); r.StatusCode != http.StatusOK {
		t.Fatalf("reload with the budget: %d %s", r.StatusCode, r.Body)
	}
	more := startLoad(t, gw, "chat", 3, 30)
	var m controller.ModelView
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		m = getModel(t, base, "chat")
		return m.Wanted == 3 && m.Has == 2 && strings.HasPrefix(m.Explain, "wants 3, has 2: room=a would draw"), fmt.Sprintf("chat: %s (%s)", m.Explain, m.Reason)
	})
	t.Logf("budget %.0f W (committed %.0f W + 150): %s", budget, draw, m.Explain)
	if r := apiCall(t, http.MethodGet, base+"/v1/replicas/chat-2", ""); r.StatusCode == http.StatusOK {
		t.Logf("chat-2: %s", r.Body)
	}
	var d controller.ReplicaDetail
	getJSON(t, base+"/v1/replicas/chat-0", &d)
	if d.Scale == nil || !strings.HasPrefix(d.Scale.Explain, "wants 3, has 2: room=a would draw") {
		t.Errorf("chat-0's explain: scale %+v", d.Scale)
	}

	// 4. The load ends: after the down window chat goes down to 1, and the
	// victim's registration leaves Nomad's catalog (the gateway's view)
	// while its allocation still runs (shutdown_delay 5s), then it stops.
	more.end()
	l.end()
	loadEnd := time.Now()
	t.Logf("load: %d requests sent, %d not answered 200", l.sent.Load()+more.sent.Load(), l.bad.Load()+more.bad.Load())
	var down controller.ScaleEvent
	var victimJob string
	var deregistered, drained time.Time
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		m := getModel(t, base, "chat")
		if down.At.IsZero() && m.LastChange != nil && m.LastChange.Reason == "down" {
			down = *m.LastChange
		}
		if down.At.IsZero() {
			return false, fmt.Sprintf("chat: wanted %d, has %d, decision %+v", m.Wanted, m.Has, m.Decision)
		}
		// The victim: the chat job Nomad holds stopped.
		if victimJob == "" {
			for _, j := range llmgwJobs(t, c.API) {
				if j.Stop && j.Meta["llmgw.model"] == "chat" {
					victimJob = j.ID
				}
			}
		}
		if victimJob == "" {
			return false, "no stopped chat job yet"
		}
		regs, _, err := c.API.Services().Get("llmgw-chat", nil)
		if err != nil {
			return false, err.Error()
		}
		registered := slices.ContainsFunc(regs, func(r *api.ServiceRegistration) bool { return r.JobID == victimJob })
		allocs, _, err := c.API.Jobs().Allocations(victimJob, true, nil)
		if err != nil || len(allocs) == 0 {
			return false, fmt.Sprint(err)
		}
		running := allocs[0].ClientStatus == api.AllocClientStatusRunning
		if !registered && running && deregistered.IsZero() {
			deregistered = time.Now()
		}
		if !running && drained.IsZero() {
			drained = time.Now()
		}
		return !drained.IsZero(), fmt.Sprintf("victim %s: registered %v, client %s", victimJob, registered, allocs[0].ClientStatus)
	})
	if deregistered.IsZero() {
		t.Errorf("the victim %s stopped without being seen deregistered while it still ran", victimJob)
	}
	if down.At.Sub(loadEnd) < 0 {
		t.Errorf("chat scaled down before the load ended")
	}
	t.Logf("scale down 2→1: decided %s after the load ended (down_window 1m): %s; %s deregistered while running, then stopped %s later (shutdown_delay 5s)",
		down.At.Sub(loadEnd).Round(100*time.Millisecond), down.Detail, victimJob, drained.Sub(deregistered).Round(100*time.Millisecond))

	// 5. nap, idle for a minute, back to zero.
	var idle controller.ScaleEvent
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		m := getModel(t, base, "nap")
		if m.LastChange != nil && m.LastChange.Reason == "idle" {
			idle = *m.LastChange
			return m.Wanted == 0, ""
		}
		return false, fmt.Sprintf("nap: wanted %d, decision %+v", m.Wanted, m.Decision)
	})
	t.Logf("nap idle %s after its only request was answered (idle_after 1m): %s", idle.At.Sub(a.at).Round(100*time.Millisecond), idle.Detail)

	page := getText(t, base+"/metrics")
	for _, name := range []string{
		`llmgw_scale_events_total{model="chat",reason="up"}`, `llmgw_scale_events_total{model="chat",reason="down"}`,
		`llmgw_scale_events_total{model="nap",reason="wake"}`, `llmgw_scale_events_total{model="nap",reason="idle"}`,
	} {
		if v, ok := metricValue(page, name); !ok || v < 1 {
			t.Errorf("%s = %v (%v), want at least 1", name, v, ok)
		}
	}
	if v, ok := metricValue(page, `llmgw_model_replicas_desired{model="chat"}`); !ok || v != 1 {
		t.Errorf(`llmgw_model_replicas_desired{model="chat"} = %v (%v), want 1`, v, ok)
	}
}

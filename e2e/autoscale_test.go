package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
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

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// The autoscaler end to end: a real Nomad, the controller in-process, the
// gateway as a Nomad job (jobs/llmgw-gateway.nomad.hcl), which the controller
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
	return autoscaleFilesWith(t, addr, engine, autoscaleCatalog, "headroom = 0\n")
}

// autoscaleFilesWith is autoscaleFiles with its own catalog and facility.
func autoscaleFilesWith(t *testing.T, addr, engine, catalog, facility string) config.Config {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"catalog.hcl":  catalog,
		"facility.hcl": facility,
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
# The API on loopback takes writes without a token (the tests' own).
insecure_writes = true
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

// runGatewayJob runs jobs/llmgw-gateway.nomad.hcl (raw_exec, this build's llmgw)
// and returns its URL and demand once Nomad lists it as llmgw-gateway and
// its demand answers, and satisfies ready when that is not nil.
func runGatewayJob(t *testing.T, client *api.Client, bin string, ready func(gatewayapi.Demand) (bool, string)) (string, gatewayapi.Demand) {
	t.Helper()
	src, err := os.ReadFile("../jobs/llmgw-gateway.nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(freeAddr(t), "127.0.0.1:")
	job, err := client.Jobs().ParseHCLOpts(&api.JobsParseRequest{
		JobHCL:       string(src),
		Variables:    fmt.Sprintf("llmgw_bin = %q\nport = %s\n", bin, port),
		Canonicalize: true,
	})
	if err != nil {
		t.Fatalf("parse jobs/llmgw-gateway.nomad.hcl: %v", err)
	}
	if _, _, err := client.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register jobs/llmgw-gateway.nomad.hcl: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logGatewayJob(t, client, *job.ID)
		}
		_, _, _ = client.Jobs().Deregister(*job.ID, true, nil)
	})
	var url string
	var d gatewayapi.Demand
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		gws, err := gatewayclient.NomadGateways(t.Context(), client, "")
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
			return false, fmt.Sprintf("llmgw-gateway registrations %v, none on port %s", gws, port)
		}
		d, err = gatewayclient.DemandClient{}.Read(t.Context(), url)
		if err != nil {
			return false, err.Error()
		}
		if ready == nil {
			return true, ""
		}
		return ready(d)
	})
	return url, d
}

// logGatewayJob logs the end of the gateway job's task logs, for a failed
// test.
func logGatewayJob(t *testing.T, client *api.Client, jobID string) {
	t.Helper()
	allocs, _, err := client.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		t.Logf("gateway job's allocations: %v", err)
		return
	}
	for _, a := range allocs {
		for _, typ := range []string{"stdout", "stderr"} {
			resp, err := http.Get(fmt.Sprintf("%s/v1/client/fs/logs/%s?task=gateway&type=%s&plain=true&origin=end&offset=6000", client.Address(), a.ID, typ))
			if err != nil {
				t.Logf("gateway %s %s: %v", a.ID, typ, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("gateway allocation %s, %s (the end):\n%s", a.ID, typ, body)
		}
	}
}

func getModel(t *testing.T, base, name string) controllerapi.ModelView {
	t.Helper()
	var m controllerapi.ModelView
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
	// firstBad is the first answer that was not a 200, or its error.
	firstBad atomic.Value
}

func (l *load) noteBad(what string) {
	l.bad.Add(1)
	l.firstBad.CompareAndSwap(nil, what)
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
					l.noteBad(err.Error())
					l.pause()
					continue
				}
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					// A refusal comes at once: pause, so that the worker's
					// requests are not all spent on it.
					l.noteBad(fmt.Sprintf("%s: %s", resp.Status, msg))
					l.pause()
				}
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

// pause waits a second, or until the load is stopped.
func (l *load) pause() {
	select {
	case <-l.stop:
	case <-time.After(time.Second):
	}
}

// waitRouted waits until the gateway at gw routes to want[model] healthy
// replicas of each model.
func waitRouted(t *testing.T, gw string, want map[string]int) {
	t.Helper()
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		d, err := gatewayclient.DemandClient{}.Read(t.Context(), gw)
		if err != nil {
			return false, err.Error()
		}
		got := map[string]int{}
		for _, m := range d.Models {
			got[m.Model] = m.Replicas
		}
		for m, n := range want {
			if got[m] != n {
				return false, fmt.Sprintf("the gateway routes to %v, want %v", got, want)
			}
		}
		return true, ""
	})
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
	gw, _ := runGatewayJob(t, c.API, bin, nil)
	t.Logf("gateway job at %s", gw)

	waitServing(t, base, 3*time.Minute, "chat-0")
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		var sv controllerapi.SignalsView
		getJSON(t, base+"/v1/signals", &sv)
		for _, s := range sv.Sources {
			if s.Source == controllerapi.SourceGateways && s.Name == gw && s.OK {
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
	var up controllerapi.ScaleEvent
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
	var nodes []controllerapi.NodeView
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
	var m controllerapi.ModelView
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		m = getModel(t, base, "chat")
		return m.Wanted == 3 && m.Has == 2 && strings.HasPrefix(m.Explain, "wants 3, has 2: room=a would draw"), fmt.Sprintf("chat: %s (%s)", m.Explain, m.Reason)
	})
	t.Logf("budget %.0f W (committed %.0f W + 150): %s", budget, draw, m.Explain)
	if r := apiCall(t, http.MethodGet, base+"/v1/replicas/chat-2", ""); r.StatusCode == http.StatusOK {
		t.Logf("chat-2: %s", r.Body)
	}
	var d controllerapi.ReplicaDetail
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
	var down controllerapi.ScaleEvent
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
	var idle controllerapi.ScaleEvent
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

// The priority test's facility: two clients in pdu=p1 (gpu-1 in rack k1,
// gpu-2 in rack k2), each with base_watts 300 and 4 mock H200s reporting
// 200 W, so each measures 1100 W whatever runs. A shard declares 1000 W, and
// a node draws max(1100, 300 + 1000 × its shards):
//
//	shards on the nodes:  (1,1) 2600 W   (2,1) 3600 W   (2,2) or (3,1) 4600 W
//
// The 3600 W budget fits three replicas and never a fourth. high (priority
// 80) and low (priority 20) each keep one (their min); low's load takes the
// third; high's load then takes low's second replica (new copy first), and
// more of it finds low at its floor.
const (
	priorityBudget  = 3600
	priorityNodeMin = 1100 // 300 W base + 4 × 200 W the mock GPUs report
	priorityBase    = 300
)

var priorityCatalog = fmt.Sprintf(`
model "high" {
  source   = "org/high"
  priority = 80
  autoscale {
    min             = 1
    max             = 3
    target { outstanding_per_replica = 2 }
    up_window       = "5s"
    down_window     = "10m"
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
model "low" {
  source   = "org/low"
  priority = 20
  autoscale {
    min             = 1
    max             = 3
    target { outstanding_per_replica = 2 }
    up_window       = "5s"
    down_window     = "10m"
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
`, autoscaleLoad, autoscaleTPS)

// pduWatch follows every allocation of the managed jobs through Nomad's
// blocking queries and keeps each state Nomad showed, for the draw of
// pdu=p1 (both clients) as the budget counts it, and the order in which
// allocations ran and ended.
type pduWatch struct {
	mu    sync.Mutex
	snaps []pduSnapshot
	// running is when each job's allocation was first seen running;
	// ended when it was first seen not running after that.
	running, ended map[string]time.Time
	watts          map[string][]float64 // job ID -> llmgw.watts
	model          map[string]string    // job ID -> llmgw.model
}

// pduSnapshot is one state of the managed jobs' allocations.
type pduSnapshot struct {
	at     time.Time
	allocs []pduAlloc
}

type pduAlloc struct {
	job, model, node string
	watts            float64
	// toRun: desired run and pending or running; running: the client
	// runs it (a stopped job's allocation runs on while it drains).
	toRun, running bool
}

func watchPDU(t *testing.T, client *api.Client) *pduWatch {
	t.Helper()
	w := &pduWatch{running: map[string]time.Time{}, ended: map[string]time.Time{},
		watts: map[string][]float64{}, model: map[string]string{}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		var index uint64
		for ctx.Err() == nil {
			q := (&api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
			allocs, meta, err := client.Allocations().List(q)
			if err != nil {
				select { // retry back-off
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			w.observe(ctx, client, allocs, time.Now())
			index = meta.LastIndex
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

func (w *pduWatch) observe(ctx context.Context, client *api.Client, allocs []*api.AllocationListStub, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	snap := pduSnapshot{at: now}
	for _, a := range allocs {
		if !strings.HasPrefix(a.JobID, render.JobIDPrefix) {
			continue
		}
		if _, ok := w.watts[a.JobID]; !ok {
			job, _, err := client.Jobs().Info(a.JobID, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil {
				continue // seen again on the next change
			}
			m, err := render.ParseMeta(job.Meta)
			if err != nil {
				w.watts[a.JobID] = nil // not a replica (the gateway)
				continue
			}
			w.watts[a.JobID], w.model[a.JobID] = m.Watts, m.Model
		}
		ws := w.watts[a.JobID]
		if len(ws) == 0 {
			continue
		}
		running := a.ClientStatus == api.AllocClientStatusRunning
		if running {
			if _, ok := w.running[a.JobID]; !ok {
				w.running[a.JobID] = now
			}
		} else if _, ran := w.running[a.JobID]; ran {
			if _, ok := w.ended[a.JobID]; !ok {
				w.ended[a.JobID] = now
			}
		}
		snap.allocs = append(snap.allocs, pduAlloc{
			job: a.JobID, model: w.model[a.JobID], node: a.NodeName, watts: ws[0], running: running,
			toRun: a.DesiredStatus == api.AllocDesiredStatusRun && (running || a.ClientStatus == api.AllocClientStatusPending),
		})
	}
	w.snaps = append(w.snaps, snap)
}

// draw is pdu=p1's draw in a snapshot over the allocations keep takes:
// each node max(1100, 300 + its shards' declared watts).
func (s pduSnapshot) draw(keep func(pduAlloc) bool) float64 {
	shards := map[string]float64{}
	for _, a := range s.allocs {
		if keep(a) {
			shards[a.node] += a.watts
		}
	}
	total := 0.0
	for _, n := range []string{"gpu-1", "gpu-2"} {
		total += max(priorityNodeMin, priorityBase+shards[n])
	}
	return total
}

// TestAutoscalePriorityTakesWattsOverRealNomad: a PDU budget that fits
// three replicas; low (priority 20, min 1) grows to two on its load; load
// on high (priority 80) then makes the controller start high's new copy and
// stop low's second replica after it (never below low's min), with the
// PDU's draw never above the budget; and more of high's load finds nothing
// left to take, which explain says for both models.
func TestAutoscalePriorityTakesWattsOverRealNomad(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	c := nomadtest.Start(t,
		gpuClient("gpu-1", "k1", "p1", plugins, engine, ""),
		gpuClient("gpu-2", "k2", "p1", plugins, engine, ""))
	bin := plugintest.Build(t, llmgwPkg)
	cfg := autoscaleFilesWith(t, c.Server.Addr(), engine, priorityCatalog,
		fmt.Sprintf("headroom = 0\nbudget \"pdu=p1\" { watts = %d }\n", priorityBudget))
	h := recordJobs(t, c.API)
	w := watchPDU(t, c.API)
	_, base, _ := runController(t, cfg, "ctl")
	gw, _ := runGatewayJob(t, c.API, bin, nil)
	t.Logf("gateway job at %s", gw)

	// Each model's min: one replica each.
	waitServing(t, base, 3*time.Minute, "high-0", "low-0")
	waitRouted(t, gw, map[string]int{"high": 1, "low": 1})

	// 1. low's load: 4 outstanding, 2 a replica: low takes the third
	// replica the budget has room for.
	lowLoad := startLoad(t, gw, "low", 4, 40)
	lowStart := time.Now()
	var lowUp controllerapi.ScaleEvent
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		m := getModel(t, base, "low")
		if m.LastChange != nil {
			lowUp = *m.LastChange
		}
		return m.LastChange != nil && m.LastChange.Reason == "up" && m.LastChange.To == 2,
			fmt.Sprintf("low: %s (%s), decision %+v, signals %+v; load %d sent, %d not 200 (first %v)", m.Explain, m.Reason, m.Decision, m.Signals, lowLoad.sent.Load(), lowLoad.bad.Load(), lowLoad.firstBad.Load())
	})
	waitServing(t, base, 3*time.Minute, "high-0", "low-0", "low-1")
	waitRouted(t, gw, map[string]int{"high": 1, "low": 2})
	t.Logf("low 1→2 decided %s after its load began, low-1 serving %s after: the budget's three replicas run",
		lowUp.At.Sub(lowStart).Round(100*time.Millisecond), time.Since(lowStart).Round(100*time.Millisecond))

	// 2. high's load: 4 outstanding: high wants 2; a fourth replica would
	// break the budget, so high takes a replica of low's, above its floor.
	highLoad := startLoad(t, gw, "high", 4, 40)
	highStart := time.Now()
	var up, yield controllerapi.ScaleEvent
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		hm, lm := getModel(t, base, "high"), getModel(t, base, "low")
		if hm.LastChange != nil && hm.LastChange.Reason == "up" && hm.LastChange.To == 2 {
			up = *hm.LastChange
		}
		if lm.LastChange != nil && lm.LastChange.Reason == "yield" {
			yield = *lm.LastChange
		}
		return !up.At.IsZero() && !yield.At.IsZero(),
			fmt.Sprintf("high: %s (%s); low: %s, last change %+v", hm.Explain, hm.Reason, lm.Explain, lm.LastChange)
	})
	t.Logf("high 1→2 decided %s after its load began (up_window 5s): %s; low %d→%d: %s",
		up.At.Sub(highStart).Round(100*time.Millisecond), up.Detail, yield.From, yield.To, yield.Detail)
	if yield.From != 2 || yield.To != 1 {
		t.Errorf("low's yield went %d→%d, want 2→1", yield.From, yield.To)
	}
	waitServing(t, base, 3*time.Minute, "high-0", "high-1", "low-0")
	highServing := time.Now()

	// The victim: low's job Nomad holds stopped; high-1's job, created
	// before that stop (Raft indexes order them; a stopped job's
	// JobModifyIndex is its stop), its allocation running before the
	// victim's ended.
	var victim, newJob *api.JobListStub
	for _, j := range llmgwJobs(t, c.API) {
		switch {
		case j.Stop && j.Meta[render.MetaModel] == "low":
			victim = j
		case j.Meta[render.MetaReplica] == "high-1":
			newJob = j
		}
	}
	if victim == nil || newJob == nil {
		t.Fatalf("Nomad holds no stopped low job (%v) or no high-1 job (%v)", victim, newJob)
	}
	if newJob.CreateIndex >= victim.JobModifyIndex {
		t.Errorf("high-1's job %s created at index %d, not before low's %s was stopped at %d", newJob.ID, newJob.CreateIndex, victim.ID, victim.JobModifyIndex)
	}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.ended[victim.ID]
		return ok, fmt.Sprintf("low's %s has not ended yet", victim.ID)
	})
	w.mu.Lock()
	newRan, victimEnded := w.running[newJob.ID], w.ended[victim.ID]
	w.mu.Unlock()
	if newRan.IsZero() || !newRan.Before(victimEnded) {
		t.Errorf("high-1's allocation running at %v, low's %s ended at %v: want the new copy running first", newRan, victim.ID, victimEnded)
	}
	t.Logf("new copy first: %s created at index %d, %s stopped at %d; high-1 running %s before %s ended; high-1 serving %s after high's load began",
		newJob.ID, newJob.CreateIndex, victim.ID, victim.JobModifyIndex, victimEnded.Sub(newRan).Round(100*time.Millisecond), victim.ID,
		highServing.Sub(highStart).Round(100*time.Millisecond))

	// 3. More of high's load: 6 outstanding: high wants 3, and low, at its
	// floor, has nothing left to give; low's own load wants 2 and high
	// holds the rest. Explain says both.
	moreHigh := startLoad(t, gw, "high", 2, 40)
	var hm, lm controllerapi.ModelView
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		hm, lm = getModel(t, base, "high"), getModel(t, base, "low")
		ok := hm.Wanted == 3 && hm.Has == 2 && strings.HasPrefix(hm.Explain, "wants 3, has 2: pdu=p1 would draw ") &&
			strings.HasSuffix(hm.Explain, "; low (priority 20, at its floor of 1) holds the rest") &&
			lm.Wanted == 2 && lm.Has == 1 && strings.HasPrefix(lm.Explain, "wants 2, has 1: pdu=p1 would draw ") &&
			strings.HasSuffix(lm.Explain, "; high (priority 80) holds the rest")
		return ok, fmt.Sprintf("high: %s; low: %s", hm.Explain, lm.Explain)
	})
	t.Logf("high: %s", hm.Explain)
	t.Logf("low: %s", lm.Explain)
	moreHigh.end()
	highLoad.end()
	lowLoad.end()
	t.Logf("load: %d requests sent, %d not answered 200", lowLoad.sent.Load()+highLoad.sent.Load()+moreHigh.sent.Load(),
		lowLoad.bad.Load()+highLoad.bad.Load()+moreHigh.bad.Load())

	// What Nomad ran: high's two, low's one; one job per slot ever (no
	// other scale up took anyone's place).
	running := map[string]int{}
	jobs := llmgwJobs(t, c.API)
	for _, a := range runningLLMGWAllocs(t, c.API) {
		for _, j := range jobs {
			if j.ID == a.JobID && !j.Stop && j.Meta[render.MetaManaged] == "true" {
				running[j.Meta[render.MetaModel]]++
			}
		}
	}
	if running["high"] != 2 || running["low"] != 1 {
		t.Errorf("running allocations per model %v, want high 2, low 1", running)
	}
	slots := h.bySlot()
	delete(slots, "") // the gateway's job
	want := []string{"high-0", "high-1", "low-0", "low-1"}
	if got := slices.Sorted(maps.Keys(slots)); !slices.Equal(got, want) {
		t.Errorf("Nomad saw jobs for slots %v, want %v (%v)", got, want, slots)
	}
	for slot, ids := range slots {
		if len(ids) != 1 {
			t.Errorf("slot %s had jobs %v, want one", slot, ids)
		}
	}

	// The PDU over every state Nomad showed. Nothing but the victim ever
	// puts it over the budget: counted without the victim's allocation,
	// what runs (draining or not) stays within it at every state; with it,
	// the overdraw is the handover (the new copy registered before the
	// victim's stop, then loading while the victim drains for its
	// shutdown_delay) and never more than the victim's own watts; and
	// once the victim ended, within it again. low never has fewer than
	// its min to run once it had one.
	w.mu.Lock()
	defer w.mu.Unlock()
	all := func(a pduAlloc) bool { return a.running || a.toRun }
	notVictim := func(a pduAlloc) bool { return all(a) && a.job != victim.ID }
	toRun := func(a pduAlloc) bool { return a.toRun }
	var peakAll, peakToRun float64
	var over time.Duration
	var overFrom time.Time
	lowStarted := false
	for i, sn := range w.snaps {
		d := sn.draw(all)
		peakAll, peakToRun = max(peakAll, d), max(peakToRun, sn.draw(toRun))
		if x := sn.draw(notVictim); x > priorityBudget {
			t.Errorf("pdu=p1 at %s: %.0f W without the victim %s, above its %d W budget (%+v)", sn.at.Format(time.TimeOnly), x, victim.ID, priorityBudget, sn.allocs)
		}
		if d > priorityBudget+1000 {
			t.Errorf("pdu=p1 at %s: %.0f W, more than the budget and the victim's 1000 W (%+v)", sn.at.Format(time.TimeOnly), d, sn.allocs)
		}
		switch {
		case d > priorityBudget && overFrom.IsZero():
			overFrom = sn.at
		case d <= priorityBudget && !overFrom.IsZero():
			over += sn.at.Sub(overFrom)
			overFrom = time.Time{}
		}
		lowToRun := 0
		for _, a := range sn.allocs {
			if a.model == "low" && a.toRun {
				lowToRun++
			}
		}
		lowStarted = lowStarted || lowToRun > 0
		if lowStarted && lowToRun < 1 {
			t.Errorf("pdu=p1 state %d at %s: low has %d allocations to run, below its min of 1", i, sn.at.Format(time.TimeOnly), lowToRun)
		}
	}
	if last := w.snaps[len(w.snaps)-1]; last.draw(all) > priorityBudget {
		t.Errorf("pdu=p1's last state: %.0f W, above its %d W budget", last.draw(all), priorityBudget)
	}
	t.Logf("pdu=p1 over %d allocation states: at most %.0f W counting every allocation running or to run, %.0f W over those to run (budget %d W); above the budget for %s in all, in the handover only",
		len(w.snaps), peakAll, peakToRun, priorityBudget, over.Round(100*time.Millisecond))
	if v, ok := metricValue(getText(t, base+"/metrics"), `llmgw_scale_events_total{model="low",reason="yield"}`); !ok || v != 1 {
		t.Errorf(`llmgw_scale_events_total{model="low",reason="yield"} = %v (%v), want 1`, v, ok)
	}
}

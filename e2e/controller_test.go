package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller"
	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// rackClients starts a server and four GPU clients in two racks (two
// PDUs), each with 4 mock H200s, the llmgw driver and fake-engine.
func rackClients(t *testing.T) (*nomadtest.Cluster, string) {
	t.Helper()
	return rackClientsOn(t, nil)
}

// rackClientsOn is rackClients with each client registering
// consul-provider services in its own Consul agent: consul maps a client's
// name (nodeRack's keys) to its agent's host:port.
func rackClientsOn(t *testing.T, consul map[string]string) (*nomadtest.Cluster, string) {
	t.Helper()
	return rackClientsWith(t, consul, "")
}

// rackClientsWith is rackClientsOn with agentExtra added to every client's
// agent configuration.
func rackClientsWith(t *testing.T, consul map[string]string, agentExtra string) (*nomadtest.Cluster, string) {
	t.Helper()
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	var clients []nomadtest.ClientOptions
	for i, loc := range []struct{ rack, pdu string }{{"k1", "p1"}, {"k1", "p1"}, {"k2", "p2"}, {"k2", "p2"}} {
		co := gpuClient(fmt.Sprintf("gpu-%d", i+1), loc.rack, loc.pdu, plugins, engine, "")
		co.Consul = consul[co.Name]
		co.AgentExtra = agentExtra
		clients = append(clients, co)
	}
	return nomadtest.Start(t, clients...), engine
}

// gpuClient is a client in rack and pdu (site lab, room a, row r1) with 4
// mock H200s drawing 200 W each (mockExtra is added to their mock block),
// the llmgw driver (ready_timeout 2m, engine allowed) and the plugins in
// plugins.
func gpuClient(name, rack, pdu, plugins, engine, mockExtra string) nomadtest.ClientOptions {
	return nomadtest.ClientOptions{
		Name:      name,
		PluginDir: plugins,
		Meta: map[string]string{
			"llmgw.site": "lab", "llmgw.room": "a", "llmgw.row": "r1",
			"llmgw.rack": rack, "llmgw.pdu": pdu,
		},
		Plugins: map[string]string{
			"nomad-device-nvml": fmt.Sprintf(`
    mock {
      system      = "dgxh200"
      gpus        = 4
      seed        = %q
      power_watts = 200
%s    }`, name, mockExtra),
			"nomad-driver-llmgw": `
    ready_timeout = "2m"` + driverPolicy(engine),
		},
	}
}

// controllerFiles writes llmgw.hcl, catalog.hcl and facility.hcl into a
// new directory and loads llmgw.hcl; ctlConfigPath gives its path. The API
// listens on a free loopback port (used when the controller runs as its
// binary; in-process tests serve the handler themselves). extra is
// appended to llmgw.hcl.
func controllerFiles(t *testing.T, addr, engine, catalog, facility string, extra ...string) config.Config {
	t.Helper()
	return controllerFilesEngines(t, addr, fmt.Sprintf("{ vllm = %q }", engine), catalog, facility, extra...)
}

// controllerFilesEngines is controllerFiles with the driver block's
// engines map given whole (HCL), for catalogs that run more than
// fake-engine as vLLM.
func controllerFilesEngines(t *testing.T, addr, engines, catalog, facility string, extra ...string) config.Config {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("catalog.hcl", catalog)
	write("facility.hcl", facility)
	write("llmgw.hcl", fmt.Sprintf(`
nomad { address = %q }
listen          = %q
node_base_watts = 300
driver {
  ready_interval = "500ms"
  ready_timeout  = "2m"
  kill_timeout   = "10s"
  shutdown_delay = "0s"
  check_interval = "2s"
  check_timeout  = "1s"
  engines        = %s
  # fake-engine checks every command line as vLLM's parser would.
  env            = { FAKE_ENGINE_STRICT = %q }
}
reconcile {
  interval         = "5s"
  partial_deadline = "1m"
}
# The API on loopback takes writes without a token (the tests' own).
insecure_writes = true
`, addr, freeAddr(t), engines, strictVLLM)+strings.Join(extra, "\n"))
	cfg, err := config.Load(filepath.Join(dir, "llmgw.hcl"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ctlConfigPath is the llmgw.hcl controllerFiles wrote for cfg.
func ctlConfigPath(cfg config.Config) string {
	return filepath.Join(filepath.Dir(cfg.Catalog), "llmgw.hcl")
}

// freeAddr returns a loopback address nothing listened on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// runController runs a controller in-process and returns it, its API's
// base URL and a function that stops it (the controller, then the API) and
// waits for it to end; the test's cleanup stops it too.
func runController(t *testing.T, cfg config.Config, name string) (*controller.Controller, string, func()) {
	t.Helper()
	return runControllerWith(t, cfg, name, nil)
}

// runControllerWith is runController with mod (when not nil) changing the
// controller's options first.
func runControllerWith(t *testing.T, cfg config.Config, name string, mod func(*controller.Options)) (*controller.Controller, string, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t, name}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts := controller.Options{Config: cfg, Logger: log, Identity: name, PowerInterval: 2 * time.Second, LockTTL: 10 * time.Second,
		EngineMetricsInterval: 2 * time.Second}
	if mod != nil {
		mod(&opts)
	}
	c, err := controller.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = c.Run(ctx)
	}()
	srv := httptest.NewServer(c.Handler())
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			srv.Close()
		})
	}
	t.Cleanup(stop)
	return c, srv.URL, stop
}

type testWriter struct {
	t    *testing.T
	name string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("[%s] %s", w.name, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type replicaJSON struct {
	ID, Model, Profile, State, Domain, JobID string
	Nodes                                    []string
	Jobs                                     []string
	Note, Waiting                            string
}

// servingCount is how many of rs serve, and every replica's state
// ("id=state ...") for a wait's message.
func servingCount(rs []replicaJSON) (int, string) {
	states := make([]string, 0, len(rs))
	serving := 0
	for _, r := range rs {
		states = append(states, r.ID+"="+r.State)
		if r.State == "serving" {
			serving++
		}
	}
	return serving, strings.Join(states, " ")
}

// getReplicas reads GET /v1/replicas; none while the controller answers
// 503 (it has not read Nomad yet).
func getReplicas(t *testing.T, base string) []replicaJSON {
	t.Helper()
	resp, err := http.Get(base + "/v1/replicas")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusServiceUnavailable {
		return nil // the controller has not read Nomad yet: nothing to show
	}
	var out []struct {
		ID      string   `json:"id"`
		Model   string   `json:"model"`
		Profile string   `json:"profile"`
		State   string   `json:"state"`
		Domain  string   `json:"domain"`
		JobID   string   `json:"job_id"`
		Nodes   []string `json:"nodes"`
		Jobs    []string `json:"jobs"`
		Note    string   `json:"note"`
		Waiting string   `json:"waiting"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("replicas: %v: %s", err, body)
	}
	var rs []replicaJSON
	for _, r := range out {
		rs = append(rs, replicaJSON{r.ID, r.Model, r.Profile, r.State, r.Domain, r.JobID, r.Nodes, r.Jobs, r.Note, r.Waiting})
	}
	return rs
}

// twoModels is a catalog of two models, alpha (2 GPUs a replica) and beta
// (1 GPU), with n replicas each, spread over racks.
func twoModels(n int) string { return alphaBeta(n, n, 1) }

// alphaBeta is twoModels' catalog with alpha and beta replicas of each
// (a model with none is left out of the catalog), whose engines take
// loadSeconds to load.
func alphaBeta(alpha, beta, loadSeconds int) string {
	var b strings.Builder
	for _, m := range []struct {
		name, profile string
		replicas      int
		gpus, watts   int
	}{{"alpha", "x2", alpha, 2, 500}, {"beta", "x1", beta, 1, 250}} {
		if m.replicas == 0 {
			continue
		}
		fmt.Fprintf(&b, `
model %[1]q {
  source   = "org/%[1]s"
  replicas = %[3]d
  profile %[2]q {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = %[4]d
    watts  = %[5]d
    spread = ["rack"]
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds %[6]d" }
  }
}
`, m.name, m.profile, m.replicas, m.gpus, m.watts, loadSeconds)
	}
	return b.String()
}

// TestControllerPlacesCatalogInRealNomad places two models' replicas
// spread over racks, then reads their engines' metrics through the
// controller's API: every serving replica's fake-engine, run by the driver
// as vLLM with one batch slot, reports its load, and requests sent to one
// show up as running and waiting, then as tokens per second and a time to
// first token, in GET /v1/replicas and llmgw_engine_* metrics.
func TestControllerPlacesCatalogInRealNomad(t *testing.T) {
	// Nomad (since 1.10.2) asks drivers for task stats only when its
	// allocation metrics are published; then the driver reads the
	// engines' metrics on those ticks too.
	c, engine := rackClientsWith(t, nil, `telemetry {
  publish_allocation_metrics = true
  collection_interval        = "1s"
}`)
	catalog := strings.ReplaceAll(twoModels(2), `env    = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }`,
		`env    = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }
    args   = ["--max-num-seqs", "1"]`)
	if !strings.Contains(catalog, "--max-num-seqs") {
		t.Fatalf("catalog lacks the batch bound:\n%s", catalog)
	}
	cfg := controllerFiles(t, c.Server.Addr(), engine, catalog, `headroom = 0`)
	_, base, _ := runController(t, cfg, "ctl-1")
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		serving, states := servingCount(getReplicas(t, base))
		return serving == 4, states
	})
	rs := getReplicas(t, base)
	racks := map[string]map[string]bool{}
	for _, r := range rs {
		if racks[r.Model] == nil {
			racks[r.Model] = map[string]bool{}
		}
		racks[r.Model][nodeRack[r.Nodes[0]]] = true
	}
	for m, rk := range racks {
		if len(rk) != 2 {
			t.Errorf("model %s's replicas are not spread over both racks: %v", m, rk)
		}
	}
	jobs, _, err := c.API.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 4 {
		t.Errorf("Nomad has %d jobs, want 4", len(jobs))
	}
	for _, j := range jobs {
		assertStrictEngine(t, c, j.ID)
	}
	t.Logf("replicas: %+v", rs)

	// Every serving replica's engine is read: vLLM's names, a rate once
	// two reads were made.
	var target string
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		var notYet []string
		for _, r := range getEngines(t, base) {
			if r.Engine == nil || r.Engine.Reading == nil || !r.Engine.Reading.TokensPerSecond.Known || r.Engine.Engine != "vllm" {
				notYet = append(notYet, fmt.Sprintf("%s=%+v", r.ID, r.Engine))
				continue
			}
			if r.ID == "beta-0" {
				target = strings.TrimSuffix(r.Engine.URL, "/metrics")
			}
		}
		return len(notYet) == 0 && target != "", "engines not read yet: " + strings.Join(notYet, " ")
	})
	// Three requests of 150 tokens at fake-engine's 50 tokens a second,
	// one at a time: beta-0's engine has one running and others waiting.
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 3 {
		wg.Go(func() {
			resp, err := http.Post(target+"/v1/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"prompt":"load %d","max_tokens":150}`, i)))
			if err != nil {
				t.Errorf("completion: %v", err)
				return
			}
			_ = resp.Body.Close()
		})
	}
	seen := map[string]bool{}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		for _, r := range getEngines(t, base) {
			if r.ID != "beta-0" || r.Engine == nil || r.Engine.Reading == nil {
				continue
			}
			rd := r.Engine.Reading
			if w, _ := rd.RequestsWaiting.Get(); rd.RequestsRunning.String() == "1" && w >= 1 {
				seen["queue"] = true
			}
			if tps, _ := rd.TokensPerSecond.Get(); tps > 0 {
				seen["tokens"] = true
			}
			if rd.TTFT.P90.Known {
				seen["ttft"] = true
			}
			return seen["queue"] && seen["tokens"] && seen["ttft"], fmt.Sprintf("seen %v; last reading %+v", seen, *rd)
		}
		return false, "beta-0 not read"
	})
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `llmgw_engine_requests_running{model="beta",replica="beta-0"}`) {
		t.Errorf("no llmgw_engine_requests_running for beta-0 in the controller's metrics")
	}
	// The driver reads the same endpoint on Nomad's task stats ticks, and
	// says so in the task's events.
	for _, r := range rs {
		a := serviceAlloc(t, c, r.JobID)
		nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
			info, _, err := c.API.Allocations().Info(a, nil)
			if err != nil {
				return false, err.Error()
			}
			ts := info.TaskStates["engine"]
			return ts != nil && hasEvent(ts, "Engine metrics read from /metrics"), r.ID + ": " + taskEvents(ts)
		})
	}
}

// serviceAlloc is the running allocation of a replica job's shard 0.
func serviceAlloc(t *testing.T, c *nomadtest.Cluster, jobID string) string {
	t.Helper()
	stubs, _, err := c.API.Jobs().Allocations(jobID, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stubs {
		if s.ClientStatus == "running" && s.TaskGroup == render.GroupName(0) {
			return s.ID
		}
	}
	t.Fatalf("job %s has no running shard-0 allocation: %+v", jobID, stubs)
	return ""
}

// getEngines reads GET /v1/replicas with each replica's engine metrics.
func getEngines(t *testing.T, base string) []struct {
	ID     string                       `json:"id"`
	Engine *controllerapi.EngineMetrics `json:"engine"`
} {
	t.Helper()
	resp, err := http.Get(base + "/v1/replicas")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []struct {
		ID     string                       `json:"id"`
		Engine *controllerapi.EngineMetrics `json:"engine"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// assertStrictEngine checks that a running allocation of job started its
// fake-engine in strict mode, so that the command line the driver built
// passed the engine's contract.
func assertStrictEngine(t *testing.T, c *nomadtest.Cluster, job string) {
	t.Helper()
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		stubs, _, err := c.API.Jobs().Allocations(job, false, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, st := range stubs {
			if st.ClientStatus != api.AllocClientStatusRunning {
				continue
			}
			a, _, err := c.API.Allocations().Info(st.ID, nil)
			if err != nil {
				return false, err.Error()
			}
			out, _ := c.Logs(a, "engine", "stdout")
			if strings.Contains(out, " strict="+strictVLLM+"\n") {
				return true, ""
			}
			return false, fmt.Sprintf("job %s: no strict=%s in the engine's startup line yet: %q", job, strictVLLM, out)
		}
		return false, "job " + job + ": no running allocation"
	})
}

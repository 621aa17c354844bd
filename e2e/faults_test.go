package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller"
	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// sameRackClients starts a server and n GPU clients in one rack and PDU,
// each with 4 mock H200s, the llmgw driver and fake-engine (and any other
// engine binaries given, which the driver's policy allows too).
func sameRackClients(t *testing.T, n int, more ...string) (*nomadtest.Cluster, string) {
	t.Helper()
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	var clients []nomadtest.ClientOptions
	for i := range n {
		c := gpuClient(fmt.Sprintf("gpu-%d", i+1), "k1", "p1", plugins, engine, "")
		c.Plugins["nomad-driver-llmgw"] = `
    ready_timeout = "2m"` + localnomad.DriverPolicy(append([]string{engine}, more...)...)
		clients = append(clients, c)
	}
	return nomadtest.Start(t, clients...), engine
}

// installRealEngine installs llama.cpp's real server and a tiny model
// answering answer where engines running as nobody can read them, or skips
// the test saying how to get the engine.
func installRealEngine(t testing.TB, answer string) llamabuild.Installed {
	t.Helper()
	realengine.Require(t)
	dir, err := os.MkdirTemp("", "llmgw-realengine-") //nolint:usetesting // the engine runs as nobody; t.TempDir's parents are root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	o := tinymodel.Defaults
	o.Answer = answer
	in, err := llamabuild.Install(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// oneBetaLlama is oneBeta served by llama.cpp's real server.
const oneBetaLlama = `
model "beta" {
  source   = %q
  replicas = 1
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    args   = ["-np", "2", "-c", "2048"]
  }
}
`

// oneBeta is one replica of a one-GPU profile.
const oneBeta = `
model "beta" {
  source   = "org/beta"
  replicas = 1
  profile "x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }
  }
}
`

// checksPass reports whether Nomad reports every check of the
// allocation's services passing (at least one).
func checksPass(c *nomadtest.Cluster, allocID string) bool {
	st, err := c.API.Allocations().Checks(allocID, nil)
	if err != nil || len(st) == 0 {
		return false
	}
	for _, r := range st {
		if r.Status != "success" {
			return false
		}
	}
	return true
}

// servingAllocs lists the running allocations of the replica's jobs whose
// checks pass, from Nomad's own API.
func servingAllocs(t *testing.T, c *nomadtest.Cluster, replica string) []*api.AllocationListStub {
	t.Helper()
	var out []*api.AllocationListStub
	for _, a := range runningLLMGWAllocs(t, c.API) {
		if a.TaskGroup == render.GroupName(0) && strings.HasPrefix(a.JobID, render.JobIDPrefix+replica+"-") && checksPass(c, a.ID) {
			out = append(out, a)
		}
	}
	return out
}

// The scenario, on a real Nomad: two clients in one rack and PDU,
// one replica of a one-GPU profile; the node serving it dies (kill -9 of
// its client agent, its plugins and its engine). Nomad marks the node down
// and the allocation lost; the controller places the replica on the other
// node in its next pass, and it serves there. When the dead node comes
// back, Nomad stops what it held and the replica is not doubled. The
// timings (Nomad's detection, the controller's reaction, back to serving)
// are logged for docs/reliability.md; they are measured, not asserted.
func TestControllerNodeLossReplacesReplica(t *testing.T) {
	c, engine := sameRackClients(t, 2)
	cfg := controllerFiles(t, c.Server.Addr(), engine, oneBeta, `headroom = 0`)
	nodeLossReplacesReplica(t, c, cfg)
}

// The same with llama.cpp's real server as the replica's engine: the
// replacement loads the real model and answers.
func TestControllerNodeLossReplacesRealLlamaCppReplica(t *testing.T) {
	in := installRealEngine(t, "Hello from beta!")
	c, engine := sameRackClients(t, 2, in.Binary)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary),
		fmt.Sprintf(oneBetaLlama, in.Model), `headroom = 0`)
	second := nodeLossReplacesReplica(t, c, cfg)
	a, _, err := c.API.Allocations().Info(second.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + allocAddr(t, a)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"Who?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Choices           []struct{ Message struct{ Content string } }
		SystemFingerprint string `json:"system_fingerprint"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("the moved replica's answer: %s (%v)", resp.Status, err)
	}
	if out.Choices[0].Message.Content != "Hello from beta!" || out.SystemFingerprint != "b1-"+llamabuild.Commit {
		t.Errorf("the moved replica answered %q (%s), want the real engine's %q", out.Choices[0].Message.Content, out.SystemFingerprint, "Hello from beta!")
	}
}

// nodeLossReplacesReplica runs the node-loss scenario on the controller
// cfg configures and returns the allocation serving after it.
func nodeLossReplacesReplica(t *testing.T, c *nomadtest.Cluster, cfg config.Config) *api.AllocationListStub {
	t.Helper()
	_, base, _ := runController(t, cfg, "ctl-1")
	waitServing(t, base, 3*time.Minute, "beta-0")
	first := onlyServing(t, c, "beta-0")
	victim := clientNamed(t, c, first.NodeName)
	jobBefore, _, err := c.API.Jobs().Info(first.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}

	killed := victim.Kill()
	tKill := time.Now()
	t.Logf("killed %s (agent and %d processes) at %s", victim.Name, len(killed), tKill.Format(time.RFC3339Nano))
	if alive := localnomad.Alive(killed); len(alive) > 0 {
		// SIGKILL is delivered at once; give the kernel a moment to reap.
		nomadtest.Eventually(t, 10*time.Second, func() (bool, string) {
			a := localnomad.Alive(killed)
			return len(a) == 0, fmt.Sprintf("still alive: %v", a)
		})
	}

	var tDown, tLost, tAct, tServe time.Time
	var second *api.AllocationListStub
	nomadtest.Eventually(t, 5*time.Minute, func() (bool, string) {
		now := time.Now()
		n, _, err := c.API.Nodes().Info(first.NodeID, nil)
		if err == nil && n.Status == api.NodeStatusDown && tDown.IsZero() {
			tDown = now
		}
		a, _, err := c.API.Allocations().Info(first.ID, nil)
		if err == nil && a.ClientStatus == api.AllocClientStatusLost && tLost.IsZero() {
			tLost = time.Unix(0, a.ModifyTime)
		}
		j, _, err := c.API.Jobs().Info(first.JobID, nil)
		if err == nil && *j.JobModifyIndex != *jobBefore.JobModifyIndex && tAct.IsZero() {
			tAct = time.Unix(0, *j.SubmitTime)
		}
		for _, s := range servingAllocs(t, c, "beta-0") {
			if s.NodeID != first.NodeID {
				second = s
				if tServe.IsZero() {
					tServe = now
				}
			}
		}
		return second != nil, fmt.Sprintf("down=%v lost=%v acted=%v", !tDown.IsZero(), !tLost.IsZero(), !tAct.IsZero())
	})
	if second.NodeID == first.NodeID {
		t.Fatalf("replaced on the dead node %s", first.NodeName)
	}
	if second.JobID != first.JobID {
		t.Errorf("the replica serves from job %s, want %s re-registered in place", second.JobID, first.JobID)
	}
	t.Logf("node-loss timing: node down (first seen) %.1fs, allocation lost (Nomad's ModifyTime) %.1fs, "+
		"controller re-registered (job SubmitTime) %.1fs after the kill = %.1fs after Nomad marked it lost; serving elsewhere (first seen) %.1fs after the kill",
		tDown.Sub(tKill).Seconds(), tLost.Sub(tKill).Seconds(), tAct.Sub(tKill).Seconds(), tAct.Sub(tLost).Seconds(), tServe.Sub(tKill).Seconds())
	// Only one job of the slot is alive, and it is the one that serves.
	if live := liveJobsOfSlot(t, c.API, "beta-0"); len(live) != 1 {
		t.Errorf("live jobs of beta-0: %v, want one", live)
	}

	// The node comes back: Nomad tells its client to stop the lost
	// allocation; nothing is doubled and the replica keeps serving where
	// it moved.
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitReady(2 * time.Minute)
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		var on []string
		for _, a := range runningLLMGWAllocs(t, c.API) {
			if strings.HasPrefix(a.JobID, render.JobIDPrefix+"beta-0-") {
				on = append(on, a.NodeName)
			}
		}
		return slices.Equal(on, []string{second.NodeName}), fmt.Sprintf("running allocations of beta-0 on %v", on)
	})
	if s := servingAllocs(t, c, "beta-0"); len(s) != 1 || s[0].ID != second.ID {
		t.Errorf("after the node came back, serving allocations: %d, want only %s", len(s), second.ID)
	}
	// The controller's view follows (within a health read).
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		rs := getReplicas(t, base)
		return len(rs) == 1 && rs[0].State == "serving" && slices.Equal(rs[0].Nodes, []string{second.NodeName}),
			fmt.Sprintf("controller's replicas after the node came back: %+v", rs)
	})
	return second
}

// onlyServing waits until exactly one allocation serves the replica slot
// (Nomad's view) and returns it.
func onlyServing(t *testing.T, c *nomadtest.Cluster, slot string) *api.AllocationListStub {
	t.Helper()
	var one *api.AllocationListStub
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		s := servingAllocs(t, c, slot)
		if len(s) != 1 {
			return false, fmt.Sprintf("%d serving allocations", len(s))
		}
		one = s[0]
		return true, ""
	})
	return one
}

// clientNamed is the cluster's client agent of that name.
func clientNamed(t *testing.T, c *nomadtest.Cluster, name string) *localnomad.Agent {
	t.Helper()
	for _, a := range c.Clients {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no client agent named %q", name)
	return nil
}

// liveJobsOfSlot lists the llmgw jobs of a replica slot that are not
// stopped.
func liveJobsOfSlot(t *testing.T, client *api.Client, slot string) []string {
	t.Helper()
	var out []string
	for _, j := range llmgwJobs(t, client) {
		if !j.Stop && j.Meta[render.MetaReplica] == slot {
			out = append(out, j.ID)
		}
	}
	return out
}

// With reconcile.lost_after set, the rendered groups carry Nomad's
// disconnect block: a node that stops heartbeating is "disconnected" and
// its allocations "unknown" for lost_after, Nomad places nothing of its
// own (replace = false), and the controller leaves the replica where it is
// until lost_after has passed since the node's status changed; then it
// places it on the other node. The order is checked on Nomad's own
// timestamps (the node's StatusUpdatedAt, the job's SubmitTime), not on
// durations measured here.
func TestControllerNodeLossWaitsForLostAfter(t *testing.T) {
	const lostAfter = 40 * time.Second
	c, engine := sameRackClients(t, 2)
	cfg := controllerFiles(t, c.Server.Addr(), engine, oneBeta, `headroom = 0`)
	cfg.Reconcile.LostAfter = lostAfter
	_, base, _ := runController(t, cfg, "ctl-1")
	waitServing(t, base, 3*time.Minute, "beta-0")
	first := onlyServing(t, c, "beta-0")
	job, _, err := c.API.Jobs().Info(first.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range job.TaskGroups {
		d := tg.Disconnect
		if d == nil || d.LostAfter == nil || *d.LostAfter != lostAfter || d.Replace == nil || *d.Replace {
			t.Fatalf("group %s's disconnect block as Nomad holds it: %+v", *tg.Name, d)
		}
	}
	victim := clientNamed(t, c, first.NodeName)
	victim.Kill()

	// Nomad: the node disconnected, the allocation unknown; the controller
	// says why it waits.
	var disconnectedAt time.Time
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		n, _, err := c.API.Nodes().Info(first.NodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		if n.Status == api.NodeStatusDisconnected {
			disconnectedAt = time.Unix(n.StatusUpdatedAt, 0)
			return true, ""
		}
		return false, "node " + n.Status
	})
	nomadtest.Eventually(t, lostAfter, func() (bool, string) {
		rs := getReplicas(t, base)
		return len(rs) == 1 && strings.Contains(rs[0].Note, "disconnected") && strings.Contains(rs[0].Note, "lost_after 40s"),
			fmt.Sprintf("replicas: %+v", rs)
	})
	a, _, err := c.API.Allocations().Info(first.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s disconnected at %s; its allocation is %s", first.NodeName, disconnectedAt.Format(time.RFC3339), a.ClientStatus)

	// After lost_after the replica is placed on the other node and serves.
	var second *api.AllocationListStub
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		for _, s := range servingAllocs(t, c, "beta-0") {
			if s.NodeID != first.NodeID {
				second = s
				return true, ""
			}
		}
		return false, "not serving elsewhere yet"
	})
	j, _, err := c.API.Jobs().Info(first.JobID, nil)
	if err != nil {
		t.Fatal(err)
	}
	acted := time.Unix(0, *j.SubmitTime)
	t.Logf("re-registered %.1fs after the node disconnected (lost_after %s); serving on %s", acted.Sub(disconnectedAt).Seconds(), lostAfter, second.NodeName)
	// StatusUpdatedAt has whole seconds: allow for its truncation.
	if acted.Before(disconnectedAt.Add(lostAfter - time.Second)) {
		t.Errorf("the controller re-registered the replica at %s, before lost_after had passed since %s", acted.Format(time.RFC3339Nano), disconnectedAt.Format(time.RFC3339))
	}
}

// holdFirstRegistration is a transport that runs before once, ahead of
// the first job registration (PUT /v1/jobs) it carries; err is what
// before returned.
type holdFirstRegistration struct {
	base   http.RoundTripper
	before func() error

	once sync.Once
	mu   sync.Mutex
	err  error
}

func (h *holdFirstRegistration) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.URL.Path == "/v1/jobs" {
		h.once.Do(func() {
			err := h.before()
			h.mu.Lock()
			h.err = err
			h.mu.Unlock()
		})
	}
	return h.base.RoundTrip(r)
}

func (h *holdFirstRegistration) failed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// When Nomad cannot place a job the controller placed (every GPU of the
// node turned unhealthy between the decision and the registration), the
// replica is pending and its detail carries Nomad's own reasons, read from
// the job's evaluations. This is the real-Nomad side of the controller's
// TestNomadReasonsInExplain, whose fake reports the metric this test finds
// Nomad 2.0.5 computing: one node evaluated, filtered for missing devices.
func TestControllerNomadReasonsInExplain(t *testing.T) {
	nomadtest.Bin(t)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	events := filepath.Join(t.TempDir(), "gpu-1.events")
	if err := os.WriteFile(events, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := nomadtest.Start(t, gpuClient("gpu-1", "k1", "p1", plugins, engine, fmt.Sprintf("      events_file = %q\n", events)))
	nodeID := c.NodeID("gpu-1")
	unhealthy := func() (bad, all int, err error) {
		n, _, err := c.API.Nodes().Info(nodeID, nil)
		if err != nil {
			return 0, 0, err
		}
		g := h200Group(n)
		if g == nil {
			return 0, 0, errors.New("no H200 group yet")
		}
		for _, in := range g.Instances {
			if !in.Healthy {
				bad++
			}
		}
		return bad, len(g.Instances), nil
	}
	var gpus []string
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		n, _, err := c.API.Nodes().Info(nodeID, nil)
		if err != nil || h200Group(n) == nil {
			return false, "waiting for the GPUs"
		}
		gpus = nil
		for _, in := range h200Group(n).Instances {
			gpus = append(gpus, in.ID)
		}
		return true, ""
	})

	// The controller's first registration waits until Nomad shows every
	// GPU unhealthy (a fatal XID each): its decision, made before, is
	// stale when Nomad evaluates the job.
	hold := &holdFirstRegistration{base: http.DefaultTransport, before: func() error {
		var lines strings.Builder
		for _, g := range gpus {
			lines.WriteString(g + " xid 79\n")
		}
		f, err := os.OpenFile(events, os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.WriteString(lines.String())
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			return err
		}
		// Within the controller's write deadline (30s): the Nomad client
		// batches node updates for 5-10s.
		deadline := time.Now().Add(25 * time.Second)
		for time.Now().Before(deadline) {
			if bad, all, err := unhealthy(); err == nil && bad == all {
				return nil
			}
			time.Sleep(250 * time.Millisecond)
		}
		bad, all, err := unhealthy()
		if err != nil {
			return fmt.Errorf("after 25s the node does not read: %w", err)
		}
		return fmt.Errorf("after 25s Nomad shows %d of %d GPUs unhealthy", bad, all)
	}}
	client, err := api.NewClient(&api.Config{Address: c.Server.Addr(), HttpClient: &http.Client{Transport: hold}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	cfg := controllerFiles(t, c.Server.Addr(), engine, oneBeta, `headroom = 0`)
	_, base, _ := runControllerWith(t, cfg, "ctl-1", func(o *controller.Options) {
		o.Nomad = client
		o.LockTTL = time.Minute // the held write must end inside the lease
	})

	want := []controllerapi.NomadReason{{Group: render.GroupName(0), NodesEvaluated: 1, NodesFiltered: 1,
		ConstraintFiltered: map[string]int{"missing devices": 1}}}
	var d controllerapi.ReplicaDetail
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		if err := hold.failed(); err != nil {
			t.Fatalf("holding the registration: %v", err)
		}
		resp, err := http.Get(base + "/v1/replicas/beta-0")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		d = controllerapi.ReplicaDetail{}
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("GET beta-0: %s %v", resp.Status, err)
		}
		return d.JobID != "" && d.Nomad != nil, fmt.Sprintf("beta-0 is %s (job %q), Nomad's reasons %+v", d.State, d.JobID, d.Nomad)
	})
	if d.State != "pending" {
		t.Errorf("beta-0 is %s, want pending", d.State)
	}
	if diff := cmp.Diff(want, d.Nomad); diff != "" {
		t.Errorf("Nomad's reasons in beta-0's detail (-want +got):\n%s", diff)
	}
	allocs, _, err := c.API.Jobs().Allocations(d.JobID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 0 {
		t.Errorf("Nomad placed %d allocations of %s on unhealthy GPUs", len(allocs), d.JobID)
	}
	t.Logf("beta-0 (%s) %s; Nomad's reasons %+v", d.JobID, d.State, d.Nomad)
}

// installRealEngineB is installRealEngine for a benchmark, with the default
// answer.
func installRealEngineB(b *testing.B) llamabuild.Installed {
	return installRealEngine(b, "Hello world!")
}

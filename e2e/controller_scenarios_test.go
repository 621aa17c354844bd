package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

const llmgwPkg = "github.com/llmgw/llmgw/cmd/llmgw"

// nodeRack is where rackClients puts its nodes.
var nodeRack = map[string]string{"gpu-1": "k1", "gpu-2": "k1", "gpu-3": "k2", "gpu-4": "k2"}

// jobHistory records every state of Nomad's list of llmgw jobs that a
// blocking query returned, from its start until the test ends. Nomad keeps a
// deregistered job in the list (stopped) until its GC, hours later, so the
// set of IDs it saw is every job ever registered.
type jobHistory struct {
	mu      sync.Mutex
	jobs    map[string]*api.JobListStub // latest stub of every job seen
	maxLive map[string]int              // replica slot -> most jobs not stopped in one observation
	both    map[string][]string         // replica slot -> the first observation holding two live jobs
	first   chan struct{}               // closed when the first job is seen
	once    sync.Once
}

func recordJobs(t *testing.T, client *api.Client) *jobHistory {
	t.Helper()
	h := &jobHistory{jobs: map[string]*api.JobListStub{}, maxLive: map[string]int{}, both: map[string][]string{}, first: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		var index uint64
		for ctx.Err() == nil {
			q := (&api.QueryOptions{
				Prefix: render.JobIDPrefix, WaitIndex: index, WaitTime: 10 * time.Second,
				Params: map[string]string{"meta": "true"},
			}).WithContext(ctx)
			jobs, meta, err := client.Jobs().List(q)
			if err != nil {
				select { // retry back-off
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			h.observe(jobs)
			index = meta.LastIndex
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

func (h *jobHistory) observe(jobs []*api.JobListStub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	live := map[string][]string{}
	for _, j := range jobs {
		h.jobs[j.ID] = j
		if !j.Stop && j.Status != "dead" {
			slot := j.Meta[render.MetaReplica]
			live[slot] = append(live[slot], j.ID)
		}
	}
	for slot, ids := range live {
		h.maxLive[slot] = max(h.maxLive[slot], len(ids))
		if len(ids) > 1 && h.both[slot] == nil {
			h.both[slot] = ids
		}
	}
	if len(jobs) > 0 {
		h.once.Do(func() { close(h.first) })
	}
}

// bySlot returns every job ID seen, by replica slot, sorted.
func (h *jobHistory) bySlot() map[string][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]string{}
	for id, j := range h.jobs {
		slot := j.Meta[render.MetaReplica]
		out[slot] = append(out[slot], id)
	}
	for _, ids := range out {
		sort.Strings(ids)
	}
	return out
}

func (h *jobHistory) stub(id string) *api.JobListStub {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[id]
}

func (h *jobHistory) live(slot string) (most int, together []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maxLive[slot], h.both[slot]
}

type replicaDetailJSON struct {
	ID      string   `json:"id"`
	State   string   `json:"state"`
	JobID   string   `json:"job_id"`
	Nodes   []string `json:"nodes"`
	Explain *struct {
		Placed  bool     `json:"placed"`
		Reasons []string `json:"reasons"`
	} `json:"explain"`
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// waitServing polls the API until every replica in want (all of them when
// want is empty) serves, and returns the replicas.
func waitServing(t *testing.T, base string, timeout time.Duration, want ...string) []replicaJSON {
	t.Helper()
	var rs []replicaJSON
	nomadtest.Eventually(t, timeout, func() (bool, string) {
		rs = getReplicas(t, base)
		var states []string
		ok := len(rs) > 0
		for _, r := range rs {
			states = append(states, r.ID+"="+r.State)
			if (len(want) == 0 || slices.Contains(want, r.ID)) && r.State != "serving" {
				ok = false
			}
		}
		return ok, strings.Join(states, " ")
	})
	return rs
}

func replicaByID(rs []replicaJSON, id string) replicaJSON {
	for _, r := range rs {
		if r.ID == id {
			return r
		}
	}
	return replicaJSON{}
}

// llmgwJobs lists Nomad's llmgw jobs (stopped ones too) with their meta.
func llmgwJobs(t *testing.T, client *api.Client) []*api.JobListStub {
	t.Helper()
	jobs, _, err := client.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// runningLLMGWAllocs lists the running allocations of llmgw jobs.
func runningLLMGWAllocs(t *testing.T, client *api.Client) []*api.AllocationListStub {
	t.Helper()
	allocs, _, err := client.Allocations().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*api.AllocationListStub
	for _, a := range allocs {
		if strings.HasPrefix(a.JobID, render.JobIDPrefix) && a.ClientStatus == api.AllocClientStatusRunning {
			out = append(out, a)
		}
	}
	return out
}

// Budget arithmetic of TestControllerBudgetLeavesReplicaUnplaced. Every node
// has base_watts 300 (llmgw.hcl node_base_watts) and 4 mock H200s that each
// report 200 W drawn, whatever runs, so a node measures 300 + 4×200 =
// 1100 W. The profile declares 1000 W per shard (one GPU). A node's draw is
// max(measured, base + promised):
//
//	no shard:  max(1100, 300)        = 1100 W
//	one shard: max(1100, 300 + 1000) = 1300 W (Δ = 200 W over measured)
//	two:       max(1100, 300 + 2000) = 2300 W
//
// pdu=p1 (gpu-1, gpu-2) and pdu=p2 (gpu-3, gpu-4) each get a 2500 W budget,
// headroom 0, so the limit is 2500 W; empty, each draws 2 × 1100 = 2200 W.
//
//	gamma-0 → gpu-1 (p1): 1300 + 1100 = 2400 W ≤ 2500
//	gamma-1 → gpu-3 (p2, spread over racks): 2400 W ≤ 2500
//	gamma-2 → p1 on gpu-2: 1300 + 1300 = 2600 W > 2500
//	          p1 on gpu-1: 2300 + 1100 = 3400 W > 2500 (p2 the same)
//
// so gamma-2 stays unplaced: "over budget: pdu=p1 would draw 2.6 kW of
// 2.5 kW". The outcome does not hang on when power is first measured: a
// node not measured yet counts base + promised (300 W empty), and gamma-2
// then sees 1300 + 1300 = 2600 W as well.
const (
	budgetCatalog = `
model "gamma" {
  source   = "org/gamma"
  replicas = 3
  profile "w1k" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 1000
    spread = ["rack"]
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }
  }
}
`
	budgetFacility = `
headroom = 0
budget "pdu=p1" { watts = 2500 }
budget "pdu=p2" { watts = 2500 }
`
)

func TestControllerBudgetLeavesReplicaUnplaced(t *testing.T) {
	c, engine := rackClients(t)
	cfg := controllerFiles(t, c.Server.Addr(), engine, budgetCatalog, budgetFacility)
	_, base, _ := runController(t, cfg, "ctl-1")

	rs := waitServing(t, base, 4*time.Minute, "gamma-0", "gamma-1")
	const want = "over budget: pdu=p1 would draw 2.6 kW of 2.5 kW"
	var d replicaDetailJSON
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		getJSON(t, base+"/v1/replicas/gamma-2", &d)
		if d.State != "unplaced" || d.JobID != "" {
			return false, fmt.Sprintf("gamma-2 is %s (job %q)", d.State, d.JobID)
		}
		if d.Explain == nil {
			return false, "gamma-2 has no explain yet"
		}
		return !d.Explain.Placed && slices.Contains(d.Explain.Reasons, want), fmt.Sprintf("explain reasons %q", d.Explain.Reasons)
	})
	t.Logf("gamma-2: %s; reasons %q", d.State, d.Explain.Reasons)
	pdus := map[string]bool{}
	for _, id := range []string{"gamma-0", "gamma-1"} {
		r := replicaByID(rs, id)
		if len(r.Nodes) != 1 {
			t.Fatalf("%s on nodes %v, want one", id, r.Nodes)
		}
		pdus[map[string]string{"k1": "p1", "k2": "p2"}[nodeRack[r.Nodes[0]]]] = true
	}
	if len(pdus) != 2 {
		t.Errorf("gamma-0 and gamma-1 share a PDU: %v", rs)
	}

	// The committed draw counts measured power: once every node is measured,
	// pdu=p1 commits 1300 W (gpu-1, promised) + 1100 W (gpu-2, measured).
	var fac struct {
		Domains []struct {
			Domain    string  `json:"domain"`
			Limit     float64 `json:"limit_watts"`
			Committed float64 `json:"committed_watts"`
			Measured  float64 `json:"measured_watts"`
		} `json:"domains"`
	}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		getJSON(t, base+"/v1/facility", &fac)
		for _, dv := range fac.Domains {
			if dv.Domain == "pdu=p1" {
				return dv.Limit == 2500 && dv.Committed == 2400 && dv.Measured == 2200,
					fmt.Sprintf("pdu=p1: limit %v, committed %v, measured %v; want 2500, 2400, 2200", dv.Limit, dv.Committed, dv.Measured)
			}
		}
		return false, fmt.Sprintf("no pdu=p1 in %+v", fac.Domains)
	})

	// Still unplaced after more passes, and Nomad holds the two jobs only.
	getJSON(t, base+"/v1/replicas/gamma-2", &d)
	if d.State != "unplaced" {
		t.Errorf("gamma-2 is %s, want unplaced", d.State)
	}
	if jobs := llmgwJobs(t, c.API); len(jobs) != 2 {
		t.Errorf("Nomad has %d llmgw jobs, want 2", len(jobs))
	}
}

func TestControllerDrainHoldMovesReplicasNewFirst(t *testing.T) {
	c, engine := rackClients(t)
	cfg := controllerFiles(t, c.Server.Addr(), engine, twoModels(2), `headroom = 0`)
	h := recordJobs(t, c.API)
	_, base, _ := runController(t, cfg, "ctl-1")

	// Each model spreads over the racks: alpha (2 GPUs) and beta (1 GPU)
	// have one replica in k1 and one in k2. k2 then has 5 of its 8 GPUs
	// free, room for the copies of both k1 replicas.
	rs := waitServing(t, base, 4*time.Minute)
	oldJob := map[string]string{} // slot in k1 -> its job
	var k2Jobs []string
	for _, r := range rs {
		switch nodeRack[r.Nodes[0]] {
		case "k1":
			oldJob[r.ID] = r.JobID
		case "k2":
			k2Jobs = append(k2Jobs, r.JobID)
		}
	}
	if len(oldJob) != 2 || len(k2Jobs) != 2 {
		t.Fatalf("replicas not spread over both racks: %+v", rs)
	}

	body := strings.NewReader(`{"reason":"PDU swap","drain":true}`)
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/facility/holds/rack=k1", body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT hold: %s: %s", resp.Status, msg)
	}

	// The k1 slots move: a new job serves each in k2, the old ones are
	// stopped, and nothing of llmgw runs in k1 any more.
	newJob := map[string]string{}
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		rs := getReplicas(t, base)
		ok := true
		var why []string
		for slot, old := range oldJob {
			r := replicaByID(rs, slot)
			o := h.stub(old)
			newJob[slot] = r.JobID
			ok = ok && r.State == "serving" && r.JobID != old && len(r.Nodes) == 1 && nodeRack[r.Nodes[0]] == "k2" && o != nil && o.Stop
			why = append(why, fmt.Sprintf("%s: %s job %s on %v (jobs %v), old job stopped: %v", slot, r.State, r.JobID, r.Nodes, r.Jobs, o != nil && o.Stop))
		}
		var inK1 []string
		for _, a := range runningLLMGWAllocs(t, c.API) {
			if nodeRack[a.NodeName] == "k1" {
				inK1 = append(inK1, a.JobID+"@"+a.NodeName)
			}
		}
		return ok && len(inK1) == 0, fmt.Sprintf("%s; running in k1: %v", strings.Join(why, "; "), inK1)
	})

	// New first: Nomad held both jobs of a slot at once, the new one was
	// registered before the old one was stopped (Raft indexes order them;
	// a stopped job's JobModifyIndex is its stop), and its engine was ready
	// before the stop.
	for slot, old := range oldJob {
		nj := newJob[slot]
		most, together := h.live(slot)
		if most != 2 {
			t.Errorf("%s: Nomad never held two live jobs for it (most %d)", slot, most)
		}
		newStub, oldStub := h.stub(nj), h.stub(old)
		if newStub == nil || oldStub == nil {
			t.Fatalf("job history lacks %s or %s", nj, old)
		}
		allocs, _, err := c.API.Jobs().Allocations(nj, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Serving is the engine's readiness (its service check probes the
		// same path): the driver's "Ready after …" task event. Its time
		// and the stop's submit time come from this host's one clock, so
		// their order is the order of the events.
		var readyAt int64
		for _, a := range allocs {
			full, _, err := c.API.Allocations().Info(a.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ts := full.TaskStates[render.TaskName]; ts != nil {
				for _, ev := range ts.Events {
					if ev.Type == "Driver" && strings.HasPrefix(ev.DisplayMessage, "Ready after") && (readyAt == 0 || ev.Time < readyAt) {
						readyAt = ev.Time
					}
				}
			}
		}
		stopAt := oldStub.JobModifyIndex
		t.Logf("%s: old %s (created %d, stopped at %d), new %s (created %d, ready %s before the stop); together in Nomad: %v",
			slot, old, oldStub.CreateIndex, stopAt, nj, newStub.CreateIndex, time.Duration(oldStub.SubmitTime-readyAt), together)
		if newStub.CreateIndex >= stopAt {
			t.Errorf("%s: new job %s registered at index %d, not before the old one was stopped at %d", slot, nj, newStub.CreateIndex, stopAt)
		}
		if readyAt == 0 || readyAt >= oldStub.SubmitTime {
			t.Errorf("%s: new job %s ready at %d, want before the old one was stopped (submitted %d)", slot, nj, readyAt, oldStub.SubmitTime)
		}
		if !strings.HasSuffix(nj, "-g1") {
			t.Errorf("%s: new job %s, want generation 1", slot, nj)
		}
	}

	// The replicas in k2 were left alone, and the hold shows.
	for _, id := range k2Jobs {
		if s := h.stub(id); s == nil || s.Stop || s.JobModifyIndex != s.CreateIndex {
			t.Errorf("the k2 replica's job %s was touched: %+v", id, s)
		}
	}
	var fac struct {
		Domains []struct {
			Domain string `json:"domain"`
			Hold   *struct {
				Reason string `json:"reason"`
				Drain  bool   `json:"drain"`
			} `json:"hold"`
		} `json:"domains"`
	}
	getJSON(t, base+"/v1/facility", &fac)
	held := false
	for _, d := range fac.Domains {
		held = held || d.Domain == "rack=k1" && d.Hold != nil && d.Hold.Drain && d.Hold.Reason == "PDU swap"
	}
	if !held {
		t.Errorf("GET /v1/facility does not show the drain hold on rack=k1: %+v", fac.Domains)
	}
}

// ctlProc is an llmgw command (the controller, the gateway) running as its
// binary, in its own process group.
type ctlProc struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

func startCtlBinary(t *testing.T, bin, config, name string) *ctlProc {
	t.Helper()
	return startLLMGW(t, bin, name, "controller", "--config", config)
}

// startLLMGW runs `llmgw args...` with its output in a log file, printed
// when the test fails, and stops it (SIGTERM) when the test ends.
func startLLMGW(t *testing.T, bin, name string, args ...string) *ctlProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, kv := range os.Environ() {
		// The config file or flags say where Nomad and Consul are.
		if !strings.HasPrefix(kv, "NOMAD_") && !strings.HasPrefix(kv, "CONSUL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		t.Fatal(err)
	}
	p := &ctlProc{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = lf.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.signal(t, syscall.SIGTERM, 20*time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- %s log ----\n%s", name, b)
		}
	})
	return p
}

// signal sends sig to the controller's process group and waits for the
// controller to exit, with SIGKILL after wait.
func (p *ctlProc) signal(t *testing.T, sig syscall.Signal, wait time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		t.Logf("signal %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(wait):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

func TestControllerKilledMidPlacementLeavesNoDuplicates(t *testing.T) {
	c, engine := rackClients(t)
	bin := plugintest.Build(t, llmgwPkg)
	cfg := controllerFiles(t, c.Server.Addr(), engine, twoModels(3), `headroom = 0`)
	h := recordJobs(t, c.API)

	first := startCtlBinary(t, bin, ctlConfigPath(cfg), "ctl-a")
	select {
	case <-h.first:
	case <-first.exited:
		t.Fatal("the first controller exited before registering a job")
	case <-time.After(2 * time.Minute):
		t.Fatal("the first controller registered no job in 2m")
	}
	first.signal(t, syscall.SIGKILL, 10*time.Second)
	atKill := len(llmgwJobs(t, c.API))
	t.Logf("killed ctl-a (kill -9) with %d of 6 jobs registered", atKill)
	if atKill == 6 {
		t.Log("ctl-a had registered every job before the kill: this run tests adoption, not a placement cut short")
	}

	// The second controller waits out the dead one's leader lock, adopts
	// what it registered and places the rest.
	second := startCtlBinary(t, bin, ctlConfigPath(cfg), "ctl-b")
	base := "http://" + cfg.Listen
	nomadtest.Eventually(t, 6*time.Minute, func() (bool, string) {
		var health struct {
			Leader bool `json:"leader"`
		}
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		_ = json.NewDecoder(resp.Body).Decode(&health)
		resp.Body.Close()
		if !health.Leader {
			return false, "ctl-b does not lead yet"
		}
		serving, states := servingCount(getReplicas(t, base))
		return serving == 6, states
	})

	// Every slot has had exactly one job, of generation 0, registered once
	// (JobModifyIndex still its CreateIndex), and is served by it.
	slots := h.bySlot()
	if len(slots) != 6 {
		t.Errorf("jobs for %d slots, want 6: %v", len(slots), slots)
	}
	for slot, ids := range slots {
		most, together := h.live(slot)
		if len(ids) != 1 || most != 1 {
			t.Errorf("slot %s: jobs %v (at most %d live at once: %v), want exactly one", slot, ids, most, together)
			continue
		}
		s := h.stub(ids[0])
		if !strings.HasSuffix(ids[0], "-g0") || s.Stop || s.JobModifyIndex != s.CreateIndex {
			t.Errorf("slot %s: job %s stopped %v, created at %d, last registered at %d; want g0, live, registered once",
				slot, ids[0], s.Stop, s.CreateIndex, s.JobModifyIndex)
		}
	}
	for _, j := range llmgwJobs(t, c.API) {
		if j.Stop {
			t.Errorf("job %s was stopped", j.ID)
		}
	}
	b, _ := os.ReadFile(second.log)
	t.Logf("ctl-b registered %d jobs, refused %d check-and-set conflicts",
		strings.Count(string(b), `"msg":"create"`), strings.Count(string(b), `"msg":"job written by another writer first"`))
}

const multiNodeCatalog = `
model "mn" {
  source   = "org/mn"
  replicas = 1
  profile "n2" {
    engine      = "vllm"
    gpu         = "NVIDIA H200"
    gpus        = 2
    nodes       = 2
    keep_within = "rack"
    watts       = 500
    env         = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }
  }
}
`

func TestControllerMultiNodeReplicaStaysInOneRack(t *testing.T) {
	c, engine := rackClients(t)
	cfg := controllerFiles(t, c.Server.Addr(), engine, multiNodeCatalog, `headroom = 0`)
	_, base, _ := runController(t, cfg, "ctl-1")

	rs := waitServing(t, base, 4*time.Minute)
	r := replicaByID(rs, "mn-0")
	if len(r.Nodes) != 2 || nodeRack[r.Nodes[0]] == "" || nodeRack[r.Nodes[0]] != nodeRack[r.Nodes[1]] || r.Nodes[0] == r.Nodes[1] {
		t.Fatalf("mn-0 placed on %v, want two nodes of one rack", r.Nodes)
	}

	// Nomad's own view: one running allocation per shard, on two nodes of
	// the rack the controller chose.
	stubs, _, err := c.API.Jobs().Allocations(r.JobID, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	byGroup := map[string]*api.AllocationListStub{}
	for _, a := range stubs {
		if a.ClientStatus == api.AllocClientStatusRunning {
			byGroup[a.TaskGroup] = a
		}
	}
	if len(byGroup) != 2 {
		t.Fatalf("running allocations by group %v, want one for each of 2 shards", byGroup)
	}
	racks := map[string]bool{}
	nodes := map[string]bool{}
	for _, a := range byGroup {
		racks[nodeRack[a.NodeName]] = true
		nodes[a.NodeName] = true
	}
	if len(racks) != 1 || len(nodes) != 2 {
		t.Errorf("shards run on %v (racks %v), want two nodes of one rack", nodes, racks)
	}

	// Rank 1 found the leader: its template wrote the leader's rendezvous
	// address, and the engine was started with it.
	var leader, worker *api.AllocationListStub
	for g, a := range byGroup {
		if g == render.GroupName(0) {
			leader = a
		} else {
			worker = a
		}
	}
	if leader == nil || worker == nil {
		t.Fatalf("no shard 0 or 1 among groups %v", byGroup)
	}
	la, _, err := c.API.Allocations().Info(leader.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dist string
	if la.AllocatedResources != nil {
		for _, p := range la.AllocatedResources.Shared.Ports {
			if p.Label == render.PortDist {
				dist = fmt.Sprintf("%s:%d", p.HostIP, p.Value)
			}
		}
	}
	if dist == "" {
		t.Fatalf("shard 0 has no %q port: %+v", render.PortDist, la.AllocatedResources)
	}
	wa, _, err := c.API.Allocations().Info(worker.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.API.AllocFS().Cat(wa, render.TaskName+"/"+render.LeaderEnvFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Contains(env, []byte(render.EnvLeaderAddr+"="+dist)) {
		t.Errorf("shard 1's %s:\n%s\nwant %s=%s", render.LeaderEnvFile, env, render.EnvLeaderAddr, dist)
	}
	host, port, _ := strings.Cut(dist, ":")
	stderr, err := c.Logs(wa, render.TaskName, "stderr")
	if err != nil {
		t.Logf("shard 1's stderr: %v", err)
	}
	// The replica-wide layout (vLLM's default for 2 nodes × 2 GPUs: tensor
	// inside a node, pipeline over the two), then the rank and the leader:
	// fake-engine lists the flags it does not know on stderr, and reports
	// the tensor size and served name it read on stdout.
	wantArgs := regexp.MustCompile(`--pipeline-parallel-size 2 --nnodes 2 --node-rank 1 --master-addr ` +
		regexp.QuoteMeta(host) + ` --master-port ` + port + ` --headless`)
	if !wantArgs.MatchString(stderr) {
		t.Errorf("shard 1's engine was not started with the layout and the leader's address %s; stderr:\n%s", dist, stderr)
	}
	stdout, err := c.Logs(wa, render.TaskName, "stdout")
	if err != nil {
		t.Logf("shard 1's stdout: %v", err)
	}
	if !strings.Contains(stdout, "served_model_name=mn ") || !strings.Contains(stdout, "tensor_parallel=2 ") {
		t.Errorf("shard 1's engine did not get --served-model-name mn --tensor-parallel-size 2; stdout:\n%s", stdout)
	}
	t.Logf("mn-0 (%s) on %v; shard 1 on %s found the leader at %s", r.JobID, r.Nodes, worker.NodeName, dist)
}

// metricValue reads one unlabelled sample from a Prometheus text page.
func metricValue(page, name string) (float64, bool) {
	for line := range strings.SplitSeq(page, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestControllerRestartAdoptsWithoutRegistering(t *testing.T) {
	c, engine := rackClients(t)
	cfg := controllerFiles(t, c.Server.Addr(), engine, twoModels(2), `headroom = 0`)
	_, base, stop := runController(t, cfg, "ctl-1")
	waitServing(t, base, 4*time.Minute)
	stop()

	before := map[string][2]uint64{} // job -> CreateIndex, JobModifyIndex
	for _, j := range llmgwJobs(t, c.API) {
		before[j.ID] = [2]uint64{j.CreateIndex, j.JobModifyIndex}
	}
	if len(before) != 4 {
		t.Fatalf("Nomad has %d llmgw jobs before the restart, want 4", len(before))
	}

	_, base2, _ := runController(t, cfg, "ctl-2")
	waitServing(t, base2, 2*time.Minute)
	// A couple more passes after the one that saw everything serve.
	passes := func() float64 {
		n, _ := metricValue(getText(t, base2+"/metrics"), "llmgw_reconcile_seconds_count")
		return n
	}
	seen := passes()
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		n := passes()
		return n >= seen+2, fmt.Sprintf("%v passes, waiting for %v", n, seen+2)
	})
	page := getText(t, base2+"/metrics")
	if leader, _ := metricValue(page, "llmgw_leader"); leader != 1 {
		t.Errorf("ctl-2 does not lead (llmgw_leader %v)", leader)
	}
	if strings.Contains(page, "\nllmgw_actions_total{") {
		t.Errorf("ctl-2 carried out actions:\n%s", grepLines(page, "llmgw_actions_total"))
	}

	after := map[string][2]uint64{}
	for _, j := range llmgwJobs(t, c.API) {
		after[j.ID] = [2]uint64{j.CreateIndex, j.JobModifyIndex}
		if j.Stop {
			t.Errorf("job %s was stopped", j.ID)
		}
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("Nomad's jobs (CreateIndex, JobModifyIndex) changed across the restart:\nbefore %v\nafter  %v", before, after)
	}
	t.Logf("jobs before and after the restart: %v", after)
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

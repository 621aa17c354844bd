package e2e

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	"github.com/llmgw/llmgw/internal/testing/faultproxy"
	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 10*time.Minute, "how long TestChaos injects faults (it then waits for the fleet to heal and tears down)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "TestChaos's random seed; 0 picks one from the clock (printed)")
	chaosBound    = flag.Duration("chaos.bound", 5*time.Minute, "every replica must serve again within this after its fault clears")
)

// The chaos fleet: two racks (k1, k2) of two nodes, one PDU a rack, 4 mock
// H200s a node, each with a mock events file for GPU faults.
var chaosRack = map[string]string{"gpu-1": "k1", "gpu-2": "k1", "gpu-3": "k2", "gpu-4": "k2"}

const (
	// beta runs on llama.cpp's real server (the 2-layer, 64-wide tiny
	// model), its weights fetched from the test's hub through each node's
	// store; gamma (two nodes, which llama.cpp does not do here) on
	// fake-engine.
	chaosCatalog = `
model "beta" {
  source   = "org/beta"
  file     = "tiny.gguf"
  replicas = 3
  weights {
    revision = "main"
  }
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    spread = ["rack"]
    args   = ["-np", "1", "-c", "1024"]
  }
}
model "gamma" {
  source   = "org/gamma"
  replicas = 1
  profile "n2" {
    engine      = "vllm"
    gpu         = "NVIDIA H200"
    gpus        = 1
    nodes       = 2
    keep_within = "rack"
    watts       = 300
    env         = { FAKE_ENGINE_FLAGS = "--load-seconds 1" }
  }
}
`
	// Declared draw per node is its base (300 W, llmgw.hcl) plus its
	// shards' declared watts; the invariant checks every PDU against 3 kW.
	chaosBaseWatts   = 300
	chaosBudgetWatts = 3000
	chaosFacility    = `
headroom = 0
budget "pdu=p1" { watts = 3000 }
budget "pdu=p2" { watts = 3000 }
`
	chaosMaxSurge = 1 // the catalog's default
)

var chaosSlots = []string{"beta-0", "beta-1", "beta-2", "gamma-0"}

// chaosFault is one injected fault and what followed.
type chaosFault struct {
	kind     string
	detail   string
	injected time.Time
	cleared  time.Time
	serving  time.Time // every replica serving again after it cleared; zero if never
	// quiet: a fault that must not make the controller write a job
	// (restarts of agents, servers, plugins and the controller itself).
	quiet  bool
	writes int // job versions written while it lasted, for the quiet ones
	// missed: a store fault that no fetch met (the replicas went to nodes
	// that held the weights).
	missed bool
}

type chaosRun struct {
	t       *testing.T
	c       *nomadtest.Cluster
	rng     *rand.Rand
	bin     string // llmgw
	cfgPath string
	proxy   *faultproxy.Proxy
	events  map[string]string // client name -> its mock events file
	store   *chaosStore

	mu         sync.Mutex
	down       map[string]bool // agents the test has stopped or killed, until it starts them again
	died       map[string]bool // agents found dead that the test had not stopped (reported once)
	ctl        *ctlProc
	ctlN       int
	violations []string
	samples    int
}

// TestChaos runs a real Nomad (one server, four clients in two racks and
// two PDUs), the plugins, llama.cpp's real server for the single-node
// model beta (its weights fetched from a local hub through each node's
// model store, room for one model each) and fake-engine for the two-node
// gamma, and the llmgw controller (its binary, reaching Nomad through a
// loopback proxy), and injects random faults for -chaos.duration: kill -9
// of a client agent with everything it started (then the node comes
// back), a client agent restart, a server restart, kill -9 of the
// controller, a partition of the controller from Nomad, kill -9 of the
// driver plugin, an engine crash, a fatal XID on a GPU that serves
// (cleared by the mock GPU's loss and reset), and the store's faults
// (chaos_store_test.go): a fetch cut halfway, a hub that stalls, one that
// answers 503, one that answers 404, and a store with no room; each meets
// a fetch the test forces (beta removed from the stores of the nodes
// without it, then a node killed whose beta replicas the rack spread must
// re-place there). Every second it checks, from Nomad's own API and the
// stores: never more serving copies of a replica than 1 + max_surge, never
// a budgeted PDU over its limit by declared draw, no engine started before
// its node's store said the weights were whole, nor on a file outside
// that store, an .incomplete part, or one whose sha256 is not the hub's,
// and no node fetching beta twice (between two removals by the test).
// After each fault clears, every replica must serve again within
// -chaos.bound; restarts must write no job; after teardown no process of
// the test may be left. It prints a table of the faults and the
// violations, which must be none.
func TestChaos(t *testing.T) {
	nomadtest.Bin(t)
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (rerun with -args -chaos.seed=%d), duration %s, bound %s", seed, seed, *chaosDuration, *chaosBound)
	plugins := nomadtest.PluginDir(t, plugintest.Build(t, devicePkg), plugintest.Build(t, driverPkg), plugintest.Build(t, supervisorPkg))
	engine := plugintest.Build(t, fakeEnginePkg)
	bin := plugintest.Build(t, llmgwPkg)
	// Registered first, so it runs last, after the cluster's own cleanup.
	var llama string
	t.Cleanup(func() {
		dirs := []string{plugins, engine}
		if llama != "" {
			dirs = append(dirs, llama)
		}
		checkNothingLeft(t, dirs...)
	})
	in := installRealEngine(t, "Hello world!")
	llama = in.Binary

	// The hub serves beta's weights (and the filler, a second model of
	// the same size, for store-full); each node's store has room for one
	// model.
	hub := hubserver.Start(t, hubserver.Options{})
	for repo, file := range map[string]string{chaosRepo: chaosFile, chaosFillerRepo: chaosFillerFile} {
		if _, err := hub.AddFiles(repo, "main", map[string]string{file: in.Model}); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(in.Model)
	if err != nil {
		t.Fatal(err)
	}
	budget := fi.Size() * 3 / 2

	dir := t.TempDir()
	events := map[string]string{}
	stores := map[string]string{}
	var clients []nomadtest.ClientOptions
	for _, name := range []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"} {
		rack := chaosRack[name]
		ev := filepath.Join(dir, name+".events")
		if err := os.WriteFile(ev, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		events[name] = ev
		stores[name] = storeDir(t)
		co := gpuClient(name, rack, "p"+strings.TrimPrefix(rack, "k"), plugins, engine, fmt.Sprintf("      events_file = %q\n", ev))
		co.Plugins["nomad-device-nvml"] = "\n    health_recovery = \"20s\"" + co.Plugins["nomad-device-nvml"]
		co.Plugins["nomad-driver-llmgw"] = fmt.Sprintf(`
    ready_timeout      = "2m"
    model_cache        = %q
    hub_url            = %q
    store_budget_bytes = %d`, stores[name], hub.URL(), budget) + localnomad.DriverPolicy(engine, in.Binary)
		clients = append(clients, co)
	}
	store, err := newChaosStore(hub, stores, in.Model, budget)
	if err != nil {
		t.Fatal(err)
	}
	c := nomadtest.Start(t, clients...)
	proxy, err := faultproxy.New(c.Server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg := controllerFilesEngines(t, proxy.URL(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary), chaosCatalog, chaosFacility)
	r := &chaosRun{t: t, c: c, rng: rand.New(rand.NewPCG(seed, 2026)), bin: bin, cfgPath: ctlConfigPath(cfg), proxy: proxy, events: events,
		store: store, down: map[string]bool{}, died: map[string]bool{}}
	r.startController()
	r.waitAllServing(5 * time.Minute)
	r.checkStoreKey()
	t.Log("every replica serves; faults begin")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { r.checkInvariants(stop) })

	kinds := append([]string{"node-kill", "client-restart", "server-restart", "controller-kill", "controller-partition", "plugin-kill", "engine-crash", "gpu-fail"},
		chaosStoreKinds...)
	var faults []*chaosFault
	end := time.Now().Add(*chaosDuration)
	// Every kind once first, in a random order (a kind that finds nothing
	// to act on goes to the back of the line), then at random.
	var first []string
	for _, i := range r.rng.Perm(len(kinds)) {
		first = append(first, kinds[i])
	}
	skips := map[string]int{}
	var never []string
	for time.Now().Before(end) || len(first) > 0 {
		kind := kinds[r.rng.IntN(len(kinds))]
		if len(first) > 0 {
			kind, first = first[0], first[1:]
		}
		f := r.inject(kind)
		if f == nil {
			if !slices.ContainsFunc(faults, func(g *chaosFault) bool { return g.kind == kind }) {
				if skips[kind]++; skips[kind] < 5 {
					first = append(first, kind)
				} else if !slices.Contains(never, kind) {
					never = append(never, kind)
				}
			}
			time.Sleep(2 * time.Second)
			continue
		}
		faults = append(faults, f)
		t.Logf("fault %d %s (%s): cleared after %.1fs, serving %.1fs after it cleared", len(faults), f.kind, f.detail,
			f.cleared.Sub(f.injected).Seconds(), since(f.serving, f.cleared))
		if f.serving.IsZero() {
			first = nil
			break // the fleet did not heal: no point in going on
		}
	}
	if len(never) > 0 {
		t.Errorf("kinds never injected (nothing to act on, 5 tries each): %s", strings.Join(never, ", "))
	}
	close(stop)
	wg.Wait()
	// The store's invariants once more, at the end.
	if v, err := r.read(); err == nil {
		r.checkStore(v)
	}
	r.sampleRecords()
	t.Log(r.finalStoreCheck())
	r.report(faults)
}

// checkStoreKey makes sure the key the store's invariants read beta's
// record under is the one the nodes' stores use.
func (r *chaosRun) checkStoreKey() {
	for node := range r.store.stores {
		if _, err := os.Stat(r.store.recordPath(node)); err == nil {
			return
		}
	}
	var found []string
	for _, dir := range r.store.stores {
		ents, _ := os.ReadDir(filepath.Join(dir, ".llmgw", "models"))
		for _, e := range ents {
			found = append(found, e.Name())
		}
	}
	r.t.Fatalf("no store holds beta's record %s.json once beta serves; records: %v", r.store.key, found)
}

func since(t, from time.Time) float64 {
	if t.IsZero() {
		return -1
	}
	return t.Sub(from).Seconds()
}

func (r *chaosRun) startController() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctlN++
	r.ctl = startCtlBinary(r.t, r.bin, r.cfgPath, fmt.Sprintf("ctl-%d", r.ctlN))
}

func (r *chaosRun) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
	r.violations = append(r.violations, msg)
	r.t.Log("VIOLATION " + msg)
}

// fleetView is what the invariants read from Nomad in one sample.
type fleetView struct {
	jobs   []*api.JobListStub
	allocs []*api.AllocationListStub
}

func (r *chaosRun) read() (fleetView, error) {
	jobs, _, err := r.c.API.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		return fleetView{}, err
	}
	allocs, _, err := r.c.API.Allocations().List(nil)
	if err != nil {
		return fleetView{}, err
	}
	return fleetView{jobs: jobs, allocs: allocs}, nil
}

// servingBySlot counts, per replica slot, the live jobs that serve: every
// group has a running allocation and shard 0's checks pass (as Nomad
// reports them).
func (r *chaosRun) servingBySlot(v fleetView) map[string]int {
	running := map[string]map[string]*api.AllocationListStub{} // job -> group -> alloc
	for _, a := range v.allocs {
		if a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun {
			if running[a.JobID] == nil {
				running[a.JobID] = map[string]*api.AllocationListStub{}
			}
			running[a.JobID][a.TaskGroup] = a
		}
	}
	out := map[string]int{}
	for _, j := range v.jobs {
		if j.Stop || j.Meta[render.MetaManaged] != "true" {
			continue
		}
		shards, _ := strconv.Atoi(j.Meta[render.MetaShards])
		groups := running[j.ID]
		if shards == 0 || len(groups) < shards {
			continue
		}
		a0 := groups[render.GroupName(0)]
		if a0 == nil || !checksPass(r.c, a0.ID) {
			continue
		}
		out[j.Meta[render.MetaReplica]]++
	}
	return out
}

// declaredOver lists the budgeted PDUs whose declared draw (node base plus
// the declared watts of every live job's shards on the node) is over the
// limit.
func declaredOver(v fleetView) []string {
	draw := map[string]float64{"p1": 2 * chaosBaseWatts, "p2": 2 * chaosBaseWatts}
	for _, j := range v.jobs {
		if j.Stop || j.Meta[render.MetaManaged] != "true" {
			continue
		}
		nodes := strings.Split(j.Meta[render.MetaNodes], ",")
		watts := strings.Split(j.Meta[render.MetaWatts], ",")
		for i, n := range nodes {
			if i >= len(watts) {
				break
			}
			w, _ := strconv.ParseFloat(watts[i], 64)
			draw["p"+strings.TrimPrefix(chaosRack[n], "k")] += w
		}
	}
	var out []string
	for pdu, w := range draw {
		if w > chaosBudgetWatts {
			out = append(out, fmt.Sprintf("pdu=%s declares %.0f W of %d W", pdu, w, chaosBudgetWatts))
		}
	}
	sort.Strings(out)
	return out
}

// checkInvariants samples Nomad every second until stop.
func (r *chaosRun) checkInvariants(stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		v, err := r.read()
		if err != nil {
			continue // the server is restarting: nothing to read
		}
		r.mu.Lock()
		r.samples++
		r.mu.Unlock()
		for slot, n := range r.servingBySlot(v) {
			if n > 1+chaosMaxSurge {
				r.violate("%d serving copies of %s (max_surge %d)", n, slot, chaosMaxSurge)
			}
		}
		for _, o := range declaredOver(v) {
			r.violate("over budget: %s", o)
		}
		r.checkStore(v)
		r.sampleRecords()
		r.checkAgents()
	}
}

// checkAgents reports an agent that ended although the test did not stop
// it (a harness fault, not the system's: it would make later numbers lie).
func (r *chaosRun) checkAgents() {
	for _, a := range append([]*localnomad.Agent{r.c.Server}, r.c.Clients...) {
		r.mu.Lock()
		skip := r.down[a.Name] || r.died[a.Name]
		r.mu.Unlock()
		if skip || !a.Exited() {
			continue
		}
		r.mu.Lock()
		stillUp := !r.down[a.Name]
		if stillUp {
			r.died[a.Name] = true
		}
		r.mu.Unlock()
		if stillUp {
			r.violate("agent %s ended without the test stopping it; its log ends: %s", a.Name, localnomad.Tail(a.Log(), 3))
		}
	}
}

func (r *chaosRun) setDown(name string, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down[name] = down
}

func (r *chaosRun) allServing() (bool, string) {
	v, err := r.read()
	if err != nil {
		return false, err.Error()
	}
	s := r.servingBySlot(v)
	var missing []string
	for _, slot := range chaosSlots {
		if s[slot] == 0 {
			missing = append(missing, slot)
		}
	}
	return len(missing) == 0, "not serving: " + strings.Join(missing, ", ")
}

func (r *chaosRun) waitAllServing(timeout time.Duration) {
	nomadtest.Eventually(r.t, timeout, r.allServing)
}

// waitServingAfter polls until every replica serves, up to the bound; it
// returns when they did, or zero (a violation) if they did not.
func (r *chaosRun) waitServingAfter(f *chaosFault) {
	deadline := f.cleared.Add(*chaosBound)
	last := ""
	for time.Now().Before(deadline) {
		ok, why := r.allServing()
		if ok {
			f.serving = time.Now()
			return
		}
		last = why
		time.Sleep(500 * time.Millisecond)
	}
	r.violate("%s (%s): replicas not serving %s after it cleared: %s", f.kind, f.detail, *chaosBound, last)
}

// jobVersions is every llmgw job's JobModifyIndex, for the quiet faults'
// no-write check.
func (r *chaosRun) jobVersions() map[string]uint64 {
	out := map[string]uint64{}
	nomadtest.Eventually(r.t, 2*time.Minute, func() (bool, string) {
		v, err := r.read()
		if err != nil {
			return false, err.Error()
		}
		for _, j := range v.jobs {
			out[j.ID] = j.JobModifyIndex
		}
		return true, ""
	})
	return out
}

func (r *chaosRun) hold(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(r.rng.Int64N(int64(hi-lo))))
}

func (r *chaosRun) client(name string) *localnomad.Agent { return clientNamed(r.t, r.c, name) }

func (r *chaosRun) pickClient() *localnomad.Agent {
	return r.c.Clients[r.rng.IntN(len(r.c.Clients))]
}

// inject carries out one fault of kind, clears it and waits for the fleet
// to serve again.
func (r *chaosRun) inject(kind string) *chaosFault {
	f := &chaosFault{kind: kind}
	var before map[string]uint64
	switch kind {
	case "client-restart", "server-restart", "controller-kill", "controller-partition", "plugin-kill":
		f.quiet = true
		before = r.jobVersions()
	}
	f.injected = time.Now()
	switch kind {
	case "node-kill":
		a := r.busyClient()
		r.setDown(a.Name, true)
		killed := a.Kill()
		f.detail = fmt.Sprintf("%s and %d processes", a.Name, len(killed))
		// The fault is the node's absence: it lasts until the fleet healed
		// around it (Nomad marks it down, the controller places its
		// replicas elsewhere), then the node comes back.
		r.healAround(f, a)
	case "client-restart":
		a := r.pickClient()
		f.detail = a.Name
		r.setDown(a.Name, true)
		if err := a.Stop(); err != nil {
			r.violate("client restart: %v", err)
		}
		r.hold(2*time.Second, 8*time.Second)
		if err := a.Start(); err != nil {
			r.t.Fatal(err)
		}
		r.setDown(a.Name, false)
		r.c.WaitReady(2 * time.Minute)
	case "server-restart":
		f.detail = "the only server"
		r.setDown(r.c.Server.Name, true)
		if err := r.c.Server.Stop(); err != nil {
			r.violate("server restart: %v", err)
		}
		r.hold(2*time.Second, 8*time.Second)
		if err := r.c.Server.Start(); err != nil {
			r.t.Fatal(err)
		}
		r.setDown(r.c.Server.Name, false)
		r.c.WaitReady(2 * time.Minute)
	case "controller-kill":
		r.mu.Lock()
		p := r.ctl
		r.mu.Unlock()
		f.detail = p.name
		p.signal(r.t, syscall.SIGKILL, 10*time.Second)
		r.hold(2*time.Second, 10*time.Second)
		r.startController()
	case "controller-partition":
		f.detail = "proxy drops every connection"
		r.proxy.Set(false, true)
		r.hold(5*time.Second, 30*time.Second)
		r.proxy.Set(false, false)
	case "plugin-kill":
		a := r.pickClient()
		pids := pidsOf(a, "nomad-driver-llmgw")
		if len(pids) == 0 {
			return nil
		}
		f.detail = fmt.Sprintf("nomad-driver-llmgw on %s (pid %d)", a.Name, pids[0])
		_ = syscall.Kill(pids[0], syscall.SIGKILL)
	case "engine-crash":
		// beta's llama-server or gamma's fake-engine.
		var all []int
		var on, name []string
		for _, a := range r.c.Clients {
			for _, e := range []string{"fake-engine", "llama-server"} {
				for _, p := range pidsOf(a, e) {
					all = append(all, p)
					on = append(on, a.Name)
					name = append(name, e)
				}
			}
		}
		if len(all) == 0 {
			return nil
		}
		i := r.rng.IntN(len(all))
		alloc := envOf(all[i], "NOMAD_ALLOC_ID")
		restarts := r.taskRestarts(alloc)
		f.detail = fmt.Sprintf("%s pid %d on %s", name[i], all[i], on[i])
		_ = syscall.Kill(all[i], syscall.SIGKILL)
		// The crash is seen once Nomad restarts the task; back to serving
		// is counted from there.
		if alloc != "" {
			nomadtest.Eventually(r.t, 2*time.Minute, func() (bool, string) {
				n := r.taskRestarts(alloc)
				return n > restarts, fmt.Sprintf("task restarts of %s: %d", alloc, n)
			})
		}
	case "gpu-fail":
		node, dev := r.servingGPU()
		if dev == "" {
			return nil
		}
		f.detail = fmt.Sprintf("XID 79 on %s of %s", dev, node)
		r.appendEvent(node, dev+" xid 79")
		// The controller moves the replica off it, new copy first; the
		// GPU then falls off the bus and is reset, which clears it.
		r.waitAllServing(*chaosBound)
		r.appendEvent(node, dev+" lost")
		r.waitDevice(node, dev, func(healthy bool, desc string) bool { return gpuLost(desc) })
		r.appendEvent(node, dev+" reset")
		r.waitDevice(node, dev, func(healthy bool, _ string) bool { return healthy })
	case "fetch-cut", "hub-stall", "hub-503", "hub-404", "store-full":
		if !r.injectStore(f) {
			return nil
		}
	}
	if f.cleared.IsZero() {
		f.cleared = time.Now()
	}
	r.waitServingAfter(f)
	if f.quiet {
		after := r.jobVersions()
		for id, idx := range after {
			if before[id] != idx {
				f.writes++
				r.violate("%s (%s): job %s written (modify index %d → %d)", f.kind, f.detail, id, before[id], idx)
			}
		}
		for id := range before {
			if _, ok := after[id]; !ok {
				f.writes++
				r.violate("%s (%s): job %s gone", f.kind, f.detail, id)
			}
		}
	}
	return f
}

// allServingWithout reports whether every replica serves with none of its
// serving allocations on node.
func (r *chaosRun) allServingWithout(node string) (bool, string) {
	ok, why := r.allServing()
	if !ok {
		return false, why
	}
	for _, a := range runningLLMGWAllocs(r.t, r.c.API) {
		if a.NodeName == node && a.DesiredStatus == api.AllocDesiredStatusRun {
			return false, "still running on " + node
		}
	}
	return true, ""
}

// busyClient picks a client that runs a replica shard.
func (r *chaosRun) busyClient() *localnomad.Agent {
	var names []string
	for _, a := range runningLLMGWAllocs(r.t, r.c.API) {
		if !slices.Contains(names, a.NodeName) {
			names = append(names, a.NodeName)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return r.pickClient()
	}
	return r.client(names[r.rng.IntN(len(names))])
}

// servingGPU picks a GPU a serving single-node replica holds.
func (r *chaosRun) servingGPU() (node, dev string) {
	var cands [][2]string
	for _, a := range runningLLMGWAllocs(r.t, r.c.API) {
		if !strings.HasPrefix(a.JobID, render.JobIDPrefix+"beta-") {
			continue
		}
		full, _, err := r.c.API.Allocations().Info(a.ID, nil)
		if err != nil || full.AllocatedResources == nil {
			continue
		}
		for _, tr := range full.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				for _, id := range d.DeviceIDs {
					cands = append(cands, [2]string{a.NodeName, id})
				}
			}
		}
	}
	if len(cands) == 0 {
		return "", ""
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i][1] < cands[j][1] })
	c := cands[r.rng.IntN(len(cands))]
	return c[0], c[1]
}

func (r *chaosRun) appendEvent(node, line string) {
	f, err := os.OpenFile(r.events[node], os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		r.t.Fatal(err)
	}
}

// waitDevice polls the node's device instance until ok says so.
func (r *chaosRun) waitDevice(node, dev string, ok func(healthy bool, desc string) bool) {
	id := r.c.NodeID(node)
	nomadtest.Eventually(r.t, 2*time.Minute, func() (bool, string) {
		n, _, err := r.c.API.Nodes().Info(id, nil)
		if err != nil || n.NodeResources == nil {
			return false, "node not readable"
		}
		for _, d := range n.NodeResources.Devices {
			for _, in := range d.Instances {
				if in.ID == dev {
					return ok(in.Healthy, in.HealthDescription), fmt.Sprintf("%s healthy=%v %q", dev, in.Healthy, in.HealthDescription)
				}
			}
		}
		return false, dev + " not listed"
	})
}

// pidsOf lists the processes named name (by their executable's base name)
// among those the agent started.
func pidsOf(a *localnomad.Agent, name string) []int {
	var out []int
	for _, pid := range a.Processes() {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && len(cmd) > 0 && filepath.Base(strings.SplitN(string(cmd), "\x00", 2)[0]) == name {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// envOf reads one variable of a process's environment.
func envOf(pid int, name string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// taskRestarts is how often Nomad restarted the allocation's engine task
// (-1 when it cannot be read).
func (r *chaosRun) taskRestarts(allocID string) int {
	if allocID == "" {
		return -1
	}
	a, _, err := r.c.API.Allocations().Info(allocID, nil)
	if err != nil || a.TaskStates[render.TaskName] == nil {
		return -1
	}
	return int(a.TaskStates[render.TaskName].Restarts)
}

// checkNothingLeft fails the test if a process of the test's binaries (the
// plugins, supervisors, engines) outlived the cluster.
func checkNothingLeft(t *testing.T, dirs ...string) {
	var left []string
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		left = nil
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || len(cmd) == 0 {
				continue
			}
			argv0 := strings.SplitN(string(cmd), "\x00", 2)[0]
			for _, d := range dirs {
				if strings.HasPrefix(argv0, filepath.Dir(d)+"/") || strings.HasPrefix(argv0, d+"/") {
					if len(localnomad.Alive([]int{pid})) > 0 {
						left = append(left, fmt.Sprintf("%d %s", pid, argv0))
					}
				}
			}
		}
		return len(left) == 0, "still running: " + strings.Join(left, "; ")
	})
	t.Logf("teardown: no process of the test left")
}

// report prints the table: faults by kind, with worst and median time
// back to serving after the fault cleared, and the violations.
func (r *chaosRun) report(faults []*chaosFault) {
	r.mu.Lock()
	violations, samples := append([]string(nil), r.violations...), r.samples
	r.mu.Unlock()
	type row struct {
		n          int
		back       []float64
		heal       []float64 // injection to serving
		quietWrite int
	}
	rows := map[string]*row{}
	for _, f := range faults {
		x := rows[f.kind]
		if x == nil {
			x = &row{}
			rows[f.kind] = x
		}
		x.n++
		if !f.serving.IsZero() {
			x.back = append(x.back, f.serving.Sub(f.cleared).Seconds())
			x.heal = append(x.heal, f.serving.Sub(f.injected).Seconds())
		}
		x.quietWrite += f.writes
	}
	kinds := make([]string, 0, len(rows))
	for k := range rows {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "\n| fault | count | back to serving after it cleared: median / worst (s) | from injection: median / worst (s) | job writes (restarts must have 0) |\n|---|---|---|---|---|\n")
	for _, k := range kinds {
		x := rows[k]
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d |\n", k, x.n, medWorst(x.back), medWorst(x.heal), x.quietWrite)
	}
	missed := 0
	met := map[string]bool{}
	for _, f := range faults {
		if f.missed {
			missed++
		} else {
			met[f.kind] = true
		}
	}
	for _, k := range chaosStoreKinds {
		if rows[k] != nil && !met[k] {
			r.t.Errorf("%s never met a fetch: the store's fault was not exercised", k)
		}
	}
	fmt.Fprintf(&b, "\nstore faults that no fetch met (the replicas went where the weights were): %d\n", missed)
	b.WriteString(r.storeSummary())
	fmt.Fprintf(&b, "\ninvariant samples: %d (one a second, from Nomad's API); violations: %d\n", samples, len(violations))
	for _, v := range violations {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	r.t.Log(b.String())
	if p := os.Getenv("LLMGW_CHAOS_REPORT"); p != "" {
		_ = os.WriteFile(p, []byte(b.String()), 0o644)
	}
	if len(violations) > 0 {
		r.t.Errorf("%d invariant violations", len(violations))
	}
	if len(faults) < len(rows) || len(faults) == 0 {
		r.t.Errorf("only %d faults injected", len(faults))
	}
}

func medWorst(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return fmt.Sprintf("%.1f / %.1f", s[len(s)/2], s[len(s)-1])
}

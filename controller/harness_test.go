package controller

// The controller tier's harness: a nomadfake server with a fleet in racks
// and PDUs, catalog and facility files in a temp dir, one clock shared by
// the fake and the controllers, and controllers run in-process against the
// fake through the real nomad/api client.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/testing/fakeclock"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

const (
	h200      = "NVIDIA H200"
	baseWatts = 300
	// testLockTTL is the controllers' leader lock TTL (Nomad's minimum).
	testLockTTL = 10 * time.Second
)

// tap is one controller's HTTP transport to the fake. It counts the job
// writes the controller sends, can cut the controller off from Nomad (a
// partition, or a process that froze), and can shuffle the allocation
// lists Nomad answers, so that adoption sees shards in any order.
type tap struct {
	base http.RoundTripper

	mu        sync.Mutex
	down      bool
	shuffle   *rand.Rand
	jobWrites int
}

var errPartitioned = errors.New("test: controller cut off from Nomad")

func (t *tap) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.down {
		t.mu.Unlock()
		return nil, errPartitioned
	}
	if isJobWrite(r.Method, r.URL.Path) {
		t.jobWrites++
	}
	rng := t.shuffle
	t.mu.Unlock()
	resp, err := t.base.RoundTrip(r)
	if err != nil || rng == nil || r.URL.Path != "/v1/allocations" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var list []json.RawMessage
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	t.mu.Lock()
	rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	t.mu.Unlock()
	if body, err = json.Marshal(list); err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

func (t *tap) writes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.jobWrites
}

func (t *tap) setDown(down bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.down = down
}

// isJobWrite reports a job registration or deregistration.
func isJobWrite(method, path string) bool {
	switch method {
	case http.MethodPut, http.MethodPost:
		if path == "/v1/jobs" {
			return true
		}
		id, ok := strings.CutPrefix(path, "/v1/job/")
		return ok && !strings.Contains(id, "/")
	case http.MethodDelete:
		return strings.HasPrefix(path, "/v1/job/")
	}
	return false
}

// nodeDef is one GPU node of a test fleet.
type nodeDef struct {
	name, rack, pdu string
	gpus            int
}

// sixNodes is three racks of two nodes, each node on its own PDU, 4 H200s
// each.
var sixNodes = []nodeDef{
	{"n1", "r1", "p1a", 4}, {"n2", "r1", "p1b", 4},
	{"n3", "r2", "p2a", 4}, {"n4", "r2", "p2b", 4},
	{"n5", "r3", "p3a", 4}, {"n6", "r3", "p3b", 4},
}

// env is one test's Nomad (the fake), fleet, files and clock.
type env struct {
	t     testing.TB
	fake  *nomadfake.Server
	clock *fakeclock.Clock // shared by the fake (lock TTLs, submit times) and the controllers (Options.Now)
	api   *api.Client      // the test's own client, never tapped
	dir   string
	cfg   config.Config
	nodes map[string]string // name -> ID
	defs  map[string]nodeDef
	cat   *facility.Catalog // the catalog file, parsed; nil after a write
}

func newEnv(t testing.TB, nodes []nodeDef, catalog, fac string, opts ...nomadfake.Option) *env {
	t.Helper()
	clk := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	fake := nomadfake.New(append([]nomadfake.Option{nomadfake.WithClock(clk.Now)}, opts...)...)
	t.Cleanup(fake.Close)
	dir := t.TempDir()
	cfg := config.Default(dir)
	cfg.NodeBaseWatts = baseWatts
	cfg.Reconcile.Interval = time.Second
	// Checks of serving allocations are read again every check interval.
	cfg.Driver.CheckInterval, cfg.Driver.CheckTimeout = time.Second, time.Second
	// The tests write through the API on loopback without a token; those
	// of the token itself (auth_test.go) turn this off.
	cfg.InsecureWrites = true
	e := &env{t: t, fake: fake, clock: clk, api: fake.Client(t), dir: dir, cfg: cfg,
		nodes: map[string]string{}, defs: map[string]nodeDef{}}
	for _, n := range nodes {
		e.addNode(n)
	}
	e.writeCatalog(catalog)
	e.writeFacility(fac)
	return e
}

func (e *env) addNode(n nodeDef) {
	var ids []string
	for i := range n.gpus {
		ids = append(ids, fmt.Sprintf("%s-gpu%d", n.name, i))
	}
	e.nodes[n.name] = e.fake.AddNode(nomadfake.NodeSpec{
		Name: n.name,
		Meta: map[string]string{
			"llmgw.site": "s1", "llmgw.room": "a", "llmgw.row": "row1",
			"llmgw.rack": n.rack, "llmgw.pdu": n.pdu,
		},
		Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(h200, 700, 143771, ids...)},
	})
	e.defs[n.name] = n
}

func (e *env) writeCatalog(src string) {
	e.t.Helper()
	if err := os.WriteFile(e.cfg.Catalog, []byte(src), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.cat = nil
}

func (e *env) writeFacility(src string) {
	e.t.Helper()
	if err := os.WriteFile(e.cfg.Facility, []byte(src), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) catalog() facility.Catalog {
	e.t.Helper()
	if e.cat != nil {
		return *e.cat
	}
	src, err := os.ReadFile(e.cfg.Catalog)
	if err != nil {
		e.t.Fatal(err)
	}
	cat, err := facility.ParseCatalog(e.cfg.Catalog, src)
	if err != nil {
		e.t.Fatal(err)
	}
	e.cat = &cat
	return cat
}

// ctl is a controller under test with its tap and API server.
type ctl struct {
	*Controller
	name   string
	tap    *tap
	url    string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	srv    *httptest.Server
}

type logWriter struct {
	t    testing.TB
	name string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("[%s] %s", w.name, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// start builds a controller named name and runs it (Run) until stop or
// the end of the test. Whether it leads depends on the leader lock: see
// holdLock for controllers driven by hand with Pass.
func (e *env) start(name string, mods ...func(*Options)) *ctl {
	e.t.Helper()
	return e.startTap(name, &tap{}, mods...)
}

// startTap is start with a tap set up beforehand (to shuffle lists from
// the first read on).
func (e *env) startTap(name string, tp *tap, mods ...func(*Options)) *ctl {
	e.t.Helper()
	return e.startAt(name, e.fake.URL(), tp, mods...)
}

// startAt is startTap with the controller reaching Nomad at url (a proxy
// in front of the fake).
func (e *env) startAt(name, url string, tp *tap, mods ...func(*Options)) *ctl {
	e.t.Helper()
	tp.base = e.fake.Config().HttpClient.Transport
	client, err := api.NewClient(&api.Config{Address: url, HttpClient: &http.Client{Transport: tp}})
	if err != nil {
		e.t.Fatal(err)
	}
	opts := Options{
		Config: e.cfg, Nomad: client, Identity: name, Now: e.clock.Now,
		Logger:        slog.New(slog.NewTextHandler(logWriter{e.t, name}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		PowerInterval: time.Hour, LockTTL: testLockTTL,
		// Engines are not scraped unless a test asks (engines_test.go):
		// nomadfake's allocations have loopback addresses nothing serves.
		EngineMetricsInterval: time.Hour,
	}
	for _, m := range mods {
		m(&opts)
	}
	c, err := New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &ctl{Controller: c, name: name, tap: tp, cancel: cancel, done: make(chan struct{})}
	h.srv = httptest.NewServer(c.Handler())
	h.url = h.srv.URL
	go func() {
		defer close(h.done)
		_ = c.Run(ctx)
	}()
	e.t.Cleanup(func() {
		h.stop()
		client.Close()
	})
	return h
}

// stop ends the controller and waits for Run to return.
func (h *ctl) stop() {
	h.once.Do(func() {
		h.cancel()
		<-h.done
		h.srv.Close()
	})
}

// holdLock takes the leader lock for the test itself, so that controllers
// started afterwards stand by: they observe, serve the API and never
// reconcile on their own, and the test runs passes with pass. The clock
// only moves when the test moves it, so the lock never lapses by itself.
func (e *env) holdLock() {
	e.t.Helper()
	locks, err := e.api.Locks(api.WriteOptions{}, api.Variable{
		Path: store.LeaderPath, Items: api.VariableItems{"holder": "test"},
		Lock: &api.VariableLock{TTL: testLockTTL.String(), LockDelay: testLockTTL.String()},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := locks.Acquire(context.Background()); err != nil {
		e.t.Fatalf("test leader lock: %v", err)
	}
}

// lockHolder returns the identity holding the leader lock, "" when free.
func (e *env) lockHolder() string {
	v := e.fake.Variable("default", store.LeaderPath)
	if v == nil || v.Lock == nil || v.Lock.ID == "" {
		return ""
	}
	return v.Items["holder"]
}

// caughtUp reports whether the controller's snapshot holds what Nomad
// holds now: every managed job, allocation and node at its current modify
// index.
func (e *env) caughtUp(c *Controller) (bool, string) {
	jobs, _, err := e.api.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		return false, err.Error()
	}
	allocs, _, err := e.api.Allocations().List(&api.QueryOptions{Namespace: "*"})
	if err != nil {
		return false, err.Error()
	}
	nodes, _, err := e.api.Nodes().List(nil)
	if err != nil {
		return false, err.Error()
	}
	snap := c.obs.snapshot()
	if !snap.synced() {
		return false, "not synced"
	}
	want, have := map[string]uint64{}, map[string]uint64{}
	for _, j := range jobs {
		want["job/"+j.ID] = j.ModifyIndex
	}
	for _, a := range allocs {
		want["alloc/"+a.ID] = a.ModifyIndex
	}
	for _, n := range nodes {
		want["node/"+n.ID] = n.ModifyIndex
	}
	for _, j := range snap.jobs {
		have["job/"+j.ID] = j.ModifyIndex
	}
	for _, a := range snap.allocs {
		have["alloc/"+a.ID] = a.ModifyIndex
	}
	for id, n := range snap.nodes {
		have["node/"+id] = n.ModifyIndex
	}
	for k, v := range want {
		if have[k] != v {
			return false, fmt.Sprintf("%s at %d, controller has %d", k, v, have[k])
		}
	}
	if len(want) != len(have) {
		return false, fmt.Sprintf("%d objects in Nomad, %d in the snapshot", len(want), len(have))
	}
	// The health reader has read what the fake's checks say now.
	for _, a := range allocs {
		if a.TaskGroup != observe.CheckedGroup || !observe.Live(a) || a.ClientStatus != api.AllocClientStatusRunning ||
			!strings.HasPrefix(a.JobID, render.JobIDPrefix) {
			continue
		}
		healthy, err := checksPassing(e.api, a.ID)
		if err != nil {
			return false, err.Error()
		}
		chk, ok := snap.checks[a.ID]
		if !ok || chk.Passing != healthy {
			return false, fmt.Sprintf("alloc %s checks: controller read %+v, fake healthy=%v", a.ID, chk, healthy)
		}
	}
	return true, ""
}

// checksPassing reads an allocation's service checks as the controller
// does and reports whether there is at least one and all pass.
func checksPassing(client *api.Client, allocID string) (bool, error) {
	st, err := client.Allocations().Checks(allocID, nil)
	if err != nil {
		return false, err
	}
	for _, r := range st {
		if r.Status != "success" {
			return false, nil
		}
	}
	return len(st) > 0, nil
}

// pass waits until the controller has observed everything in Nomad, then
// runs one reconcile pass and returns how many job writes it sent.
func (e *env) pass(h *ctl) int {
	e.t.Helper()
	wait.For(e.t, h.name+" to observe Nomad", func() (bool, string) { return e.caughtUp(h.Controller) })
	before := h.tap.writes()
	if err := h.Pass(context.Background()); err != nil {
		e.t.Fatalf("%s: pass: %v", h.name, err)
	}
	return h.tap.writes() - before
}

// settle runs passes until one writes nothing (at most 10).
func (e *env) settle(h *ctl) {
	e.t.Helper()
	for range 10 {
		if e.pass(h) == 0 {
			return
		}
	}
	e.t.Fatalf("%s: still writing after 10 passes", h.name)
}

// liveJob is a managed job that is not stopped, from its meta.
type liveJob struct {
	ID, Replica, Model, Profile, FP string
	Gen                             int
	Nodes                           []string
	Watts                           []float64
	Status                          string
	Meta                            map[string]string
}

// liveJobs lists the managed jobs Nomad holds that are not stopped, by ID.
func (e *env) liveJobs() []liveJob {
	e.t.Helper()
	out, err := listLive(e.api)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func listLive(client *api.Client) ([]liveJob, error) {
	stubs, _, err := client.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		return nil, err
	}
	var out []liveJob
	for _, s := range stubs {
		if s.Stop || s.Meta[render.MetaManaged] != "true" {
			continue
		}
		j := liveJob{ID: s.ID, Replica: s.Meta[render.MetaReplica], Model: s.Meta[render.MetaModel],
			Profile: s.Meta[render.MetaProfile], FP: s.Meta[render.MetaProfileFP], Status: s.Status, Meta: s.Meta}
		j.Gen, _ = strconv.Atoi(s.Meta[render.MetaGen])
		if v := s.Meta[render.MetaNodes]; v != "" {
			j.Nodes = strings.Split(v, ",")
		}
		for w := range strings.SplitSeq(s.Meta[render.MetaWatts], ",") {
			f, _ := strconv.ParseFloat(w, 64)
			j.Watts = append(j.Watts, f)
		}
		out = append(out, j)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, nil
}

// bySlot groups live jobs by replica id.
func bySlot(jobs []liveJob) map[string][]liveJob {
	out := map[string][]liveJob{}
	for _, j := range jobs {
		out[j.Replica] = append(out[j.Replica], j)
	}
	return out
}

func jobIDs(jobs []liveJob) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// serveAll makes every pending allocation running and healthy, as clients
// whose engines loaded would.
func (e *env) serveAll() int {
	e.t.Helper()
	n := 0
	for _, a := range e.fake.Allocations("") {
		if a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusPending {
			if err := e.fake.SetAllocStatus(a.ID, api.AllocClientStatusRunning, true); err != nil {
				e.t.Fatal(err)
			}
			n++
		}
	}
	return n
}

// serveJob makes the pending allocations of one job running and healthy.
func (e *env) serveJob(jobID string) {
	e.t.Helper()
	for _, a := range e.fake.Allocations(jobID) {
		if a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusPending {
			if err := e.fake.SetAllocStatus(a.ID, api.AllocClientStatusRunning, true); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// renderJob renders a managed job for a replica of a catalog model on the
// given nodes, as the controller would have, for seeding Nomad.
func (e *env) renderJob(model, profile string, replica, gen int, nodes ...string) *api.Job {
	e.t.Helper()
	var m facility.Model
	for _, x := range e.catalog().Models {
		if x.Name == model {
			m = x
		}
	}
	var p facility.Profile
	for _, x := range m.Profiles {
		if x.Name == profile {
			p = x
		}
	}
	if p.Name == "" {
		e.t.Fatalf("no profile %s/%s in the catalog", model, profile)
	}
	first := e.defs[nodes[0]]
	scope := facility.Scope{
		{Level: facility.LevelSite, Value: "s1"}, {Level: facility.LevelRoom, Value: "a"},
		{Level: facility.LevelRow, Value: "row1"}, {Level: facility.LevelRack, Value: first.rack},
	}
	if len(nodes) == 1 {
		scope = append(scope, facility.Domain{Level: facility.LevelPDU, Value: first.pdu})
	}
	d := facility.Decision{Replica: facility.ReplicaID(model, replica), Model: model, Profile: profile, Placed: true, Domain: scope}
	info := map[string]render.NodeInfo{}
	for _, n := range nodes {
		d.Shards = append(d.Shards, facility.Shard{Node: n, Watts: p.Watts, GPU: p.GPU, GPUs: p.GPUs})
		d.Watts += p.Watts
		info[n] = render.NodeInfo{}
	}
	job, err := render.Job(render.Input{Model: m, Profile: p, Gen: gen, Decision: d, Nodes: info, Settings: e.cfg.RenderSettings()})
	if err != nil {
		e.t.Fatal(err)
	}
	return job
}

// seed registers a job directly in the fake and returns its ID.
func (e *env) seed(job *api.Job) string {
	e.t.Helper()
	if _, err := e.fake.RegisterJob(job); err != nil {
		e.t.Fatal(err)
	}
	return *job.ID
}

// call sends one API request; body, when not nil, is sent as JSON, and
// the response is decoded into out when out is not nil. It returns the
// status code and the raw body.
func call(t testing.TB, method, url, token string, body, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, raw)
		}
	}
	return resp.StatusCode, string(raw)
}

// replicas reads GET /v1/replicas.
func (h *ctl) replicas(t testing.TB) []controllerapi.ReplicaView {
	t.Helper()
	var out []controllerapi.ReplicaView
	// 503 until the controller has read Nomad and built its first view.
	wait.For(t, h.name+" to answer GET /v1/replicas", func() (bool, string) {
		out = nil
		code, body := call(t, http.MethodGet, h.url+"/v1/replicas", "", nil, &out)
		switch code {
		case http.StatusOK:
			return true, ""
		case http.StatusServiceUnavailable:
			return false, body
		}
		t.Fatalf("GET /v1/replicas: %d %s", code, body)
		return false, ""
	})
	return out
}

// rackOf returns the rack of a node of the test fleet.
func (e *env) rackOf(node string) string { return e.defs[node].rack }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// budgetCheck computes, from the managed jobs Nomad holds (not stopped,
// not dead) and their meta llmgw.nodes and llmgw.watts, every budgeted
// domain's draw as the facility counts it with nothing measured: per node
// base watts plus its shards, summed over the domain's nodes. It returns a
// description of every domain over its limit.
func budgetCheck(client *api.Client, defs map[string]nodeDef, fac facility.Facility) ([]string, error) {
	stubs, _, err := client.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		return nil, err
	}
	perNode := map[string]float64{}
	for name := range defs {
		perNode[name] = baseWatts
	}
	for _, s := range stubs {
		if s.Stop || s.Status == "dead" {
			continue
		}
		m, err := render.ParseMeta(s.Meta)
		if err != nil {
			continue
		}
		for i, n := range m.Nodes {
			perNode[n] += m.Watts[i]
		}
	}
	var over []string
	for _, b := range fac.Budgets {
		draw := 0.0
		for name, d := range defs {
			in := (b.Domain.Level == facility.LevelRack && d.rack == b.Domain.Value) ||
				(b.Domain.Level == facility.LevelPDU && d.pdu == b.Domain.Value)
			if in {
				draw += perNode[name]
			}
		}
		if limit := fac.Limit(b); draw > limit+1e-9 {
			over = append(over, fmt.Sprintf("%s draws %.0f W of %.0f W", b.Domain, draw, limit))
		}
	}
	return over, nil
}

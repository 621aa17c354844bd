// Package ctlharness is the controller tests' one harness: a Nomad fake
// (internal/testing/nomadfake) with a fleet of GPU nodes in racks and
// PDUs, the catalog and facility files in a temporary folder, one clock
// shared by the fake and the controllers (internal/testing/fakeclock),
// the leader lock held by the test, and controllers run in-process through
// the real nomad/api client, each behind a Tap (it counts the job writes,
// cuts the controller off from Nomad, shuffles the allocation lists). A
// test runs a standing-by controller's passes with Pass and Settle, and
// calls its API with Call; every wait is internal/testing/wait's.
//
// It does not import the controller, so that the controller's own tests
// (package controller) use it: a test hands Start the function that builds
// its controller (Build). internal/testing/ctltest builds the standard
// facility of the CLI and console tests on it.
package ctlharness

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
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/testing/fakeclock"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// The fleet's GPUs and nodes.
const (
	// GPU is every node's GPU model: H200s of 700 W and 143,771 MiB.
	GPU = "NVIDIA H200"
	// BaseWatts is every node's base draw (the config's node_base_watts).
	BaseWatts = 300
	// LockTTL is the leader lock's TTL, the test's and the controllers'
	// (Nomad's minimum).
	LockTTL = 10 * time.Second
)

// Epoch is where the fake clock starts.
var Epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Node is one GPU node of a test fleet, in site Spec.Site, room a.
type Node struct {
	Name string
	Row  string // default row1
	Rack string
	PDU  string
	GPUs int
}

// Spec is a test's Nomad, fleet and files.
type Spec struct {
	Nodes             []Node
	Catalog, Facility string
	// Site is every node's site; default s1.
	Site string
	// RealTime runs the fake and the controllers on time.Now instead of
	// the fake clock: for a leading controller whose learning, history and
	// rounds need time to pass on their own.
	RealTime bool
	// LogLevel is the controllers' log level (their logs go to the test's
	// log); default Info.
	LogLevel slog.Level
	// Fake adds options to the fake's.
	Fake []nomadfake.Option
}

// Env is one test's Nomad (the fake), fleet, files and clock.
type Env struct {
	T    testing.TB
	Fake *nomadfake.Server
	// Clock is the fake clock the fake and the controllers share; nil with
	// Spec.RealTime.
	Clock *fakeclock.Clock
	// API is the test's own client of the fake, never tapped.
	API *api.Client
	// Config is what the controllers started afterwards run with: the
	// files' paths, node_base_watts BaseWatts, a reconcile interval of a
	// second, and insecure writes (the API is on loopback; a test of the
	// token turns them off).
	Config config.Config
	// NodeIDs maps each node's name to its ID in the fake; Nodes maps it
	// to its definition.
	NodeIDs map[string]string
	Nodes   map[string]Node

	spec Spec
	cat  *facility.Catalog // the catalog file, parsed; nil after a write
}

// New starts a fake with spec's fleet and writes spec's files; everything
// stops when the test ends.
func New(t testing.TB, spec Spec) *Env {
	t.Helper()
	if spec.Site == "" {
		spec.Site = "s1"
	}
	e := &Env{T: t, NodeIDs: map[string]string{}, Nodes: map[string]Node{}, spec: spec}
	opts := slices.Clone(spec.Fake)
	if !spec.RealTime {
		e.Clock = fakeclock.New(Epoch)
		opts = append([]nomadfake.Option{nomadfake.WithClock(e.Clock.Now)}, opts...)
	}
	e.Fake = nomadfake.New(opts...)
	t.Cleanup(e.Fake.Close)
	e.API = e.Fake.Client(t)
	e.Config = config.Default(t.TempDir())
	e.Config.NodeBaseWatts = BaseWatts
	e.Config.Reconcile.Interval = time.Second
	e.Config.InsecureWrites = true
	for _, n := range spec.Nodes {
		e.AddNode(n)
	}
	e.WriteCatalog(spec.Catalog)
	e.WriteFacility(spec.Facility)
	return e
}

// Now is the time on the controllers' clock.
func (e *Env) Now() time.Time {
	if e.Clock == nil {
		return time.Now()
	}
	return e.Clock.Now()
}

// GPUIDs are the device IDs of a node's GPUs: name-gpu0, name-gpu1, ….
func GPUIDs(n Node) []string {
	ids := make([]string, n.GPUs)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-gpu%d", n.Name, i)
	}
	return ids
}

// AddNode adds a node to the fleet, with its location in llmgw's meta.
func (e *Env) AddNode(n Node) {
	if n.Row == "" {
		n.Row = "row1"
	}
	e.NodeIDs[n.Name] = e.Fake.AddNode(nomadfake.NodeSpec{
		Name: n.Name,
		Meta: map[string]string{
			"llmgw.site": e.spec.Site, "llmgw.room": "a", "llmgw.row": n.Row,
			"llmgw.rack": n.Rack, "llmgw.pdu": n.PDU,
		},
		Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs(GPU, 700, 143771, GPUIDs(n)...)},
	})
	e.Nodes[n.Name] = n
}

// RackOf returns the rack of a node of the fleet.
func (e *Env) RackOf(node string) string { return e.Nodes[node].Rack }

// WriteCatalog writes the catalog file.
func (e *Env) WriteCatalog(src string) {
	e.T.Helper()
	if err := os.WriteFile(e.Config.Catalog, []byte(src), 0o644); err != nil {
		e.T.Fatal(err)
	}
	e.cat = nil
}

// WriteFacility writes the facility file.
func (e *Env) WriteFacility(src string) {
	e.T.Helper()
	if err := os.WriteFile(e.Config.Facility, []byte(src), 0o644); err != nil {
		e.T.Fatal(err)
	}
}

// Catalog is the catalog file, parsed.
func (e *Env) Catalog() facility.Catalog {
	e.T.Helper()
	if e.cat != nil {
		return *e.cat
	}
	src, err := os.ReadFile(e.Config.Catalog)
	if err != nil {
		e.T.Fatal(err)
	}
	cat, err := facility.ParseCatalog(e.Config.Catalog, src)
	if err != nil {
		e.T.Fatal(err)
	}
	e.cat = &cat
	return cat
}

// HoldLock takes the leader lock for the test itself, so that controllers
// started afterwards stand by: they observe, serve the API and never
// reconcile on their own, and the test runs their passes (Pass, Settle).
// On the fake clock the lock never lapses by itself: the clock moves only
// when the test moves it.
func (e *Env) HoldLock() {
	e.T.Helper()
	locks, err := e.API.Locks(api.WriteOptions{}, api.Variable{
		Path: store.LeaderPath, Items: api.VariableItems{"holder": "test"},
		Lock: &api.VariableLock{TTL: LockTTL.String(), LockDelay: LockTTL.String()},
	})
	if err != nil {
		e.T.Fatal(err)
	}
	if _, err := locks.Acquire(context.Background()); err != nil {
		e.T.Fatalf("test leader lock: %v", err)
	}
}

// LockHolder returns the identity holding the leader lock, "" when free.
func (e *Env) LockHolder() string {
	v := e.Fake.Variable("default", store.LeaderPath)
	if v == nil || v.Lock == nil || v.Lock.ID == "" {
		return ""
	}
	return v.Items["holder"]
}

// Controller is a controller under test as the harness runs it: a
// *controller.Controller.
type Controller interface {
	Run(context.Context) error
	Handler() http.Handler
	Pass(context.Context) error
}

// Setup is what the harness gives Build for one controller: its name (its
// Identity), the Config, a client of the fake through the controller's Tap,
// the clock (Env.Now) and a logger to the test's log.
type Setup struct {
	Name   string
	Config config.Config
	Nomad  *api.Client
	Now    func() time.Time
	Logger *slog.Logger
}

// Build makes a controller from its Setup (controller.New with the
// options a test wants).
type Build func(Setup) (Controller, error)

// Ctl is a controller the harness runs, with its Tap and API server.
type Ctl struct {
	Name string
	// URL is the controller API's base URL (an httptest server).
	URL string
	Tap *Tap
	// Ready, when set, says whether a pass now would see everything
	// Nomad holds (the controller's own tests compare its snapshot with
	// Nomad: CaughtUp); Pass waits for it.
	Ready func() (bool, string)
	// NotYet, when set, says that a pass's error only means the
	// controller has not caught up with Nomad (or its own writes) yet;
	// Pass passes again. Any other error fails the test.
	NotYet func(error) bool

	c      Controller
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	srv    *httptest.Server
}

// Running is a controller the harness runs: a *Ctl, or a test's type that
// embeds one.
type Running interface{ running() *Ctl }

func (h *Ctl) running() *Ctl { return h }

// logWriter puts a controller's log lines in the test's log.
type logWriter struct {
	t    testing.TB
	name string
}

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("[%s] %s", w.name, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Start builds a controller named name and runs it (Run) until Stop or
// the end of the test. Whether it leads depends on the leader lock: see
// HoldLock for controllers whose passes the test runs.
func (e *Env) Start(name string, build Build) *Ctl {
	e.T.Helper()
	return e.StartTap(name, &Tap{}, build)
}

// StartTap is Start with a Tap set up beforehand (to shuffle lists, or be
// cut off, from the first read on).
func (e *Env) StartTap(name string, tp *Tap, build Build) *Ctl {
	e.T.Helper()
	return e.StartAt(name, e.Fake.URL(), tp, build)
}

// StartAt is StartTap with the controller reaching Nomad at url (a proxy
// in front of the fake, or an address that refuses connections).
func (e *Env) StartAt(name, url string, tp *Tap, build Build) *Ctl {
	e.T.Helper()
	tp.base = e.Fake.Config().HttpClient.Transport
	client, err := api.NewClient(&api.Config{Address: url, HttpClient: &http.Client{Transport: tp}})
	if err != nil {
		e.T.Fatal(err)
	}
	c, err := build(Setup{
		Name: name, Config: e.Config, Nomad: client, Now: e.Now,
		Logger: slog.New(slog.NewTextHandler(logWriter{e.T, name}, &slog.HandlerOptions{Level: e.spec.LogLevel})),
	})
	if err != nil {
		e.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Ctl{Name: name, Tap: tp, c: c, cancel: cancel, done: make(chan struct{})}
	h.srv = httptest.NewServer(c.Handler())
	h.URL = h.srv.URL
	go func() {
		defer close(h.done)
		_ = c.Run(ctx)
	}()
	e.T.Cleanup(func() {
		h.Stop()
		client.Close()
	})
	return h
}

// Cancel ends the controller's context and returns at once: a process
// killed mid-write, from inside one of its calls to Nomad.
func (h *Ctl) Cancel() { h.cancel() }

// Done is closed when the controller's Run has returned.
func (h *Ctl) Done() <-chan struct{} { return h.done }

// Stop ends the controller, waits for Run to return, and closes its API
// server.
func (h *Ctl) Stop() {
	h.once.Do(func() {
		h.cancel()
		<-h.done
		h.srv.Close()
	})
}

// Pass waits until the controller is ready (Ctl.Ready), then runs one
// reconcile pass (again while Ctl.NotYet says so), and returns how many
// job writes it sent.
func (e *Env) Pass(r Running) int {
	e.T.Helper()
	h := r.running()
	if h.Ready != nil {
		wait.For(e.T, h.Name+" to observe Nomad", h.Ready)
	}
	before := h.Tap.Writes()
	wait.For(e.T, h.Name+"'s pass", func() (bool, string) {
		err := h.c.Pass(context.Background())
		if err != nil && h.NotYet != nil && h.NotYet(err) {
			return false, err.Error()
		}
		if err != nil {
			e.T.Fatalf("%s: pass: %v", h.Name, err)
		}
		return true, ""
	})
	return h.Tap.Writes() - before
}

// Settle runs passes until one writes nothing (at most 10).
func (e *Env) Settle(r Running) {
	e.T.Helper()
	for range 10 {
		if e.Pass(r) == 0 {
			return
		}
	}
	e.T.Fatalf("%s: still writing after 10 passes", r.running().Name)
}

// Seen is what a controller has observed of Nomad: whether it has read
// every list once, each object's modify index by "job/ID", "alloc/ID" and
// "node/ID", and, by allocation ID, whether the checks it last read pass.
type Seen struct {
	Synced bool
	Index  map[string]uint64
	Checks map[string]bool
}

// CaughtUp reads what Nomad holds now (every managed job, allocation and
// node, and the checks of the serving allocations), then what the
// controller has seen, and reports whether the controller holds all of
// it at its current modify index.
func (e *Env) CaughtUp(seen func() Seen) (bool, string) {
	jobs, _, err := e.API.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		return false, err.Error()
	}
	allocs, _, err := e.API.Allocations().List(&api.QueryOptions{Namespace: "*"})
	if err != nil {
		return false, err.Error()
	}
	nodes, _, err := e.API.Nodes().List(nil)
	if err != nil {
		return false, err.Error()
	}
	have := seen()
	if !have.Synced {
		return false, "not synced"
	}
	want := map[string]uint64{}
	for _, j := range jobs {
		want["job/"+j.ID] = j.ModifyIndex
	}
	for _, a := range allocs {
		want["alloc/"+a.ID] = a.ModifyIndex
	}
	for _, n := range nodes {
		want["node/"+n.ID] = n.ModifyIndex
	}
	for k, v := range want {
		if have.Index[k] != v {
			return false, fmt.Sprintf("%s at %d, controller has %d", k, v, have.Index[k])
		}
	}
	if len(want) != len(have.Index) {
		return false, fmt.Sprintf("%d objects in Nomad, %d in the snapshot", len(want), len(have.Index))
	}
	// The health reader has read what the fake's checks say now.
	for _, a := range allocs {
		if a.TaskGroup != observe.CheckedGroup || !observe.Live(a) || a.ClientStatus != api.AllocClientStatusRunning ||
			!strings.HasPrefix(a.JobID, render.JobIDPrefix) {
			continue
		}
		healthy, err := checksPassing(e.API, a.ID)
		if err != nil {
			return false, err.Error()
		}
		passing, ok := have.Checks[a.ID]
		if !ok || passing != healthy {
			return false, fmt.Sprintf("alloc %s checks: controller read passing=%v (read: %v), fake healthy=%v", a.ID, passing, ok, healthy)
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

// LiveJob is a managed job that is not stopped, from its meta.
type LiveJob struct {
	ID, Replica, Model, Profile, FP string
	Gen                             int
	Nodes                           []string
	Watts                           []float64
	Status                          string
	Meta                            map[string]string
}

// LiveJobs lists the managed jobs Nomad holds that are not stopped, by ID.
func (e *Env) LiveJobs() []LiveJob {
	e.T.Helper()
	out, err := ListLive(e.API)
	if err != nil {
		e.T.Fatal(err)
	}
	return out
}

// ListLive is LiveJobs through any client.
func ListLive(client *api.Client) ([]LiveJob, error) {
	stubs, _, err := client.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix, Params: map[string]string{"meta": "true"}})
	if err != nil {
		return nil, err
	}
	var out []LiveJob
	for _, s := range stubs {
		if s.Stop || s.Meta[render.MetaManaged] != "true" {
			continue
		}
		j := LiveJob{ID: s.ID, Replica: s.Meta[render.MetaReplica], Model: s.Meta[render.MetaModel],
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

// ServeAll makes every pending allocation running and healthy, as clients
// whose engines loaded would, and returns how many it made so.
func (e *Env) ServeAll() int {
	e.T.Helper()
	n := 0
	for _, a := range e.Fake.Allocations("") {
		if a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusPending {
			if err := e.Fake.SetAllocStatus(a.ID, api.AllocClientStatusRunning, true); err != nil {
				e.T.Fatal(err)
			}
			n++
		}
	}
	return n
}

// ServeJob makes the pending allocations of one job running and healthy.
func (e *Env) ServeJob(jobID string) {
	e.T.Helper()
	for _, a := range e.Fake.Allocations(jobID) {
		if a.DesiredStatus == api.AllocDesiredStatusRun && a.ClientStatus == api.AllocClientStatusPending {
			if err := e.Fake.SetAllocStatus(a.ID, api.AllocClientStatusRunning, true); err != nil {
				e.T.Fatal(err)
			}
		}
	}
}

// RenderJob renders a managed job for a replica of a catalog model on the
// given nodes, as the controller would have, for seeding Nomad.
func (e *Env) RenderJob(model, profile string, replica, gen int, nodes ...string) *api.Job {
	e.T.Helper()
	var m facility.Model
	for _, x := range e.Catalog().Models {
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
		e.T.Fatalf("no profile %s/%s in the catalog", model, profile)
	}
	first := e.Nodes[nodes[0]]
	scope := facility.Scope{
		{Level: facility.LevelSite, Value: e.spec.Site}, {Level: facility.LevelRoom, Value: "a"},
		{Level: facility.LevelRow, Value: first.Row}, {Level: facility.LevelRack, Value: first.Rack},
	}
	if len(nodes) == 1 {
		scope = append(scope, facility.Domain{Level: facility.LevelPDU, Value: first.PDU})
	}
	d := facility.Decision{Replica: facility.ReplicaID(model, replica), Model: model, Profile: profile, Placed: true, Domain: scope}
	info := map[string]render.NodeInfo{}
	for _, n := range nodes {
		d.Shards = append(d.Shards, facility.Shard{Node: n, Watts: p.Watts, GPU: p.GPU, GPUs: p.GPUs})
		d.Watts += p.Watts
		info[n] = render.NodeInfo{}
	}
	job, err := render.Job(render.Input{Model: m, Profile: p, Gen: gen, Decision: d, Nodes: info, Settings: e.Config.RenderSettings()})
	if err != nil {
		e.T.Fatal(err)
	}
	return job
}

// Seed registers a job directly in the fake and returns its ID.
func (e *Env) Seed(job *api.Job) string {
	e.T.Helper()
	if _, err := e.Fake.RegisterJob(job); err != nil {
		e.T.Fatal(err)
	}
	return *job.ID
}

// Call sends one API request; body, when not nil, is sent as JSON, and a
// 2xx answer is decoded into out when out is not nil. It returns the
// status code and the raw body.
func Call(t testing.TB, method, url, token string, body, out any) (int, string) {
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
	defer func() { _ = resp.Body.Close() }()
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

// Tap is one controller's HTTP transport to the fake. It counts the job
// writes the controller sends, can cut the controller off from Nomad (a
// partition, or a process that froze), and can shuffle the allocation
// lists Nomad answers, so that adoption sees shards in any order.
type Tap struct {
	// Down starts the controller cut off from Nomad (SetDown changes it).
	Down bool
	// Shuffle, when set, shuffles every allocation list.
	Shuffle *rand.Rand

	base      http.RoundTripper
	mu        sync.Mutex
	jobWrites int
}

// ErrPartitioned is what a controller cut off by its Tap gets from every
// call to Nomad.
var ErrPartitioned = errors.New("test: controller cut off from Nomad")

// RoundTrip implements http.RoundTripper.
func (t *Tap) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	if t.Down {
		t.mu.Unlock()
		return nil, ErrPartitioned
	}
	if IsJobWrite(r.Method, r.URL.Path) {
		t.jobWrites++
	}
	rng := t.Shuffle
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

// Writes is how many job writes the controller has sent.
func (t *Tap) Writes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.jobWrites
}

// SetDown cuts the controller off from Nomad (true) or connects it again.
func (t *Tap) SetDown(down bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Down = down
}

// IsJobWrite reports a job registration or deregistration.
func IsJobWrite(method, path string) bool {
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

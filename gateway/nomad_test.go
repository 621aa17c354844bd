package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// nomadServices fakes the part of Nomad's HTTP API NomadSource reads:
// GET /v1/services and /v1/service/<name> as blocking queries on one
// index, GET /v1/client/allocation/<id>/checks (a client endpoint: no
// index) and GET /v1/allocation/<id> (the job's service declarations). internal/testing/nomadfake fakes no service registrations, and adding
// them there would mean changing its router; this is the smallest fake
// that answers in Nomad's shapes.
type nomadServices struct {
	ts *httptest.Server

	mu        sync.Mutex
	index     uint64
	changed   chan struct{}
	regs      map[string]*nomadapi.ServiceRegistration // by ID
	checks    map[string]nomadapi.AllocCheckStatuses   // by alloc ID
	checkFail map[string]bool
	reads     map[string]int  // check reads by alloc ID
	declared  map[string]bool // by alloc ID: its service declares a check

	// Check reads of a held allocation block until release gives them a
	// token, their request ends (cut counts those) or the test ends.
	held     map[string]bool
	blocked  map[string]int // held reads in flight, by alloc ID
	release  chan struct{}
	unheld   chan struct{}
	cut      int
	inFlight int           // check reads in flight, all allocations
	most     int           // the most inFlight has been
	latency  time.Duration // each check read takes this long
}

func newNomadServices(t testing.TB) *nomadServices {
	s := &nomadServices{index: 1, changed: make(chan struct{}), regs: map[string]*nomadapi.ServiceRegistration{},
		checks: map[string]nomadapi.AllocCheckStatuses{}, checkFail: map[string]bool{}, reads: map[string]int{},
		declared: map[string]bool{}, held: map[string]bool{}, blocked: map[string]int{}, release: make(chan struct{}),
		unheld: make(chan struct{})}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.ts.Close)
	t.Cleanup(func() { close(s.unheld) }) // before Close, which waits for handlers
	return s
}

func (s *nomadServices) client(t testing.TB) *nomadapi.Client {
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: s.ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (s *nomadServices) bumpLocked() {
	s.index++
	close(s.changed)
	s.changed = make(chan struct{})
}

// register adds r's registration, as the controller's render would have
// Nomad make it, with its check in status ("" for no check; "unreported"
// for a declared check with no result yet, as Nomad has it for a moment
// after registering).
func (s *nomadServices) register(r *replica, status string) {
	port, _ := strconv.Atoi(r.addr()[strings.LastIndex(r.addr(), ":")+1:])
	s.registerAt(r.model, r.id, port, status)
}

// registerAt registers replica id of model at 127.0.0.1:port, as register.
func (s *nomadServices) registerAt(model, id string, port int, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := render.ServiceName(model)
	s.regs[id] = &nomadapi.ServiceRegistration{
		ID: "_nomad-task-alloc-" + id, ServiceName: name, Namespace: "default", NodeID: "node-1", Datacenter: "dc1",
		JobID: "llmgw-" + id, AllocID: "alloc-" + id, Address: "127.0.0.1", Port: port,
		Tags: []string{"llmgw", "model=" + model, "profile=p", "replica=" + id},
	}
	s.declared["alloc-"+id] = status != ""
	if status != "" && status != "unreported" {
		s.checks["alloc-"+id] = nomadapi.AllocCheckStatuses{"chk-" + id: {ID: "chk-" + id, Check: "ready", Group: "shard-0",
			Mode: "healthiness", Service: name, Task: "engine", Status: status}}
	}
	s.bumpLocked()
}

// report gives a registered replica's declared check its first result.
func (s *nomadServices) report(r *replica, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks["alloc-"+r.id] = nomadapi.AllocCheckStatuses{"chk-" + r.id: {ID: "chk-" + r.id, Check: "ready", Group: "shard-0",
		Mode: "healthiness", Service: render.ServiceName(r.model), Task: "engine", Status: status}}
}

func (s *nomadServices) deregister(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.regs, id)
	s.bumpLocked()
}

func (s *nomadServices) setCheck(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.checks["alloc-"+id] {
		c.Status = status
		s.checks["alloc-"+id][k] = c
	}
}

func (s *nomadServices) failChecks(id string, fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkFail["alloc-"+id] = fail
}

func (s *nomadServices) checkReads(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads["alloc-"+id]
}

// hold makes id's check reads block (see nomadServices.held), or not.
func (s *nomadServices) hold(id string, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held["alloc-"+id] = hold
}

// blockedReads is how many of id's check reads are blocked now.
func (s *nomadServices) blockedReads(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blocked["alloc-"+id]
}

// releaseOne lets one blocked check read answer, waiting for one.
func (s *nomadServices) releaseOne(t *testing.T) {
	t.Helper()
	select {
	case s.release <- struct{}{}:
	case <-time.After(waitFor):
		t.Fatalf("no check read blocked for %s", waitFor)
	}
}

// concurrency is the check reads in flight now and the most there have
// been at once.
func (s *nomadServices) concurrency() (now, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight, s.most
}

func (s *nomadServices) cutReads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cut
}

func (s *nomadServices) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if id, ok := strings.CutPrefix(p, "/v1/client/allocation/"); ok && strings.HasSuffix(id, "/checks") {
		id = strings.TrimSuffix(id, "/checks")
		s.mu.Lock()
		s.reads[id]++
		s.inFlight++
		s.most = max(s.most, s.inFlight)
		held, latency := s.held[id], s.latency
		if held {
			s.blocked[id]++
		}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			if held {
				s.blocked[id]--
			}
			s.mu.Unlock()
		}()
		time.Sleep(latency)
		if held {
			select {
			case <-s.release:
			case <-s.unheld:
			case <-r.Context().Done():
				s.mu.Lock()
				s.cut++
				s.mu.Unlock()
				return
			}
		}
		s.mu.Lock()
		st, fail := s.checks[id], s.checkFail[id]
		s.mu.Unlock()
		if fail {
			http.Error(w, "No path to node", http.StatusNotFound)
			return
		}
		if st == nil {
			st = nomadapi.AllocCheckStatuses{}
		}
		s.mu.Lock()
		b, err := json.Marshal(st) // under the lock: setCheck writes the map
		s.mu.Unlock()
		if err == nil {
			_, _ = w.Write(b)
		}
		return
	}
	if id, ok := strings.CutPrefix(p, "/v1/allocation/"); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		var reg *nomadapi.ServiceRegistration
		for _, r := range s.regs {
			if r.AllocID == id {
				reg = r
			}
		}
		if reg == nil {
			http.Error(w, "alloc not found", http.StatusNotFound)
			return
		}
		svc := &nomadapi.Service{Name: reg.ServiceName, PortLabel: "http"}
		if s.declared[id] {
			svc.Checks = []nomadapi.ServiceCheck{{Name: "ready", Type: "http", Path: "/health"}}
		}
		group, other := "shard-0", "other"
		_ = json.NewEncoder(w).Encode(&nomadapi.Allocation{ID: id, TaskGroup: group, Job: &nomadapi.Job{TaskGroups: []*nomadapi.TaskGroup{
			{Name: &other, Services: []*nomadapi.Service{{Name: reg.ServiceName, Checks: []nomadapi.ServiceCheck{{Name: "x", Type: "tcp"}}}}},
			{Name: &group, Services: []*nomadapi.Service{svc}},
		}}})
		return
	}
	var run func() any
	switch {
	case p == "/v1/services":
		run = s.listLocked
	case strings.HasPrefix(p, "/v1/service/"):
		name := strings.TrimPrefix(p, "/v1/service/")
		run = func() any { return s.getLocked(name) }
	default:
		http.Error(w, "not faked", http.StatusNotImplemented)
		return
	}
	var minIndex uint64
	if v := r.URL.Query().Get("index"); v != "" {
		minIndex, _ = strconv.ParseUint(v, 10, 64)
	}
	wait := 5 * time.Minute
	if v := r.URL.Query().Get("wait"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			wait = d
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		idx, ch := s.index, s.changed
		out := run()
		s.mu.Unlock()
		if minIndex == 0 || idx > minIndex {
			w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
			_ = json.NewEncoder(w).Encode(out)
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
			_ = json.NewEncoder(w).Encode(out)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (s *nomadServices) listLocked() any {
	tags := map[string][]string{}
	for _, reg := range s.regs {
		for _, t := range reg.Tags {
			if !slices.Contains(tags[reg.ServiceName], t) {
				tags[reg.ServiceName] = append(tags[reg.ServiceName], t)
			}
		}
	}
	stub := &nomadapi.ServiceRegistrationListStub{Namespace: "default", Services: []*nomadapi.ServiceRegistrationStub{}}
	for name, ts := range tags {
		sort.Strings(ts)
		stub.Services = append(stub.Services, &nomadapi.ServiceRegistrationStub{ServiceName: name, Tags: ts})
	}
	return []*nomadapi.ServiceRegistrationListStub{stub}
}

func (s *nomadServices) getLocked(name string) any {
	out := []*nomadapi.ServiceRegistration{}
	for _, reg := range s.regs {
		if reg.ServiceName == name {
			out = append(out, reg)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func TestNomadDiscoveryFollowsRegistrationsAndChecks(t *testing.T) {
	const model = "qwen-2.5.7b"
	n := newNomadServices(t)
	r0 := startReplica(t, model, "r0", nil)
	r1 := startReplica(t, model, "r1", nil)
	n.register(r0, "pending") // loading: registered, not yet ready

	tg := startGateway(t, Options{Source: &NomadSource{Client: n.client(t), CheckInterval: 50 * time.Millisecond}})
	runGateway(t, tg.Gateway)
	wait.Until(t, "discovery synced", tg.Synced)
	tg.waitServed(t, map[string]int{})
	if got := tg.post(t, "/v1/chat/completions", chat(model)); got.status != http.StatusServiceUnavailable {
		t.Errorf("only a loading replica: %d, want 503", got.status)
	}

	n.setCheck("r0", "success")
	tg.waitServed(t, map[string]int{model: 1})
	n.register(r1, "success")
	tg.waitServed(t, map[string]int{model: 2})

	// A failing check takes r0 out.
	n.setCheck("r0", "failure")
	tg.waitServed(t, map[string]int{model: 1})
	for range 3 {
		if got := tg.post(t, "/v1/chat/completions", chat(model)); got.status != 200 || got.header.Get(ReplicaHeader) != "r1" {
			t.Fatalf("r0 failing: %d from %q", got.status, got.header.Get(ReplicaHeader))
		}
	}
	// Checks that cannot be read keep the last verdict.
	n.failChecks("r0", true)
	n.setCheck("r0", "success")
	reads := n.checkReads("r0")
	wait.Until(t, "three more check reads", func() bool { return n.checkReads("r0") >= reads+3 })
	if got := tg.served(t); got[model] != 1 {
		t.Errorf("unreadable checks changed the verdict: %v", got)
	}
	n.failChecks("r0", false)
	tg.waitServed(t, map[string]int{model: 2})

	// A replica without checks is routed as registered.
	r2 := startReplica(t, model, "r2", nil)
	n.register(r2, "")
	tg.waitServed(t, map[string]int{model: 3})

	// A replica whose service declares a check that has no result yet
	// (Nomad registers the service a moment before it reports the check
	// pending) is not routed until the check succeeds.
	r3 := startReplica(t, model, "r3", nil)
	n.register(r3, "unreported")
	reads = n.checkReads("r3")
	wait.Until(t, "three check reads of r3", func() bool { return n.checkReads("r3") >= reads+3 })
	if got := tg.served(t); got[model] != 3 {
		t.Errorf("a replica with its check unreported was routed: %v", got)
	}
	n.report(r3, "success")
	tg.waitServed(t, map[string]int{model: 4})
	n.deregister("r3")

	n.deregister("r0")
	n.deregister("r1")
	n.deregister("r2")
	wait.Until(t, "the model to be unknown", func() bool {
		return tg.post(t, "/v1/chat/completions", chat(model)).status == http.StatusNotFound
	})
}

// One client that does not answer holds only its own allocation's health:
// the other registrations are still read, routed and taken out while its
// read hangs, its replica keeps its last verdict meanwhile, and it is not
// read again until that read ends.
func TestNomadStuckCheckReadHoldsOnlyItsOwn(t *testing.T) {
	const model = "qwen-2.5.7b"
	n := newNomadServices(t)
	stuck := startReplica(t, model, "a-stuck", nil) // its registration sorts first
	r1 := startReplica(t, model, "r1", nil)
	n.register(stuck, "success")
	n.register(r1, "success")
	// A deadline far beyond the test: only releaseOne ends a blocked read.
	src := &NomadSource{Client: n.client(t), CheckInterval: 50 * time.Millisecond, CheckTimeout: time.Hour}
	tg := startGateway(t, Options{Source: src})
	runGateway(t, tg.Gateway)
	tg.waitServed(t, map[string]int{model: 2})

	n.hold("a-stuck", true)
	wait.Until(t, "a check read of a-stuck to block", func() bool { return n.blockedReads("a-stuck") == 1 })
	reads := n.checkReads("a-stuck")

	r2 := startReplica(t, model, "r2", nil)
	n.register(r2, "success")
	tg.waitServed(t, map[string]int{model: 3})
	n.setCheck("r1", "failure")
	tg.waitServed(t, map[string]int{model: 2})
	n.setCheck("r1", "success")
	tg.waitServed(t, map[string]int{model: 3})
	if got := n.blockedReads("a-stuck"); got != 1 {
		t.Fatalf("%d blocked reads of a-stuck, want the one still hanging", got)
	}
	if got := n.checkReads("a-stuck"); got != reads {
		t.Errorf("a-stuck read %d more times while its read hung", got-reads)
	}

	// Once it answers, it is read as before.
	n.hold("a-stuck", false)
	n.releaseOne(t)
	n.setCheck("a-stuck", "failure")
	tg.waitServed(t, map[string]int{model: 2})
}

// A check read is cut off at CheckTimeout; its allocation, never read,
// is then routed (the verdict of checks that cannot be read, at first).
func TestNomadCheckReadDeadline(t *testing.T) {
	const model = "qwen-2.5.7b"
	n := newNomadServices(t)
	r0 := startReplica(t, model, "r0", nil)
	r1 := startReplica(t, model, "r1", nil)
	n.register(r0, "failure") // never read: it would not be routed
	n.register(r1, "success")
	n.hold("r0", true)
	src := &NomadSource{Client: n.client(t), CheckInterval: 50 * time.Millisecond, CheckTimeout: 100 * time.Millisecond}
	tg := startGateway(t, Options{Source: src})
	runGateway(t, tg.Gateway)
	wait.Until(t, "discovery synced", tg.Synced)
	tg.waitServed(t, map[string]int{model: 2})
	if n.cutReads() == 0 {
		t.Error("no check read of r0 was cut off")
	}
}

// Check reads run concurrently, never more at once than CheckParallelism,
// all services together.
func TestNomadCheckReadsBounded(t *testing.T) {
	const bound = 3
	n := newNomadServices(t)
	var ids []string
	for _, model := range []string{"qwen-2.5.7b", "llama-3.1.8b"} {
		for i := range 5 { // more than bound in each service
			id := model[:4] + "-" + strconv.Itoa(i)
			n.register(startReplica(t, model, id, nil), "success")
			n.hold(id, true)
			ids = append(ids, id)
		}
	}
	src := &NomadSource{Client: n.client(t), CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Hour, CheckParallelism: bound}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, func(Snapshot) {}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return after its context ended")
		}
	})

	wait.Until(t, "check reads in flight at the bound", func() bool { now, _ := n.concurrency(); return now >= bound })
	// Let the reads answer one at a time until every allocation has
	// been read, the reads of later rounds queueing behind the rest.
	allRead := func() bool {
		for _, id := range ids {
			if n.checkReads(id) == 0 {
				return false
			}
		}
		return true
	}
	for i := 0; !allRead(); i++ {
		if i == 10*len(ids) {
			t.Fatalf("not every allocation read after %d answers", i)
		}
		n.releaseOne(t)
	}
	if _, most := n.concurrency(); most > bound {
		t.Errorf("%d check reads in flight at once, want at most %d", most, bound)
	}
}

// The first publish waits for every registration's first verdict, so the
// gateway does not start on part of its replicas while a read hangs.
func TestNomadFirstPublishHasEveryVerdict(t *testing.T) {
	const model = "qwen-2.5.7b"
	n := newNomadServices(t)
	n.register(startReplica(t, model, "r0", nil), "success")
	n.register(startReplica(t, model, "r1", nil), "success")
	n.hold("r0", true)
	var mu sync.Mutex
	var published []Snapshot
	src := &NomadSource{Client: n.client(t), CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Hour}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(s Snapshot) {
			mu.Lock()
			defer mu.Unlock()
			published = append(published, s)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("Run ended: %v", err)
		}
	})

	wait.Until(t, "r0's read to block", func() bool { return n.blockedReads("r0") == 1 })
	// r1 is read again only once its first answer has been taken (and, were
	// it published alone, handed to runDiscovery).
	wait.Until(t, "r1 read twice", func() bool { return n.checkReads("r1") >= 2 })
	n.releaseOne(t)
	wait.Until(t, "a publish", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(published) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if got := len(published[0].Instances); got != 2 {
		t.Errorf("first publish has %d replicas, want 2: %+v", got, published[0].Instances)
	}
}

// benchNomad registers regs replicas of one model, r000 first, each check
// read answering after a millisecond (a client's round trip).
func benchNomad(b *testing.B, regs int) *nomadServices {
	n := newNomadServices(b)
	n.mu.Lock()
	n.latency = time.Millisecond
	n.mu.Unlock()
	for i := range regs {
		n.registerAt("qwen-2.5.7b", fmt.Sprintf("r%03d", i), 10000+i, "success")
	}
	return n
}

// runBench runs src until stop, sending the replicas of each publish on
// counts.
func runBench(src *NomadSource) (counts <-chan int, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan int)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx, func(s Snapshot) {
			select {
			case ch <- len(s.Instances):
			case <-ctx.Done():
			}
		})
	}()
	return ch, func() {
		cancel()
		<-done
	}
}

// BenchmarkNomadFirstPublish is the time from a NomadSource's start to its
// first publish, over 200 registrations whose check reads take 1ms each.
func BenchmarkNomadFirstPublish(b *testing.B) {
	const regs = 200
	n := benchNomad(b, regs)
	client := n.client(b)
	for b.Loop() {
		counts, stop := runBench(&NomadSource{Client: client})
		if got := <-counts; got != regs {
			b.Fatalf("first publish: %d replicas, want %d", got, regs)
		}
		stop()
	}
}

// BenchmarkNomadCheckFlip is the time from a check's change to its publish,
// over 200 registrations whose check reads take 1ms each, with the client
// of the first never answering (CheckTimeout 1s, CheckInterval 100ms).
func BenchmarkNomadCheckFlip(b *testing.B) {
	const regs = 200
	n := benchNomad(b, regs)
	n.hold("r000", true)
	counts, stop := runBench(&NomadSource{Client: n.client(b), CheckInterval: 100 * time.Millisecond, CheckTimeout: time.Second})
	defer stop()
	if got := <-counts; got != regs {
		b.Fatalf("first publish: %d replicas, want %d", got, regs)
	}
	want := regs
	for b.Loop() {
		status := "failure"
		if want == regs-1 {
			status = "success"
		}
		n.setCheck("r199", status)
		want = 2*regs - 1 - want
		for got := <-counts; got != want; got = <-counts {
		}
	}
}

package gateway

import (
	"encoding/json"
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
)

// nomadServices fakes the part of Nomad's HTTP API NomadSource reads:
// GET /v1/services and /v1/service/<name> as blocking queries on one
// index, GET /v1/client/allocation/<id>/checks (a client endpoint: no
// index) and GET /v1/allocation/<id> (the job's service declarations). controller/nomadfake fakes no service registrations, and adding
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
}

func newNomadServices(t *testing.T) *nomadServices {
	s := &nomadServices{index: 1, changed: make(chan struct{}), regs: map[string]*nomadapi.ServiceRegistration{},
		checks: map[string]nomadapi.AllocCheckStatuses{}, checkFail: map[string]bool{}, reads: map[string]int{},
		declared: map[string]bool{}}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.ts.Close)
	return s
}

func (s *nomadServices) client(t *testing.T) *nomadapi.Client {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	name := render.ServiceName(r.model)
	s.regs[r.id] = &nomadapi.ServiceRegistration{
		ID: "_nomad-task-alloc-" + r.id, ServiceName: name, Namespace: "default", NodeID: "node-1", Datacenter: "dc1",
		JobID: "llmgw-" + r.id, AllocID: "alloc-" + r.id, Address: "127.0.0.1", Port: port,
		Tags: []string{"llmgw", "model=" + r.model, "profile=p", "replica=" + r.id},
	}
	s.declared["alloc-"+r.id] = status != ""
	if status != "" && status != "unreported" {
		s.checks["alloc-"+r.id] = nomadapi.AllocCheckStatuses{"chk-" + r.id: {ID: "chk-" + r.id, Check: "ready", Group: "shard-0",
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

func (s *nomadServices) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if id, ok := strings.CutPrefix(p, "/v1/client/allocation/"); ok && strings.HasSuffix(id, "/checks") {
		id = strings.TrimSuffix(id, "/checks")
		s.mu.Lock()
		st, fail := s.checks[id], s.checkFail[id]
		s.reads[id]++
		s.mu.Unlock()
		if fail {
			http.Error(w, "No path to node", http.StatusNotFound)
			return
		}
		if st == nil {
			st = nomadapi.AllocCheckStatuses{}
		}
		_ = json.NewEncoder(w).Encode(st)
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
	eventually(t, "discovery synced", tg.Synced)
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
	eventually(t, "three more check reads", func() bool { return n.checkReads("r0") >= reads+3 })
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
	eventually(t, "three check reads of r3", func() bool { return n.checkReads("r3") >= reads+3 })
	if got := tg.served(t); got[model] != 3 {
		t.Errorf("a replica with its check unreported was routed: %v", got)
	}
	n.report(r3, "success")
	tg.waitServed(t, map[string]int{model: 4})
	n.deregister("r3")

	n.deregister("r0")
	n.deregister("r1")
	n.deregister("r2")
	eventually(t, "the model to be unknown", func() bool {
		return tg.post(t, "/v1/chat/completions", chat(model)).status == http.StatusNotFound
	})
}

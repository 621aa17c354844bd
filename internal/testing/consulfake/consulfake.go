// Package consulfake is a test double of the Consul HTTP API subset the
// gateway uses, for the real client github.com/hashicorp/consul/api: an
// httptest server on loopback. It imports testing and httptest and must
// only be imported by tests.
//
//	c := consulfake.New()
//	defer c.Close()
//	c.Register(consulfake.Service{ID: "r1", Name: "llmgw-m", Tags: []string{"llmgw", "model=m"}, Address: "127.0.0.1", Port: 8001})
//	client := c.Client(t) // *api.Client
//
// Faked, with Consul's paths, JSON shapes and headers:
//
//   - GET /v1/catalog/services: every service name with the union of its
//     instances' tags, whatever their health.
//   - GET /v1/health/service/<name>: its instances as ServiceEntry
//     (Node, Service, Checks), ?tag= (repeatable: all must match) and
//     ?passing (only instances whose checks all pass) honoured.
//   - PUT /v1/agent/service/register (an AgentServiceRegistration; its
//     check starts critical, as Consul's do unless given a status) and
//     PUT /v1/agent/service/deregister/<id>.
//
// Reads are blocking queries as in Consul: every answer carries
// X-Consul-Index (one index for the whole fake, growing with every write),
// X-Consul-KnownLeader and X-Consul-LastContact; with ?index=N a read waits
// until the index exceeds N, or ?wait (default 5m, at most 10m) passes, or
// the client goes away. Anything else answers 404 with a text body.
package consulfake

import (
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

	"github.com/hashicorp/consul/api"
)

// Node is the node every service is registered on unless it names another.
const Node = "node-1"

// Health statuses, as Consul spells them.
const (
	Passing  = api.HealthPassing
	Warning  = api.HealthWarning
	Critical = api.HealthCritical
)

// Service is one registered instance.
type Service struct {
	ID      string
	Name    string
	Tags    []string
	Address string
	Port    int
	// Node defaults to Node, NodeAddress to 127.0.0.1.
	Node        string
	NodeAddress string
	// Weight is Consul's passing weight; 0 means Consul's default, 1.
	Weight int
	// Status is its one check's status; "" means passing.
	Status string
	// Check is the registration's check as given to the agent endpoint.
	Check *api.AgentServiceCheck
}

// Server is the fake. It is safe for concurrent use.
type Server struct {
	ts *httptest.Server

	mu       sync.Mutex
	index    uint64
	changed  chan struct{}
	closed   chan struct{}
	once     sync.Once
	services map[string]*Service      // by ID
	requests map[string]int           // by path
	fail     map[string]int           // path prefix → failures left
	hold     map[string]chan struct{} // path prefix → closed when answers may go
}

// New starts a fake Consul agent on a loopback port.
func New() *Server {
	s := &Server{
		index:    1,
		changed:  make(chan struct{}),
		closed:   make(chan struct{}),
		services: map[string]*Service{},
		requests: map[string]int{},
		fail:     map[string]int{},
		hold:     map[string]chan struct{}{},
	}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the fake's address.
func (s *Server) URL() string { return s.ts.URL }

// Addr is the fake's host:port, for api.Config.Address.
func (s *Server) Addr() string { return strings.TrimPrefix(s.ts.URL, "http://") }

// Close ends blocking queries and stops the server.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closed)
		s.ts.Close()
	})
}

// Client returns the real Consul client pointed at the fake.
func (s *Server) Client(t testing.TB) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = s.Addr()
	cfg.Scheme = "http"
	cfg.Token = ""
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("consulfake: client: %v", err)
	}
	return c
}

// Register adds or replaces an instance, as a catalog registration would.
func (s *Server) Register(svc Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := svc
	c.Tags = slices.Clone(svc.Tags)
	s.services[svc.ID] = &c
	s.bumpLocked()
}

// Deregister removes an instance; it reports whether there was one.
func (s *Server) Deregister(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.services[id]; !ok {
		return false
	}
	delete(s.services, id)
	s.bumpLocked()
	return true
}

// SetStatus sets an instance's check status (Passing, Warning, Critical).
func (s *Server) SetStatus(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc, ok := s.services[id]; ok {
		svc.Status = status
		s.bumpLocked()
	}
}

// Service returns a copy of an instance, as registered.
func (s *Server) Service(id string) (Service, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	svc, ok := s.services[id]
	if !ok {
		return Service{}, false
	}
	return *svc, true
}

// Requests is how many requests were made for path.
func (s *Server) Requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

// FailNext makes the next n requests whose path starts with prefix answer
// 500.
func (s *Server) FailNext(prefix string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[prefix] += n
}

// HoldAnswers makes requests whose path starts with prefix take effect but
// not be answered until release is called or their client gives up, as
// when an agent's answer is lost on the way.
func (s *Server) HoldAnswers(prefix string) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold[prefix] = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.hold, prefix)
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Index is the fake's current index.
func (s *Server) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

func (s *Server) bumpLocked() {
	s.index++
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	s.mu.Lock()
	s.requests[p]++
	for prefix, n := range s.fail {
		if n > 0 && strings.HasPrefix(p, prefix) {
			s.fail[prefix] = n - 1
			s.mu.Unlock()
			http.Error(w, "consulfake: injected failure", http.StatusInternalServerError)
			return
		}
	}
	var hold []chan struct{}
	for prefix, ch := range s.hold {
		if strings.HasPrefix(p, prefix) {
			hold = append(hold, ch)
		}
	}
	s.mu.Unlock()
	for _, ch := range hold {
		defer func() {
			select {
			case <-ch:
			case <-r.Context().Done():
			case <-s.closed:
			}
		}()
	}
	switch {
	case p == "/v1/catalog/services" && r.Method == http.MethodGet:
		s.query(w, r, s.catalogServicesLocked)
	case strings.HasPrefix(p, "/v1/health/service/") && r.Method == http.MethodGet:
		name := strings.TrimPrefix(p, "/v1/health/service/")
		q := r.URL.Query()
		_, passing := q["passing"]
		if v := q.Get("passing"); v != "" {
			passing, _ = strconv.ParseBool(v)
		}
		tags := q["tag"]
		s.query(w, r, func() any { return s.healthLocked(name, tags, passing) })
	case p == "/v1/agent/service/register" && r.Method == http.MethodPut:
		var reg api.AgentServiceRegistration
		if err := json.NewDecoder(r.Body).Decode(&reg); err != nil {
			http.Error(w, "Request decode failed: "+err.Error(), http.StatusBadRequest)
			return
		}
		if reg.Name == "" {
			http.Error(w, "Missing service name", http.StatusBadRequest)
			return
		}
		id := reg.ID
		if id == "" {
			id = reg.Name
		}
		svc := Service{ID: id, Name: reg.Name, Tags: reg.Tags, Address: reg.Address, Port: reg.Port, Check: reg.Check, Status: Critical}
		if reg.Check == nil {
			svc.Status = Passing
		} else if reg.Check.Status != "" {
			svc.Status = reg.Check.Status
		}
		s.Register(svc)
	case strings.HasPrefix(p, "/v1/agent/service/deregister/") && r.Method == http.MethodPut:
		id := strings.TrimPrefix(p, "/v1/agent/service/deregister/")
		if !s.Deregister(id) {
			http.Error(w, fmt.Sprintf("Unknown service ID %q. Ensure that the service ID is passed, not the service name.", id), http.StatusNotFound)
		}
	default:
		http.Error(w, "consulfake: "+r.Method+" "+p+" is not faked", http.StatusNotFound)
	}
}

// query answers a read as a blocking query.
func (s *Server) query(w http.ResponseWriter, r *http.Request, run func() any) {
	q := r.URL.Query()
	var minIndex uint64
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, "Invalid index", http.StatusBadRequest)
			return
		}
		minIndex = n
	}
	wait := 5 * time.Minute
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			http.Error(w, "Invalid wait time", http.StatusBadRequest)
			return
		}
		wait = d
	}
	wait = min(wait, 10*time.Minute)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		idx, ch := s.index, s.changed
		var out any
		if minIndex == 0 || idx > minIndex {
			out = run()
		}
		s.mu.Unlock()
		if out == nil {
			select {
			case <-ch:
				continue
			case <-timer.C:
			case <-s.closed:
			case <-r.Context().Done():
				return
			}
			s.mu.Lock()
			idx, out = s.index, run()
			s.mu.Unlock()
		}
		b, err := json.Marshal(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Consul-Index", strconv.FormatUint(idx, 10))
		h.Set("X-Consul-KnownLeader", "true")
		h.Set("X-Consul-LastContact", "0")
		_, _ = w.Write(b)
		return
	}
}

func (s *Server) catalogServicesLocked() any {
	out := map[string][]string{}
	for _, svc := range s.services {
		tags := out[svc.Name]
		if tags == nil {
			tags = []string{}
		}
		for _, t := range svc.Tags {
			if !slices.Contains(tags, t) {
				tags = append(tags, t)
			}
		}
		sort.Strings(tags)
		out[svc.Name] = tags
	}
	return out
}

func (s *Server) healthLocked(name string, tags []string, passing bool) any {
	out := []*api.ServiceEntry{}
	ids := make([]string, 0, len(s.services))
	for id := range s.services {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		svc := s.services[id]
		if svc.Name != name {
			continue
		}
		if !containsAll(svc.Tags, tags) {
			continue
		}
		status := svc.Status
		if status == "" {
			status = Passing
		}
		if passing && status != Passing {
			continue
		}
		node, nodeAddr := svc.Node, svc.NodeAddress
		if node == "" {
			node = Node
		}
		if nodeAddr == "" {
			nodeAddr = "127.0.0.1"
		}
		weight := svc.Weight
		if weight == 0 {
			weight = 1
		}
		out = append(out, &api.ServiceEntry{
			Node: &api.Node{Node: node, Address: nodeAddr, Datacenter: "dc1"},
			Service: &api.AgentService{
				ID: svc.ID, Service: svc.Name, Tags: slices.Clone(svc.Tags), Address: svc.Address, Port: svc.Port,
				Weights: api.AgentWeights{Passing: weight, Warning: 1},
			},
			Checks: api.HealthChecks{{
				Node: node, CheckID: "service:" + svc.ID, Name: "Service '" + svc.Name + "' check",
				Status: status, ServiceID: svc.ID, ServiceName: svc.Name, Type: "http",
			}},
		})
	}
	return out
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

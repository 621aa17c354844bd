package nomadfake

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Blocking-query limits, as Nomad 2.0's servers apply them
// (structs.DefaultBlockingRPCQueryTime and MaxBlockingRPCQueryTime).
const (
	DefaultBlockingWait = 5 * time.Minute
	MaxBlockingWait     = 5 * time.Minute
)

// DropConnection, passed as the status to FailNext or FailNextAfterApply,
// closes the connection without an HTTP response, as a crashed or
// partitioned server would.
const DropConnection = -1

// StatusClientClosed is the Status logged for a request whose client went
// away before it was answered (nginx's 499).
const StatusClientClosed = 499

// State-table names, one index each, as Nomad keeps them.
const (
	tableJobs  = "jobs"
	tableAlloc = "allocs"
	tableEvals = "evals"
	tableNodes = "nodes"
	tableVars  = "variables"
)

// Option configures a Server.
type Option func(*Server)

// WithClock makes the fake read time from now: lock TTLs and delays,
// CreateTime/ModifyTime and submit-time stamps, node status times. Call
// Tick after moving it.
func WithClock(now func() time.Time) Option {
	return func(s *Server) { s.now = now }
}

// WithAutoRun makes every new allocation running with passing checks at
// once, as if its client had started it. See also AutoRun.
func WithAutoRun(on bool) Option {
	return func(s *Server) { s.autoRun = on }
}

// WithNodeMetaDelay makes dynamic node metadata reach the node the servers
// show (GET /v1/node/<id>, the node list's index) d after
// POST /v1/client/metadata answers, as a Nomad client sends it with its
// next node update (5 to 10 s later; 1 s in dev mode). The answer has the
// new metadata at once, as a client's does. The delay is wall-clock time,
// not WithClock's.
func WithNodeMetaDelay(d time.Duration) Option {
	return func(s *Server) { s.nodeMetaDelay = d }
}

// WithoutRequestLog keeps no log of requests (Requests answers none),
// for runs of many requests; Traffic still counts them.
func WithoutRequestLog() Option {
	return func(s *Server) { s.noLog = true }
}

// Traffic is what the fake served on one endpoint.
type Traffic struct {
	Requests int64
	Bytes    int64 // response body bytes written (an event stream's as they are sent)
}

// Traffic returns the requests and response bytes served so far, by
// endpoint: the method and the path with IDs replaced by ":id"
// ("GET /v1/node/:id", "GET /v1/client/allocation/:id/checks").
func (s *Server) Traffic() map[string]Traffic {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Traffic, len(s.traffic))
	for k, v := range s.traffic {
		out[k] = Traffic{Requests: v.requests.Load(), Bytes: v.bytes.Load()}
	}
	return out
}

type trafficCounter struct{ requests, bytes atomic.Int64 }

// endpoint names a request's endpoint for Traffic.
func endpoint(r *http.Request) string {
	p := r.URL.Path
	for _, pre := range []string{"/v1/job/", "/v1/node/", "/v1/var/", "/v1/service/", "/v1/client/allocation/"} {
		rest, ok := strings.CutPrefix(p, pre)
		if !ok {
			continue
		}
		id, sub, _ := strings.Cut(rest, "/")
		if pre == "/v1/var/" {
			sub = ""
		}
		p = pre + ":id"
		if id == "" {
			p = pre
		}
		if sub != "" {
			p += "/" + sub
		}
		break
	}
	return r.Method + " " + p
}

// Request is one request the fake served, for assertions.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Body   []byte
	// Status is the HTTP status sent; 0 while the request is in flight,
	// StatusClientClosed when the client went away first (a cancelled
	// blocking query), DropConnection when FailNext dropped the connection.
	Status int
	// Injected reports that a FailNext rule answered it.
	Injected bool
}

type nsKey struct{ ns, id string }

type fault struct {
	method, prefix string
	n, status      int
	after          bool
}

// Server is an in-memory fake of the Nomad HTTP API subset llmgw's
// controller uses. It is safe for concurrent use.
type Server struct {
	ts  *httptest.Server
	now func() time.Time

	closed    chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	index   uint64
	tables  map[string]uint64
	changed chan struct{}
	autoRun bool
	ports   int // dynamic ports handed out (allocs.go)
	// shutdownDelay: stopped running allocations wait their group's
	// shutdown_delay (services.go); extraServices are AddService's.
	shutdownDelay bool
	extraServices []*api.ServiceRegistration
	// nodeMetaDelay is WithNodeMetaDelay's.
	nodeMetaDelay time.Duration
	// failMetric is what FailedTGAllocs reports for a group the fake
	// could not place (SetPlacementFailureMetric).
	failMetric api.AllocationMetric
	hooks      []func(*http.Request)
	faults     []*fault
	reqs       []*Request
	noLog      bool // WithoutRequestLog
	traffic    map[string]*trafficCounter

	jobs   map[nsKey]*jobRecord
	allocs map[string]*allocRecord
	// stopping are the allocations waiting out a shutdown_delay
	// (WithShutdownDelay), swept at every request.
	stopping map[string]*allocRecord
	nodes    map[string]*nodeRecord
	byName   map[string]*nodeRecord // nodes by name, for placement
	vars     map[nsKey]*varRecord

	// Indexes, append-only, in creation order.
	allocsByJob  map[nsKey][]*allocRecord
	allocsByNode map[string][]*allocRecord
	evalsByJob   map[nsKey][]*api.Evaluation

	// The event stream (events.go): the objects the current write
	// changed, the buffer of the last eventBufSize batches, and the
	// highest index dropped from it.
	dirty          map[string]*dirtyObject
	events         []*eventBatch
	eventsDropped  uint64
	eventBufSize   int
	eventHeartbeat time.Duration
	streamsEnd     chan struct{} // closed by EndEventStreams
	streamsHeld    bool          // HoldEventStreams
}

// New starts a fake Nomad server on a loopback port.
func New(opts ...Option) *Server {
	s := &Server{
		// Index 1 is the bootstrapped raft log; the first write is 2, so
		// it is above the floor of 1 that empty tables answer.
		index:    1,
		now:      time.Now,
		closed:   make(chan struct{}),
		tables:   map[string]uint64{},
		changed:  make(chan struct{}),
		jobs:     map[nsKey]*jobRecord{},
		allocs:   map[string]*allocRecord{},
		stopping: map[string]*allocRecord{},
		nodes:    map[string]*nodeRecord{},
		byName:   map[string]*nodeRecord{},
		vars:     map[nsKey]*varRecord{},

		allocsByJob:  map[nsKey][]*allocRecord{},
		allocsByNode: map[string][]*allocRecord{},
		evalsByJob:   map[nsKey][]*api.Evaluation{},

		eventBufSize:   DefaultEventBufferSize,
		eventHeartbeat: DefaultEventHeartbeat,
	}
	for _, o := range opts {
		o(s)
	}
	s.ts = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	return s
}

// URL is the fake's address, for api.Config.Address.
func (s *Server) URL() string { return s.ts.URL }

// Close ends every blocking query, then stops the server and waits for
// its handlers to return.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.ts.Close()
	})
}

// Config returns an api.Config pointed at the fake, using an HTTP client
// whose connections the fake's Close shuts.
func (s *Server) Config() *api.Config {
	return &api.Config{Address: s.ts.URL, HttpClient: s.ts.Client()}
}

// Client returns the real Nomad API client pointed at the fake, closed
// when the test ends.
func (s *Server) Client(t testing.TB) *api.Client {
	t.Helper()
	c, err := api.NewClient(s.Config())
	if err != nil {
		t.Fatalf("nomadfake: api client: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// AutoRun switches WithAutoRun on or off for allocations created from now.
func (s *Server) AutoRun(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.autoRun = on
}

// SetPlacementFailureMetric sets the AllocationMetric an evaluation
// reports in FailedTGAllocs for each group the fake could not place (all
// zero until set). The fake does not compute Nomad's feasibility counters:
// a test that needs them says what Nomad would report, and a real-Nomad
// e2e checks that Nomad does.
func (s *Server) SetPlacementFailureMetric(m api.AllocationMetric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failMetric = m
}

// Hook adds f, called with every request before the fake handles it (after
// its body is read), in the handler's goroutine. A test can use it to cancel
// a controller's context at an exact point, and may block in it (for
// example until the caller has seen the cancellation) to order events. f
// runs without the fake's lock held, so it may call the fake's helpers.
func (s *Server) Hook(f func(r *http.Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, f)
}

// FailNext makes the next n requests whose method is method ("" for any)
// and whose path starts with pathPrefix fail with status (0 for 500, or
// DropConnection) before they change anything: the body is the plain text
// "nomadfake: injected failure". Rules are matched in the order added.
func (s *Server) FailNext(method, pathPrefix string, n, status int) {
	s.addFault(method, pathPrefix, n, status, false)
}

// FailNextAfterApply is FailNext, except that the request is applied first
// and only its response is lost: the write happened, the caller sees a
// failure. It models a server that committed and then crashed.
func (s *Server) FailNextAfterApply(method, pathPrefix string, n, status int) {
	s.addFault(method, pathPrefix, n, status, true)
}

func (s *Server) addFault(method, prefix string, n, status int, after bool) {
	if n <= 0 {
		return
	}
	if status == 0 {
		status = http.StatusInternalServerError
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: method, prefix: prefix, n: n, status: status, after: after})
}

// Requests returns a copy of every request served so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = *r
		out[i].Query = cloneValues(r.Query)
		out[i].Body = slices.Clone(r.Body)
	}
	return out
}

// ResetRequests forgets the request log.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = nil
}

// Index is the fake's current raft-like index: it grows by one with every
// write.
func (s *Server) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

// Tick re-reads the clock and applies what time alone changes: variable
// locks whose TTL or lock delay has passed, and (WithShutdownDelay)
// stopping allocations whose shutdown_delay has. Every request does this
// too; call Tick after moving a WithClock clock to wake blocking queries.
func (s *Server) Tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocksLocked()
	s.sweepStopsLocked()
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// nextIndexLocked starts a write: it returns the new index.
func (s *Server) nextIndexLocked() uint64 {
	s.index++
	return s.index
}

// touchLocked records that table changed at idx. The service
// registrations follow the allocations (services.go), so a change of
// those is one of these.
func (s *Server) touchLocked(idx uint64, tables ...string) {
	for _, t := range tables {
		s.tables[t] = idx
		if t == tableAlloc {
			s.tables[tableServices] = idx
		}
	}
}

// notifyLocked ends a write: it appends the write's event batch and
// wakes every blocking query and event stream to re-run.
func (s *Server) notifyLocked() {
	s.flushEventsLocked()
	close(s.changed)
	s.changed = make(chan struct{})
}

// tableIndexLocked is a table's last index, as a list answers it: 0 for a
// table never written, as Nomad 2.0.5 answers (GET /v1/jobs on a new
// cluster: X-Nomad-Index 0; conformance.IndexesAndHeaders).
func (s *Server) tableIndexLocked(t string) uint64 {
	return s.tables[t]
}

// missingIndexLocked is the index a read of a missing object answers: its
// table's, floored at 1 (Nomad 2.0.5 answers a missing variable of a
// table never written with an index of at least 1;
// conformance.IndexesAndHeaders).
func (s *Server) missingIndexLocked(t string) uint64 {
	return max(1, s.tables[t])
}

func (s *Server) nowNano() int64 { return s.now().UnixNano() }

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ---- HTTP plumbing ----

type statusWriter struct {
	http.ResponseWriter
	status  int
	counter *trafficCounter // body bytes written are added to it as they are
}

// Flush sends what was written (the event stream's lines).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.counter.bytes.Add(int64(n))
	return n, err
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	entry := &Request{Method: r.Method, Path: r.URL.Path, Query: cloneValues(r.URL.Query()), Body: body}

	s.mu.Lock()
	if !s.noLog {
		s.reqs = append(s.reqs, entry)
	}
	ep := endpoint(r)
	if s.traffic == nil {
		s.traffic = map[string]*trafficCounter{}
	}
	tr := s.traffic[ep]
	if tr == nil {
		tr = &trafficCounter{}
		s.traffic[ep] = tr
	}
	tr.requests.Add(1)
	hooks := slices.Clone(s.hooks)
	s.sweepLocksLocked()
	s.sweepStopsLocked()
	s.mu.Unlock()

	for _, h := range hooks {
		h(r)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	s.mu.Lock()
	f := s.matchFaultLocked(r)
	s.mu.Unlock()

	sw := &statusWriter{ResponseWriter: w, counter: tr}
	switch {
	case f == nil:
		s.route(sw, r)
	case f.after:
		s.route(httptest.NewRecorder(), r)
		s.injectFailure(sw, f.status)
	default:
		s.injectFailure(sw, f.status)
	}

	s.mu.Lock()
	entry.Status = sw.status
	if entry.Status == 0 {
		entry.Status = StatusClientClosed
	}
	entry.Injected = f != nil
	if f != nil && f.status == DropConnection {
		entry.Status = DropConnection
	}
	s.mu.Unlock()
}

func (s *Server) matchFaultLocked(r *http.Request) *fault {
	for i, f := range s.faults {
		if f.method != "" && f.method != r.Method {
			continue
		}
		if !strings.HasPrefix(r.URL.Path, f.prefix) {
			continue
		}
		f.n--
		if f.n <= 0 {
			s.faults = slices.Delete(s.faults, i, i+1)
		}
		return f
	}
	return nil
}

func (s *Server) injectFailure(w http.ResponseWriter, status int) {
	if status == DropConnection {
		if hj, ok := w.(*statusWriter).ResponseWriter.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	writeError(w, &httpError{code: status, msg: "nomadfake: injected failure"})
}

// httpError is an error answered as Nomad does: a status and a plain-text
// body.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) *httpError {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, e *httpError) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(e.code)
	_, _ = w.Write([]byte(e.msg))
}

func notFaked(w http.ResponseWriter, r *http.Request) {
	writeError(w, errorf(http.StatusNotImplemented, "nomadfake: %s %s is not faked", r.Method, r.URL.Path))
}

func methodNotAllowed(w http.ResponseWriter) {
	writeError(w, errorf(http.StatusMethodNotAllowed, "Invalid method"))
}

// writeJSON answers a write: X-Nomad-Index and a JSON body.
func writeJSON(w http.ResponseWriter, status int, index uint64, obj any) {
	b, err := json.Marshal(obj)
	if err != nil {
		writeError(w, errorf(http.StatusInternalServerError, "nomadfake: encode: %v", err))
		return
	}
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(index, 10))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeClientJSON answers a client (node-forwarded) endpoint: Nomad sets
// no query-meta headers on those.
func writeClientJSON(w http.ResponseWriter, obj any) {
	b, err := json.Marshal(obj)
	if err != nil {
		writeError(w, errorf(http.StatusInternalServerError, "nomadfake: encode: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func decodeBody(r *http.Request, out any) *httpError {
	if err := json.NewDecoder(r.Body).Decode(out); err != nil {
		return errorf(http.StatusBadRequest, "%v", err)
	}
	return nil
}

// namespace is the request's namespace, default when not given.
func namespace(r *http.Request) string {
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		return ns
	}
	return api.DefaultNamespace
}

func nsMatches(want, have string) bool {
	return want == api.AllNamespacesNamespace || want == have
}

// queryResult is what one run of a query produced.
type queryResult struct {
	body  []byte
	index uint64
	err   *httpError
}

// query answers a read as Nomad's blockingRPC does: run is called with the
// lock held and returns the response object and its index; with ?index=N
// the fake waits (up to ?wait, default and cap 5m) until run's index
// exceeds N, re-running it after every write. A 404 answer is a result like
// any other: it blocks too, with the table's index.
func (s *Server) query(w http.ResponseWriter, r *http.Request, run func() (any, uint64, *httpError)) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w)
		return
	}
	q := r.URL.Query()
	if q.Get("filter") != "" || q.Get("per_page") != "" || q.Get("next_token") != "" {
		writeError(w, errorf(http.StatusNotImplemented, "nomadfake: filter expressions and pagination are not faked"))
		return
	}
	var minIndex uint64
	wait := DefaultBlockingWait
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, "Invalid wait time"))
			return
		}
		if d > 0 {
			wait = min(d, MaxBlockingWait)
		}
	}
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, "Invalid index"))
			return
		}
		minIndex = n
	}
	var timeout <-chan time.Time
	if minIndex > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		s.mu.Lock()
		res := s.runQueryLocked(run)
		ch := s.changed
		s.mu.Unlock()
		final := minIndex == 0 || res.index > minIndex || (res.err != nil && res.err.code != http.StatusNotFound)
		if !final {
			select {
			case <-ch:
				continue
			case <-timeout:
			case <-s.closed:
			case <-r.Context().Done():
				return
			}
		}
		writeQuery(w, res)
		return
	}
}

func (s *Server) runQueryLocked(run func() (any, uint64, *httpError)) queryResult {
	obj, idx, herr := run()
	if herr != nil {
		return queryResult{index: idx, err: herr}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return queryResult{index: math.MaxUint64, err: errorf(http.StatusInternalServerError, "nomadfake: encode: %v", err)}
	}
	return queryResult{body: b, index: idx}
}

func writeQuery(w http.ResponseWriter, res queryResult) {
	h := w.Header()
	h.Set("X-Nomad-Index", strconv.FormatUint(res.index, 10))
	h.Set("X-Nomad-KnownLeader", "true")
	h.Set("X-Nomad-LastContact", "0")
	if res.err != nil {
		writeError(w, res.err)
		return
	}
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(res.body)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == "/v1/jobs":
		s.handleJobs(w, r)
	case strings.HasPrefix(p, "/v1/job/"):
		s.handleJob(w, r, strings.TrimPrefix(p, "/v1/job/"))
	case p == "/v1/allocations":
		s.handleAllocList(w, r)
	case p == "/v1/nodes":
		s.handleNodeList(w, r)
	case strings.HasPrefix(p, "/v1/node/"):
		s.handleNode(w, r, strings.TrimPrefix(p, "/v1/node/"))
	case p == "/v1/client/metadata":
		s.handleNodeMeta(w, r)
	case p == "/v1/client/stats":
		s.handleClientStats(w, r)
	case strings.HasPrefix(p, "/v1/client/allocation/") && strings.HasSuffix(p, "/checks"):
		s.handleAllocChecks(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/v1/client/allocation/"), "/checks"))
	case p == "/v1/services":
		s.handleServiceList(w, r)
	case strings.HasPrefix(p, "/v1/service/"):
		s.handleService(w, r, strings.TrimPrefix(p, "/v1/service/"))
	case p == "/v1/event/stream":
		s.handleEventStream(w, r)
	case p == "/v1/vars":
		s.handleVarList(w, r)
	case strings.HasPrefix(p, "/v1/var/"):
		s.handleVar(w, r, strings.TrimPrefix(p, "/v1/var/"))
	default:
		notFaked(w, r)
	}
}

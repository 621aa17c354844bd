package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/internal/testing/fakeclock"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// waitFor is how long a test waits for an answer or a signal before it
// fails: wait.For's timeout, long because the machine may be busy;
// nothing asserts how fast.
const waitFor = wait.Timeout

// newFakeClock is a clock at the gateway tests' epoch that moves only
// when the test moves it.
func newFakeClock() *fakeclock.Clock { return fakeclock.New(time.Unix(1_700_000_000, 0)) }

// Replica failure modes.
const (
	modeOK          int32 = iota
	modeUnavailable       // answer 503 at once
	modeReset             // close the connection without an answer
)

// replica is an in-process fake-engine on a loopback port, with switches
// to make it fail and a record of the requests whose client went away.
type replica struct {
	id, model string
	fe        *fakeengine.Server
	srv       *httptest.Server
	mode      atomic.Int32
	hits      atomic.Int64
	cancelled chan string // the path of each request whose context ended while it was served
}

func startReplica(t testing.TB, model, id string, tweak func(*fakeengine.Config)) *replica {
	t.Helper()
	cfg := fakeengine.Defaults()
	cfg.Model = model
	cfg.TokensPerSecond = 0
	if tweak != nil {
		tweak(&cfg)
	}
	r := &replica{id: id, model: model, fe: fakeengine.NewServer(cfg, io.Discard, io.Discard), cancelled: make(chan string, 64)}
	if cfg.LoadTime == 0 {
		r.fe.Load(t.Context())
	}
	inner := r.fe.Handler()
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		switch r.mode.Load() {
		case modeUnavailable:
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		case modeReset:
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		inner.ServeHTTP(w, req)
		if req.Context().Err() != nil {
			select {
			case r.cancelled <- req.URL.Path:
			default:
			}
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *replica) addr() string { return strings.TrimPrefix(r.srv.URL, "http://") }

func (r *replica) instance() Instance {
	return Instance{ID: r.id, Model: r.model, Replica: r.id, Address: r.addr(), Weight: 1}
}

type testGateway struct {
	*Gateway
	srv    *gwServer
	reg    *prometheus.Registry
	client *http.Client
	ends   *handlerEnds
}

// handlerEnds tells a test when the gateway's handler has returned from
// one of its requests. A client has the whole of an answer with a
// Content-Length before then, and what the handler does last (settling a
// key's tokens, counting the request) is read after it.
type handlerEnds struct {
	n    atomic.Int64
	ends sync.Map // request number (testRequestHeader) -> chan struct{}
}

const testRequestHeader = "X-Llmgw-Test-Request"

func (he *handlerEnds) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(testRequestHeader)
		if id == "" {
			h.ServeHTTP(w, r)
			return
		}
		end := func() {
			if ch, ok := he.ends.LoadAndDelete(id); ok {
				close(ch.(chan struct{}))
			}
		}
		ew := &endsWriter{ResponseWriter: w, end: end}
		defer func() {
			if !ew.detached {
				end()
			}
		}()
		h.ServeHTTP(ew, r)
	})
}

// endsWriter is a tracked request's writer: the handler's end is its
// detached rest's (fastWriter.Detach), when it detached one.
type endsWriter struct {
	http.ResponseWriter
	end      func()
	detached bool
}

func (ew *endsWriter) Unwrap() http.ResponseWriter { return ew.ResponseWriter }

func (ew *endsWriter) Detach(rest func()) bool {
	d := detacher(ew.ResponseWriter)
	if d == nil {
		return false
	}
	ew.detached = d.Detach(func() {
		defer ew.end()
		rest()
	})
	return ew.detached
}

// track marks req so that the returned func waits for its handler's end.
func (he *handlerEnds) track(req *http.Request) func(t *testing.T) {
	id := strconv.FormatInt(he.n.Add(1), 10)
	ch := make(chan struct{})
	he.ends.Store(id, ch)
	req.Header.Set(testRequestHeader, id)
	return func(t *testing.T) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(waitFor):
			t.Fatalf("waited %s for the gateway's handler to return from %s %s", waitFor, req.Method, req.URL.Path)
		}
	}
}

func startGateway(t testing.TB, o Options, insts ...Instance) *testGateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	g := New(o)
	if o.Source == nil {
		g.Update(Snapshot{Instances: insts})
	}
	he := &handlerEnds{}
	srv := serveGateway(t, he.wrap(g.Handler()), g.BodyTimeout)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &testGateway{Gateway: g, srv: srv, reg: reg, client: &http.Client{Transport: tr}, ends: he}
}

// gwServer is a gateway's handler served on a loopback listener.
type gwServer struct {
	URL      string // http://<address>
	Listener net.Listener
}

// serveGateway serves h on loopback with the server `llmgw gateway`
// serves a plaintext listener with (NewFastServer, timeouts its
// BodyTimeouts); the test's end shuts it down.
func serveGateway(t testing.TB, h http.Handler, timeouts BodyTimeouts) *gwServer {
	t.Helper()
	return serveGatewayLogged(t, h, timeouts, nil)
}

// serveGatewayLogged is serveGateway with the server's logger.
func serveGatewayLogged(t testing.TB, h http.Handler, timeouts BodyTimeouts, log *slog.Logger) *gwServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewFastServer(h, timeouts, log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		// Connections still busy (a stream the test left) are left to end
		// with the test; t.Context() is done by now.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
		<-done
	})
	return &gwServer{URL: "http://" + ln.Addr().String(), Listener: ln}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// post sends body as JSON and returns the answer once the gateway's
// handler has returned.
func (tg *testGateway) post(t *testing.T, path, body string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tg.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	ended := tg.ends.track(req)
	resp, err := tg.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", path, err)
	}
	ended(t)
	return answer{resp.StatusCode, resp.Header, b}
}

func chat(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`
}

// breakerState reads an endpoint's breaker.
func (tg *testGateway) breakerState(id string) BreakerState {
	ep := tg.tbl.Load().byID[id]
	if ep == nil {
		return -1
	}
	return ep.br.State()
}

// sseLines reads an event stream's data lines in a goroutine, one a
// value, closing the channel at the end.
func sseLines(r io.Reader) <-chan string {
	ch := make(chan string, 256)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				ch <- line
			}
		}
	}()
	return ch
}

func decodeError(t *testing.T, b []byte) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error: %s (%v)", b, err)
	}
	return e
}

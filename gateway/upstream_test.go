package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/llmgw/internal/testing/wait"
)

// rawServer accepts loopback connections and hands each to handle with its
// number (from 0), on a goroutine of its own. Its cleanup closes the
// connections still open.
type rawServer struct {
	ln     net.Listener
	conns  atomic.Int32
	wg     sync.WaitGroup
	mu     sync.Mutex
	open   []net.Conn
	closed bool
}

func startRaw(t *testing.T, handle func(c net.Conn, n int)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1)) - 1
			s.mu.Lock()
			if s.closed {
				_ = c.Close()
			}
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				handle(c, n)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		s.closed = true
		for _, c := range s.open {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() + "/v1/chat/completions" }

// readRequest reads one request and its body from br.
func readRequest(br *bufio.Reader) (*http.Request, string, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(req.Body)
	return req, string(b), err
}

// countingServer serves h on loopback and counts the connections it
// accepts.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	conns := new(atomic.Int32)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

func okResponse(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// upstreamRequest is a POST to url as the gateway builds it (outRequest):
// its body held whole.
func upstreamRequest(t *testing.T, url, body string) *fasthttp.Request {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	req := fasthttp.AcquireRequest()
	t.Cleanup(func() { fasthttp.ReleaseRequest(req) })
	req.Header.SetNoDefaultContentType(true)
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetRequestURI(u.RequestURI())
	req.Header.SetHost(u.Host)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw([]byte(body))
	return req
}

// hostOf is req's replica address.
func hostOf(req *fasthttp.Request) string { return string(req.Header.Host()) }

// do sends req with u and returns the answer's head and body.
func do(t *testing.T, u Upstream, ctx context.Context, req *fasthttp.Request) (*fasthttp.Response, io.ReadCloser, error) {
	t.Helper()
	resp := fasthttp.AcquireResponse()
	body, _, err := u.Do(ctx, hostOf(req), req, resp)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, nil, err
	}
	t.Cleanup(func() { _ = body.Close(); fasthttp.ReleaseResponse(resp) })
	return resp, body, nil
}

// roundTrip sends req with u and reads the whole answer.
func roundTrip(t *testing.T, u Upstream, ctx context.Context, req *fasthttp.Request) (int, string, error) {
	t.Helper()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	body, _, err := u.Do(ctx, hostOf(req), req, resp)
	if err != nil {
		return 0, "", err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	return resp.StatusCode(), string(b), err
}

func TestUpstreamReusesConnections(t *testing.T) {
	var reqs atomic.Int32
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Expect") != "" {
			t.Errorf("Expect reached the replica: %q", r.Header.Get("Expect"))
		}
		reqs.Add(1)
		_, _ = w.Write(b)
	})
	u := newUpstreamClient(time.Second, time.Second)
	defer u.CloseIdleConnections()
	for i := range 20 {
		body := `{"model":"m","n":` + strconv.Itoa(i) + `}`
		req := upstreamRequest(t, srv.URL+"/v1/completions", body)
		req.Header.Set("Expect", "100-continue")
		code, got, err := roundTrip(t, u, t.Context(), req)
		if err != nil || code != 200 || got != body {
			t.Fatalf("request %d: %d %q %v", i, code, got, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential requests used %d connections, want 1", n)
	}
	if n := reqs.Load(); n != 20 {
		t.Errorf("replica saw %d requests, want 20", n)
	}
}

// A replica that closes a kept-alive connection: the next request goes
// on a fresh one, whether the close is seen before sending (peek) or
// only after (the replica read the request and hung up without a word).
func TestUpstreamStaleConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		// second is what the replica does on the first connection after
		// its first answer.
		second func(c net.Conn, br *bufio.Reader)
	}{
		{"closed while idle", func(net.Conn, *bufio.Reader) {}},
		{"closed after reading the next request", func(_ net.Conn, br *bufio.Reader) { _, _, _ = readRequest(br) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen atomic.Int32
			srv := startRaw(t, func(c net.Conn, n int) {
				br := bufio.NewReader(c)
				if _, _, err := readRequest(br); err != nil {
					return
				}
				seen.Add(1)
				_, _ = io.WriteString(c, okResponse(`{"conn":`+strconv.Itoa(n)+`}`))
				if n == 0 {
					tc.second(c, br)
					return
				}
				for {
					if _, _, err := readRequest(br); err != nil {
						return
					}
					seen.Add(1)
					_, _ = io.WriteString(c, okResponse(`{"conn":`+strconv.Itoa(n)+`}`))
				}
			})
			u := newUpstreamClient(time.Second, 5*time.Second)
			defer u.CloseIdleConnections()
			code, got, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{"model":"m"}`))
			if err != nil || code != 200 || got != `{"conn":0}` {
				t.Fatalf("first: %d %q %v", code, got, err)
			}
			if tc.name == "closed while idle" {
				u.mu.Lock()
				idle := u.idle[srv.ln.Addr().String()]
				u.mu.Unlock()
				if len(idle) != 1 {
					t.Fatalf("%d idle connections after the first request, want 1", len(idle))
				}
				wait.Until(t, "the replica to close its first connection", func() bool { return !connAlive(idle[0].c) })
			}
			code, got, err = roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{"model":"m"}`))
			if err != nil || code != 200 || got != `{"conn":1}` {
				t.Fatalf("second: %d %q %v", code, got, err)
			}
			if n := srv.conns.Load(); n != 2 {
				t.Errorf("replica accepted %d connections, want 2", n)
			}
		})
	}
}

// A fresh connection that closes without an answer is the replica's
// failure: no second try (the gateway's retry decides).
func TestUpstreamFreshConnectionFailureNotRetried(t *testing.T) {
	srv := startRaw(t, func(c net.Conn, _ int) { _, _, _ = readRequest(bufio.NewReader(c)) })
	u := newUpstreamClient(time.Second, 5*time.Second)
	_, _, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{"model":"m"}`))
	if err == nil || !strings.Contains(err.Error(), "closed the connection before answering") {
		t.Fatalf("err = %v, want the replica closing without an answer", err)
	}
	var stale staleError
	if errors.As(err, &stale) {
		t.Errorf("the internal stale marker leaked: %v", err)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("replica accepted %d connections, want 1", n)
	}
}

func TestUpstreamCancelWhileWaiting(t *testing.T) {
	closed := make(chan struct{})
	srv := startRaw(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		if _, _, err := readRequest(br); err != nil {
			return
		}
		_, _ = br.ReadByte() // until the gateway closes its end
		close(closed)
	})
	u := newUpstreamClient(time.Second, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	_, _, err := roundTrip(t, u, ctx, upstreamRequest(t, srv.url(), `{"model":"m"}`))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("the connection to the replica stayed open after the cancel")
	}
}

func TestUpstreamCancelMidBody(t *testing.T) {
	closed := make(chan struct{})
	srv := startRaw(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		if _, _, err := readRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n")
		_, _ = br.ReadByte()
		close(closed)
	})
	u := newUpstreamClient(time.Second, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	_, body, err := do(t, u, ctx, upstreamRequest(t, srv.url(), `{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := body.Read(buf); err != nil || string(buf[:n]) != "data: " {
		t.Fatalf("first chunk: %q %v", buf[:n], err)
	}
	cancel()
	if _, err := io.ReadAll(body); err == nil {
		t.Error("reading the rest after the cancel succeeded")
	}
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("the connection to the replica stayed open after the cancel")
	}
	if n := len(u.idle); n != 0 {
		t.Errorf("%d addresses have idle connections after a cancelled response", n)
	}
}

func TestUpstreamHeaderTimeout(t *testing.T) {
	srv := startRaw(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		_, _, _ = readRequest(br)
		_, _ = br.ReadByte()
	})
	u := newUpstreamClient(time.Second, 100*time.Millisecond)
	_, _, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{"model":"m"}`))
	if err == nil || !strings.Contains(err.Error(), "no response headers within 100ms") {
		t.Fatalf("err = %v, want the header timeout", err)
	}
}

func TestUpstreamInterimResponse(t *testing.T) {
	srv := startRaw(t, func(c net.Conn, _ int) {
		if _, _, err := readRequest(bufio.NewReader(c)); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"+okResponse(`{"ok":true}`))
	})
	u := newUpstreamClient(time.Second, 5*time.Second)
	defer u.CloseIdleConnections()
	code, got, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{"model":"m"}`))
	if err != nil || code != 200 || got != `{"ok":true}` {
		t.Fatalf("%d %q %v, want the final 200", code, got, err)
	}
}

// A response not read to its end, or one that says Connection: close,
// does not leave its connection for reuse.
func TestUpstreamNoReuseOfUnfinishedConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("close") != "" {
			w.Header().Set("Connection", "close")
		}
		_, _ = w.Write([]byte(strings.Repeat("x", 100)))
	})
	u := newUpstreamClient(time.Second, 5*time.Second)
	defer u.CloseIdleConnections()
	// Half read, then closed.
	_, body, err := do(t, u, t.Context(), upstreamRequest(t, srv.URL+"/v1/completions", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = body.Read(make([]byte, 10))
	_ = body.Close()
	if n := len(u.idle[strings.TrimPrefix(srv.URL, "http://")]); n != 0 {
		t.Errorf("a half-read response left %d idle connections", n)
	}
	// Connection: close, read whole.
	if code, _, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.URL+"/v1/completions?close=1", `{}`)); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if n := len(u.idle[strings.TrimPrefix(srv.URL, "http://")]); n != 0 {
		t.Errorf("a Connection: close response left %d idle connections", n)
	}
	if code, _, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.URL+"/v1/completions", `{}`)); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("replica accepted %d connections, want 3 (none reused)", n)
	}
}

// A body larger than the client writes inline goes through net/http's
// Transport, which reads the answer while it writes: a replica that
// answers before it has read the body (here, never reads it) is heard,
// where writing it all first would block for good.
func TestUpstreamLargeBodyAnswerBeforeRead(t *testing.T) {
	release := make(chan struct{})
	srv := startRaw(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Replica-Said: no\r\n\r\n{}")
		<-release
	})
	defer close(release)
	u := newUpstreamClient(time.Second, 5*time.Second)
	defer u.CloseIdleConnections()
	req := upstreamRequest(t, srv.url(), strings.Repeat(" ", 16<<20)) // past any socket buffer
	resp, body, err := do(t, u, t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	if err != nil || resp.StatusCode() != http.StatusRequestEntityTooLarge || string(got) != "{}" ||
		string(resp.Header.Peek("X-Replica-Said")) != "no" || string(resp.Header.ContentType()) != "application/json" || resp.Header.ContentLength() != 2 {
		t.Fatalf("got %d %q %v, headers:\n%s", resp.StatusCode(), got, err, resp.Header.String())
	}
}

// A large body's answer, of unknown length, comes through net/http's
// Transport as a small one's through fasthttp: its head, its body, and
// whether the request was sent.
func TestUpstreamLargeBody(t *testing.T) {
	var seen atomic.Int64
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		seen.Store(n)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Add("X-Twice", "a")
		w.Header().Add("X-Twice", "b")
		_, _ = io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "data: 2\n\n")
	})
	u := newUpstreamClient(time.Second, 5*time.Second)
	defer u.CloseIdleConnections()
	for _, size := range []int{100, maxInlineBody + 1} {
		resp := fasthttp.AcquireResponse()
		req := upstreamRequest(t, srv.URL+"/v1/completions", strings.Repeat(" ", size))
		body, sent, err := u.Do(t.Context(), hostOf(req), req, resp)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(body)
		_ = body.Close()
		var twice []string
		for _, v := range resp.Header.PeekAll("X-Twice") {
			twice = append(twice, string(v))
		}
		if err != nil || !sent || resp.StatusCode() != 200 || string(got) != "data: 1\n\ndata: 2\n\n" || resp.Header.ContentLength() != -1 ||
			string(resp.Header.ContentType()) != "text/event-stream" || strings.Join(twice, ",") != "a,b" || seen.Load() != int64(size) {
			t.Errorf("%d-byte body: %d %q %v, sent %v, the replica read %d, headers:\n%s", size, resp.StatusCode(), got, err, sent, seen.Load(), resp.Header.String())
		}
		fasthttp.ReleaseResponse(resp)
	}
}

// A request whose connection could not be made was not sent: the
// gateway may try it on another replica.
func TestUpstreamRefusedNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	u := newUpstreamClient(time.Second, 5*time.Second)
	for _, size := range []int{100, maxInlineBody + 1} {
		resp := fasthttp.AcquireResponse()
		req := upstreamRequest(t, "http://"+addr+"/v1/completions", strings.Repeat(" ", size))
		_, sent, err := u.Do(t.Context(), addr, req, resp)
		fasthttp.ReleaseResponse(resp)
		if err == nil || sent {
			t.Errorf("%d-byte body to a closed port: sent %v, err %v; want an error, not sent", size, sent, err)
		}
	}
}

// Idle connections the replica closed are closed by the sweep, not held
// until next used.
func TestUpstreamSweepClosesDeadIdleConnections(t *testing.T) {
	release := make(chan struct{})
	srv := startRaw(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		if _, _, err := readRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, okResponse(`{}`))
		if n == 0 {
			return // closes the first
		}
		<-release
	})
	defer close(release)
	u := newUpstreamClient(time.Second, 5*time.Second)
	defer u.CloseIdleConnections()
	bodies := make([]io.ReadCloser, 2)
	for i := range 2 {
		_, body, err := do(t, u, t.Context(), upstreamRequest(t, srv.url(), `{}`))
		if err != nil {
			t.Fatal(err)
		}
		bodies[i] = body
	}
	for _, body := range bodies {
		_, _ = io.ReadAll(body)
		_ = body.Close()
	}
	addr := srv.ln.Addr().String()
	u.mu.Lock()
	n := len(u.idle[addr])
	u.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}
	var left int
	wait.Until(t, "the sweep to drop the closed connection", func() bool {
		u.sweep()
		u.mu.Lock()
		defer u.mu.Unlock()
		left = len(u.idle[addr])
		return left == 1
	})
}

// A replica that sent part of an answer on a reused connection and then
// closed it may have acted on the request: it is not sent again.
func TestUpstreamPartialAnswerNotRetried(t *testing.T) {
	srv := startRaw(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		if _, _, err := readRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, okResponse(`{}`))
		if _, _, err := readRequest(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
	})
	u := newUpstreamClient(time.Second, 5*time.Second)
	defer u.CloseIdleConnections()
	if code, _, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{}`)); err != nil || code != 200 {
		t.Fatalf("first: %d %v", code, err)
	}
	_, _, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{}`))
	if err == nil || strings.Contains(err.Error(), "before answering") {
		t.Fatalf("err = %v, want the cut-off answer's error", err)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("replica accepted %d connections, want 1 (no second try)", n)
	}
}

// The second try goes on a new connection, not on another pooled one that
// may be just as stale (a replica that restarted closed them all).
func TestUpstreamRetryDialsFresh(t *testing.T) {
	srv := startRaw(t, func(c net.Conn, n int) {
		br := bufio.NewReader(c)
		for first := true; ; first = false {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			if n < 2 && !first {
				return // hangs up on its second request, unanswered
			}
			_, _ = io.WriteString(c, okResponse(`{"conn":`+strconv.Itoa(n)+`}`))
		}
	})
	u := newUpstreamClient(time.Second, 5*time.Second)
	defer u.CloseIdleConnections()
	var bodies []io.ReadCloser
	for range 2 { // two connections in the pool
		_, body, err := do(t, u, t.Context(), upstreamRequest(t, srv.url(), `{}`))
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	for _, body := range bodies {
		_, _ = io.ReadAll(body)
		_ = body.Close()
	}
	code, got, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.url(), `{}`))
	if err != nil || code != 200 || got != `{"conn":2}` {
		t.Fatalf("%d %q %v, want the answer from a third, new connection", code, got, err)
	}
}

// writeCounter counts the writes made on a connection.
type writeCounter struct {
	net.Conn
	writes *atomic.Int32
}

func (w writeCounter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	return w.Conn.Write(p)
}

// A request's headers and body leave in one write: were the headers
// flushed on their own, the replica would wake for the headers and again
// for the body on every request.
func TestUpstreamOneWritePerRequest(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	u := newUpstreamClient(time.Second, time.Second)
	defer u.CloseIdleConnections()
	var writes atomic.Int32
	dial := u.dial
	u.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: &writes}, nil
	}
	const n = 5
	for i := range n {
		body := `{"model":"m","n":` + strconv.Itoa(i) + `}`
		code, got, err := roundTrip(t, u, t.Context(), upstreamRequest(t, srv.URL+"/v1/completions", body))
		if err != nil || code != 200 || got != body {
			t.Fatalf("request %d: %d %q %v", i, code, got, err)
		}
	}
	if got := writes.Load(); got != n {
		t.Errorf("%d requests took %d writes, want one each", n, got)
	}
}

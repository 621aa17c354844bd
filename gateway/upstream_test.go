package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// upstreamRequest is a POST as the gateway builds it: body held whole,
// GetBody set.
func upstreamRequest(t *testing.T, ctx context.Context, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func roundTrip(t *testing.T, tr http.RoundTripper, req *http.Request) (int, string, error) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
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
	tr := newUpstreamTransport(time.Second, time.Second)
	defer tr.CloseIdleConnections()
	for i := range 20 {
		body := `{"model":"m","n":` + strconv.Itoa(i) + `}`
		req := upstreamRequest(t, t.Context(), srv.URL+"/v1/completions", body)
		req.Header.Set("Expect", "100-continue")
		code, got, err := roundTrip(t, tr, req)
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
			tr := newUpstreamTransport(time.Second, 5*time.Second)
			defer tr.CloseIdleConnections()
			code, got, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{"model":"m"}`))
			if err != nil || code != 200 || got != `{"conn":0}` {
				t.Fatalf("first: %d %q %v", code, got, err)
			}
			if tc.name == "closed while idle" {
				tr.mu.Lock()
				idle := tr.idle[srv.ln.Addr().String()]
				tr.mu.Unlock()
				if len(idle) != 1 {
					t.Fatalf("%d idle connections after the first request, want 1", len(idle))
				}
				wait.Until(t, "the replica to close its first connection", func() bool { return !connAlive(idle[0].c) })
			}
			code, got, err = roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{"model":"m"}`))
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
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	_, _, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{"model":"m"}`))
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
	tr := newUpstreamTransport(time.Second, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	_, _, err := roundTrip(t, tr, upstreamRequest(t, ctx, srv.url(), `{"model":"m"}`))
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
	tr := newUpstreamTransport(time.Second, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := tr.RoundTrip(upstreamRequest(t, ctx, srv.url(), `{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); err != nil || string(buf[:n]) != "data: " {
		t.Fatalf("first chunk: %q %v", buf[:n], err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("reading the rest after the cancel succeeded")
	}
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("the connection to the replica stayed open after the cancel")
	}
	if n := len(tr.idle); n != 0 {
		t.Errorf("%d addresses have idle connections after a cancelled response", n)
	}
}

func TestUpstreamHeaderTimeout(t *testing.T) {
	srv := startRaw(t, func(c net.Conn, _ int) {
		br := bufio.NewReader(c)
		_, _, _ = readRequest(br)
		_, _ = br.ReadByte()
	})
	tr := newUpstreamTransport(time.Second, 100*time.Millisecond)
	_, _, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{"model":"m"}`))
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
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	defer tr.CloseIdleConnections()
	code, got, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{"model":"m"}`))
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
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	defer tr.CloseIdleConnections()
	// Half read, then closed.
	resp, err := tr.RoundTrip(upstreamRequest(t, t.Context(), srv.URL+"/v1/completions", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 10))
	_ = resp.Body.Close()
	if n := len(tr.idle[strings.TrimPrefix(srv.URL, "http://")]); n != 0 {
		t.Errorf("a half-read response left %d idle connections", n)
	}
	// Connection: close, read whole.
	if code, _, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.URL+"/v1/completions?close=1", `{}`)); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if n := len(tr.idle[strings.TrimPrefix(srv.URL, "http://")]); n != 0 {
		t.Errorf("a Connection: close response left %d idle connections", n)
	}
	if code, _, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.URL+"/v1/completions", `{}`)); err != nil || code != 200 {
		t.Fatalf("%d %v", code, err)
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("replica accepted %d connections, want 3 (none reused)", n)
	}
}

// Bodies the gateway does not hold whole, or larger than it writes
// inline, go through net/http's Transport.
func TestUpstreamInline(t *testing.T) {
	small := upstreamRequest(t, t.Context(), "http://127.0.0.1:1/", `{}`)
	big := upstreamRequest(t, t.Context(), "http://127.0.0.1:1/", strings.Repeat(" ", maxInlineBody+1))
	streaming, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/", io.NopCloser(strings.NewReader("{}")))
	tls, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:1/", strings.NewReader("{}"))
	for _, tc := range []struct {
		name string
		req  *http.Request
		want bool
	}{{"small", small, true}, {"over 64 KiB", big, false}, {"unknown length", streaming, false}, {"https", tls, false}} {
		if got := inline(tc.req); got != tc.want {
			t.Errorf("%s: inline = %v, want %v", tc.name, got, tc.want)
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
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	defer tr.CloseIdleConnections()
	resps := make([]*http.Response, 2)
	for i := range 2 {
		resp, err := tr.RoundTrip(upstreamRequest(t, t.Context(), srv.url(), `{}`)) //nolint:bodyclose // closed below, after both are open
		if err != nil {
			t.Fatal(err)
		}
		resps[i] = resp
	}
	for _, resp := range resps {
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	addr := srv.ln.Addr().String()
	tr.mu.Lock()
	n := len(tr.idle[addr])
	tr.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}
	var left int
	wait.Until(t, "the sweep to drop the closed connection", func() bool {
		tr.sweep()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		left = len(tr.idle[addr])
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
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	defer tr.CloseIdleConnections()
	if code, _, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{}`)); err != nil || code != 200 {
		t.Fatalf("first: %d %v", code, err)
	}
	_, _, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{}`))
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
	tr := newUpstreamTransport(time.Second, 5*time.Second)
	defer tr.CloseIdleConnections()
	var resps []*http.Response
	for range 2 { // two connections in the pool
		resp, err := tr.RoundTrip(upstreamRequest(t, t.Context(), srv.url(), `{}`)) //nolint:bodyclose // closed below, after both are open
		if err != nil {
			t.Fatal(err)
		}
		resps = append(resps, resp) //nolint:bodyclose // read and closed below, after both are open
	}
	for _, resp := range resps {
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	code, got, err := roundTrip(t, tr, upstreamRequest(t, t.Context(), srv.url(), `{}`))
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

// opaqueBody is a body net/http cannot tell is in memory, as the
// gateway's own request bodies are.
type opaqueBody struct{ r io.Reader }

func (b *opaqueBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *opaqueBody) Close() error               { return nil }

// A request's headers and body leave in one write: net/http's
// Request.Write flushes the headers of a body it does not know to be in
// memory on their own, which costs the replica a wake-up for the headers
// and another for the body on every request.
func TestUpstreamOneWritePerRequest(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	tr := newUpstreamTransport(time.Second, time.Second)
	defer tr.CloseIdleConnections()
	var writes atomic.Int32
	dial := tr.dial
	tr.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: &writes}, nil
	}
	const n = 5
	for i := range n {
		body := `{"model":"m","n":` + strconv.Itoa(i) + `}`
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", &opaqueBody{strings.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return &opaqueBody{strings.NewReader(body)}, nil }
		if !inline(req) {
			t.Fatal("the request is not sent inline")
		}
		code, got, err := roundTrip(t, tr, req)
		if err != nil || code != 200 || got != body {
			t.Fatalf("request %d: %d %q %v", i, code, got, err)
		}
	}
	if got := writes.Load(); got != n {
		t.Errorf("%d requests took %d writes, want one each", n, got)
	}
}

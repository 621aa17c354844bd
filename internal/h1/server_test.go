package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
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
)

// countingListener counts the connections it accepts, so a test can tell
// keep-alive from a new connection per request.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

type testServer struct {
	s    *Server
	ln   *countingListener
	addr string
	done chan error
}

// start serves h on a loopback listener; opt adjusts the server before it
// starts. The server is closed when the test ends.
func start(t *testing.T, h http.Handler, opt ...func(*Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	s := &Server{Handler: h}
	for _, o := range opt {
		o(s)
	}
	ts := &testServer{s: s, ln: &countingListener{Listener: ln}, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- s.Serve(ts.ln) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-ts.done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ts
}

func (ts *testServer) url(path string) string { return "http://" + ts.addr + path }

// client is a net/http client of its own, so that connections are not
// shared between tests.
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// raw is one client connection written and read by hand.
type raw struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *raw {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &raw{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *raw) write(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatalf("write to server: %v", err)
	}
}

// reply is what a test looks at in a response read whole.
type reply struct {
	StatusCode       int
	Header           http.Header
	ContentLength    int64
	TransferEncoding []string
	Close            bool
}

// response reads one response to a request of method and its whole body.
func (r *raw) response(method string) (reply, string) {
	r.t.Helper()
	resp, err := http.ReadResponse(r.br, &http.Request{Method: method})
	if err != nil {
		r.t.Fatalf("read response: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("read response body: %v", err)
	}
	return reply{resp.StatusCode, resp.Header, resp.ContentLength, resp.TransferEncoding, resp.Close}, string(b)
}

// closed reports whether the server has closed the connection: a read
// sees EOF (or a reset) rather than more bytes.
func (r *raw) closed() bool {
	r.t.Helper()
	b, err := r.br.ReadByte()
	if err == nil {
		r.t.Logf("read %q where the connection should have closed", b)
		return false
	}
	return true
}

func echoPath(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
}

func TestKeepAliveSequential(t *testing.T) {
	ts := start(t, http.HandlerFunc(echoPath))
	c := client(t)
	for i := range 20 {
		var resp *http.Response
		var err error
		want := fmt.Sprintf("GET /get/%d ", i)
		if i%2 == 0 {
			resp, err = c.Get(ts.url(fmt.Sprintf("/get/%d", i)))
		} else {
			body := strings.Repeat("b", i*100)
			want = fmt.Sprintf("POST /post/%d %s", i, body)
			resp, err = c.Post(ts.url(fmt.Sprintf("/post/%d", i)), "text/plain", strings.NewReader(body))
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatalf("request %d: read body: %v", i, err)
		}
		if string(b) != want {
			t.Fatalf("request %d: body %q, want %q", i, b, want)
		}
	}
	if n := ts.ln.n.Load(); n != 1 {
		t.Errorf("20 sequential requests took %d connections, want 1", n)
	}
}

func TestPipelinedInOrder(t *testing.T) {
	ts := start(t, http.HandlerFunc(echoPath))
	r := dial(t, ts.addr)
	var all strings.Builder
	for i := range 5 {
		if i%2 == 0 {
			fmt.Fprintf(&all, "GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		} else {
			fmt.Fprintf(&all, "POST /p%d HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", i)
		}
	}
	r.write(all.String())
	for i := range 5 {
		resp, body := r.response("GET")
		want := fmt.Sprintf("GET /p%d ", i)
		if i%2 == 1 {
			want = fmt.Sprintf("POST /p%d abc", i)
		}
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("pipelined response %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
		}
	}
}

func TestFraming(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 300) // 4800 bytes
	errs := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		// In pieces, so that the first ones are held before chunking.
		for i := 0; i < len(big); i += 1000 {
			_, _ = io.WriteString(w, big[i:min(i+1000, len(big))])
		}
	})
	mux.HandleFunc("/bigone", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) })
	mux.HandleFunc("/cl", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		_, _ = io.WriteString(w, big)
	})
	mux.HandleFunc("/over", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		_, err := io.WriteString(w, "four")
		errs <- err
	})
	mux.HandleFunc("/under", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "five!")
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(code)
		_, err := io.WriteString(w, "not allowed")
		errs <- err
	})
	mux.HandleFunc("/flushhead", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "some")
		_ = http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "more")
	})
	mux.HandleFunc("/handlerclose", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "bye")
	})
	ts := start(t, mux)

	t.Run("small body gets Content-Length", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := r.response("GET")
		if resp.ContentLength != 5 || len(resp.TransferEncoding) != 0 || body != "hello" {
			t.Errorf("got Content-Length %d, Transfer-Encoding %v, body %q; want 5, none, hello", resp.ContentLength, resp.TransferEncoding, body)
		}
	})
	for _, path := range []string{"/big", "/bigone"} {
		t.Run("large body goes chunked "+path, func(t *testing.T) {
			r := dial(t, ts.addr)
			r.write("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, body := r.response("GET")
			if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || body != big {
				t.Errorf("got Transfer-Encoding %v, %d bytes (right: %v); want chunked, %d bytes", resp.TransferEncoding, len(body), body == big, len(big))
			}
			// And the connection is still good after the last chunk.
			r.write("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := r.response("GET"); body != "hello" {
				t.Errorf("request after a chunked response: body %q, want hello", body)
			}
			resp2, err := client(t).Get(ts.url(path))
			if err != nil {
				t.Fatalf("net/http client: %v", err)
			}
			b, err := io.ReadAll(resp2.Body)
			_ = resp2.Body.Close()
			if err != nil || string(b) != big {
				t.Errorf("net/http client read %d bytes, err %v; want %d bytes", len(b), err, len(big))
			}
		})
	}
	t.Run("handler Content-Length honoured", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /cl HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := r.response("GET")
		if resp.ContentLength != int64(len(big)) || len(resp.TransferEncoding) != 0 || body != big {
			t.Errorf("got Content-Length %d, Transfer-Encoding %v, %d bytes; want %d, none", resp.ContentLength, resp.TransferEncoding, len(body), len(big))
		}
	})
	t.Run("more than Content-Length", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /over HTTP/1.1\r\nHost: x\r\n\r\n")
		if err := <-errs; !errors.Is(err, http.ErrContentLength) {
			t.Errorf("writing past Content-Length: %v, want http.ErrContentLength", err)
		}
		resp, err := http.ReadResponse(r.br, nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.ReadAll(resp.Body)
		if !r.closed() {
			t.Error("connection kept after a body shorter than its Content-Length")
		}
	})
	t.Run("fewer than Content-Length closes", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /under HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(r.br, nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if string(b) != "five!" || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("read %q, %v; want five! then io.ErrUnexpectedEOF", b, err)
		}
	})
	t.Run("HEAD gets no body", func(t *testing.T) {
		for _, path := range []string{"/small", "/big", "/cl", "/flushhead"} {
			r := dial(t, ts.addr)
			// A GET after the HEAD on the same connection: any body bytes
			// after the HEAD's headers would garble it.
			r.write("HEAD " + path + " HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, body := r.response("HEAD")
			if resp.StatusCode != 200 || body != "" {
				t.Errorf("HEAD %s: %d %q, want 200 and no body", path, resp.StatusCode, body)
			}
			if path == "/cl" && resp.ContentLength != int64(len(big)) {
				t.Errorf("HEAD %s: Content-Length %d, want %d", path, resp.ContentLength, len(big))
			}
			if resp, body := r.response("GET"); resp.StatusCode != 200 || body != "hello" {
				t.Errorf("GET after HEAD %s: %d %q, want 200 hello", path, resp.StatusCode, body)
			}
		}
	})
	for _, code := range []int{204, 304} {
		t.Run(fmt.Sprintf("%d gets no body", code), func(t *testing.T) {
			r := dial(t, ts.addr)
			r.write(fmt.Sprintf("GET /status/%d HTTP/1.1\r\nHost: x\r\n\r\nGET /small HTTP/1.1\r\nHost: x\r\n\r\n", code))
			if err := <-errs; !errors.Is(err, http.ErrBodyNotAllowed) {
				t.Errorf("writing a %d body: %v, want http.ErrBodyNotAllowed", code, err)
			}
			resp, body := r.response("GET")
			if resp.StatusCode != code || body != "" || resp.Header.Get("Content-Length") != "" || len(resp.TransferEncoding) != 0 {
				t.Errorf("got %d %q (Content-Length %q, Transfer-Encoding %v), want %d, no body and no framing", resp.StatusCode, body, resp.Header.Get("Content-Length"), resp.TransferEncoding, code)
			}
			if _, body := r.response("GET"); body != "hello" {
				t.Errorf("request after %d: %q, want hello", code, body)
			}
		})
	}
	t.Run("HTTP/1.0 answered then closed", func(t *testing.T) {
		for _, path := range []string{"/small", "/big"} {
			r := dial(t, ts.addr)
			r.write("GET " + path + " HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
			resp, body := r.response("GET")
			if resp.StatusCode != 200 || len(resp.TransferEncoding) != 0 {
				t.Errorf("HTTP/1.0 %s: %d, Transfer-Encoding %v; want 200, none", path, resp.StatusCode, resp.TransferEncoding)
			}
			if (path == "/small" && body != "hello") || (path == "/big" && body != big) {
				t.Errorf("HTTP/1.0 %s: body of %d bytes is wrong", path, len(body))
			}
			if !r.closed() {
				t.Errorf("HTTP/1.0 %s: connection kept", path)
			}
		}
	})
	t.Run("Connection close from client", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, body := r.response("GET")
		if body != "hello" || !resp.Close {
			t.Errorf("got %q, Close %v; want hello and Connection: close", body, resp.Close)
		}
		if !r.closed() {
			t.Error("connection kept after the client asked to close")
		}
	})
	t.Run("Connection close from handler", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /handlerclose HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := r.response("GET")
		if body != "bye" || !resp.Close {
			t.Errorf("got %q, Close %v; want bye and Connection: close", body, resp.Close)
		}
		if !r.closed() {
			t.Error("connection kept after the handler asked to close")
		}
	})
}

func TestFlushSendsWhileHandlerRuns(t *testing.T) {
	read := make(chan struct{})
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		<-read // only the flush can have sent it
		_, _ = io.WriteString(w, "data: two\n\n")
	}))
	resp, err := client(t).Get(ts.url("/events"))
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(read)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Errorf("rest of the stream: %q, %v", rest, err)
	}
}

func TestRequestBodies(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ignore" {
			_, _ = io.WriteString(w, "ignored")
			return
		}
		echoPath(w, r)
	}))
	t.Run("Content-Length", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world")
		if _, body := r.response("POST"); body != "POST /cl hello world" {
			t.Errorf("body %q", body)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("POST /ch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := r.response("POST"); body != "POST /ch hello world" {
			t.Errorf("chunked body: %q", body)
		}
		if _, body := r.response("GET"); body != "GET /next " {
			t.Errorf("request after the chunked one: %q", body)
		}
	})
	t.Run("100-continue when read", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("POST /exp HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
		resp, err := http.ReadResponse(r.br, nil)
		if err != nil || resp.StatusCode != http.StatusContinue {
			t.Fatalf("want 100 Continue first, got %v, %v", resp, err)
		}
		_ = resp.Body.Close()
		r.write("data")
		if resp, body := r.response("POST"); resp.StatusCode != 200 || body != "POST /exp data" {
			t.Errorf("after 100 Continue: %d %q", resp.StatusCode, body)
		}
		// The connection is kept: the body was sent and read.
		r.write("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := r.response("GET"); body != "GET /again " {
			t.Errorf("request after 100-continue: %q", body)
		}
	})
	t.Run("100-continue not read closes", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
		resp, body := r.response("POST")
		if resp.StatusCode != 200 || body != "ignored" {
			t.Errorf("got %d %q, want the final response and no 100 Continue", resp.StatusCode, body)
		}
		if !r.closed() {
			t.Error("connection kept while the client may or may not send the body")
		}
	})
	t.Run("100-continue from net/http client", func(t *testing.T) {
		tr := &http.Transport{ExpectContinueTimeout: time.Hour}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("POST", ts.url("/exp"), strings.NewReader("body"))
		req.Header.Set("Expect", "100-continue")
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if string(b) != "POST /exp body" {
			t.Errorf("body %q", b)
		}
	})
	t.Run("unread small body keeps the connection", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + strings.Repeat("x", 1000) + "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := r.response("POST"); body != "ignored" {
			t.Errorf("body %q", body)
		}
		if _, body := r.response("GET"); body != "GET /next " {
			t.Errorf("request after an unread body: %q", body)
		}
	})
	t.Run("unread large body closes", func(t *testing.T) {
		r := dial(t, ts.addr)
		const n = 300 << 10
		r.write("POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n")
		go func() { _, _ = r.c.Write(bytes.Repeat([]byte("x"), n)) }() // the server may close before reading it all
		if _, body := r.response("POST"); body != "ignored" {
			t.Errorf("body %q", body)
		}
		if !r.closed() {
			t.Error("connection kept after an unread body of more than 256 KiB")
		}
	})
}

// compare sends the same bytes to h1 and to net/http's server and checks
// that both answer with the same status and close the connection after.
func TestRefusedAsNetHTTPRefuses(t *testing.T) {
	h := http.HandlerFunc(echoPath)
	// Idle timeouts only so that a server wrongly keeping a connection
	// fails the test rather than hang it.
	std := httptest.NewUnstartedServer(h)
	std.Config.MaxHeaderBytes = 1 << 10
	std.Config.IdleTimeout = 5 * time.Second
	std.Start()
	defer std.Close()
	ts := start(t, h, func(s *Server) {
		s.MaxHeaderBytes = 1 << 10
		s.IdleTimeout = 5 * time.Second
	})
	cases := []struct {
		name, req string
		want      int
	}{
		{"garbage", "hello\r\n\r\n", 400},
		{"bad version", "GET / HTTP/9.x\r\nHost: x\r\n\r\n", 400},
		{"bad header line", "GET / HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", 400},
		{"bad header name", "GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400},
		{"bad Content-Length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ab\r\n\r\n", 400},
		{"two Host", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
		{"bad Host", "GET / HTTP/1.1\r\nHost: x y\r\n\r\n", 400},
		{"missing Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"head too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431},
		{"unsupported Expect", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\na", 417},
		{"two Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400},
		{"unknown Transfer-Encoding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"two Transfer-Encodings", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, target := range []struct{ name, addr string }{{"net/http", std.Listener.Addr().String()}, {"h1", ts.addr}} {
				r := dial(t, target.addr)
				r.write(tc.req)
				resp, err := http.ReadResponse(r.br, nil)
				if err != nil {
					t.Fatalf("%s: read response: %v", target.name, err)
				}
				defer func() { _ = resp.Body.Close() }()
				_, _ = io.ReadAll(resp.Body)
				if resp.StatusCode != tc.want {
					t.Errorf("%s answered %d, want %d", target.name, resp.StatusCode, tc.want)
				}
				if !r.closed() {
					t.Errorf("%s kept the connection after refusing a request", target.name)
				}
			}
		})
	}
	// net/http serves HTTP/2 without TLS when asked to; h1 does not.
	t.Run("HTTP/2 preface", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		if resp, _ := r.response("GET"); resp.StatusCode != http.StatusHTTPVersionNotSupported {
			t.Errorf("answered %d, want 505", resp.StatusCode)
		}
		if !r.closed() {
			t.Error("connection kept after an HTTP/2 preface")
		}
	})
	// Both Content-Length and Transfer-Encoding: net/http takes the
	// chunked body and drops the Content-Length; the bytes after the last
	// chunk are a request of their own, the same on both.
	t.Run("Content-Length and Transfer-Encoding", func(t *testing.T) {
		req := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"
		var got [2]string
		for i, addr := range []string{std.Listener.Addr().String(), ts.addr} {
			r := dial(t, addr)
			r.write(req)
			resp, body := r.response("POST")
			got[i] = strconv.Itoa(resp.StatusCode) + " " + body
			if resp.StatusCode == 200 && !resp.Close {
				resp, body := r.response("GET")
				got[i] += " | " + strconv.Itoa(resp.StatusCode) + " " + body
			}
		}
		if got[0] != got[1] {
			t.Errorf("net/http answered %q, h1 %q", got[0], got[1])
		}
	})
}

func TestClientGoneCancelsContext(t *testing.T) {
	started := make(chan struct{}, 1)
	cancelled := make(chan error, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		started <- struct{}{}
		<-r.Context().Done()
		cancelled <- r.Context().Err()
	}), func(s *Server) { s.WatchAfter = time.Millisecond })
	for _, req := range []string{
		"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST /wait HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	} {
		r := dial(t, ts.addr)
		r.write(req)
		<-started
		_ = r.c.Close()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Errorf("%q: context ended with %v, want context.Canceled", strings.SplitN(req, "\r\n", 2)[0], err)
		}
	}
}

func TestPipelinedRequestIsNotClientGone(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	ctxErr := make(chan error, 1)
	watched := make(chan error, 4)
	var calls atomic.Int32
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			close(started)
			<-release
			ctxErr <- r.Context().Err()
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}), func(s *Server) {
		s.WatchAfter = time.Millisecond
		s.watched = func(err error) { watched <- err }
	})
	r := dial(t, ts.addr)
	r.write("GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	r.write("GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
	// The watch reads ahead while the first handler runs: it must see the
	// second request, not the client gone.
	if err := <-watched; err != nil {
		t.Errorf("the watch read %v, want the second request's first byte", err)
	}
	close(release)
	if err := <-ctxErr; err != nil {
		t.Errorf("first request's context ended (%v) when the client pipelined a second", err)
	}
	for _, want := range []string{"/first", "/second"} {
		if resp, body := r.response("GET"); resp.StatusCode != 200 || body != want {
			t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
}

// lockedBuffer is a log destination for a test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestHandlerPanic(t *testing.T) {
	var logs lockedBuffer
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, "fine")
	}), func(s *Server) { s.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	for _, path := range []string{"/panic", "/abort"} {
		r := dial(t, ts.addr)
		r.write("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		if !r.closed() {
			t.Errorf("%s: connection kept after a panic", path)
		}
	}
	if n := strings.Count(logs.String(), "panicked"); n != 1 || !strings.Contains(logs.String(), "boom") {
		t.Errorf("want one logged panic (boom) and http.ErrAbortHandler not logged; log:\n%s", logs.String())
	}
	r := dial(t, ts.addr)
	r.write("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := r.response("GET"); body != "fine" {
		t.Errorf("after panics: %q, want fine", body)
	}
}

func TestTimeouts(t *testing.T) {
	ts := start(t, http.HandlerFunc(echoPath), func(s *Server) {
		s.IdleTimeout = 50 * time.Millisecond
		s.ReadHeaderTimeout = 50 * time.Millisecond
	})
	t.Run("idle", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
		if _, body := r.response("GET"); body != "GET /a " {
			t.Fatalf("body %q", body)
		}
		if !r.closed() {
			t.Error("idle connection not closed")
		}
	})
	t.Run("read header", func(t *testing.T) {
		r := dial(t, ts.addr)
		r.write("GET /a HTTP/1.1\r\nHost: x\r\n")
		if !r.closed() {
			t.Error("connection with half a request head not closed")
		}
	})
}

func TestShutdown(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "done "+r.URL.Path)
	}))
	idle := dial(t, ts.addr)
	idle.write("GET /idle HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := idle.response("GET"); body != "done /idle" {
		t.Fatalf("body %q", body)
	}
	busy := dial(t, ts.addr)
	busy.write("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started

	shut := make(chan error, 1)
	go func() { shut <- ts.s.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Error("idle connection kept during Shutdown")
	}
	if err := <-ts.done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
	ts.done <- http.ErrServerClosed // for the cleanup
	if c, err := net.Dial("tcp", ts.addr); err == nil {
		_ = c.Close()
		t.Error("listener still accepts after Shutdown")
	}
	close(release)
	resp, body := busy.response("GET")
	if body != "done /slow" || !resp.Close {
		t.Errorf("in-flight request: %q, Close %v; want its response with Connection: close", body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestShutdownContextEnds(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	}))
	defer close(release)
	r := dial(t, ts.addr)
	r.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ts.s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with an ended context: %v, want context.Canceled", err)
	}
	// Close ends the connection the handler holds.
	if err := ts.s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !r.closed() {
		t.Error("Close left a connection open")
	}
}

func TestHeaderSafety(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Evil"] = []string{"a\r\nInjected: yes", "b\nSet-Cookie: x=1"}
		w.Header()["Bad Name"] = []string{"v"}
		w.Header()["Bad:Name"] = []string{"v"}
		w.Header()["X-Fine"] = []string{"ok"}
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, "<html><body>"+strings.Repeat("x", 5000))
			return
		}
		if r.URL.Path == "/cl" {
			w.Header().Set("Content-Length", "13")
		}
		_, _ = io.WriteString(w, "<html>hi</html>")
	}))
	for _, path := range []string{"/", "/big"} {
		r := dial(t, ts.addr)
		r.write("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, _ := r.response("GET")
		h := resp.Header
		if h.Get("Injected") != "" || h.Get("Set-Cookie") != "" {
			t.Errorf("%s: a header value injected a field: %v", path, h)
		}
		if len(h["X-Evil"]) != 2 || h.Get("X-Fine") != "ok" {
			t.Errorf("%s: X-Evil %q, X-Fine %q", path, h["X-Evil"], h.Get("X-Fine"))
		}
		for k := range h {
			if strings.Contains(k, "Name") {
				t.Errorf("%s: invalid header name %q sent", path, k)
			}
		}
		if _, err := http.ParseTime(h.Get("Date")); err != nil {
			t.Errorf("%s: Date %q: %v", path, h.Get("Date"), err)
		}
		if ct := h.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type %q, want it sniffed as text/html; charset=utf-8", path, ct)
		}
	}
}

func TestResponseController(t *testing.T) {
	results := make(chan []error, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		var errs []error
		errs = append(errs, rc.SetReadDeadline(time.Now().Add(time.Hour)))
		errs = append(errs, rc.EnableFullDuplex())
		_, _, err := rc.Hijack()
		errs = append(errs, err)
		if r.URL.Path == "/deadline" {
			// A deadline in the past: the next write to the client fails.
			if err := rc.SetWriteDeadline(time.Unix(1, 0)); err != nil {
				errs = append(errs, fmt.Errorf("SetWriteDeadline: %w", err))
			}
			_, _ = io.WriteString(w, "never")
			if err := rc.Flush(); err == nil {
				errs = append(errs, errors.New("flush after a past write deadline succeeded"))
			}
		} else {
			_, _ = io.WriteString(w, "ok")
			if err := rc.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("flush: %w", err))
			}
		}
		results <- errs
	}))
	r := dial(t, ts.addr)
	r.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	errs := <-results
	for i, name := range []string{"SetReadDeadline", "EnableFullDuplex", "Hijack"} {
		if !errors.Is(errs[i], http.ErrNotSupported) {
			t.Errorf("%s: %v, want an error wrapping http.ErrNotSupported", name, errs[i])
		}
	}
	for _, err := range errs[3:] {
		t.Error(err)
	}
	if _, body := r.response("GET"); body != "ok" {
		t.Errorf("body %q", body)
	}

	r = dial(t, ts.addr)
	r.write("GET /deadline HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, err := range (<-results)[3:] {
		t.Error(err)
	}
	if !r.closed() {
		t.Error("connection kept after a failed write")
	}
	// A later connection is served as usual.
	r = dial(t, ts.addr)
	r.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-results
	if _, body := r.response("GET"); body != "ok" {
		t.Errorf("body %q", body)
	}
}

// A handler may hand the body to another goroutine that reads it past the
// handler's end, as http.Transport does when it proxies a request whose
// answer comes before its body is sent. That read must neither race with
// the server nor eat the next request.
func TestBodyReadAfterHandlerReturns(t *testing.T) {
	reading := make(chan struct{})
	readDone := make(chan error, 1)
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/early" {
			go func() {
				var b [1]byte
				_, err := io.ReadFull(r.Body, b[:])
				close(reading)
				if err == nil {
					_, err = io.ReadAll(r.Body) // blocks: the client sends no more
				}
				readDone <- err
			}()
			<-reading
			_, _ = io.WriteString(w, "early answer")
			return
		}
		echoPath(w, r)
	}), func(s *Server) { s.WatchAfter = time.Millisecond })
	r := dial(t, ts.addr)
	r.write("POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nh")
	if _, body := r.response("POST"); body != "early answer" {
		t.Errorf("body %q", body)
	}
	if err := <-readDone; err == nil {
		t.Error("a body read past the handler's end got the whole body, want an error")
	}
	if !r.closed() {
		t.Error("connection kept while a body read was cut short")
	}
	// A body read to its end on another goroutine (which arms the watch
	// there) is fine too.
	done := make(chan struct{})
	ts2 := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		go func() {
			_, _ = io.ReadAll(r.Body)
			close(done)
		}()
		<-done
		_, _ = io.WriteString(w, "read elsewhere")
	}), func(s *Server) { s.WatchAfter = time.Millisecond })
	r = dial(t, ts2.addr)
	r.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	if _, body := r.response("POST"); body != "read elsewhere" {
		t.Errorf("body %q", body)
	}
}

// A 100 Continue belongs before the final response: once that has begun,
// a body read sends none.
func TestContinueNotAfterResponseBegins(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/next" {
			_, _ = io.WriteString(w, "next")
			return
		}
		if r.URL.Path == "/early" {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		}
		// Whole once flushed: the client reads it before sending the body.
		w.Header().Set("Content-Length", "8")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "accepted")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		if b, err := io.ReadAll(r.Body); err != nil || string(b) != "data" {
			t.Errorf("body read after the response began: %q, %v", b, err)
		}
	}))
	for _, path := range []string{"/", "/early"} {
		r := dial(t, ts.addr)
		r.write("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
		resp, body := r.response("POST")
		if path == "/early" {
			if resp.StatusCode != http.StatusEarlyHints || resp.Header.Get("Link") == "" {
				t.Errorf("%s: first response %d (Link %q), want 103 with its Link", path, resp.StatusCode, resp.Header.Get("Link"))
			}
			resp, body = r.response("POST")
		}
		if resp.StatusCode != http.StatusAccepted || body != "accepted" {
			t.Errorf("%s: got %d %q, want 202 accepted and no 100 Continue", path, resp.StatusCode, body)
		}
		r.write("data")
		// What follows on the connection is the next request's answer, not
		// a 100 Continue sent late.
		r.write("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, body := r.response("GET"); resp.StatusCode != 200 || body != "next" {
			t.Errorf("%s: after the body, got %d %q, want 200 next", path, resp.StatusCode, body)
		}
	}
}

// A write deadline a handler sets is for its own response.
func TestWriteDeadlineEndsWithResponse(t *testing.T) {
	ts := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/set" {
			// Far enough ahead for this response, passed by the next one.
			if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
				t.Errorf("SetWriteDeadline: %v", err)
			}
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	r := dial(t, ts.addr)
	r.write("GET /set HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := r.response("GET"); body != "/set" {
		t.Fatalf("body %q", body)
	}
	// Wait out the deadline on the server's side: the idle wait is a read,
	// so a kept write deadline is what would fail the next response.
	time.Sleep(30 * time.Millisecond)
	r.write("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := r.response("GET"); body != "/next" {
		t.Errorf("request after a handler's write deadline passed: %q", body)
	}
}

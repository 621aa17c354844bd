package controller

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// The controller's server bounds what a client can hold: its headers, its
// whole request, a kept-alive connection with nothing on it. A write
// timeout cuts no answer the API gives (it has no streaming one): it is
// above the longest handler's own waits.
func TestServerTimeouts(t *testing.T) {
	srv := NewServer(http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.WriteTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("server limits: read header %s, read %s, idle %s, write %s, header bytes %d: want every one set",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout, srv.WriteTimeout, srv.MaxHeaderBytes)
	}
	// A label write: the Nomad call, the wait for the servers, the view.
	if longest := callTimeout + labelWait + viewWait; srv.WriteTimeout <= longest {
		t.Errorf("WriteTimeout %s would cut a label write, which may take %s", srv.WriteTimeout, longest)
	}

	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	// The production server with short timeouts, so that the test does not
	// wait 30 s for each.
	s := NewServer(c.Handler())
	s.ReadHeaderTimeout, s.ReadTimeout, s.IdleTimeout = 200*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })

	// closed reads conn until the server closes it, and returns what it
	// answered first; a conn the server keeps open past a deadline far
	// beyond the timeouts fails the test.
	closed := func(what string, conn net.Conn) string {
		t.Helper()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		got, err := io.ReadAll(conn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: the server kept the connection open (read %q)", what, got)
		}
		return string(got)
	}
	dial := func() net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}

	// Headers a byte at a time, never finished.
	conn := dial()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	closed("unfinished headers", conn)

	// A body that never comes whole: the reload reads it, fails, answers
	// 400 and the connection closes.
	conn = dial()
	if _, err := io.WriteString(conn, "POST /v1/reload HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"con"); err != nil {
		t.Fatal(err)
	}
	if got := closed("a body that stalls", conn); got != "" && !strings.Contains(got, "400 Bad Request") {
		t.Errorf("a body that stalls: answered %q, want 400 or nothing", got)
	}

	// A kept-alive connection with no second request.
	conn = dial()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz: %s, close %v: want 200 on a kept-alive connection", resp.Status, resp.Close)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if rest, err := io.ReadAll(br); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("an idle kept-alive connection stayed open (read %q)", rest)
	}
}

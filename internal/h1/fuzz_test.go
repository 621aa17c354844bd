package h1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzServer writes arbitrary bytes to a connection and half-closes it:
// the server must not panic, and what it sends back must be a sequence of
// well-formed HTTP/1.1 responses ended by the connection closing.
func FuzzServer(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.0\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\ndata",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort",
		"GET /big HTTP/1.1\r\nHost: x\r\n\r\n",
		"\x00\xff garbage\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	big := make([]byte, 5000)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatalf("listen on loopback: %v", err)
	}
	s := &Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if r.Method == http.MethodHead {
				return // so that a response read as a GET's has no body to wait for
			}
			if r.URL.Path == "/big" {
				_, _ = w.Write(big)
				return
			}
			_, _ = w.Write(b)
		}),
		MaxHeaderBytes: 1 << 10,
		WatchAfter:     time.Millisecond,
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	f.Cleanup(func() {
		_ = s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			f.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	addr := ln.Addr().String()
	var dials atomic.Uint32

	f.Fuzz(func(t *testing.T, in []byte) {
		// Each connection from a loopback address of its own: the client
		// closes first (CloseWrite), so thousands of connections a second
		// leave as many 4-tuples in TIME_WAIT; from one address they use
		// up the ephemeral ports, and dials stall.
		n := dials.Add(1)
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, byte(n>>16)|1, byte(n>>8), byte(n)|1)}}
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		defer func() { _ = nc.Close() }()
		// Not a timing assertion: a bound so that a server that neither
		// answers nor closes fails the input instead of hanging the fuzzer.
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			_, _ = nc.Write(in) // the server may close before reading it all
			_ = nc.(*net.TCPConn).CloseWrite()
		}()
		br := bufio.NewReader(nc)
		for {
			if _, err := br.Peek(1); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("server neither answered nor closed the connection for %q", in)
				}
				return // closed
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("malformed response to %q: %v", in, err)
			}
			if resp.ProtoMajor != 1 || resp.ProtoMinor != 1 {
				t.Errorf("response to %q is %s, want HTTP/1.1", in, resp.Proto)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatalf("response body to %q: %v", in, err)
			}
		}
	})
}

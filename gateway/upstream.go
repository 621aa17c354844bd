package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// maxInlineBody is the largest request body the upstream transport writes
// on the request's own goroutine: it fits the kernel's socket buffers, so
// writing it cannot block on a replica that answers before reading it.
// Larger bodies, and bodies of unknown length (still streaming from the
// client), go through net/http's Transport, which writes and reads on two
// goroutines.
const maxInlineBody = 64 << 10

// upstreamTransport sends requests to replicas over kept-alive HTTP/1.1
// connections, writing the request and reading the response on the
// calling goroutine. net/http's Transport hands every request to a writer
// goroutine and every response back from a reader goroutine; on a proxy
// hop that is most of what the hop costs (docs/perf.md, "Gateway"). The
// request and response are still written and parsed by net/http
// (Request.Write, ReadResponse); only the connection handling is ours.
type upstreamTransport struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration
	idleTimeout   time.Duration
	maxIdle       int // per address
	now           func() time.Time
	// fallback takes what is not sent inline (see maxInlineBody).
	fallback http.RoundTripper

	mu       sync.Mutex
	idle     map[string][]*upConn // per address, most recently used last
	sweeping bool                 // a sweep is scheduled
}

// sweepEvery is how often idle connections are checked while there are
// any: the ones past idleTimeout, or closed by their replica (which
// happens when a replica goes away or its own keep-alive runs out), are
// closed rather than held until next used.
const sweepEvery = 10 * time.Second

// upConn is one connection to a replica.
type upConn struct {
	c         net.Conn
	rc        *readCounter // under br
	br        *bufio.Reader
	bw        *bufio.Writer
	addr      string
	idleSince time.Time
}

func newUpstreamTransport(dialTimeout, headerTimeout time.Duration) *upstreamTransport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &upstreamTransport{
		dial:          d.DialContext,
		headerTimeout: headerTimeout,
		idleTimeout:   90 * time.Second,
		maxIdle:       1024,
		now:           time.Now,
		fallback:      newStdTransport(dialTimeout, headerTimeout),
		idle:          map[string][]*upConn{},
	}
}

// inline reports whether req is sent on the calling goroutine: its body
// is known whole (replayable, small) or absent.
func inline(req *http.Request) bool {
	if req.URL.Scheme != "http" {
		return false
	}
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	return req.GetBody != nil && req.ContentLength >= 0 && req.ContentLength <= maxInlineBody
}

// RoundTrip implements http.RoundTripper.
func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !inline(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	// A request that fails on a reused (kept-alive) connection before the
	// replica sent a byte of its answer — writing it failed, or the read
	// met EOF or a reset — is sent once more, on a newly dialed
	// connection; a failure there, or on a connection that was new, is
	// returned. That is the usual race with a replica closing an idle
	// connection. It retries more than net/http's Transport: that one
	// sends a POST again only when nothing of it was written
	// (shouldRetryRequest; GET, HEAD, OPTIONS, TRACE or a request with an
	// Idempotency-Key also after an EOF on the read), and it may retry on
	// another pooled connection, any number of times. Here a POST the
	// replica may have read whole and then closed on unanswered is sent
	// again, once, to the same replica: the race with an idle close is
	// far more common than a request that kills its engine, and a dead
	// engine refuses the fresh connection. The gateway itself does not
	// send such a request to another replica (the attempt read the body:
	// proxy.go, poison). Only a request with no body or a GetBody comes
	// this way (inline); the gateway holds every body whole and sets it.
	// TestUpstreamStaleConnection and TestUpstreamRetryDialsFresh hold
	// this; TestUpstreamPartialAnswerNotRetried and
	// TestUpstreamFreshConnectionFailureNotRetried what is not retried.
	for try := 0; ; try++ {
		pc, reused, err := t.conn(ctx, req.URL.Host, try > 0)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := t.send(ctx, pc, req)
		if err == nil {
			return resp, nil
		}
		var stale staleError
		if !reused || try > 0 || !errors.As(err, &stale) || ctx.Err() != nil {
			closeBody(req)
			return nil, unwrapStale(err)
		}
		if req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, gerr
			}
			req = req.Clone(ctx)
			req.Body = body
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// headerTimeoutError is a replica that sent no response headers within
// the transport's headerTimeout: a net.Error whose Timeout is true, as
// net/http's Transport's own.
type headerTimeoutError struct{ d time.Duration }

func (e headerTimeoutError) Error() string {
	return fmt.Sprintf("replica sent no response headers within %s", e.d)
}
func (headerTimeoutError) Timeout() bool   { return true }
func (headerTimeoutError) Temporary() bool { return true }

// staleError marks a failure on a reused connection before the replica
// sent a byte: the connection had been closed at the other end.
type staleError struct{ err error }

func (e staleError) Error() string { return e.err.Error() }
func (e staleError) Unwrap() error { return e.err }

func unwrapStale(err error) error {
	var s staleError
	if errors.As(err, &s) {
		return s.err
	}
	return err
}

// send writes req on pc and reads the response headers. The connection
// belongs to the response body from then on; on error it is closed.
func (t *upstreamTransport) send(ctx context.Context, pc *upConn, req *http.Request) (*http.Response, error) {
	// The client going away, or the gateway giving up, unblocks whatever
	// this connection is doing; such a connection is never reused.
	stop := context.AfterFunc(ctx, func() { _ = pc.c.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = pc.c.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if req.Header.Get("Expect") != "" {
		// The body is already here: nothing to wait for.
		req = req.Clone(ctx)
		req.Header.Del("Expect")
	}
	if err := req.Write(unflushed{pc.bw}); err != nil {
		return fail(staleError{err})
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(staleError{err})
	}
	// A deadline set here could replace the one a cancel has just set:
	// setDeadline checks the context after setting it.
	setDeadline := func(d time.Time) error {
		_ = pc.c.SetReadDeadline(d)
		return ctx.Err()
	}
	if t.headerTimeout > 0 {
		if err := setDeadline(t.now().Add(t.headerTimeout)); err != nil {
			return fail(err)
		}
	}
	read0 := pc.rc.n
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil:
				return fail(headerTimeoutError{t.headerTimeout})
			// ReadResponse reports a close before the status line as
			// ErrUnexpectedEOF; a close with unread data as a reset.
			case pc.rc.n == read0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)):
				return fail(staleError{fmt.Errorf("replica closed the connection before answering: %w", err)})
			}
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// An interim answer (1xx): the final one follows.
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return fail(errors.New("replica switched protocols, which the gateway does not proxy"))
	}
	if t.headerTimeout > 0 {
		if err := setDeadline(time.Time{}); err != nil {
			_ = resp.Body.Close()
			return fail(err)
		}
	}
	resp.Body = &upBody{t: t, pc: pc, body: resp.Body, stop: stop, reuse: !resp.Close && !req.Close}
	return resp, nil
}

// unflushed is a connection's bufio.Writer as Request.Write sees it:
// not a *bufio.Writer, so that it does not flush the headers on their own
// before a body it does not know to be in memory (net/http does, in case
// the body blocks). An inline body is in memory (see inline): headers and
// body go out in one write, and the replica reads one segment instead of
// waking for the headers and again for the body.
type unflushed struct{ bw *bufio.Writer }

func (u unflushed) Write(p []byte) (int, error)       { return u.bw.Write(p) }
func (u unflushed) WriteString(s string) (int, error) { return u.bw.WriteString(s) }
func (u unflushed) WriteByte(c byte) error            { return u.bw.WriteByte(c) }

// upBody is a response body that gives its connection back for reuse
// once read to its end, and closes it otherwise.
type upBody struct {
	t     *upstreamTransport
	pc    *upConn
	body  io.ReadCloser
	stop  func() bool
	reuse bool
	done  bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err != nil {
		b.end(errors.Is(err, io.EOF))
	}
	return n, err
}

func (b *upBody) Close() error {
	if !b.done {
		b.end(false)
	}
	return nil
}

// end releases the connection: to the idle list when the response was
// read whole and nothing interrupted it, closed otherwise.
func (b *upBody) end(complete bool) {
	b.done = true
	// stop reports false when the context's deadline-setting has run (or
	// is running): the connection may be poisoned.
	if b.stop() && complete && b.reuse && b.pc.br.Buffered() == 0 {
		b.t.put(b.pc)
		return
	}
	_ = b.pc.c.Close()
}

// conn returns an idle connection to addr, or dials one; a new one when
// fresh is set.
func (t *upstreamTransport) conn(ctx context.Context, addr string, fresh bool) (*upConn, bool, error) {
	now := t.now()
	for !fresh {
		t.mu.Lock()
		list := t.idle[addr]
		if len(list) == 0 {
			t.mu.Unlock()
			break
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		t.idle[addr] = list[:len(list)-1]
		t.mu.Unlock()
		if now.Sub(pc.idleSince) < t.idleTimeout && connAlive(pc.c) {
			return pc, true, nil
		}
		_ = pc.c.Close()
	}
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	rc := &readCounter{Conn: c}
	return &upConn{c: c, rc: rc, br: bufio.NewReaderSize(rc, 4<<10), bw: bufio.NewWriterSize(c, 4<<10), addr: addr}, false, nil
}

// put keeps pc for reuse, unless there are enough idle connections to its
// address already.
func (t *upstreamTransport) put(pc *upConn) {
	pc.idleSince = t.now()
	t.mu.Lock()
	list := t.idle[pc.addr]
	if len(list) >= t.maxIdle {
		t.mu.Unlock()
		_ = pc.c.Close()
		return
	}
	t.idle[pc.addr] = append(list, pc)
	arm := !t.sweeping
	t.sweeping = true
	t.mu.Unlock()
	if arm {
		time.AfterFunc(sweepEvery, t.sweep)
	}
}

// sweep closes the idle connections that expired or died, and schedules
// the next sweep while any remain.
func (t *upstreamTransport) sweep() {
	now := t.now()
	var drop []*upConn
	t.mu.Lock()
	for addr, list := range t.idle {
		keep := list[:0]
		for _, pc := range list {
			if now.Sub(pc.idleSince) < t.idleTimeout && connAlive(pc.c) {
				keep = append(keep, pc)
			} else {
				drop = append(drop, pc)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = keep
		}
	}
	t.sweeping = len(t.idle) > 0
	if t.sweeping {
		time.AfterFunc(sweepEvery, t.sweep)
	}
	t.mu.Unlock()
	for _, pc := range drop {
		_ = pc.c.Close()
	}
}

// readCounter counts the bytes read from a connection: a failure before
// the replica sent any byte of its answer is one a request can be sent
// again after.
type readCounter struct {
	net.Conn
	n int64
}

func (r *readCounter) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.n += int64(n)
	return n, err
}

// CloseIdleConnections closes the connections kept for reuse.
func (t *upstreamTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*upConn{}
	t.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			_ = pc.c.Close()
		}
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

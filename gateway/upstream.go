package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// An Upstream sends the gateway's requests to replicas: NewUpstream's by
// default (Options.Upstream).
type Upstream interface {
	// Do sends req to the replica at addr (host:port) and reads its
	// answer's status and headers into resp. The answer's body streams
	// from body, which the caller reads and closes before it resets or
	// releases resp. sent reports whether any of req went out on a
	// connection to the replica, whether or not Do succeeded: a request
	// that did may be what made the replica fail. A cancelled ctx ends
	// the request, the body's reads included.
	Do(ctx context.Context, addr string, req *fasthttp.Request, resp *fasthttp.Response) (body io.ReadCloser, sent bool, err error)
}

// maxInlineBody is the largest request body the upstream client writes
// on the request's own goroutine: it fits the kernel's socket buffers, so
// writing it cannot block on a replica that answers before reading it.
// Larger bodies go through net/http's Transport, which writes and reads
// on two goroutines.
const maxInlineBody = 64 << 10

// maxAnswerHead is the most bytes of status line and headers read of a
// replica's answer (the connection's read buffer: fasthttp parses an
// answer's head from it whole).
const maxAnswerHead = 8 << 10

// NewUpstream returns the Upstream New uses by default: connections kept
// alive and reused (many per replica), dialTimeout to connect and
// headerTimeout from the request's end to the answer's headers (0: none).
// A non-streamed completion sends its headers only when it is done, so
// headerTimeout must exceed the longest generation. A request whose body
// is at most 64 KiB (nearly all of them) is written and its answer read
// on the calling goroutine, by fasthttp (upstreamClient); the others go
// through net/http's Transport.
func NewUpstream(dialTimeout, headerTimeout time.Duration) Upstream {
	return newUpstreamClient(dialTimeout, headerTimeout)
}

// upstreamClient sends requests to replicas over kept-alive HTTP/1.1
// connections, writing the request and reading the answer on the
// calling goroutine. fasthttp writes the request (Request.Write) and
// parses the answer, its body streamed (Response.ReadLimitBody with
// StreamBody); the connections are pooled here, because what the gateway
// needs of them is more than fasthttp's HostClient gives: a dial the
// request's context cancels, a peek at an idle connection before its
// reuse and on a sweep, and a second try on a connection dialed for it
// (RoundTrip says when).
type upstreamClient struct {
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
	raw       syscall.RawConn // c's, to peek at it (rawAlive); nil: c has none
	rc        *readCounter    // under br
	br        *bufio.Reader
	bw        *bufio.Writer
	addr      string
	idleSince time.Time
}

func newUpstreamClient(dialTimeout, headerTimeout time.Duration) *upstreamClient {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &upstreamClient{
		dial:          d.DialContext,
		headerTimeout: headerTimeout,
		idleTimeout:   90 * time.Second,
		maxIdle:       1024,
		now:           time.Now,
		fallback:      newStdTransport(dialTimeout, headerTimeout),
		idle:          map[string][]*upConn{},
	}
}

// newStdTransport is net/http's Transport configured as NewUpstream says.
func newStdTransport(dialTimeout, headerTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// Do implements Upstream.
func (u *upstreamClient) Do(ctx context.Context, addr string, req *fasthttp.Request, resp *fasthttp.Response) (io.ReadCloser, bool, error) {
	// The body is here whole: nothing to wait for.
	req.Header.Del(fasthttp.HeaderExpect)
	if len(req.Body()) > maxInlineBody {
		return u.doStd(ctx, addr, req, resp)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
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
	// send such a request to another replica (it was sent: proxy.go,
	// poison). TestUpstreamStaleConnection and TestUpstreamRetryDialsFresh
	// hold this; TestUpstreamPartialAnswerNotRetried and
	// TestUpstreamFreshConnectionFailureNotRetried what is not retried.
	sent := false
	for try := 0; ; try++ {
		pc, reused, err := u.conn(ctx, addr, try > 0)
		if err != nil {
			return nil, sent, err
		}
		sent = true
		body, err := u.send(ctx, pc, req, resp)
		if err == nil {
			return body, true, nil
		}
		var stale staleError
		if !reused || try > 0 || !errors.As(err, &stale) || ctx.Err() != nil {
			return nil, true, unwrapStale(err)
		}
	}
}

// headerTimeoutError is a replica that sent no response headers within
// the client's headerTimeout: a net.Error whose Timeout is true, as
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

// isTimeout reports whether err is a timeout: a net.Error's, or
// fasthttp's ErrTimeout (which has Timeout but not Temporary).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// send writes req on pc and reads the answer's head into resp. The
// connection belongs to the answer's body from then on; on error it is
// closed.
func (u *upstreamClient) send(ctx context.Context, pc *upConn, req *fasthttp.Request, resp *fasthttp.Response) (io.ReadCloser, error) {
	// The client going away, or the gateway giving up, unblocks whatever
	// this connection is doing; such a connection is never reused.
	cut := cutWhenDone(ctx, pc.c)
	fail := func(err error) (io.ReadCloser, error) {
		cut.release()
		_ = pc.c.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	// Headers and body go out in one write (the body is in memory, at
	// most maxInlineBody): the replica reads one segment instead of
	// waking for the headers and again for the body.
	if err := req.Write(pc.bw); err != nil {
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
	if u.headerTimeout > 0 {
		if err := setDeadline(u.now().Add(u.headerTimeout)); err != nil {
			return fail(err)
		}
	}
	read0 := pc.rc.n
	// Interim answers (1xx) are read past; the body is read as it comes.
	resp.StreamBody = true
	resp.Header.SetNoDefaultContentType(true)
	if err := resp.ReadLimitBody(pc.br, 0); err != nil {
		var small *fasthttp.ErrSmallBuffer
		switch {
		case isTimeout(err) && ctx.Err() == nil:
			return fail(headerTimeoutError{u.headerTimeout})
		// fasthttp reports a close or a reset before the status line's
		// first byte as io.EOF.
		case pc.rc.n == read0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)):
			return fail(staleError{fmt.Errorf("replica closed the connection before answering: %w", err)})
		case errors.As(err, &small):
			return fail(fmt.Errorf("the replica's answer has more than %d bytes of status line and headers", maxAnswerHead))
		}
		return fail(err)
	}
	if resp.StatusCode() == http.StatusSwitchingProtocols {
		_ = resp.CloseBodyStream()
		return fail(errors.New("replica switched protocols, which the gateway does not proxy"))
	}
	if u.headerTimeout > 0 {
		if err := setDeadline(time.Time{}); err != nil {
			_ = resp.CloseBodyStream()
			return fail(err)
		}
	}
	b := &upBody{u: u, pc: pc, resp: resp, stream: resp.BodyStream(), cut: cut,
		// A body that ends with the connection (neither a length nor
		// chunks) leaves nothing to reuse.
		reuse: !resp.ConnectionClose() && !req.ConnectionClose() && resp.Header.ContentLength() != -2}
	if b.stream == nil {
		// No body (204, 304): the answer is whole.
		b.end(true)
	}
	return b, nil
}

// upBody is an answer's body, fasthttp's stream over the connection,
// which it gives back for reuse once read to its end, and closes
// otherwise. A body cut short is an error, never an end: a length not
// reached, or chunks the replica stopped sending (fasthttp since v1.79
// reports a chunked body cut between two chunks as
// io.ErrUnexpectedEOF, where before it read as an end;
// TestNoRetryAfterFirstByte and TestMidResponseFailureCutsAJSONAnswer
// hold this).
type upBody struct {
	u      *upstreamClient
	pc     *upConn
	resp   *fasthttp.Response // whose body stream this is
	stream io.Reader
	cut    cancelCut
	reuse  bool
	done   bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.stream.Read(p)
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

// end releases the connection: to the idle list when the answer was
// read whole and nothing interrupted it, closed otherwise.
func (b *upBody) end(complete bool) {
	b.done = true
	if b.stream != nil {
		_ = b.resp.CloseBodyStream()
	}
	// release reports false when the context's cut has run (or is
	// running): the connection may be poisoned.
	if b.cut.release() && complete && b.reuse && b.pc.br.Buffered() == 0 {
		b.u.put(b.pc)
		return
	}
	_ = b.pc.c.Close()
}

// conn returns an idle connection to addr, or dials one; a new one when
// fresh is set.
func (u *upstreamClient) conn(ctx context.Context, addr string, fresh bool) (*upConn, bool, error) {
	now := u.now()
	for !fresh {
		u.mu.Lock()
		list := u.idle[addr]
		if len(list) == 0 {
			u.mu.Unlock()
			break
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		u.idle[addr] = list[:len(list)-1]
		u.mu.Unlock()
		if now.Sub(pc.idleSince) < u.idleTimeout && rawAlive(pc.raw) {
			return pc, true, nil
		}
		_ = pc.c.Close()
	}
	c, err := u.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	rc := &readCounter{Conn: c}
	var raw syscall.RawConn
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err = sc.SyscallConn(); err != nil {
			_ = c.Close()
			return nil, false, err
		}
	}
	return &upConn{c: c, raw: raw, rc: rc, br: bufio.NewReaderSize(rc, maxAnswerHead), bw: bufio.NewWriterSize(c, 4<<10), addr: addr}, false, nil
}

// put keeps pc for reuse, unless there are enough idle connections to its
// address already.
func (u *upstreamClient) put(pc *upConn) {
	pc.idleSince = u.now()
	u.mu.Lock()
	list := u.idle[pc.addr]
	if len(list) >= u.maxIdle {
		u.mu.Unlock()
		_ = pc.c.Close()
		return
	}
	u.idle[pc.addr] = append(list, pc)
	arm := !u.sweeping
	u.sweeping = true
	u.mu.Unlock()
	if arm {
		time.AfterFunc(sweepEvery, u.sweep)
	}
}

// sweep closes the idle connections that expired or died, and schedules
// the next sweep while any remain.
func (u *upstreamClient) sweep() {
	now := u.now()
	var drop []*upConn
	u.mu.Lock()
	for addr, list := range u.idle {
		keep := list[:0]
		for _, pc := range list {
			if now.Sub(pc.idleSince) < u.idleTimeout && rawAlive(pc.raw) {
				keep = append(keep, pc)
			} else {
				drop = append(drop, pc)
			}
		}
		clear(list[len(keep):])
		if len(keep) == 0 {
			delete(u.idle, addr)
		} else {
			u.idle[addr] = keep
		}
	}
	u.sweeping = len(u.idle) > 0
	if u.sweeping {
		time.AfterFunc(sweepEvery, u.sweep)
	}
	u.mu.Unlock()
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
func (u *upstreamClient) CloseIdleConnections() {
	u.mu.Lock()
	idle := u.idle
	u.idle = map[string][]*upConn{}
	u.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			_ = pc.c.Close()
		}
	}
	if ci, ok := u.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// doStd sends req with net/http's Transport (a body over maxInlineBody):
// req's method, target, headers and body as an *http.Request, the
// answer's status and headers copied into resp.
func (u *upstreamClient) doStd(ctx context.Context, addr string, req *fasthttp.Request, resp *fasthttp.Response) (io.ReadCloser, bool, error) {
	target, err := url.ParseRequestURI(string(req.Header.RequestURI()))
	if err != nil {
		return nil, false, err
	}
	target.Scheme, target.Host = "http", addr
	data := req.Body()
	var read atomic.Bool
	hr := &http.Request{
		Method: string(req.Header.Method()),
		URL:    target,
		Proto:  "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{},
		Host:          addr,
		ContentLength: int64(len(data)),
		// The gateway's body is its own, and never pooled at this size
		// (readBody): net/http may go on reading it after the answer.
		Body:    &sentReader{r: bytes.NewReader(data), read: &read},
		GetBody: func() (io.ReadCloser, error) { return &sentReader{r: bytes.NewReader(data), read: &read}, nil },
	}
	for k, v := range req.Header.All() {
		key := string(k)
		switch key {
		case "Host", "Content-Length", "Connection":
			continue
		}
		hr.Header[key] = append(hr.Header[key], string(v))
	}
	hres, err := u.fallback.RoundTrip(hr.WithContext(ctx))
	if err != nil {
		return nil, read.Load(), err
	}
	resp.Header.SetNoDefaultContentType(true)
	resp.SetStatusCode(hres.StatusCode)
	for k, vs := range hres.Header {
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
	if hres.ContentLength < 0 {
		resp.Header.SetContentLength(-1)
	}
	return hres.Body, true, nil
}

// sentReader is a request body that records that it was read.
type sentReader struct {
	r    io.Reader
	read *atomic.Bool
}

func (s *sentReader) Read(p []byte) (int, error) {
	s.read.Store(true)
	return s.r.Read(p)
}

func (s *sentReader) Close() error { return nil }

// Package h1 is the gateway's own HTTP/1.1 server loop for plaintext
// listeners: a goroutine per connection reading requests with net/http's
// parser (http.ReadRequest: the request line, headers, Content-Length and
// Transfer-Encoding rules, chunked bodies) and answering through an
// http.ResponseWriter, so every gateway handler runs on it unchanged.
//
// What it leaves out of net/http's server is what costs a proxy hop on
// every request (docs/perf.md, "Gateway against nginx"): the background
// read net/http starts on each connection once a request's body is read,
// to notice a client that goes away, and the goroutine hand-off that
// stopping it takes when the handler returns. Here the client is watched
// only once a request has run for WatchAfter (a request held for a model
// at zero, a long completion): a fast request never starts a goroutine.
// A client that goes away is noticed at most WatchAfter later, or at the
// next write.
//
// Not served: HTTP/2, TLS (the gateway serves TLS listeners with
// net/http), protocol upgrades and Hijack, trailers. HTTP/1.0 requests are
// answered and the connection closed.
package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the zero values of Server's fields.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultWatchAfter        = 20 * time.Millisecond
	DefaultMaxHeaderBytes    = http.DefaultMaxHeaderBytes
)

// maxDiscard is how much of a request body the handler did not read is
// read and thrown away to keep the connection; past it, it is closed.
const maxDiscard = 256 << 10

// Server serves HTTP/1.1 on plaintext listeners.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's headers, from its first
	// byte.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a connection.
	IdleTimeout time.Duration
	// WatchAfter is how long a request runs, its body read, before the
	// connection is watched for the client going away (which cancels the
	// request's context).
	WatchAfter time.Duration
	// MaxHeaderBytes bounds a request's line and headers.
	MaxHeaderBytes int
	// Log, when set, gets handler panics and the like.
	Log *slog.Logger
	// BaseContext is the parent of every request's context.
	BaseContext context.Context

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   atomic.Bool
	idleWake  chan struct{}

	// watched, set by tests, hears what each watch's read returned.
	watched func(error)
}

// ErrServerClosed is what Serve returns after Shutdown or Close: the
// same value as net/http's, so callers test one.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) readHeaderTimeout() time.Duration {
	return orDefault(s.ReadHeaderTimeout, DefaultReadHeaderTimeout)
}
func (s *Server) idleTimeout() time.Duration { return orDefault(s.IdleTimeout, DefaultIdleTimeout) }
func (s *Server) watchAfter() time.Duration  { return orDefault(s.WatchAfter, DefaultWatchAfter) }
func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Serve accepts connections on ln until it fails or the server is shut
// down (ErrServerClosed). It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		_ = ln.Close()
		return ErrServerClosed
	}
	defer s.untrack(ln)
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTemporary(err)) {
				// Out of file descriptors and the like: back off, as
				// net/http does, rather than spin.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.newConn(nc)
		if c == nil {
			_ = nc.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

// errTemporary returns err when it says it is temporary (EMFILE and
// ENFILE do), and a value nothing matches otherwise.
func errTemporary(err error) error {
	var t interface{ Temporary() bool }
	if errors.As(err, &t) && t.Temporary() {
		return err
	}
	return errNever
}

var errNever = errors.New("never matched")

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = map[net.Listener]struct{}{}
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
	_ = ln.Close()
}

// Shutdown stops accepting, closes idle connections, lets each request in
// progress finish (its connection closed after its response), and returns
// when none is left or ctx ends (ctx's error then).
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose()
	for {
		s.mu.Lock()
		for c := range s.conns {
			c.closeIfIdle()
		}
		n := len(s.conns)
		wake := s.idleWake
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.beginClose()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	return nil
}

func (s *Server) beginClose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	for ln := range s.listeners {
		_ = ln.Close()
	}
	if s.idleWake == nil {
		s.idleWake = make(chan struct{}, 1)
	}
}

func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return nil
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	base := s.BaseContext
	if base == nil {
		base = context.Background()
	}
	lr := &limitReader{r: nc, n: -1}
	c := &conn{s: s, nc: nc, lr: lr, base: base, remote: nc.RemoteAddr().String()}
	c.br = bufio.NewReaderSize(lr, 4<<10)
	c.bw = bufio.NewWriterSize(errWriter{c}, 4<<10)
	s.conns[c] = struct{}{}
	return c
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	wake := s.idleWake
	s.mu.Unlock()
	if wake != nil {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// limitReader is under a connection's bufio.Reader: while n ≥ 0 it reads
// at most n bytes more (a request's head), then reports errHeadTooLarge.
type limitReader struct {
	r io.Reader
	n int64 // -1: no limit
}

var errHeadTooLarge = errors.New("request line and headers too large")

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// conn is one client connection.
type conn struct {
	s      *Server
	nc     net.Conn
	lr     *limitReader
	br     *bufio.Reader
	bw     *bufio.Writer
	base   context.Context
	remote string

	// werr is the first error writing to the client; after it nothing
	// more is written.
	werr error
	// writeDeadline: the handler set one, to be undone after its response.
	writeDeadline bool

	mu     sync.Mutex
	active bool // a request is being read or answered
	closed bool

	// The watch: a goroutine reading one byte ahead while a slow request
	// runs, to notice the client going away.
	watchTimer *time.Timer
	watchDone  chan struct{}
	watchEOF   atomic.Bool // the watch saw the client go away
	aborting   atomic.Bool
	cancel     context.CancelFunc
	body       *eofBody
}

// errWriter writes to the connection and keeps the first error.
type errWriter struct{ c *conn }

func (w errWriter) Write(p []byte) (int, error) {
	if w.c.werr != nil {
		return 0, w.c.werr
	}
	n, err := w.c.nc.Write(p)
	if err != nil {
		w.c.werr = err
		if w.c.cancel != nil {
			w.c.cancel()
		}
	}
	return n, err
}

func (c *conn) setActive(a bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.active = a
	return true
}

// closeIfIdle closes the connection when it waits between requests; one
// answering a request closes itself after the response.
func (c *conn) closeIfIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.active && !c.closed {
		c.closed = true
		_ = c.nc.Close()
	}
}

func (c *conn) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		_ = c.nc.Close()
	}
	c.mu.Unlock()
	c.s.forget(c)
}

func (c *conn) serve() {
	defer c.close()
	for {
		if !c.next() {
			return
		}
	}
}

// next waits for, reads and answers one request; it reports whether the
// connection stays open for another.
func (c *conn) next() bool {
	s := c.s
	if s.closing.Load() {
		return false
	}
	// The head's limit counts from its first byte read off the wire: set
	// after the wait for it, the bufio.Reader's first fill would be free.
	c.lr.n = int64(s.maxHeaderBytes()) + 4096 // bufio.Reader reads ahead by up to its size
	defer func() { c.lr.n = -1 }()
	// Between requests: the idle timeout, then, from the first byte, the
	// header timeout.
	if c.br.Buffered() == 0 {
		if c.nc.SetReadDeadline(time.Now().Add(s.idleTimeout())) != nil {
			return false
		}
		if _, err := c.br.Peek(1); err != nil {
			return false
		}
	}
	if !c.setActive(true) {
		return false
	}
	defer c.setActive(false)
	if c.nc.SetReadDeadline(time.Now().Add(s.readHeaderTimeout())) != nil {
		return false
	}
	req, err := http.ReadRequest(c.br)
	headTooLarge := c.lr.n == 0
	c.lr.n = -1
	if headTooLarge {
		err = errHeadTooLarge // whatever the parser made of a cut head
	}
	if err != nil {
		c.badRequest(err)
		return false
	}
	if c.nc.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	if code, msg := check(req); code != 0 {
		c.plainError(code, msg)
		return false
	}
	return c.answer(req)
}

// check refuses what net/http's server refuses after parsing
// (http.ReadRequest has already refused a repeated Host and taken it out
// of the header, into req.Host).
func check(req *http.Request) (int, string) {
	if req.ProtoMajor != 1 {
		return http.StatusHTTPVersionNotSupported, "HTTP/1.x only"
	}
	if !validHost(req.Host) {
		return http.StatusBadRequest, "malformed Host header"
	}
	// http.ReadRequest has taken the Host field out of the header, so an
	// empty one cannot be told from none; net/http refuses none, and
	// neither is a host to route on.
	if req.ProtoAtLeast(1, 1) && req.Host == "" {
		return http.StatusBadRequest, "missing required Host header"
	}
	// http.ReadRequest (textproto) lets through field names and values
	// net/http's server refuses, such as a name with a space in it.
	for k, vv := range req.Header {
		if !validFieldName(k) {
			return http.StatusBadRequest, "invalid header name"
		}
		for _, v := range vv {
			if !validFieldValue(v) {
				return http.StatusBadRequest, "invalid header value"
			}
		}
	}
	if e := req.Header.Get("Expect"); e != "" && !equalFold(e, "100-continue") {
		return http.StatusExpectationFailed, "unsupported Expect header"
	}
	if req.Method == http.MethodConnect {
		return http.StatusMethodNotAllowed, "CONNECT is not served"
	}
	return 0, ""
}

// validFieldValue reports whether v holds no control byte but tab.
func validFieldValue(v string) bool {
	for i := range len(v) {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// validHost reports whether a Host header holds only what a host, an
// IPv6 literal, a port or a percent-encoding can.
func validHost(h string) bool {
	for i := range len(h) {
		b := h[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:[]%@", b) >= 0:
		default:
			return false
		}
	}
	return true
}

func (c *conn) badRequest(err error) {
	var code int
	var msg string
	switch {
	case errors.Is(err, errHeadTooLarge):
		code, msg = http.StatusRequestHeaderFieldsTooLarge, "request line and headers too large"
	case isClosed(err):
		return // the client went away between requests, or timed out
	case strings.Contains(err.Error(), "transfer encoding"):
		// http.ReadRequest's unsupportedTEError (unexported): net/http's
		// server answers it 501.
		code, msg = http.StatusNotImplemented, err.Error()
	default:
		code, msg = http.StatusBadRequest, err.Error()
	}
	c.plainError(code, msg)
}

func isClosed(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &ne) && ne.Timeout()
}

// plainError answers a request that never reached the handler, and the
// connection closes after it.
func (c *conn) plainError(code int, msg string) {
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	body := http.StatusText(code) + ": " + msg
	// With a Content-Length, a client reads the answer whole without
	// waiting for the close (which a client still writing may not see).
	_, _ = io.WriteString(c.bw, "HTTP/1.1 "+statusLine(code)+"\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body)
	_ = c.bw.Flush()
}

// answer runs the handler on req and writes its response; it reports
// whether the connection stays open.
func (c *conn) answer(req *http.Request) (keep bool) {
	ctx, cancel := context.WithCancel(c.base)
	defer cancel()
	c.cancel = cancel
	defer func() { c.cancel = nil }()
	req.RemoteAddr = c.remote
	req = req.WithContext(ctx)

	w := &response{c: c, req: req, status: http.StatusOK, contentLength: -1}
	w.http10 = !req.ProtoAtLeast(1, 1)
	w.head = req.Method == http.MethodHead
	w.closeAfter = req.Close || w.http10 || c.s.closing.Load()

	body := &eofBody{rc: req.Body, c: c}
	w.body = body
	if e := req.Header.Get("Expect"); e != "" {
		req.Header.Del("Expect")
		// An HTTP/1.0 client knows no interim responses (net/http
		// sends it none either).
		body.cont = !w.http10
	}
	req.Body = body
	c.body = body
	if req.ContentLength == 0 && len(req.TransferEncoding) == 0 {
		body.hitEOF()
	}

	panicked := true
	func() {
		defer func() {
			if panicked {
				if v := recover(); v != nil && !isAbort(v) && c.s.Log != nil {
					c.s.Log.Error("gateway handler panicked", "method", req.Method, "path", req.URL.Path, "panic", v, "stack", string(debug.Stack()))
				}
			}
		}()
		c.s.Handler.ServeHTTP(w, req)
		panicked = false
	}()
	// From here the server alone reads the connection: the body is shut
	// to the handler's goroutines (a proxy's transport may still be
	// reading it), and then the watch is stopped, which the body may have
	// armed from any of them.
	cut := body.shut()
	c.stopWatch()
	c.body = nil
	if panicked {
		return false
	}
	w.finish()
	if c.writeDeadline {
		// A handler's deadline (http.ResponseController) was for its
		// response, not the next request's.
		c.writeDeadline = false
		if c.nc.SetWriteDeadline(time.Time{}) != nil {
			return false
		}
	}
	if c.werr != nil || c.watchEOF.Load() || w.closeAfter || body.cont || cut {
		// body.cont: the client waits for a 100 Continue it will never
		// get, and may or may not send the body. cut: a read of the body
		// was broken off, and where the body ends is unknown.
		return false
	}
	// What of the body the handler left unread is read and dropped, a
	// little of it; more and the connection closes.
	if !body.eof {
		if n, err := io.CopyN(io.Discard, body.rc, maxDiscard+1); n > maxDiscard || err != nil && !errors.Is(err, io.EOF) {
			return false
		}
	}
	_ = body.rc.Close()
	return !c.s.closing.Load()
}

// isAbort reports whether a handler's panic value is http.ErrAbortHandler,
// the quiet way to abort a response.
func isAbort(v any) bool {
	err, ok := v.(error)
	return ok && errors.Is(err, http.ErrAbortHandler)
}

// eofBody is a request's body: it arms the watch when read to its end and
// answers Expect: 100-continue on the first read. Its Read may run on any
// goroutine the handler hands it to, during or after the handler.
type eofBody struct {
	rc io.ReadCloser
	c  *conn

	mu     sync.Mutex // held through a Read
	eof    bool
	closed bool // the handler has returned: Read fails

	// contMu orders a 100 Continue with the response's first bytes,
	// without waiting on a Read blocked on the client.
	contMu      sync.Mutex
	cont        bool // a 100 Continue is owed
	contBlocked bool // the response has begun: too late to send it
}

func (b *eofBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof {
		return 0, io.EOF
	}
	b.sendContinue()
	n, err := b.rc.Read(p)
	if errors.Is(err, io.EOF) {
		b.hitEOF()
	}
	return n, err
}

// sendContinue writes the 100 Continue owed, unless the final response
// has begun (it would land in it: it stays owed, and the connection
// closes after). It writes to the connection itself: c.bw and c.werr
// belong to the handler's goroutine, and nothing is buffered before the
// response begins.
func (b *eofBody) sendContinue() {
	b.contMu.Lock()
	defer b.contMu.Unlock()
	if b.cont && !b.contBlocked {
		b.cont = false
		_, _ = io.WriteString(b.c.nc, "HTTP/1.1 100 Continue\r\n\r\n")
	}
}

// beginResponse stops any 100 Continue, and waits for one being written:
// the response's bytes come after it.
func (b *eofBody) beginResponse() {
	b.contMu.Lock()
	b.contBlocked = true
	b.contMu.Unlock()
}

// interim writes an interim (1xx) response of the handler's, ordered with
// a 100 Continue written by a Read.
func (b *eofBody) interim(write func()) {
	b.contMu.Lock()
	defer b.contMu.Unlock()
	write()
}

// shut ends reads of the body once the handler has returned. A read in
// progress on another goroutine is broken off by a read deadline in the
// past (the client may never send what it waits for); shut reports
// whether it did so.
func (b *eofBody) shut() (cut bool) {
	if !b.mu.TryLock() {
		cut = true
		_ = b.c.nc.SetReadDeadline(time.Unix(1, 0))
		b.mu.Lock()
		_ = b.c.nc.SetReadDeadline(time.Time{})
	}
	b.closed = true
	b.mu.Unlock()
	return cut
}

// Close leaves the body for the server to drain after the handler.
func (b *eofBody) Close() error { return nil }

func (b *eofBody) hitEOF() {
	if b.eof {
		return
	}
	b.eof = true
	b.contMu.Lock()
	b.cont = false
	b.contMu.Unlock()
	b.c.armWatch()
}

// armWatch starts the clock on watching the client: if the request is
// still running after WatchAfter, a goroutine reads ahead on the
// connection.
func (c *conn) armWatch() {
	if c.watchTimer == nil {
		c.watchDone = make(chan struct{}, 1)
		c.watchTimer = time.AfterFunc(c.s.watchAfter(), c.watch)
		return
	}
	c.watchTimer.Reset(c.s.watchAfter())
}

// watch reads ahead by one byte. A byte is the client's next request
// (pipelined), kept in the buffer; an error, unless the handler's end
// caused it, is the client gone: the request's context is cancelled.
func (c *conn) watch() {
	_, err := c.br.Peek(1)
	if err != nil && !c.aborting.Load() {
		c.watchEOF.Store(true)
		if cancel := c.cancel; cancel != nil {
			cancel()
		}
	}
	if c.s.watched != nil {
		c.s.watched(err)
	}
	c.watchDone <- struct{}{}
}

// stopWatch makes sure no watch runs past the handler's end.
func (c *conn) stopWatch() {
	if c.watchTimer == nil || c.body == nil || !c.body.eof {
		return
	}
	if c.watchTimer.Stop() {
		return
	}
	// It fired: stop the read it makes, and wait for it to be done.
	c.aborting.Store(true)
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	<-c.watchDone
	c.aborting.Store(false)
	_ = c.nc.SetReadDeadline(time.Time{})
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

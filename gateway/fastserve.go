package gateway

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// BodyTimeouts says how long a request for path has for its body, from
// the end of its headers, and the setting that sets it ("" for one no
// setting names): Gateway.BodyTimeout.
type BodyTimeouts func(path string) (d time.Duration, setting string)

// NewFastServer returns the fasthttp server `llmgw gateway` serves h with
// on a plaintext listener (HTTP/1.1; a TLS listener is served by
// NewServer's, which speaks HTTP/2 too). h is served as net/http's
// handlers are, on its connection's goroutine, with an *http.Request and
// an http.ResponseWriter (fastWriter) over fasthttp's request and
// response, so the handler is the same on both servers. Its answer is held
// whole and sent when it returns, unless it detaches the rest of its work
// to stream it (fastWriter.Detach).
//
// Its settings are NewServer's: ServerReadHeaderTimeout for a request's
// line and headers from their first byte, ServerMaxHeaderBytes of them
// (431 past them), ServerIdleTimeout between requests; a request's body
// must arrive within timeouts' answer for its path (ServerBodyReadTimeout
// for every path when timeouts is nil), from the end of its headers (408
// past it, naming the setting, and the connection closed). A request sent
// with Transfer-Encoding gets its answer and a closed connection, as
// NewServer's says why. What the server has to say (a handler's panic, a
// connection it failed to serve) goes to log at warn; log may be nil.
func NewFastServer(h http.Handler, timeouts BodyTimeouts, log *slog.Logger) *FastServer {
	if timeouts == nil {
		timeouts = func(string) (time.Duration, string) { return ServerBodyReadTimeout, "" }
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fs := &fastServe{h: h, timeouts: timeouts, log: log, reading: map[*fasthttp.RequestHeader]string{}}
	fs.workers.fs = fs
	return &FastServer{&fasthttp.Server{
		Handler:        fs.serve,
		ErrorHandler:   fs.readError,
		HeaderReceived: fs.headerReceived,
		ReadTimeout:    ServerReadHeaderTimeout,
		IdleTimeout:    ServerIdleTimeout,
		ReadBufferSize: ServerMaxHeaderBytes,
		// The handler reads the body (readBody, within its limit and the
		// gateway's body memory); fasthttp reads ahead only what it has.
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		CloseOnShutdown:              true,
		Logger:                       fastLogger{log},
	}}
}

// FastServer is NewFastServer's: fasthttp's server, whose Serve closes
// the connections it is done with gracefully (lingerConn).
type FastServer struct {
	*fasthttp.Server
}

// Serve serves ln until the server is shut down.
func (s *FastServer) Serve(ln net.Listener) error {
	return s.Server.Serve(lingerListener{ln})
}

// lingerListener's connections close as lingerConn says.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return &lingerConn{TCPConn: tc}, nil
	}
	return c, nil
}

// lingerTime is how long a connection the server closes stays open for
// reading after its sending side is closed (lingerConn): net/http's
// server waits as long.
const lingerTime = 500 * time.Millisecond

// lingerConn is a client's connection that the server closes as net/http's
// closes one it gives up on (an answer sent before the request was read
// whole: a 413, a 431, a 408): its sending side first, then the rest
// lingerTime later. Closed at once, with the client's bytes unread, the
// connection would be reset at once, and the client, still sending, would
// lose the answer it had not yet read. Close returns at once.
type lingerConn struct {
	*net.TCPConn
	once sync.Once
	// remote is the client's address as text, once a request asked
	// (remoteAddr): the connection's requests are served one at a time.
	remote string
	// watch is the timer of the watch on the client while a request's
	// handler runs inline (fastWriter.bodyRead), made for the first
	// request that needs it and reset for the next; watched is the
	// request it watches for.
	watch   *time.Timer
	watched atomic.Pointer[fastWriter]
}

// watchInline is the connection's watch timer's: the watch of the
// request it was reset for.
func (c *lingerConn) watchInline() {
	if w := c.watched.Load(); w != nil {
		w.watchInline()
	}
}

// remoteAddr is the client's address as http.Request's RemoteAddr,
// formatted once per connection rather than once per request.
func remoteAddr(ctx *fasthttp.RequestCtx) string {
	lc, ok := ctx.Conn().(*lingerConn)
	if !ok {
		return ctx.RemoteAddr().String()
	}
	if lc.remote == "" {
		lc.remote = lc.RemoteAddr().String()
	}
	return lc.remote
}

func (c *lingerConn) Close() error {
	c.once.Do(func() {
		if c.CloseWrite() != nil {
			_ = c.TCPConn.Close()
			return
		}
		time.AfterFunc(lingerTime, func() { _ = c.TCPConn.Close() })
	})
	return nil
}

// fastLogger is fasthttp's logger, at warn.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) { l.log.Warn(fmt.Sprintf(format, args...)) }

// fastServe serves a net/http handler on fasthttp's server.
type fastServe struct {
	h        http.Handler
	timeouts BodyTimeouts
	log      *slog.Logger
	// reading holds the path of each request whose body fasthttp reads
	// ahead of the handler, by its header (one per connection: fasthttp
	// keeps a connection's request).
	readingMu sync.Mutex
	reading   map[*fasthttp.RequestHeader]string
	workers   workers
}

// workers are the goroutines detached requests run on: kept once
// started, at most maxIdleWorkers of them idle, so that a request runs on
// a stack already grown to what the handler needs (a new goroutine's
// stack is grown, and copied, several times over a request) rather than
// on a new one.
type workers struct {
	fs   *fastServe
	mu   sync.Mutex
	idle []*worker // the last to finish last: its stack is warm
}

const maxIdleWorkers = 1024

type worker struct {
	jobs chan *fastWriter
}

// do runs w's detached rest on an idle worker, or a new one.
func (ws *workers) do(w *fastWriter) {
	ws.mu.Lock()
	var wk *worker
	if n := len(ws.idle); n > 0 {
		wk = ws.idle[n-1]
		ws.idle[n-1] = nil
		ws.idle = ws.idle[:n-1]
	}
	ws.mu.Unlock()
	if wk == nil {
		wk = &worker{jobs: make(chan *fastWriter, 1)}
		go ws.work(wk)
	}
	wk.jobs <- w
}

// work runs wk's requests until there are enough idle workers.
func (ws *workers) work(wk *worker) {
	for w := range wk.jobs {
		ws.fs.runRest(w)
		ws.mu.Lock()
		if len(ws.idle) >= maxIdleWorkers {
			ws.mu.Unlock()
			return
		}
		ws.idle = append(ws.idle, wk)
		ws.mu.Unlock()
	}
}

// headerReceived gives a request with a body its path's deadline for it,
// from now: fasthttp reads the first bytes of the body before the
// handler runs, and the handler reads the rest under the same deadline.
func (fs *fastServe) headerReceived(hd *fasthttp.RequestHeader) fasthttp.RequestConfig {
	if hd.ContentLength() == 0 {
		return fasthttp.RequestConfig{}
	}
	path := pathOf(hd.RequestURI())
	d, _ := fs.timeouts(path)
	// fasthttp resets the request when its read ahead fails: readError
	// finds the path here.
	fs.readingMu.Lock()
	fs.reading[hd] = path
	fs.readingMu.Unlock()
	return fasthttp.RequestConfig{ReadTimeout: d}
}

// pathOf is a request target's path, without its query.
func pathOf(uri []byte) string {
	for i, c := range uri {
		if c == '?' {
			return string(uri[:i])
		}
	}
	return string(uri)
}

// readError answers a request fasthttp could not read: 431 for headers
// past ServerMaxHeaderBytes, 408 for a body that did not arrive in time
// (naming the setting), 400 otherwise. The server closes the connection
// after it.
func (fs *fastServe) readError(ctx *fasthttp.RequestCtx, err error) {
	fs.readingMu.Lock()
	path, reading := fs.reading[&ctx.Request.Header]
	delete(fs.reading, &ctx.Request.Header)
	fs.readingMu.Unlock()
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		ctx.Error("431 Request Header Fields Too Large", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case errors.As(err, &ne) && ne.Timeout() && reading:
		d, setting := fs.timeouts(path)
		ctx.Response.Header.SetContentType("application/json")
		ctx.SetStatusCode(http.StatusRequestTimeout)
		ctx.SetBody(errorJSON("invalid_request_error", "request_timeout", "", bodyTimeoutMessage(d, setting)))
	case errors.As(err, &ne) && ne.Timeout():
		ctx.Error("408 Request Timeout", fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("400 Bad Request", fasthttp.StatusBadRequest)
	}
}

// serve runs h for one request on this goroutine, the connection's, as
// net/http's server does: the answer, held in ctx.Response, is sent when h
// returns. From watchAfter after the request's body is read, a goroutine
// watches the connection for the client going away (clientGone), which
// cancels the request's context.
//
// A handler that is to stream its answer detaches the rest of its work
// first (Detach): it returns, the rest runs on a worker goroutine, and
// this one waits for the answer's head (the first flush, which it hands
// to fasthttp to write as the rest comes, or the answer whole) while it
// watches the connection itself.
func (fs *fastServe) serve(ctx *fasthttp.RequestCtx) {
	if ctx.Request.Header.ContentLength() != 0 {
		fs.readingMu.Lock()
		delete(fs.reading, &ctx.Request.Header)
		fs.readingMu.Unlock()
	}
	w := newFastWriter(ctx)
	r, err := fastRequest(ctx, w)
	if err != nil {
		ctx.Error("400 Bad Request: "+err.Error(), fasthttp.StatusBadRequest)
		w.cancel()
		return
	}
	fs.runInline(w, r)
	w.stopWatch()
	if w.rest == nil {
		w.cancel()
		if w.aborted {
			abortConn(ctx)
		}
		return
	}
	w.ev = make(chan int, 2)
	w.inline = false
	fs.workers.do(w)
	fs.await(ctx, w)
}

// abortConn ends ctx's connection with no answer: a cut-off answer must
// not look whole.
func abortConn(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

// runInline runs h, logging a panic as net/http's server does; the answer
// is aborted then.
func (fs *fastServe) runInline(w *fastWriter, r *http.Request) {
	defer func() {
		if rec := recover(); rec != nil {
			fs.logPanic(r, rec)
			w.rest = nil
			w.aborted = true
		}
	}()
	fs.h.ServeHTTP(w, r)
	if w.rest == nil && !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
}

func (fs *fastServe) logPanic(r *http.Request, rec any) {
	if rec == http.ErrAbortHandler { //nolint:errorlint // net/http's sentinel, compared as net/http does
		return
	}
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	fs.log.Warn(fmt.Sprintf("http: panic serving %s: %v\n%s", r.RemoteAddr, rec, buf))
}

// await waits for a detached request's answer, watching the connection
// from watchAfter on.
func (fs *fastServe) await(ctx *fasthttp.RequestCtx, w *fastWriter) {
	watched := false
	var t *time.Timer // while a watch is due
	if w.readDone {
		t = watchTimers.Get().(*time.Timer)
		t.Reset(watchAfter)
	}
	for {
		var e int
		if t != nil {
			select {
			case e = <-w.ev:
			case <-t.C:
				e = evWatch
			}
		} else {
			e = <-w.ev
		}
		if e == evBodyRead {
			if t == nil && !w.sent.Load() {
				t = watchTimers.Get().(*time.Timer)
				t.Reset(watchAfter)
			}
			continue
		}
		if e == evWatch {
			watchTimers.Put(t)
			t = nil
			if w.sent.Load() {
				continue
			}
			watched = true
			w.watching.Store(true)
			if clientGone(w.conn, &w.sent) {
				w.cancel()
			}
			continue
		}
		if t != nil {
			t.Stop()
			watchTimers.Put(t)
		}
		if watched {
			// The handler may have woken the watch with a deadline in
			// the past (handOff); fasthttp sets its own before it reads
			// again.
			_ = w.conn.SetReadDeadline(time.Time{})
		}
		switch e {
		case evFlushed:
			ctx.Response.SetBodyStream(w.stream, -1)
			ctx.Response.ImmediateHeaderFlush = true
		case evAborted:
			abortConn(ctx)
		}
		return
	}
}

// runRest is a worker's: a detached request's rest, then its answer
// handed to the connection's goroutine (unless a flush or an early end
// did), a panic logged as net/http's server logs it.
func (fs *fastServe) runRest(w *fastWriter) {
	defer w.cancel()
	defer func() {
		if rec := recover(); rec != nil {
			fs.logPanic(w.req, rec)
			w.abort()
		}
	}()
	w.rest()
	w.end()
}

// fastRequest is ctx's request as net/http's handlers take it: its own
// copies of what they read, so that the handler may outlive the
// connection's hold on ctx (after its answer is handed over).
func fastRequest(ctx *fasthttp.RequestCtx, w *fastWriter) (*http.Request, error) {
	hd := &ctx.Request.Header
	uri := string(hd.RequestURI())
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, err
	}
	// Built here and copied once, with its context, by WithContext.
	r := http.Request{
		Method:     method(hd.Method()),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1,
		Header:     make(http.Header, hd.Len()),
		Host:       string(hd.Host()),
		RemoteAddr: remoteAddr(ctx),
		RequestURI: uri,
	}
	if !hd.IsHTTP11() {
		r.Proto, r.ProtoMinor = "HTTP/1.0", 0
	}
	// The values are substrings of one string, and their one-element
	// slices share one array.
	size := 0
	for k, v := range hd.All() {
		if !skipHeader(k) {
			size += len(v)
		}
	}
	var all strings.Builder
	all.Grow(size)
	for k, v := range hd.All() {
		if !skipHeader(k) {
			all.Write(v)
		}
	}
	text := all.String()
	vals := make([]string, 0, hd.Len())
	at := 0
	for k, v := range hd.All() {
		if skipHeader(k) {
			continue
		}
		val := text[at : at+len(v)]
		at += len(v)
		key := headerKey(k)
		if prev, ok := r.Header[key]; ok {
			r.Header[key] = append(prev, val)
			continue
		}
		vals = append(vals, val)
		r.Header[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	switch cl := hd.ContentLength(); {
	case cl == -1:
		// Chunked. Its connection is closed after the answer: net/http
		// drops a Content-Length beside Transfer-Encoding, and so does
		// fasthttp, so a request with both cannot be told from one with
		// Transfer-Encoding alone (NewServer, RFC 9112 §6.3).
		r.TransferEncoding = []string{"chunked"}
		r.ContentLength = -1
		w.h.Set("Connection", "close")
	case cl > 0:
		r.ContentLength = int64(cl)
	}
	if r.ContentLength == 0 {
		r.Body = http.NoBody
		w.bodyRead()
	} else {
		r.Body = &fastBody{r: ctx.RequestBodyStream(), left: r.ContentLength, w: w}
	}
	w.req = r.WithContext(&w.rc)
	return w.req, nil
}

// skipHeader reports whether a request's header field is left out of its
// http.Request: Host is its own field, and net/http's server takes
// Transfer-Encoding out too.
func skipHeader(k []byte) bool {
	return string(k) == "Host" || string(k) == "Transfer-Encoding"
}

// method is m without an allocation for the common ones.
func method(m []byte) string {
	switch string(m) {
	case http.MethodPost:
		return http.MethodPost
	case http.MethodGet:
		return http.MethodGet
	case http.MethodOptions:
		return http.MethodOptions
	}
	return string(m)
}

// commonHeaders are header names a request carries often, kept as one
// string each rather than a new one a request.
var commonHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Encoding", "Authorization", "Api-Key", "Connection", "Content-Length",
		"Content-Type", "Origin", "User-Agent", "X-Forwarded-For", "Access-Control-Request-Method",
		"Access-Control-Request-Headers", "Host", "Transfer-Encoding"} {
		m[k] = k
	}
	return m
}()

func headerKey(k []byte) string {
	if s, ok := commonHeaders[string(k)]; ok {
		return s
	}
	return http.CanonicalHeaderKey(string(k))
}

// fastBody is a request's body as the handler reads it: fasthttp's
// stream, which tells the connection's goroutine when it has been read
// whole (then it may watch the connection).
type fastBody struct {
	r    io.Reader
	left int64 // bytes to come; -1: chunked, until EOF
	w    *fastWriter
	done bool
	err  error // the read's error, once it failed
}

func (b *fastBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	if b.left >= 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	if len(p) == 0 && b.left == 0 {
		b.finish()
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
		if b.left == 0 && err == nil {
			err = io.EOF
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		b.finish()
	case err != nil:
		// Not read whole: the server drains or closes the connection,
		// under the body's deadline; nothing is watched.
		b.err = err
	}
	return n, err
}

func (b *fastBody) finish() {
	if !b.done {
		b.done = true
		b.w.bodyRead()
	}
}

func (b *fastBody) Close() error { return nil }

// The events the request's goroutine sends the connection's.
const (
	evBodyRead = iota + 1 // the body is read: the connection may be watched
	evDone                // the answer is whole in ctx.Response
	evFlushed             // the answer streams from w.stream
	evAborted             // no answer: close the connection
	evWatch               // (the connection's own) watchAfter passed
)

// watchAfter is how long after a request's body is read its connection
// is first watched for the client going away: most answers come sooner,
// and are spared the watch's system calls.
const watchAfter = 10 * time.Millisecond

var watchTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// errAnswerSent is a write after the answer was handed over whole.
var errAnswerSent = errors.New("gateway: write after the answer was sent")

// fastWriter is the http.ResponseWriter (and http.ResponseController's
// Flush and SetReadDeadline) of a request served by NewFastServer. While
// the handler runs inline (on the connection's goroutine) the answer is
// written into ctx.Response and a flush does nothing: it is sent whole
// when the handler returns. Once the rest of the work is detached (Detach)
// and runs on a worker, until the answer is handed to the connection's
// goroutine (handOff), it is written into ctx.Response; a flush before the
// answer is whole hands it over as a stream (a pipe that fasthttp writes
// chunked, flushing each chunk), and a flush once a body of the length its
// Content-Length said is written hands it over whole, so that it is sent
// while the handler finishes its bookkeeping.
type fastWriter struct {
	fctx *fasthttp.RequestCtx // not touched once the answer is handed over
	conn net.Conn
	h    http.Header
	// rc is the request's context.
	rc reqCtx

	req *http.Request

	// inline: the handler runs on the connection's goroutine, which sends
	// ctx.Response when it returns; rest is what it detached to run on a
	// worker (Detach), aborted says it panicked.
	inline  bool
	rest    func()
	aborted bool
	// The watch while inline: a goroutine from watchAfter after the body
	// is read (watchInline) until stopWatch.
	watchTimer *time.Timer
	watchWG    sync.WaitGroup
	stopW      atomic.Bool

	// Once detached: the events to the connection's goroutine (made
	// then), and the state it watches by.
	ev       chan int
	sent     atomic.Bool // the answer is handed over
	watching atomic.Bool // the connection's goroutine watches the connection
	readDone bool

	wroteHeader bool
	length      int64 // the Content-Length the handler set, -1 none
	written     int64
	stream      *fastStream // once streaming
	whole       bool        // handed over whole
}

func newFastWriter(ctx *fasthttp.RequestCtx) *fastWriter {
	return &fastWriter{fctx: ctx, conn: ctx.Conn(), h: make(http.Header), length: -1, inline: true}
}

// cancel cancels the request's context.
func (w *fastWriter) cancel() { w.rc.cancel() }

func (w *fastWriter) Header() http.Header { return w.h }

func (w *fastWriter) WriteHeader(code int) {
	if w.wroteHeader || w.sent.Load() {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	w.wroteHeader = true
	resp := &w.fctx.Response
	resp.SetStatusCode(code)
	for k, vs := range w.h {
		if k == "Content-Length" {
			if n, err := strconv.ParseInt(vs[0], 10, 64); err == nil && n >= 0 {
				w.length = n
			}
			continue // fasthttp frames the body itself
		}
		for _, v := range vs {
			resp.Header.Add(k, v)
		}
	}
}

// AddHeader adds a header field of the answer, as bytes, replacing any
// of its name set through Header: a replica's answer's head goes into
// fasthttp's response with no http.Header between (Gateway.writeHead).
// Before WriteHeader only.
func (w *fastWriter) AddHeader(k, v []byte) {
	if w.wroteHeader || w.sent.Load() {
		return
	}
	delete(w.h, string(k))
	if string(k) == "Content-Length" {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n >= 0 {
			w.length = n
		}
		return // fasthttp frames the body itself
	}
	w.fctx.Response.Header.AddBytesKV(k, v)
}

// SetHeader sets a header field of the answer, replacing any of its name
// set before (through Header too). Before WriteHeader only.
func (w *fastWriter) SetHeader(k, v string) {
	if w.wroteHeader || w.sent.Load() {
		return
	}
	delete(w.h, k)
	w.fctx.Response.Header.Set(k, v)
}

func (w *fastWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.length >= 0 && w.written+int64(len(p)) > w.length:
		// As net/http's: no more than the Content-Length said.
		return 0, http.ErrContentLength
	case w.inline:
	case w.stream != nil:
		n, err := w.stream.pw.Write(p)
		w.written += int64(n)
		return n, err
	case w.whole:
		return 0, errAnswerSent
	}
	w.fctx.Response.AppendBody(p)
	w.written += int64(len(p))
	return len(p), nil
}

// FlushError is http.ResponseController's Flush: the answer is handed
// over, whole when its Content-Length is written, else as a stream of
// what comes next.
func (w *fastWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.inline:
		// Sent whole when the handler returns.
		return nil
	case w.stream != nil:
		return w.stream.err()
	case w.whole:
		return nil
	case w.length >= 0 && w.written == w.length:
		w.whole = true
		w.handOff(evDone)
		return nil
	}
	// The rest streams, after what was written so far, chunked.
	resp := &w.fctx.Response
	st := &fastStream{w: w, pre: append([]byte(nil), resp.Body()...)}
	st.pr, st.pw = io.Pipe()
	resp.ResetBody()
	w.stream = st
	w.handOff(evFlushed)
	return nil
}

// Flush is http.Flusher's.
func (w *fastWriter) Flush() { _ = w.FlushError() }

// SetReadDeadline is http.ResponseController's: the deadline of the
// request's body (ignored once the answer is handed over: the connection
// may be reading its next request).
func (w *fastWriter) SetReadDeadline(t time.Time) error {
	if w.sent.Load() {
		return nil
	}
	return w.conn.SetReadDeadline(t)
}

// Detach is how a handler that is to stream its answer runs the rest of
// its work on another goroutine than its connection's (which must be free
// to write the answer as it comes): it returns at once when Detach says
// true, and rest runs once it has (its answer sent when rest returns, or
// as it flushes). Only before anything is written.
func (w *fastWriter) Detach(rest func()) bool {
	if !w.inline || w.wroteHeader || w.rest != nil {
		return false
	}
	w.rest = rest
	return true
}

// bodyRead is the end of the body: the connection may be watched.
func (w *fastWriter) bodyRead() {
	if w.readDone {
		return
	}
	w.readDone = true
	if w.inline {
		w.watchWG.Add(1)
		lc, ok := w.conn.(*lingerConn)
		switch {
		case !ok:
			w.watchTimer = time.AfterFunc(watchAfter, w.watchInline)
		case lc.watch == nil:
			lc.watched.Store(w)
			lc.watch = time.AfterFunc(watchAfter, lc.watchInline)
			w.watchTimer = lc.watch
		default:
			// The request before stopped it, or waited for its run to end
			// (stopWatch).
			lc.watched.Store(w)
			lc.watch.Reset(watchAfter)
			w.watchTimer = lc.watch
		}
		return
	}
	w.ev <- evBodyRead
}

// watchInline watches the connection while the handler runs inline.
func (w *fastWriter) watchInline() {
	defer w.watchWG.Done()
	if !w.stopW.Load() && clientGone(w.conn, &w.stopW) {
		w.cancel()
	}
}

// stopWatch ends watchInline, if it runs, and clears the deadline that
// woke it (fasthttp sets its own before it reads again).
func (w *fastWriter) stopWatch() {
	if w.watchTimer == nil {
		return
	}
	w.stopW.Store(true)
	if lc, ok := w.conn.(*lingerConn); ok {
		// The connection's timer no longer holds this request between
		// requests.
		defer lc.watched.CompareAndSwap(w, nil)
	}
	if w.watchTimer.Stop() {
		w.watchWG.Done() // it never ran
		return
	}
	_ = w.conn.SetReadDeadline(aLongTimeAgo)
	w.watchWG.Wait()
	_ = w.conn.SetReadDeadline(time.Time{})
}

// handOff gives the answer to the connection's goroutine, waking it if it
// is watching the connection.
func (w *fastWriter) handOff(ev int) {
	w.sent.Store(true)
	if w.watching.Load() {
		_ = w.conn.SetReadDeadline(aLongTimeAgo)
	}
	w.ev <- ev
}

var aLongTimeAgo = time.Unix(1, 0)

// end is the handler's return: the answer, if not yet handed over, is.
func (w *fastWriter) end() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case w.stream != nil:
		_ = w.stream.pw.Close()
	case !w.whole:
		w.handOff(evDone)
	}
}

// abort ends the answer without completing it: a stream is cut (fasthttp
// closes the connection when its body fails), an answer not handed over
// is never sent.
func (w *fastWriter) abort() {
	switch {
	case w.stream != nil:
		_ = w.stream.pw.CloseWithError(http.ErrAbortHandler)
	case !w.sent.Load():
		w.handOff(evAborted)
	}
}

// fastStream is a streamed answer as fasthttp reads it: what was written
// before the flush, then what the handler writes into the pipe. fasthttp
// closes it when the answer is written or its write failed (the client
// went away): the request's context is cancelled then, and the handler's
// next write fails.
type fastStream struct {
	w      *fastWriter
	pre    []byte
	pr     *io.PipeReader
	pw     *io.PipeWriter
	mu     sync.Mutex
	closed bool
}

func (s *fastStream) Read(p []byte) (int, error) {
	if len(s.pre) > 0 {
		n := copy(p, s.pre)
		s.pre = s.pre[n:]
		return n, nil
	}
	return s.pr.Read(p)
}

// Close is fasthttp's, once it is done with the stream.
func (s *fastStream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	_ = s.pr.CloseWithError(errClientGone)
	s.w.cancel()
	return nil
}

func (s *fastStream) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClientGone
	}
	return nil
}

// errClientGone is a write to a streamed answer fasthttp stopped sending.
var errClientGone = errors.New("gateway: the client connection is gone")

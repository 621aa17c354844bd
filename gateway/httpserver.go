package gateway

import (
	"log/slog"
	"net/http"
	"time"
)

// The settings of the server NewServer returns.
const (
	// ServerReadHeaderTimeout bounds reading a request's line and
	// headers.
	ServerReadHeaderTimeout = 10 * time.Second
	// ServerBodyReadTimeout bounds reading a request's body, from the
	// end of its headers, on every route but the OpenAI ones (which
	// take Options.BodyReadTimeout, the setting body_read_timeout): a body
	// trickled in is cut, and its connection closed. The answer is not
	// bounded (a completion streams for as long as the model writes).
	ServerBodyReadTimeout = 30 * time.Second
	// ServerIdleTimeout bounds the wait for the next request on a
	// kept-alive connection.
	ServerIdleTimeout = 2 * time.Minute
	// ServerMaxHeaderBytes bounds a request's line and headers (431
	// past them). NewFastServer's server holds a read buffer of this
	// size for every open connection (fasthttp's ReadBufferSize, which
	// bounds the headers), so it is 32 KiB: room for any API client's
	// headers, a long bearer token among them, and 320 MiB for 10,000
	// connections.
	ServerMaxHeaderBytes = 32 << 10
)

// NewServer returns the net/http server `llmgw gateway` serves h with,
// on every listener (HTTP/1.1; HTTP/2 too once given a TLSConfig and
// served with ServeTLS). What net/http's server has to say (a handler's
// panic, a TLS handshake that failed, an Accept error it retries) goes to
// log at warn; log may be nil (then net/http's default, the log package).
//
// Every request's body must arrive within ServerBodyReadTimeout. An
// HTTP/1.1 request sent with Transfer-Encoding gets its answer and a
// closed connection: a request with both Content-Length and
// Transfer-Encoding must not keep its connection (RFC 9112 §6.3, request
// smuggling), and net/http drops the Content-Length of such a request
// before the handler sees it, so every chunked request is treated so (API
// clients send a Content-Length).
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	srv := &http.Server{
		Handler:           guard(h, ServerBodyReadTimeout),
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    ServerMaxHeaderBytes,
	}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	return srv
}

// guard is what NewServer's server does before h: the body's deadline
// (bodyTimeout from now), and Connection: close for a request with
// Transfer-Encoding.
func guard(h http.Handler, bodyTimeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			// net/http sets no deadline on the body (ReadTimeout would
			// bound the whole request and cancel a streaming answer's
			// context); a handler that reads the body past this sets its
			// own, and clears it once the body is read.
			setReadDeadline(w, time.Now().Add(bodyTimeout))
		}
		if len(r.TransferEncoding) > 0 && r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// setReadDeadline is http.ResponseController's SetReadDeadline (the same
// lookup, through Unwrap), without the controller, which the compiler
// puts on the heap in guard: one allocation a request saved. A writer
// that cannot (a test's recorder) is left alone.
func setReadDeadline(w http.ResponseWriter, t time.Time) {
	for {
		switch v := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			_ = v.SetReadDeadline(t)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return
		}
	}
}

package gateway

import (
	"log/slog"
	"net/http"
	"time"
)

// The settings of the server NewServer returns.
const (
	// ServerReadHeaderTimeout bounds reading a request's line and
	// headers; the body and the answer are not bounded (a completion
	// streams for as long as the model writes).
	ServerReadHeaderTimeout = 10 * time.Second
	// ServerIdleTimeout bounds the wait for the next request on a
	// kept-alive connection.
	ServerIdleTimeout = 2 * time.Minute
	// ServerMaxHeaderBytes bounds a request's line and headers (431
	// past them).
	ServerMaxHeaderBytes = http.DefaultMaxHeaderBytes
)

// NewServer returns the net/http server `llmgw gateway` serves h with,
// on every listener (HTTP/1.1; HTTP/2 too once given a TLSConfig and
// served with ServeTLS). What net/http's server has to say (a handler's
// panic, a TLS handshake that failed, an Accept error it retries) goes to
// log at warn; log may be nil (then net/http's default, the log package).
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    ServerMaxHeaderBytes,
	}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	return srv
}

package controller

import (
	"net/http"
	"time"
)

// Timeouts of the controller's HTTP server (NewServer). The API has no
// streaming answer (no watch, no server-sent events): every answer is
// written whole within WriteTimeout. An endpoint that streams must clear
// its write deadline (http.ResponseController.SetWriteDeadline).
const (
	// ReadHeaderTimeout bounds a request's headers: a client that sends
	// them a byte at a time is cut off.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds a whole request, its body included: the largest
	// (a 512 KiB plan) needs about 18 kB/s to arrive in time, and a body
	// sent a byte every few seconds holds a connection no longer.
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds a request's handling and answer from the end of
	// its headers: the longest handler, a label write, waits up to 25 s
	// for Nomad's servers and the view, after a Nomad call of up to 30 s.
	WriteTimeout = 2 * time.Minute
	// IdleTimeout closes a kept-alive connection with no request for this
	// long.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
)

// NewServer is the controller's HTTP server for h (Handler), with the
// timeouts above.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

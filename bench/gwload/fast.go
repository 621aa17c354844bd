package main

import (
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// serveFastRelay serves relay-fasthttp: the same relay as relay-nethttp,
// on fasthttp's server and its HostClient instead of net/http's server and
// the gateway's transport: the least a proxy on fasthttp does, the
// reference for the gateway on a plaintext listener, which fasthttp's
// server serves (gateway.NewFastServer; docs/perf.md, "Gateway cost per
// request against nginx (issue 36)").
func serveFastRelay(upstream string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hc := &fasthttp.HostClient{Addr: upstream, MaxConns: 1024, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Request.SetHost(upstream)
			if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error(err.Error(), fasthttp.StatusBadGateway)
			}
		},
		ReadTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Shutdown() }, nil
}

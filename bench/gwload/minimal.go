package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/llmgw/gateway"
)

// serveMinimal serves a proxy that does the least an HTTP/1.1 proxy in Go
// does, as a reference beside the gateway: a goroutine per client
// connection with a replica connection of its own, each request parsed by
// http.ReadRequest and sent on as read (its header as it came, Host the
// replica's), the answer relayed as it came, found by its Content-Length.
// No routing, no pool, no limits, no metrics: what is left of a proxy hop
// in Go on this machine is the runtime, the parse and the sockets.
// It answers only what fake-engine answers here (a Content-Length body).
func serveMinimal(upstream string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go minimalConn(c, upstream)
		}
	}()
	return ln.Addr().String(), func() { _ = ln.Close() }, nil
}

func minimalConn(c net.Conn, upstream string) {
	defer func() { _ = c.Close() }()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer func() { _ = u.Close() }()
	cbr, ubr := bufio.NewReaderSize(c, 4<<10), bufio.NewReaderSize(u, 4<<10)
	ubw := bufio.NewWriterSize(u, 4<<10)
	var answer []byte
	for {
		r, err := http.ReadRequest(cbr)
		if err != nil {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		_, _ = ubw.WriteString(r.Method + " " + r.RequestURI + " HTTP/1.1\r\nHost: " + upstream + "\r\n")
		for k, vv := range r.Header {
			for _, v := range vv {
				_, _ = ubw.WriteString(k + ": " + v + "\r\n")
			}
		}
		_, _ = ubw.WriteString("\r\n")
		_, _ = ubw.Write(body)
		if ubw.Flush() != nil {
			return
		}
		if answer, err = readAnswer(ubr, answer[:0]); err != nil {
			return
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

// readAnswer appends to buf one response as it came: its head, and the
// body its Content-Length gives.
func readAnswer(br *bufio.Reader, buf []byte) ([]byte, error) {
	n := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		buf = append(buf, line...)
		if len(line) <= 2 {
			break
		}
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return nil, err
			}
		}
	}
	head := len(buf)
	buf = append(buf, make([]byte, n)...)
	_, err := io.ReadFull(br, buf[head:])
	return buf, err
}

// relayHandler is the least a proxy on net/http's server does, as a
// reference between minimal-go and the gateway (relay-nethttp): the
// request's body read, sent on with the gateway's own upstream client
// (gateway.NewUpstream), the answer's headers copied and its body relayed.
// Served by gateway.NewServer (net/http's server, as the gateway serves a
// TLS listener), so what it spends beyond minimal-go is net/http's server;
// the gateway on a plaintext listener is served by fasthttp's
// (gateway.NewFastServer), as relay-fasthttp is.
func relayHandler(upstream string) http.Handler {
	up := gateway.NewUpstream(2*time.Second, 0)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod(r.Method)
		req.Header.SetRequestURI(r.URL.RequestURI())
		req.Header.SetHost(upstream)
		for k, vv := range r.Header {
			for _, v := range vv {
				req.Header.Add(k, v)
			}
		}
		req.SetBodyRaw(body)
		rb, _, err := up.Do(r.Context(), upstream, req, resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = rb.Close() }()
		h := w.Header()
		for k, v := range resp.Header.All() {
			switch string(k) {
			case "Connection", "Transfer-Encoding":
				continue
			}
			h.Add(string(k), string(v))
		}
		w.WriteHeader(resp.StatusCode())
		_, _ = io.Copy(w, rb)
	})
}

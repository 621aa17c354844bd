// Package faultproxy is a loopback TCP proxy for fault tests: it stalls,
// drops or passes the traffic between a process and the server it talks
// to (the controller and Nomad), without knowing the protocol.
package faultproxy

import (
	"net"
	"strings"
	"sync"
)

// Proxy is a loopback TCP proxy that can stall traffic (hold every byte
// until resumed), drop it (reset every connection and refuse new ones) or
// pass it. It works on the wire, below HTTP: the client's own timeouts and
// retries see what a hung or cut network does to them.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
	dropped bool
	conns   map[net.Conn]bool
}

// New starts a proxy on a free loopback port to target (host:port, or an
// http:// URL).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	return p, nil
}

// Close stops the proxy and resets every connection through it.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Set(false, true)
}

// URL is the proxy's address as an http:// URL.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.dropped {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies src to dst chunk by chunk, holding each chunk while stalled.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer func() {
		_ = src.Close()
		_ = dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled && !p.dropped {
				p.cond.Wait()
			}
			dropped := p.dropped
			p.mu.Unlock()
			if dropped {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a reset: close both sides
		}
	}
}

// Set switches the proxy: stalled holds traffic, dropped resets every
// connection and refuses new ones; neither passes everything.
func (p *Proxy) Set(stalled, dropped bool) {
	p.mu.Lock()
	p.stalled, p.dropped = stalled, dropped
	var conns []net.Conn
	if dropped {
		for c := range p.conns {
			conns = append(conns, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

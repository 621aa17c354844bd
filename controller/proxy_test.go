package controller

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/nomadfake"
)

// faultProxy is a loopback TCP proxy between a controller and Nomad (the
// fake) that can stall traffic (hold every byte until resumed), drop it
// (reset every connection and refuse new ones) or pass it. It works on the
// wire, below HTTP: the controller's own client, timeouts and retries see
// what a hung or cut network does to them.
type faultProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	stalled bool
	dropped bool
	conns   map[net.Conn]bool
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.set(false, true)
	})
	return p
}

func (p *faultProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *faultProxy) serve() {
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
func (p *faultProxy) pipe(src, dst net.Conn) {
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
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// set switches the proxy: stalled holds traffic, dropped resets every
// connection and refuses new ones; neither passes everything.
func (p *faultProxy) set(stalled, dropped bool) {
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

// A leader whose connection to Nomad hangs (every byte held by the proxy)
// steps down when its lock renewal times out, instead of waiting on it
// forever; the standby takes the lock once it lapses and acts; the old
// leader, its traffic released, writes no job: its lease ended. Then the
// proxy resets every connection: the old leader's blocking queries fail
// and, once the network is back, resume and catch up with Nomad.
func TestStalledLeaderStepsDownAndIsFenced(t *testing.T) {
	e := newEnv(t, sixNodes, alphaBeta, `headroom = 0`, nomadfake.WithAutoRun(true))
	px := newFaultProxy(t, e.fake.URL())
	a := e.startAt("ctl-a", px.URL(), &tap{})
	waitFor(t, "ctl-a to lead", func() (bool, string) { return e.lockHolder() == "ctl-a", e.lockHolder() })
	waitFor(t, "every replica placed", func() (bool, string) { return e.placedAll(alphaBetaSlots...) })
	b := e.start("ctl-b")
	waitFor(t, "ctl-b synced", func() (bool, string) { _, s := b.health(t); return s, "" })

	px.set(true, false) // every byte between ctl-a and Nomad is held
	waitFor(t, "ctl-a to step down on its renewal's deadline", func() (bool, string) { l, _ := a.health(t); return !l, "" })
	before := a.tap.writes()
	e.clock.Advance(3*testLockTTL + time.Second)
	e.fake.Tick()
	waitFor(t, "ctl-b to take the lock", func() (bool, string) { return e.lockHolder() == "ctl-b", e.lockHolder() })
	e.writeCatalog(strings.Replace(alphaBeta, "replicas = 3", "replicas = 4", 1))
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alpha-3 placed by ctl-b", func() (bool, string) { return e.placedAll(append(alphaBetaSlots, "alpha-3")...) })

	px.set(false, false) // ctl-a's held traffic goes through
	waitFor(t, "ctl-a to catch up with Nomad after the stall", func() (bool, string) { return e.caughtUp(a.Controller) })
	if n := a.tap.writes() - before; n != 0 {
		t.Errorf("ctl-a sent %d job writes after it stepped down", n)
	}
	if l, _ := a.health(t); l {
		t.Errorf("ctl-a leads again while ctl-b holds the lock")
	}
	for slot, jobs := range bySlot(e.liveJobs()) {
		if len(jobs) != 1 {
			t.Errorf("slot %s has jobs %v, want one", slot, jobIDs(jobs))
		}
	}

	px.set(false, true) // reset: every connection of ctl-a dies
	px.set(false, false)
	e.writeCatalog(strings.Replace(alphaBeta, "replicas = 3", "replicas = 5", 1))
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alpha-4 placed by ctl-b", func() (bool, string) { return e.placedAll(append(alphaBetaSlots, "alpha-3", "alpha-4")...) })
	waitFor(t, "ctl-a's watches to resume after the reset", func() (bool, string) { return e.caughtUp(a.Controller) })
}

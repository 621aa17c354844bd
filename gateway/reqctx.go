package gateway

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"
)

// reqCtx is the context of a request served by NewFastServer: cancelled
// when the client goes away, when a streamed answer's client stops
// reading, and when the request ends. It is what context.WithCancel
// would give, without its allocations, and with one thing more: the
// replica connection a request waits on is cut by the cancel itself
// (cutOnCancel), where context.AfterFunc would register a callback, a
// context and a map entry for every request.
//
// A context derived from it (context.WithTimeout, context.AfterFunc)
// registers through AfterFunc, which the context package finds on its
// own, so no goroutine watches it.
type reqCtx struct {
	mu   sync.Mutex
	done chan struct{} // made on the first Done
	err  error
	// conn is cut (its deadline set in the past) by cancel.
	conn net.Conn
	fns  []*func()
}

var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

func (c *reqCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *reqCtx) Value(any) any               { return nil }

func (c *reqCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			return closedDone
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *reqCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// cancel ends the context: context.Canceled from now on, its
// connection cut and its AfterFunc functions run, each in its own
// goroutine as context.AfterFunc runs them. Only the first call does.
func (c *reqCtx) cancel() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = context.Canceled
	if c.done != nil {
		close(c.done)
	}
	conn, fns := c.conn, c.fns
	c.conn, c.fns = nil, nil
	c.mu.Unlock()
	if conn != nil {
		_ = conn.SetDeadline(aLongTimeAgo)
	}
	for _, f := range fns {
		go (*f)()
	}
}

// AfterFunc is context.AfterFunc's hook for a context derived from this
// one: f runs once the context is cancelled, unless stop is called
// first (stop reports whether it was).
func (c *reqCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	p := &f
	c.fns = append(c.fns, p)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.fns, p)
		if i < 0 {
			return false
		}
		c.fns = slices.Delete(c.fns, i, i+1)
		return true
	}
}

// cutOnCancel makes cancel cut conn, the one connection a request waits
// on at a time; when the context is already cancelled it cuts conn now.
func (c *reqCtx) cutOnCancel(conn net.Conn) {
	c.mu.Lock()
	if c.err == nil {
		c.conn = conn
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	_ = conn.SetDeadline(aLongTimeAgo)
}

// keepOnCancel undoes cutOnCancel: it reports false when conn was cut
// (or was being cut), so it may be poisoned.
func (c *reqCtx) keepOnCancel(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == conn && c.err == nil {
		c.conn = nil
		return true
	}
	return false
}

// cancelCut is how a replica connection is cut when its request's
// context ends: through the request's reqCtx on the fasthttp server,
// through context.AfterFunc for any other context.
type cancelCut struct {
	rc   *reqCtx
	conn net.Conn
	stop func() bool
}

// cutWhenDone arranges for conn's deadline to be set in the past once
// ctx is done.
func cutWhenDone(ctx context.Context, conn net.Conn) cancelCut {
	if rc, ok := ctx.(*reqCtx); ok {
		rc.cutOnCancel(conn)
		return cancelCut{rc: rc, conn: conn}
	}
	return cancelCut{stop: context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })}
}

// release ends the arrangement: false when the cut has run (or is
// running), so the connection may be poisoned.
func (k cancelCut) release() bool {
	if k.rc != nil {
		return k.rc.keepOnCancel(k.conn)
	}
	return k.stop()
}

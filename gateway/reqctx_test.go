package gateway

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/wait"
)

// pipeConn is one end of a pipe, closed with the test; the other end
// writes a byte into it once.
func pipeConn(t *testing.T) net.Conn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	go func() { _, _ = b.Write([]byte{1}) }()
	return a
}

// cutDeadline reports whether c's deadline is in the past: a read fails
// at once with a timeout.
func cutDeadline(c net.Conn) bool {
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// reqCtx behaves as context.WithCancel's context: not done, then done
// with context.Canceled, Done closed whether it was asked for before or
// after.
func TestReqCtxIsACancelContext(t *testing.T) {
	var early, late reqCtx
	d := early.Done()
	if early.Err() != nil {
		t.Fatalf("Err before cancel: %v", early.Err())
	}
	select {
	case <-d:
		t.Fatal("Done closed before cancel")
	default:
	}
	early.cancel()
	early.cancel() // a second cancel does nothing
	late.cancel()
	for name, c := range map[string]*reqCtx{"Done asked before": &early, "Done asked after": &late} {
		select {
		case <-c.Done():
		default:
			t.Errorf("%s: Done not closed after cancel", name)
		}
		if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), context.Canceled) {
			t.Errorf("%s: Err %v, Cause %v; want context.Canceled", name, c.Err(), context.Cause(c))
		}
	}
}

// A context derived from a reqCtx (context.WithTimeout, as the adapter
// reads use) ends with it, and one whose own end came first is let go.
func TestReqCtxDerivedContexts(t *testing.T) {
	var c reqCtx
	child, stop := context.WithTimeout(&c, time.Hour)
	defer stop()
	other, stopOther := context.WithCancel(&c)
	stopOther()
	if len(c.fns) != 1 {
		t.Fatalf("%d functions registered, want 1 (the cancelled child's let go)", len(c.fns))
	}
	c.cancel()
	select {
	case <-child.Done():
	case <-time.After(waitFor):
		t.Fatalf("the derived context was not done %s after its parent's cancel", waitFor)
	}
	if !errors.Is(child.Err(), context.Canceled) || !errors.Is(other.Err(), context.Canceled) {
		t.Fatalf("children's errors %v, %v; want context.Canceled", child.Err(), other.Err())
	}
	// Derived after the cancel: done at once.
	late, stopLate := context.WithCancel(&c)
	defer stopLate()
	select {
	case <-late.Done():
	case <-time.After(waitFor):
		t.Fatalf("a context derived after the cancel was not done within %s", waitFor)
	}
}

// The replica connection a request waits on is cut by the cancel; one let
// go before it is not, and letting go of a cut one reports it.
func TestReqCtxCutsItsConnection(t *testing.T) {
	var c reqCtx
	kept := pipeConn(t)
	k := cutWhenDone(&c, kept)
	if !k.release() {
		t.Fatal("release before the cancel reported the connection cut")
	}
	cut := pipeConn(t)
	k = cutWhenDone(&c, cut)
	c.cancel()
	if k.release() {
		t.Fatal("release after the cancel reported the connection kept: it may be poisoned")
	}
	if !cutDeadline(cut) {
		t.Fatal("the cancel did not cut the connection it waited on")
	}
	if _, err := kept.Read(make([]byte, 1)); err != nil {
		t.Fatalf("the connection let go before the cancel was cut: %v", err)
	}
	// After the cancel, a new wait is cut at once.
	after := pipeConn(t)
	if cutWhenDone(&c, after).release() {
		t.Fatal("a connection given after the cancel was reported kept")
	}
	if !cutDeadline(after) {
		t.Fatal("a connection given after the cancel was not cut")
	}
}

// Any other context cuts through context.AfterFunc, as before.
func TestCutWhenDoneOtherContexts(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	conn := pipeConn(t)
	k := cutWhenDone(ctx, conn)
	cancel()
	wait.Until(t, "the connection cut after the cancel", func() bool { return cutDeadline(conn) })
	if k.release() {
		t.Fatal("release after the cut reported the connection kept")
	}
}

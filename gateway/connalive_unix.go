//go:build unix

package gateway

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
)

// connAlive reports whether an idle connection can still carry a
// request: the replica has neither closed it nor sent anything unasked.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return rawAlive(rc)
}

// rawAlive is connAlive on the connection's raw form, which the upstream
// keeps from the dial on (upConn.raw): nil is a connection that cannot be
// peeked at. It peeks, one system call; Go's sockets are non-blocking, so
// a quiet connection answers EAGAIN at once.
func rawAlive(rc syscall.RawConn) bool {
	if rc == nil {
		return true
	}
	alive := false
	var b [1]byte
	err := rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		// Nothing to read: open and quiet. EOF or any byte: closed, or
		// out of step with us.
		alive = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && alive
}

// clientGone watches a client's connection, once its request is read,
// until the client closes it (or it fails: true), it sends more (a
// pipelined request: false, nothing more can be told), stop is set, or a
// read deadline passes (false; handOff sets one in the past to end the
// watch). It peeks, never reads: the server reads what comes next. Go's
// poller wakes it when the connection becomes readable.
func clientGone(c net.Conn, stop *atomic.Bool) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		if stop.Load() {
			return true
		}
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		switch {
		case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK) || errors.Is(rerr, syscall.EINTR):
			return false // quiet: wait until it is readable
		case rerr == nil && n > 0:
			return true // the next request
		}
		gone = true // EOF, or a reset
		return true
	})
	return gone
}

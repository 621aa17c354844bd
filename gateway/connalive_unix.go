//go:build unix

package gateway

import (
	"errors"
	"net"
	"syscall"
)

// connAlive reports whether an idle connection can still carry a
// request: the replica has neither closed it nor sent anything unasked.
// It peeks, one system call; Go's sockets are non-blocking, so a quiet
// connection answers EAGAIN at once.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		// Nothing to read: open and quiet. EOF or any byte: closed, or
		// out of step with us.
		alive = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && alive
}

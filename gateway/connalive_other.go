//go:build !unix

package gateway

import (
	"net"
	"sync/atomic"
	"syscall"
)

// connAlive cannot peek here; a request on a connection the replica has
// closed is sent again on a fresh one (upstreamClient.Do).
func connAlive(net.Conn) bool { return true }

func rawAlive(syscall.RawConn) bool { return true }

// clientGone cannot peek here: a client that goes away is noticed when a
// write to it fails.
func clientGone(net.Conn, *atomic.Bool) bool { return false }

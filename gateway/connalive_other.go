//go:build !unix

package gateway

import "net"

// connAlive cannot peek here; a request on a connection the replica has
// closed is sent again on a fresh one (upstreamTransport.RoundTrip).
func connAlive(net.Conn) bool { return true }

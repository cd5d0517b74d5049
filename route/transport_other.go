//go:build !unix

package route

import "net"

// idleOpen cannot peek at a socket here: a connection the provider
// closed is found when a request fails on it.
func idleOpen(net.Conn) bool { return true }

func newPeekConn(c net.Conn) net.Conn { return c }

//go:build unix

package route

import (
	"crypto/tls"
	"net"
	"syscall"
)

// idleOpen says whether an idle connection can carry a request: open at
// both ends, and nothing arrived on it since its last answer. A provider
// that closed it (a FIN or a reset), or sent anything unasked (a 408, a
// TLS close_notify), makes it unusable. One peek at the socket, which
// never blocks.
func idleOpen(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	pc, ok := c.(*peekConn)
	if !ok {
		return true
	}
	pc.peeked, pc.perr = 0, nil
	if err := pc.raw.Read(pc.peekFn); err != nil {
		return false
	}
	return pc.peeked < 0 && (pc.perr == syscall.EAGAIN || pc.perr == syscall.EWOULDBLOCK)
}

// peekConn is a provider connection that can be peeked at without
// allocating.
type peekConn struct {
	net.Conn
	raw    syscall.RawConn
	peekFn func(fd uintptr) bool
	peeked int
	perr   error
	one    [1]byte
}

func newPeekConn(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	pc := &peekConn{Conn: c, raw: raw}
	pc.peekFn = pc.peek
	return pc
}

func (pc *peekConn) peek(fd uintptr) bool {
	n, _, err := syscall.Recvfrom(int(fd), pc.one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err != nil {
		n = -1
	}
	pc.peeked, pc.perr = n, err
	return true
}

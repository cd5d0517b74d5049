package gossip

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// transport wraps memberlist's network transport to count the bytes gossip
// costs and, for fault-injection tests, to cut this node off from chosen
// addresses. Packets and stream connections are counted in both
// directions.
type transport struct {
	inner   *memberlist.NetTransport
	sent    atomic.Uint64
	recv    atomic.Uint64
	packets chan *memberlist.Packet
	streams chan net.Conn
	stop    chan struct{} // closed first on shutdown: stop delivering
	drained chan struct{} // closed once the inner transport has stopped
	wg      sync.WaitGroup
	// blocked, when not nil, says whether traffic to or from addr is cut.
	blocked atomic.Pointer[func(addr string) bool]
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

func newTransport(inner *memberlist.NetTransport) *transport {
	t := &transport{
		inner:   inner,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		stop:    make(chan struct{}),
		drained: make(chan struct{}),
	}
	t.wg.Add(2)
	go t.forwardPackets()
	go t.forwardStreams()
	return t
}

func (t *transport) cut(addr string) bool {
	f := t.blocked.Load()
	return f != nil && (*f)(addr)
}

// The inner transport hands packets and connections over with blocking
// sends, and its Shutdown waits for its listeners: so after stop the
// forwarders keep draining it, discarding, until it has stopped.

func (t *transport) forwardPackets() {
	defer t.wg.Done()
	for {
		select {
		case p := <-t.inner.PacketCh():
			if t.cut(p.From.String()) {
				continue
			}
			t.recv.Add(uint64(len(p.Buf)))
			select {
			case t.packets <- p:
			case <-t.stop:
			}
		case <-t.drained:
			return
		}
	}
}

func (t *transport) forwardStreams() {
	defer t.wg.Done()
	for {
		select {
		case c := <-t.inner.StreamCh():
			if t.cut(c.RemoteAddr().String()) {
				c.Close()
				continue
			}
			select {
			case t.streams <- &countedConn{Conn: c, t: t}:
			case <-t.stop:
				c.Close()
			}
		case <-t.drained:
			return
		}
	}
}

func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.cut(a.Addr) {
		return time.Now(), nil // lost on the wire
	}
	t.sent.Add(uint64(len(b)))
	return t.inner.WriteToAddress(b, a)
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.cut(a.Addr) {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errCut}
	}
	c, err := t.inner.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, t: t}, nil
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streams }

func (t *transport) Shutdown() error {
	close(t.stop)
	err := t.inner.Shutdown()
	close(t.drained)
	t.wg.Wait()
	return err
}

type cutError struct{}

func (cutError) Error() string   { return "gossip: address cut off (fault injection)" }
func (cutError) Timeout() bool   { return true }
func (cutError) Temporary() bool { return true }

var errCut = cutError{}

// countedConn counts a stream connection's bytes into its transport.
type countedConn struct {
	net.Conn
	t *transport
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.t.recv.Add(uint64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.t.sent.Add(uint64(n))
	return n, err
}

package consensus

import (
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// TLSConfig is both ends of mutual TLS between voters: Server accepts
// peers (it must require and verify their certificates), Client dials
// them.
type TLSConfig struct {
	Server, Client *tls.Config
}

// tlsStreamLayer is a raft.StreamLayer over mutual TLS. Nothing passes
// before the handshake, so a peer without a valid certificate never gets
// a byte of the log, nor sends one. An accepted connection's handshake
// runs on its first read, in Raft's goroutine for that connection, so a
// slow peer holds up only itself.
type tlsStreamLayer struct {
	ln             net.Listener
	advertise      net.Addr
	server, client *tls.Config
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

func newTLSStreamLayer(bind string, advertise net.Addr, tc *TLSConfig) (*tlsStreamLayer, error) {
	if tc.Server == nil || tc.Client == nil {
		return nil, errors.New("TLS needs both a server and a client configuration")
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if a, ok := advertise.(*net.TCPAddr); ok && a.IP.IsUnspecified() {
		ln.Close()
		return nil, errors.New("local bind address is not advertisable")
	}
	return &tlsStreamLayer{ln: ln, advertise: advertise, server: tc.Server, client: tc.Client}, nil
}

// Accept waits for a connection; its handshake runs on first use.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

func (l *tlsStreamLayer) Close() error   { return l.ln.Close() }
func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

// Dial connects to a peer and completes the handshake within timeout.
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(address), l.client)
}

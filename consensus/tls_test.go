package consensus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// testCA mints node certificates for mutual TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// config returns both ends of mutual TLS for a node certified by ca.
func (ca *testCA) config(t *testing.T) *TLSConfig {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"llmesh"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return &TLSConfig{
		Server: &tls.Config{Certificates: []tls.Certificate{c}, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13},
		Client: &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: ca.pool, ServerName: "llmesh", MinVersion: tls.VersionTLS13},
	}
}

// Three voters replicate over mutual TLS on loopback; a peer with a
// certificate of another CA, or none, gets no answer from any of them.
func TestRaftOverMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	var servers []*Server
	var members []raft.Server
	for i := range 3 {
		s, err := NewServer(ServerConfig{
			ID: string(rune('a' + i)), Bind: "127.0.0.1:0", InMemory: true, Timings: FastTimings, TLS: ca.config(t),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ApplyTimeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown() })
		servers = append(servers, s)
		members = append(members, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(s.cfg.ID), Address: raft.ServerAddress(s.Addr())})
	}
	if err := servers[0].bootstrap(members); err != nil {
		t.Fatal(err)
	}
	var leader *Server
	wait.For(t, 10*time.Second, "a leader over TLS", func() bool {
		for _, s := range servers {
			if s.IsLeader() {
				leader = s
				return true
			}
		}
		return false
	})
	body, _ := json.Marshal(Tenant{Name: "acme"})
	if _, err := leader.Apply(context.Background(), Command{ID: "t1", Type: CmdSeedTenant, Body: body}); err != nil {
		t.Fatalf("apply over TLS: %v", err)
	}

	// Intruders: a certificate of another CA, and no TLS at all.
	rogue, err := newTLSStreamLayer("127.0.0.1:0", nil, newTestCA(t).config(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	rt := raft.NewNetworkTransport(rogue, 1, time.Second, io.Discard)
	defer rt.Close()
	// One that trusts anything: the leader still refuses its certificate.
	careless := newTestCA(t).config(t)
	careless.Client.InsecureSkipVerify = true
	rogue2, err := newTLSStreamLayer("127.0.0.1:0", nil, careless)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue2.Close()
	rt2 := raft.NewNetworkTransport(rogue2, 1, time.Second, io.Discard)
	defer rt2.Close()
	plain, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for name, tr := range map[string]raft.Transport{"another CA's certificate": rt, "another CA's certificate, trusting anything": rt2, "no TLS": plain} {
		var resp raft.AppendEntriesResponse
		err := tr.AppendEntries("x", raft.ServerAddress(leader.Addr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ID: []byte("x"), Addr: []byte("x")}, Term: 1 << 20,
		}, &resp)
		if err == nil {
			t.Fatalf("a peer with %s was answered by the leader: %+v", name, resp)
		}
		t.Logf("a peer with %s: %v", name, err)
	}
	if !leader.IsLeader() {
		t.Fatal("an intruder's huge term unseated the leader")
	}
}

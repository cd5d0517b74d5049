package pki

import (
	"crypto/tls"
	"crypto/x509"
	"io/fs"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// A node certificate of the CA loads, and the pair it gives completes a
// mutual-TLS handshake with another node's; a certificate of another CA
// or a key of another certificate is refused at load.
func TestNodeCertificatesOfTheCA(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewCA(now)
	a, err := NewNodeCert(ca, "eu-1", []net.IP{net.ParseIP("10.0.0.5")}, now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewNodeCert(ca, "us-1", nil, now)
	stranger, _ := NewNodeCert(other, "x", nil, now)
	files := map[string][]byte{"ca": ca.Cert, "a.crt": a.Cert, "a.key": a.Key, "b.crt": b.Cert, "b.key": b.Key,
		"s.crt": stranger.Cert, "s.key": stranger.Key}
	read := func(name string) ([]byte, error) {
		if f, ok := files[name]; ok {
			return f, nil
		}
		return nil, fs.ErrNotExist
	}
	ma, err := Load(Files{CAFile: "ca", CertFile: "a.crt", KeyFile: "a.key"}, read)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(ma.Server.Certificates[0].Certificate[0])
	if !slices.Contains(leaf.DNSNames, "eu-1.llmesh") || !slices.Contains(leaf.DNSNames, MeshServerName) || len(leaf.IPAddresses) != 1 {
		t.Fatalf("names %v %v", leaf.DNSNames, leaf.IPAddresses)
	}
	mb, err := Load(Files{CAFile: "ca", CertFile: "b.crt", KeyFile: "b.key"}, read)
	if err != nil {
		t.Fatal(err)
	}
	c, s := net.Pipe()
	errs := make(chan error, 1)
	go func() { errs <- tls.Server(s, ma.Server).Handshake() }()
	if err := tls.Client(c, mb.Client).Handshake(); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("server: %v", err)
	}
	for _, tc := range []struct {
		f    Files
		want string
	}{
		{Files{CAFile: "ca", CertFile: "s.crt", KeyFile: "s.key"}, "cert_file is not a node certificate of this CA"},
		{Files{CAFile: "ca", CertFile: "a.crt", KeyFile: "b.key"}, "cert_file and key_file: "},
		{Files{CAFile: "ca", CertFile: "a.crt"}, "key_file is required"},
	} {
		if _, err := Load(tc.f, read); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.f, err, tc.want)
		}
	}
	if _, err := NewNodeCert(PEMPair{Cert: ca.Cert, Key: other.Key}, "x", nil, now); err == nil {
		t.Fatal("a CA with another CA's key signed a certificate")
	}
}

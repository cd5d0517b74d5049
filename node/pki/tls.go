// Package pki mints and loads the certificates of a mesh: a development CA,
// node certificates it signs, and the mutual-TLS settings a node uses for
// connections between nodes. It imports nothing of llmesh.
package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// MeshServerName is the name every node certificate carries and every node
// checks when it dials a peer: a node proves it belongs to the mesh (its
// certificate is signed by the mesh's CA), not that it has some address,
// so nodes can move and sit behind NAT.
const MeshServerName = "llmesh"

// MeshTLS holds a node's TLS settings for connections between nodes: the
// same certificate serves and dials, and both sides require the other's to
// be signed by the mesh's CA.
type MeshTLS struct {
	// Server accepts peers: it requires a client certificate of the CA.
	Server *tls.Config
	// Client dials peers: it checks their certificate names
	// MeshServerName and is signed by the CA.
	Client *tls.Config
}

// Files names the PEM files of a node's certificate, its key and the
// mesh's CA.
type Files struct {
	CAFile, CertFile, KeyFile string
}

// Load reads a node's certificate, key and CA from the files sec names
// through readFile, and checks the certificate is a node certificate of
// that CA. Its errors name the configuration keys (ca_file, cert_file,
// key_file).
func Load(sec Files, readFile func(string) ([]byte, error)) (*MeshTLS, error) {
	read := func(field, path string) ([]byte, error) {
		if path == "" {
			return nil, fmt.Errorf("%s is required", field)
		}
		b, err := readFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return b, nil
	}
	caPEM, err := read("ca_file", sec.CAFile)
	if err != nil {
		return nil, err
	}
	certPEM, err := read("cert_file", sec.CertFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := read("key_file", sec.KeyFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("ca_file %s holds no PEM certificate", sec.CAFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("cert_file and key_file: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("cert_file: %w", err)
	}
	// A certificate the peers would refuse fails here, at start, rather
	// than in every handshake.
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: pool, DNSName: MeshServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("cert_file is not a node certificate of this CA for %q: %w", MeshServerName, err)
	}
	return &MeshTLS{
		Server: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS13,
		},
		Client: &tls.Config{
			Certificates: []tls.Certificate{cert},
			RootCAs:      pool,
			ServerName:   MeshServerName,
			MinVersion:   tls.VersionTLS13,
		},
	}, nil
}

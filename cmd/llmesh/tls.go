package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmesh/llmesh/node/pki"
)

// runTLS is `llmesh tls init`: a development CA (made once, kept) and a
// certificate for each node named, for node.tls.
func runTLS(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintln(stderr, "usage: llmesh tls init [-dir DIR] [-ip IP,...] NODE...")
		return 2
	}
	fset := flag.NewFlagSet("tls init", flag.ContinueOnError)
	fset.SetOutput(stderr)
	dir := fset.String("dir", "llmesh-tls", "directory for the CA and the node certificates")
	ipList := fset.String("ip", "", "comma-separated IP addresses to add to every node certificate")
	fset.Usage = func() {
		fmt.Fprintln(stderr, `usage: llmesh tls init [-dir DIR] [-ip IP,...] NODE...

Writes DIR/ca.pem and DIR/ca-key.pem (a development CA, made on the first
run and reused after) and DIR/NODE.pem and DIR/NODE-key.pem for each NODE.
Point each node's node.tls at ca.pem and its own pair. Keep ca-key.pem off
the nodes: it mints members of the mesh.`)
		fset.PrintDefaults()
	}
	if err := fset.Parse(args[1:]); err != nil {
		return 2
	}
	names := fset.Args()
	if len(names) == 0 {
		fmt.Fprintln(stderr, "llmesh tls init: name at least one node")
		return 2
	}
	var ips []net.IP
	for _, s := range strings.Split(*ipList, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		ip := net.ParseIP(s)
		if ip == nil {
			fmt.Fprintf(stderr, "llmesh tls init: -ip: %q is not an IP address\n", s)
			return 2
		}
		ips = append(ips, ip)
	}
	if err := tlsInit(*dir, names, ips, time.Now(), stdout); err != nil {
		fmt.Fprintf(stderr, "llmesh tls init: %v\n", err)
		return 1
	}
	return 0
}

func tlsInit(dir string, names []string, ips []net.IP, now time.Time, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caCert, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	var ca pki.PEMPair
	c, err1 := os.ReadFile(caCert)
	k, err2 := os.ReadFile(caKey)
	switch {
	case err1 == nil && err2 == nil:
		ca = pki.PEMPair{Cert: c, Key: k}
		fmt.Fprintf(stdout, "using the CA in %s\n", caCert)
	case errors.Is(err1, fs.ErrNotExist) && errors.Is(err2, fs.ErrNotExist):
		var err error
		if ca, err = pki.NewCA(now); err != nil {
			return err
		}
		if err := writeFiles(caCert, ca.Cert, caKey, ca.Key); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s\n", caCert, caKey)
	default:
		return fmt.Errorf("%s and %s must both exist or neither", caCert, caKey)
	}
	for _, name := range names {
		pair, err := pki.NewNodeCert(ca, name, ips, now)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := writeFiles(cert, pair.Cert, key, pair.Key); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s\n", cert, key)
	}
	return nil
}

// writeFiles writes a certificate (readable) and its key (owner only).
func writeFiles(cert string, certPEM []byte, key string, keyPEM []byte) error {
	if err := os.WriteFile(cert, certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(key, keyPEM, 0o600)
}

package harness

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/llmesh/llmesh/node/config"
)

// devKeyPrefix starts every dev tenant key.
const devKeyPrefix = "sk-llmesh-dev-"

// isDevKey reports whether key is what NewKey(devKeyPrefix) makes: the
// prefix and 128 bits in lower-case hex.
func isDevKey(key string) bool {
	bits, ok := strings.CutPrefix(key, devKeyPrefix)
	if !ok || len(bits) != 32 {
		return false
	}
	_, err := hex.DecodeString(bits)
	return err == nil && strings.ToLower(bits) == bits
}

// DevKeyFile is where `llmesh agent -dev` listening on httpAddr keeps
// its tenant key: ${TMPDIR:-/tmp}/llmesh-dev.key for the default port
// (8080), so that the README's commands run as printed, and
// ${TMPDIR:-/tmp}/llmesh-dev-PORT.key for any other, so that dev nodes on
// different ports never overwrite each other's key.
func DevKeyFile(httpAddr string) string {
	_, port, err := net.SplitHostPort(httpAddr)
	_, def, _ := net.SplitHostPort(config.DefaultHTTPAddr)
	if err != nil || port == def {
		return filepath.Join(os.TempDir(), "llmesh-dev.key")
	}
	return filepath.Join(os.TempDir(), "llmesh-dev-"+port+".key")
}

// DevKey returns the dev tenant key kept in path, so that a dev node
// restarted on the same port keeps its key. When path holds none (it is
// missing, not a dev key, or not a regular file only its owner can read
// and write) it makes a new random key and writes it there.
func DevKey(path string) (string, error) {
	if key, ok := readDevKey(path); ok {
		return key, nil
	}
	key, err := NewKey(devKeyPrefix)
	if err != nil {
		return "", err
	}
	return key, WriteDevKey(path, key)
}

// readDevKey returns the key in path if it is a dev key file: a regular
// file (not a link someone else could point elsewhere) that no one but
// its owner may read or write, holding one dev key.
func readDevKey(path string) (string, bool) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return "", false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	key := string(bytes.TrimSpace(b))
	return key, isDevKey(key)
}

// WriteDevKey replaces path with a file only its owner can read holding
// key. It creates the file anew rather than writing through whatever is
// at path (a link, say).
func WriteDevKey(path, key string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dev key file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("dev key file: %w", err)
	}
	_, err = f.WriteString(key + "\n")
	return errors.Join(err, f.Close())
}

package harness_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/sim/harness"
)

// The default port's key file is the README's; any other port has its own.
func TestDevKeyFile(t *testing.T) {
	t.Setenv("TMPDIR", "/some/tmp")
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "/some/tmp/llmesh-dev.key",
		"127.0.0.1:8090": "/some/tmp/llmesh-dev-8090.key",
		"0.0.0.0:9000":   "/some/tmp/llmesh-dev-9000.key",
	} {
		if got := harness.DevKeyFile(addr); got != want {
			t.Errorf("DevKeyFile(%q) = %q, want %q", addr, got, want)
		}
	}
}

// DevKey makes a random key the first time and returns the same one after;
// a file that is not a dev key file only its owner reads is replaced.
func TestDevKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.key")
	first, err := harness.DevKey(path)
	if err != nil || !strings.HasPrefix(first, "sk-llmesh-dev-") {
		t.Fatalf("DevKey = %q, %v", first, err)
	}
	if again, err := harness.DevKey(path); err != nil || again != first {
		t.Fatalf("again: %q, %v; want %q", again, err, first)
	}
	other, _ := harness.DevKey(filepath.Join(t.TempDir(), "k.key"))
	if other == first {
		t.Fatal("two key files hold the same key")
	}
	// World-readable: anyone may know it, so it is not kept.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if next, _ := harness.DevKey(path); next == first {
		t.Fatal("a key others could read was kept")
	}
	if err := os.WriteFile(path, []byte("sk-llmesh-dev-known\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if next, _ := harness.DevKey(path); next == "sk-llmesh-dev-known" {
		t.Fatal("a key file not holding a dev key was kept")
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode(), err)
	}
}

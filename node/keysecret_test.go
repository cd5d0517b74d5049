package node_test

import (
	"bytes"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// An operator who names a key by the key itself (llmesh tenants keys set
// TENANT KEY, the key pasted) is refused before anything reaches the
// ledger: the key is never written to the Raft log. (It was sent as the
// command's reference to the key, and refused only by the state machine,
// the key in clear in the log on every voter.)
func TestKeySetByTheKeyItselfNeverReachesTheLedger(t *testing.T) {
	var dir string
	m := startMeshWith(t, 1, []upstream{{name: "p", kind: "openai"}}, voters(t, 1, func(i int, c *node.Config) { dir = c.Node.DataDir }), fastRaft)
	tenants := m.urls[0] + "/v1/mesh/tenants/t1/keys/"
	wait.For(t, 30*time.Second, "a leader to take a change", func() bool {
		return adminCall(t, http.MethodPut, tenants+consensus.KeyID(sha(testKey)), "", map[string]any{"rpm": 50}) == 200
	})
	if code := adminCall(t, http.MethodPut, tenants+testKey, "", map[string]any{"rpm": 60}); code != 400 {
		t.Fatalf("PUT naming the key by the key itself: %d", code)
	}
	// Another command after it, so that the log holds whatever came before.
	if code := adminCall(t, http.MethodPut, tenants+consensus.KeyID(sha(testKey)), "", map[string]any{"rpm": 70}); code != 200 {
		t.Fatalf("PUT by the key's id: %d", code)
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(testKey)) {
			t.Errorf("%s holds the key in clear", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

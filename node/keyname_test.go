package node_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A key is named in the admin API (and so in llmesh tenants keys set) as
// its name is spelled, capitals and all (names are letters, digits and
// . _ - of either case); a whole SHA-256 is read in either case. (The
// path was lowered, and a key named App-1 could not be named.)
func TestKeySetByItsNameAsSpelled(t *testing.T) {
	m := startMeshWith(t, 1, []upstream{{name: "p", kind: "openai"}}, voters(t, 1, func(i int, c *node.Config) {
		c.Tenants[0].Keys = []node.KeySection{{Name: "App-1", KeySHA256: sha(testKey)}}
	}), fastRaft)
	tenants := m.urls[0] + "/v1/mesh/tenants/t1/keys/"
	id := consensus.KeyID(sha(testKey))
	wait.For(t, 30*time.Second, "a leader to take a change", func() bool {
		return adminCall(t, http.MethodPut, tenants+id, "", map[string]any{"tpm": 9000}) == 200
	})
	if code := adminCall(t, http.MethodPut, tenants+"App-1", "", map[string]any{"rpm": 7}); code != 200 {
		t.Fatalf("PUT by the key's name: %d", code)
	}
	if code := adminCall(t, http.MethodPut, tenants+strings.ToUpper(sha(testKey)), "", map[string]any{"rpm": 8}); code != 200 {
		t.Fatalf("PUT by the key's SHA-256 in capitals: %d", code)
	}
	var doc views.Tenants
	getJSON(t, m.urls[0]+"/v1/mesh/tenants", "", &doc)
	if len(doc.Tenants) != 1 || len(doc.Tenants[0].KeySettings) != 1 || doc.Tenants[0].KeySettings[0].Limits == nil ||
		*doc.Tenants[0].KeySettings[0].Limits != (views.LimitsInfo{RPM: 8, TPM: 9000}) {
		t.Fatalf("tenants: %+v", doc.Tenants)
	}
}

package node_test

import (
	"io"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/node"
)

// A key's request that a node forwards counts against the key's limit
// once, at the node it entered: a key limited to 4 requests a minute,
// whose every request node-0 forwards to node-1 (the provider is
// reachable from node-1's region only), is served 4 times and refused
// the fifth, and the provider sees 4. (Taken again at the via node, the
// two nodes' shares would split the 4 between them, and the key be
// refused well before its limit.)
func TestKeyRateCountsOnceThroughAForward(t *testing.T) {
	const key = "sk-test-forwarded-key-0123456789"
	m := startMeshWith(t, 2, []upstream{{name: "p", kind: "openai", region: "us-east", reach: "region"}},
		voters(t, 2, func(i int, c *node.Config) {
			c.Tenants[0].Keys = []node.KeySection{{Name: "fwd", KeySHA256: sha(key), Limits: &node.RateSection{RPM: 4}}}
		}), fastRaft)
	for i := range 5 {
		resp := postAs(t, m.urls[0], key, hello)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case i < 4 && resp.StatusCode != 200:
			t.Fatalf("request %d of a key limited to 4 a minute: %d %s", i, resp.StatusCode, b)
		case i < 4 && resp.Header.Get("X-LLMesh-Via") != "node-1":
			t.Fatalf("request %d was not forwarded: via %q", i, resp.Header.Get("X-LLMesh-Via"))
		case i == 4 && (resp.StatusCode != 429 || !strings.Contains(string(b), `key \"fwd\" of tenant t1 is at its limit of 4 requests a minute`)):
			t.Fatalf("the fifth request: %d %s", resp.StatusCode, b)
		}
	}
	if n := m.emus["p"].Stats().Requests; n != 4 {
		t.Fatalf("the provider saw %d requests; the key's limit is 4", n)
	}
}

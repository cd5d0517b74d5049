package node_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
)

// On a node without the ledger, the file's limits hold it whole: a
// key's, and its tenant's over all its keys. Each refusal names the
// limit that was reached, after limits.admission_wait.
func TestKeyAndTenantLimitsOnANodeAlone(t *testing.T) {
	const a, b = "sk-test-key-a-0123456789", "sk-test-key-b-0123456789"
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) {
		c.Limits.AdmissionWait = node.Duration(200 * time.Millisecond)
		c.Tenants = []node.TenantSection{{Name: "t1", Limits: &node.RateSection{RPM: 3}, Keys: []node.KeySection{
			{Name: "a", KeySHA256: sha(a), Limits: &node.RateSection{RPM: 2}},
			{KeySHA256: sha(b)},
		}}}
	})
	send := func(key string) (int, string, time.Duration) {
		start := time.Now()
		resp := postAs(t, f.url, key, hello)
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), time.Since(start)
	}
	for i, want := range []struct {
		key    string
		status int
		names  string
	}{
		{a, 200, ""}, {a, 200, ""}, {a, 429, `key \"a\" of tenant t1 is at its limit of 2 requests a minute`},
		{b, 200, ""}, {b, 429, "tenant t1 is at its limit of 3 requests a minute"},
	} {
		code, body, took := send(want.key)
		if code != want.status || !strings.Contains(body, want.names) {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		if code == 429 && took < 200*time.Millisecond {
			t.Fatalf("request %d was refused after %v, before limits.admission_wait", i, took)
		}
	}
}

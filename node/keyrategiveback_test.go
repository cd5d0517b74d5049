package node_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
)

// A request that reached no provider does not count against its key's
// limit: a key limited to 2 requests a minute whose second request is
// refused 429 because the provider's own limit (1 a minute) is reached,
// before any provider saw it, still has one left, which a request for
// another provider's model is served with. (It counted: the key was
// refused at its limit having sent the providers one request.)
func TestKeyRateGivenBackWhenNoProviderSawIt(t *testing.T) {
	const key = "sk-test-key-a-0123456789"
	f := startNode(t, []upstream{{name: "p", kind: "openai", rpm: 1}, {name: "q", kind: "openai", models: []string{"other"}}}, func(c *node.Config) {
		c.Limits.AdmissionWait = node.Duration(200 * time.Millisecond)
		c.Tenants = []node.TenantSection{{Name: "t1", Keys: []node.KeySection{
			{Name: "a", KeySHA256: sha(key), Limits: &node.RateSection{RPM: 2}},
		}}}
	})
	for i, want := range []struct {
		model  string
		status int
		names  string
	}{
		{"gpt-4o-mini", 200, ""},
		{"gpt-4o-mini", 429, "every provider of the model is rate limited"}, // p's own limit: no provider saw it
		{"other", 200, ""},
		{"other", 429, `key \"a\" of tenant t1 is at its limit of 2 requests a minute`},
	} {
		resp := postAs(t, f.url, key, `{"model":"`+want.model+`","messages":[{"role":"user","content":"hi"}]}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want.status || !strings.Contains(string(body), want.names) {
			t.Fatalf("request %d (%s): %d %s", i, want.model, resp.StatusCode, body)
		}
	}
	if n := f.emus["p"].Stats().Requests + f.emus["q"].Stats().Requests; n != 2 {
		t.Fatalf("the providers saw %d requests", n)
	}
}

package node_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// No secret leaves where it belongs. A three-node mesh with encrypted
// gossip, an admin token and each node's own provider keys serves
// tenants directly and through forwards, refuses wrong keys, and calls a
// provider that echoes the key it was sent in its error body. Then every
// node's log (debug level), every answer a client got, every /metrics,
// the decisions and what each node gossips (its metadata and provider
// reports) are searched for every provider key, tenant key, the admin
// token and the gossip key: none holds one. And a provider is only ever
// sent the key of the node that calls it: a forward carries no key.
func TestSecretsStayPut(t *testing.T) {
	const (
		adminToken = "admin-token-secret-0123456789"
		gossipKey  = "c2VjcmV0LWdvc3NpcC1rZXktMDEyMzQ1Njc4OWFiY2Q=" // 32 bytes
	)
	echo := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","code":"invalid_api_key"}}`, r.Header.Get("Authorization"))
	})
	secrets := []string{adminToken, gossipKey, euKey, usKey, testKey}
	testEnvKeys["LLMESH_SECRETS_ADMIN"] = adminToken
	testEnvKeys["LLMESH_SECRETS_GOSSIP"] = gossipKey
	providerKey := func(region, provider string) string { return "sk-prov-" + region + "-" + provider + "-0123456789" }
	f := startRegions(t, regionsUpstreams(emulator.Config{}), func(region string, c *node.Config) {
		c.Node.AdminTokenEnv, c.Node.GossipKeyEnv = "LLMESH_SECRETS_ADMIN", "LLMESH_SECRETS_GOSSIP"
		ps := append([]node.ProviderSection(nil), c.Providers...)
		ps = append(ps, node.ProviderSection{Name: "echo", Kind: "openai", Region: "eu-west", BaseURL: echo,
			Models: []node.ModelSection{{Name: "gpt-4o-mini", InputUSDPerMTok: 0.01, OutputUSDPerMTok: 0.01}}})
		for i := range ps {
			env := strings.ToUpper("KEY_" + region + "_" + strings.ReplaceAll(ps[i].Name, "-", "_"))
			testEnvKeys[env] = providerKey(region, ps[i].Name)
			secrets = append(secrets, testEnvKeys[env])
			ps[i].APIKeyEnv = env
		}
		c.Providers = ps
	})
	var answers strings.Builder
	send := func(url, key string) {
		resp := postAs(t, url, key, hello)
		answers.WriteString(resp.Status + " " + readAll(t, resp.Body) + "\n")
		for k, v := range resp.Header {
			answers.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
	}
	for range 2 {
		send(f.urls["us"], euKey) // forwarded to eu-1 for gpu-eu
		send(f.urls["eu"], usKey) // the echo provider is eu: openai-us directly
		send(f.urls["ap"], testKey)
		send(f.urls["eu"], testKey) // echo first: it fails over, echoing the key
		send(f.urls["eu"], "sk-wrong-key-0123456789")
	}
	if !strings.Contains(answers.String(), "X-Llmesh-Via: eu-1") {
		t.Fatalf("no request was forwarded:\n%s", answers.String())
	}
	// What the echo provider was sent is its node's own key.
	var where strings.Builder
	for region, u := range f.urls {
		for _, path := range []string{"/metrics", "/v1/mesh/decisions?limit=256", "/v1/mesh/providers", "/v1/mesh/members", "/v1/mesh/status"} {
			req, _ := http.NewRequest(http.MethodGet, u+path, nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			where.WriteString(region + path + ":\n" + readAll(t, resp.Body) + "\n")
		}
		nd := f.nodes[region]
		meta, _ := json.Marshal(nd.Mesh().Members())
		reports, _ := json.Marshal(nd.Mesh().Reports())
		where.WriteString(region + " gossip:\n" + string(meta) + string(reports) + "\n")
	}
	wait.For(t, 5*time.Second, "every node's request lines", func() bool {
		for _, l := range f.logs {
			if strings.Count(l.String(), `"msg":"request"`) < 2 {
				return false
			}
		}
		return true
	})
	for region, l := range f.logs {
		where.WriteString(region + " log:\n" + l.String())
	}
	everything := answers.String() + where.String()
	for _, s := range secrets {
		if i := strings.Index(everything, s); i >= 0 {
			t.Errorf("secret %q leaked: ...%s...", s, everything[max(0, i-200):min(len(everything), i+len(s)+50)])
		}
	}
	if !strings.Contains(where.String(), "[redacted]") {
		t.Error("nothing was redacted: the echoed key never reached a log or an answer, and the test proves nothing")
	}
	for name, e := range f.emus {
		for _, r := range e.Received() {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if got == "" {
				got = r.Header.Get("Api-Key")
			}
			if name == "gpu-eu" && got != providerKey("eu", "gpu-eu") {
				t.Errorf("gpu-eu (reached through eu-1 only) was sent %q", got)
			}
			if !strings.HasPrefix(got, "sk-prov-") || !strings.HasSuffix(got, "-"+name+"-0123456789") {
				t.Errorf("%s was sent %q, not a node's own key for it", name, got)
			}
		}
	}
}

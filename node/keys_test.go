package node_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// adminPost posts a JSON body to a node's admin API and returns the status.
func adminPost(t *testing.T, url, token string, body any) int {
	t.Helper()
	return adminCall(t, http.MethodPost, url, token, body)
}

// adminCall sends method to url with body as JSON and the admin token, if
// any, and returns the status.
func adminCall(t *testing.T, method, url, token string, body any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, url, bytes.NewReader(b))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A key added at one node of three is taken by all of them; revoked at
// another, it is refused by every node within the stated bound (one
// tenant refresh and a read: 3 s), and it cannot be added back. Keys of
// the configuration file are revoked the same way.
func TestKeyRevokedOnEveryNode(t *testing.T) {
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai"}}, voters(t, 3, nil), fastRaft)
	const key = "sk-llmesh-test-added-0123456789abcdefghijkl"
	sum := sha256.Sum256([]byte(key))
	hash := hex.EncodeToString(sum[:])
	wait.For(t, 30*time.Second, "a Raft leader", func() bool {
		return adminPost(t, m.urls[0]+"/v1/mesh/tenants/acme/keys", "", map[string]any{"key_sha256": hash, "create": true, "residency": "eu"}) == 200
	})
	allAnswer := func(key string, want int) func() bool {
		return func() bool {
			for _, u := range m.urls {
				if postAs(t, u, key, hello).StatusCode != want {
					return false
				}
			}
			return true
		}
	}
	wait.For(t, 5*time.Second, "every node to take the new key", allAnswer(key, 200))
	var doc struct{ Tenants []views.TenantInfo }
	if code := getJSON(t, m.urls[2]+"/v1/mesh/tenants", "", &doc); code != 200 {
		t.Fatalf("tenants: %d", code)
	}
	var acme *views.TenantInfo
	for i := range doc.Tenants {
		if doc.Tenants[i].Name == "acme" {
			acme = &doc.Tenants[i]
		}
	}
	if acme == nil || acme.Residency != "eu" || len(acme.Keys) != 1 || acme.Keys[0] != hash[:12] {
		t.Fatalf("tenants: %+v", doc.Tenants)
	}

	if code := adminPost(t, m.urls[1]+"/v1/mesh/tenants/acme/revoke", "", map[string]any{"keys": []string{hash[:12]}}); code != 200 {
		t.Fatalf("revoke: %d", code)
	}
	took := wait.For(t, 3*time.Second, "every node to refuse the revoked key", allAnswer(key, 401))
	t.Logf("the revoked key was refused by all three nodes %v after the revocation was committed", took.Round(time.Millisecond))
	if code := adminPost(t, m.urls[2]+"/v1/mesh/tenants/acme/keys", "", map[string]any{"key_sha256": hash}); code != 400 {
		t.Fatalf("a revoked key was added back: %d", code)
	}

	// The file's key for t1 is revoked by its hash, which only the
	// operator (and the file) knows.
	if code := adminPost(t, m.urls[0]+"/v1/mesh/tenants/t1/revoke", "", map[string]any{"keys": []string{sha(testKey)}}); code != 200 {
		t.Fatalf("revoke the file's key: %d", code)
	}
	wait.For(t, 3*time.Second, "every node to refuse the file's revoked key", allAnswer(testKey, 401))
}

// Every admin endpoint refuses a caller without the admin token, or with
// a wrong one, when one is configured; the token opens each of them.
func TestEveryAdminEndpointNeedsTheToken(t *testing.T) {
	testEnvKeys["LLMESH_TEST_ADMIN"] = "admin-secret"
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) { c.Node.AdminTokenEnv = "LLMESH_TEST_ADMIN" })
	endpoints := []struct {
		method, path string
		steers       bool // not called with the token: it would stop the node
	}{
		{"GET", "/v1/mesh/members", false}, {"GET", "/v1/mesh/providers", false}, {"GET", "/v1/mesh/budgets", false},
		{"GET", "/v1/mesh/raft/peers", false}, {"GET", "/v1/mesh/status", false}, {"GET", "/v1/mesh/decisions", false},
		{"GET", "/v1/mesh/tenants", false}, {"GET", "/v1/mesh/series", false}, {"GET", "/v1/mesh/observe", false},
		{"GET", "/debug/pprof/", false}, {"GET", "/debug/pprof/cmdline", false},
		{"POST", "/v1/mesh/join", false}, {"POST", "/v1/mesh/budgets/forfeit", false}, {"PUT", "/v1/mesh/budgets/t1", false},
		{"POST", "/v1/mesh/tenants/t1/keys", false}, {"POST", "/v1/mesh/tenants/t1/revoke", false},
		{"PUT", "/v1/mesh/tenants/t1/keys/app", false}, {"PUT", "/v1/mesh/tenants/t1/limits", false}, {"DELETE", "/v1/mesh/tenants/t1/limits", false},
		{"POST", "/v1/route/explain", false},
		{"POST", "/v1/mesh/drain", true}, {"POST", "/v1/mesh/leave", true},
	}
	call := func(method, path, token string) int { return adminCall(t, method, f.url+path, token, map[string]any{}) }
	for _, e := range endpoints {
		for _, token := range []string{"", "admin-secre", "admin-secret2", testKey} {
			if token == testKey && e.path == "/v1/route/explain" {
				continue // a tenant explains its own requests
			}
			if code := call(e.method, e.path, token); code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d, want 401", e.method, e.path, token, code)
			}
		}
		if !e.steers {
			if code := call(e.method, e.path, "admin-secret"); code == http.StatusUnauthorized {
				t.Errorf("%s %s with the token: 401", e.method, e.path)
			}
		}
	}
	if f.node.Draining() {
		t.Fatal("a refused drain drained the node")
	}
}

// Without an admin token, the loopback-only admin API refuses what a web
// page can make a browser send: cross-site requests (Origin,
// Sec-Fetch-Site) and names rebound to 127.0.0.1 (Host). Tools on the
// host, which send neither, are served.
func TestTokenlessAdminRefusesBrowsers(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, nil)
	call := func(method, path string, hdr ...string) int {
		req, _ := http.NewRequest(method, f.url+path, strings.NewReader(`{"key_sha256":"`+sha("x")+`","create":true}`))
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, hdr := range [][]string{
		{"Origin", "https://evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Host", "rebound.example:8080"},
	} {
		for _, e := range []struct{ method, path string }{{"POST", "/v1/mesh/drain"}, {"POST", "/v1/mesh/tenants/x/keys"}, {"GET", "/v1/mesh/status"}, {"GET", "/ui/"}} {
			if code := call(e.method, e.path, hdr...); code != http.StatusForbidden {
				t.Errorf("%s %s with %v: %d, want 403", e.method, e.path, hdr, code)
			}
		}
	}
	if f.node.Draining() {
		t.Fatal("a cross-site request drained the node")
	}
	for _, hdr := range [][]string{nil, {"Sec-Fetch-Site", "same-origin"}, {"Sec-Fetch-Site", "none"}, {"Host", "localhost"}} {
		if code := call("GET", "/v1/mesh/status", hdr...); code != 200 {
			t.Errorf("a loopback tool with %v: %d", hdr, code)
		}
	}
}

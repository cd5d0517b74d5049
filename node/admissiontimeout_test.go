package node_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
)

// A ledger that cannot grant in time (here a voter waiting for a second
// voter that never comes, so no leader is ever elected) is the mesh's
// own slowness, not a limit anyone configured: a request that waited
// limits.admission_wait for budget escrow, a provider's rate share or a
// tenant's share of its own limit is answered 503 admission_timeout with
// Retry-After, in its endpoint's own error shape, and never 429.
func TestLeaseWaitIsAdmissionTimeoutNot429(t *testing.T) {
	const (
		budgetKey  = "sk-test-budgeted-0123456789"
		limitedKey = "sk-test-limited-0123456789"
	)
	f := startNodeBy(t, []upstream{{name: "p", kind: "openai", in: 1, out: 1, rpm: 600}}, func(c *node.Config) {
		c.Node.Gossip, c.Node.RPC, c.Node.Raft, c.Node.DataDir = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
		c.Node.Voter, c.Node.BootstrapExpect = true, 2
		c.Limits.AdmissionWait = node.Duration(300 * time.Millisecond)
		c.Tenants = []node.TenantSection{
			// Escrow first: the budget holder waits for the ledger.
			{Name: "budgeted", KeySHA256: []string{sha(budgetKey)}, Budget: &node.BudgetSection{USD: 1, Period: "day"}},
			// No budget: the provider's share is what is not granted.
			{Name: "free", KeySHA256: []string{sha(testKey)}},
			// The tenant's own limit's share is not granted.
			{Name: "limited", KeySHA256: []string{sha(limitedKey)}, Limits: &node.RateSection{RPM: 1000}},
		}
	}, harness.JoinNode)
	chat := `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, key, path, body string
		hdr                   []string
		anthropic             bool
	}{
		{"budget escrow, chat", budgetKey, "/v1/chat/completions", chat, nil, false},
		{"budget escrow, messages", budgetKey, "/v1/messages",
			`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, []string{"anthropic-version", "2023-06-01"}, true},
		{"budget escrow, responses", budgetKey, "/v1/responses", `{"model":"gpt-4o-mini","input":"hi","max_output_tokens":16}`, nil, false},
		{"provider share", testKey, "/v1/chat/completions", chat, nil, false},
		{"tenant limit share", limitedKey, "/v1/chat/completions", chat, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, f.url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+tc.key)
			req.Header.Set("Content-Type", "application/json")
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			took := time.Since(start)
			body := readAll(t, resp.Body)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("answered %d, want 503: %s", resp.StatusCode, body)
			}
			if took < 250*time.Millisecond {
				t.Errorf("refused after %v, before limits.admission_wait (300ms) ran out", took)
			}
			if ra := resp.Header.Get("Retry-After"); ra == "" {
				t.Errorf("no Retry-After on %s", body)
			}
			if tc.anthropic {
				var doc struct {
					Type  string
					Error struct{ Type, Message string }
				}
				if json.Unmarshal([]byte(body), &doc) != nil || doc.Type != "error" || doc.Error.Type != "overloaded_error" || doc.Error.Message == "" {
					t.Errorf("not Anthropic's overloaded_error: %s", body)
				}
				return
			}
			var doc struct {
				Error struct{ Type, Code, Message string }
			}
			if json.Unmarshal([]byte(body), &doc) != nil || doc.Error.Code != "admission_timeout" || doc.Error.Type != "server_error" {
				t.Errorf("not OpenAI's shape with code admission_timeout: %s", body)
			}
		})
	}
}

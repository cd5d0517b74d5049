package node_test

import (
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A key with a budget of its own, driven through two nodes, one of which
// forwards to the other (the provider is reachable from its region only,
// where the via node reserves the key's escrow): its spend never exceeds
// its budget, it then gets 402 budget_exceeded naming the key, its
// tenant's budget covers what it spent too, and another key of the
// tenant goes on being served.
func TestKeyBudgetAcrossAForward(t *testing.T) {
	const capped, free = "sk-test-capped-key-0123456789", "sk-test-free-key-0123456789"
	m := startMeshWith(t, 2, []upstream{{name: "p", kind: "openai", in: 1, out: 1000, region: "us-east", reach: "region"}},
		voters(t, 2, func(i int, c *node.Config) {
			c.Tenants[0].Budget = &node.BudgetSection{USD: 10, Period: "total"}
			c.Tenants[0].Keys = []node.KeySection{
				{Name: "capped", KeySHA256: sha(capped), Budget: &node.BudgetSection{USD: 0.05, Period: "total"}},
				{Name: "free", KeySHA256: sha(free)},
			}
		}), fastRaft)
	// At most ~$0.01 a request: 10 completion tokens at $1000 per million.
	body := `{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"spend"}]}`
	served, refused := 0, 0
	for i := 0; refused == 0 && i < 40; i++ {
		resp := postAs(t, m.urls[i%2], capped, body)
		b, _ := io.ReadAll(resp.Body)
		switch resp.StatusCode {
		case 200:
			served++
			if i%2 == 0 && resp.Header.Get("X-LLMesh-Via") != "node-1" {
				t.Fatalf("node-0 served it itself: via %q", resp.Header.Get("X-LLMesh-Via"))
			}
		case 402:
			refused++
			if !strings.Contains(string(b), `"code":"budget_exceeded"`) || !strings.Contains(string(b), `key \"capped\" of tenant t1 has $0.0`) {
				t.Fatalf("a 402 that does not name the key: %s", b)
			}
		default:
			t.Fatalf("the capped key got %d: %s", resp.StatusCode, b)
		}
	}
	if refused == 0 || served < 3 {
		t.Fatalf("served %d, refused %d: the key should spend most of its budget, then be refused", served, refused)
	}
	for i := range 4 {
		if resp := postAs(t, m.urls[i%2], free, body); resp.StatusCode != 200 {
			t.Fatalf("the other key got %d", resp.StatusCode)
		}
	}
	account := consensus.KeyAccount("t1", consensus.KeyID(sha(capped)))
	var keySettled, tenantSettled float64
	wait.For(t, 10*time.Second, "every node's spend to be settled", func() bool {
		keySettled, tenantSettled = 0, 0
		for _, b := range budgetsOf(t, m.urls[1]) {
			switch b.Tenant {
			case account:
				keySettled = b.SettledUSD + b.ReservedUSD
				if b.SettledUSD+b.ReservedUSD > b.LimitUSD+1e-9 {
					t.Fatalf("the key's books %+v", b)
				}
			case "t1":
				tenantSettled = b.SettledUSD
			}
		}
		return keySettled > 0 && tenantSettled >= keySettled-1e-9
	})
	t.Logf("the capped key: %d served, then 402; its books hold $%.6f of $0.05; the tenant settled $%.6f", served, keySettled, tenantSettled)
	if keySettled > 0.05+1e-9 || math.IsNaN(keySettled) {
		t.Fatalf("the key spent $%v of its $0.05", keySettled)
	}
}

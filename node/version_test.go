package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// Two voters whose gossip says each is of a build before ledger
// versions (each knows its own): they agree on version 0, so an
// operator's change of a tenant's limits, which older voters would
// ignore, is refused 409 ledger_upgrade_required naming the other voter,
// in OpenAI's shape, and nothing is applied; a budget, which every
// version reads, is set. raft peers shows each voter's version and the
// agreed one, and status the agreed one.
func TestLedgerUpgradeRequired(t *testing.T) {
	m := startMeshWith(t, 2, []upstream{{name: "p", kind: "openai"}}, voters(t, 2, nil), func(i int, o *node.Options) {
		fastRaft(i, o)
		o.GossipTuning = func(c *gossip.Config) { c.Meta.LedgerVersion = 0 }
	})
	put := func(url string, body any) (int, []byte) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(b))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		_, _ = out.ReadFrom(resp.Body)
		return resp.StatusCode, out.Bytes()
	}
	wait.For(t, 30*time.Second, "a Raft leader to set a budget", func() bool {
		code, _ := put(m.urls[0]+"/v1/mesh/budgets/t1", map[string]any{"usd": 5, "period": "month"})
		return code == 200
	})
	for i, u := range m.urls {
		code, body := put(u+"/v1/mesh/tenants/t1/limits", map[string]any{"rpm": 60})
		var doc struct {
			Error struct{ Message, Type, Code string } `json:"error"`
		}
		if code != http.StatusConflict || json.Unmarshal(body, &doc) != nil || doc.Error.Code != "ledger_upgrade_required" ||
			doc.Error.Type != "invalid_request_error" {
			t.Fatalf("node %d: tenant limits at version 0: %d %s", i, code, body)
		}
		// The other voter is named, whichever leads (asked on the
		// follower, the leader, which advertises 0, is).
		if !strings.Contains(doc.Error.Message, "set_tenant_limits needs ledger version 1; ") || !strings.Contains(doc.Error.Message, " node-") ||
			!strings.Contains(doc.Error.Message, "(version 0) must be upgraded first") {
			t.Fatalf("node %d: the refusal does not say what to upgrade: %q", i, doc.Error.Message)
		}
	}
	var tenants views.Tenants
	if code := getJSON(t, m.urls[1]+"/v1/mesh/tenants", "", &tenants); code != 200 || len(tenants.Tenants) != 1 ||
		tenants.Tenants[0].Limits != nil || tenants.Tenants[0].BudgetUSD == nil || *tenants.Tenants[0].BudgetUSD != 5 {
		t.Fatalf("tenants %d %+v", code, tenants)
	}

	var peers struct {
		Peers   []consensus.Peer
		Version *int `json:"ledger_version"`
	}
	if code := getJSON(t, m.urls[0]+"/v1/mesh/raft/peers", "", &peers); code != 200 || peers.Version == nil || *peers.Version != 0 || len(peers.Peers) != 2 {
		t.Fatalf("raft peers %d %+v", code, peers)
	}
	for _, p := range peers.Peers {
		// Asked, node-0 knows its own version and what node-1 advertises.
		if want := map[string]int{"node-0": consensus.LedgerVersion, "node-1": 0}[p.ID]; p.Version != want {
			t.Errorf("peer %s at version %d, want %d", p.ID, p.Version, want)
		}
	}
	for i, u := range m.urls {
		var st views.Status
		if code := getJSON(t, u+"/v1/mesh/status", "", &st); code != 200 || st.LedgerVersion == nil || *st.LedgerVersion != 0 {
			t.Fatalf("node %d status %d: %s", i, code, fmt.Sprint(st.LedgerVersion))
		}
	}
}

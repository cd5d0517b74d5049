package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A node killed after serving traffic, restarted with its data directory:
// its spend journal tells the ledger what it may have spent, so none of
// its escrow is written off and the rest comes back at once; every
// charge it made is in the ledger's spend (none lost with the process);
// and it goes on holding its rate share of a limited provider as the
// same holder, so the provider's capacity shared among the live nodes is
// back within 10 s of the restart, with no ghost share left behind.
func TestKilledNodeGivesBackItsEscrow(t *testing.T) {
	const rpm = 600
	var cfgs []*node.Config
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai", in: 1, out: 1, rpm: rpm}}, voters(t, 3, func(i int, c *node.Config) {
		c.Tenants[0].Budget = &node.BudgetSection{USD: 1, Period: "total"}
		cfgs = append(cfgs, c)
	}), fastRaft)
	const victim = 1
	for i := range 40 {
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":%d,"messages":[{"role":"user","content":"journal"}]}`, 4+i%8)
		if code, answer, _ := send(t, m.urls[victim]+"/v1/chat/completions", testKey, body); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, answer)
		}
	}
	charged := m.emus["p"].Stats().ChargedUSD
	// The last charges reach the journal within its flush (100 ms).
	time.Sleep(300 * time.Millisecond) // a crash a moment after the last answer, not during it
	var held float64
	for _, b := range budgetsOf(t, m.urls[0]) {
		held += b.ReservedUSD
	}
	// Restart the victim on the same addresses and data, as a real
	// restart would.
	cfg := cfgs[victim]
	var members struct{ Members []views.MemberInfo }
	getJSON(t, m.urls[victim]+"/v1/mesh/members", "", &members)
	for _, mem := range members.Members {
		if mem.Self {
			cfg.Node.Gossip, cfg.Node.RPC, cfg.Node.HTTP = mem.Address, mem.RPC, mem.HTTP
		}
	}
	var peers struct{ Peers []consensus.Peer }
	getJSON(t, m.urls[victim]+"/v1/mesh/raft/peers", "", &peers)
	for _, p := range peers.Peers {
		if p.ID == cfg.Node.Name {
			cfg.Node.Raft = p.Address
		}
	}
	m.nodes[victim].Kill()
	cfg.Node.Join = []string{m.nodes[0].Mesh().Addr()}
	again := harness.JoinNode(t, cfg, node.Options{Logger: quietLogger(), LedgerTuning: func(c *consensus.ServerConfig) { c.Timings = consensus.FastTimings }})
	restarted := time.Now()
	m.urls[victim] = "http://" + again.HTTPAddr()

	wait.For(t, 20*time.Second, "the restarted node to be ready (its first sync made)", func() bool {
		return getJSON(t, m.urls[victim]+"/readyz", "", &struct{}{}) == 200
	})
	b := budgetsOf(t, m.urls[0])[0]
	t.Logf("the provider charged $%.6f; the victim's escrow $%.6f at the kill; the books settled $%.6f, forfeited $%.6f", charged, held, b.SettledUSD, b.ForfeitedUSD)
	if b.ForfeitedUSD != 0 {
		t.Errorf("$%.6f written off, though the node came back with its journal", b.ForfeitedUSD)
	}
	if b.SettledUSD < charged-1e-9 {
		t.Errorf("the books settled $%.9f, less than the provider charged ($%.9f)", b.SettledUSD, charged)
	}
	// What the journal's ceilings let the node reserve unrecorded is
	// counted as spent: a few requests' bounds, not the escrow it held.
	if b.SettledUSD > charged+held/2 {
		t.Errorf("the books settled $%.6f of the $%.6f escrow held: the journal gave back little", b.SettledUSD-charged, held)
	}
	var spend views.Spend
	wait.For(t, 10*time.Second, "every charge in the ledger's spend", func() bool {
		getJSON(t, m.urls[0]+"/v1/mesh/spend?by=key&since=1h", "", &spend)
		return spend.Requests >= 40
	})
	if spend.Requests != 40 || spend.TotalNanos != int64(consensus.RoundNanos(charged)) {
		t.Errorf("spend after the restart: %d requests, %d nano-dollars; 40 were served for %d", spend.Requests, spend.TotalNanos, consensus.RoundNanos(charged))
	}
	// The provider's capacity: what is not held by an earlier boot's
	// grants (a ghost) is the live nodes' to share.
	live := func() (float64, []views.ShareInfo) {
		var doc views.Shares
		getJSON(t, m.urls[0]+"/v1/mesh/shares", "", &doc)
		free := float64(rpm)
		for _, s := range doc.Shares {
			if s.Provider == "p" && s.Ghost {
				free -= s.CommittedRPM
			}
		}
		return free, doc.Shares
	}
	wait.For(t, 10*time.Second, "90% of the provider's capacity for the live nodes, and a share for the restarted one", func() bool {
		free, _ := live()
		var st views.Status
		getJSON(t, m.urls[victim]+"/v1/mesh/status", "", &st)
		for _, s := range st.RateShares {
			if s.Provider == "p" && s.RPM > 0 && free >= 0.9*rpm {
				return true
			}
		}
		return false
	})
	free, shares := live()
	t.Logf("capacity for the live nodes %.0f of %d within %v of the restart; shares %+v", free, rpm, time.Since(restarted).Round(time.Millisecond), shares)
	for _, s := range shares {
		if s.Ghost {
			t.Errorf("a ghost share is left: %+v", s)
		}
	}
}

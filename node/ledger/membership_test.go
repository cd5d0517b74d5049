package ledger

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// With gossip, each voter comes with the ledger version its metadata
// advertises: a node of a build before versions advertises none (0),
// and members that are no voters are not listed.
func TestMembershipVersionsFromGossip(t *testing.T) {
	start := func(name string, meta gossip.Meta, seeds ...string) *gossip.Mesh {
		c := gossip.DefaultConfig(name)
		c.BindAddr, c.BindPort, c.Seeds, c.Meta = "127.0.0.1", 0, seeds, meta
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		m, err := gossip.New(c, route.NewTracker(route.DefaultHealthConfig(), route.TrackerHooks{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Shutdown() })
		return m
	}
	a := start("a", gossip.Meta{Voter: true, Raft: "127.0.0.1:1", RPC: "127.0.0.1:2", LedgerVersion: consensus.LedgerVersion})
	start("b", gossip.Meta{Voter: true, Raft: "127.0.0.1:3", RPC: "127.0.0.1:4"}, a.Addr()) // an older build
	start("c", gossip.Meta{LedgerVersion: consensus.LedgerVersion}, a.Addr())               // no voter
	m := membership{self: "a", mesh: a}
	want := []consensus.VoterInfo{
		{ID: "a", RaftAddr: "127.0.0.1:1", RPCAddr: "127.0.0.1:2", State: "alive", Version: consensus.LedgerVersion},
		{ID: "b", RaftAddr: "127.0.0.1:3", RPCAddr: "127.0.0.1:4", State: "alive", Version: 0},
	}
	var got []consensus.VoterInfo
	wait.For(t, 10*time.Second, "both voters in gossip", func() bool {
		got = m.Voters()
		return len(a.Members()) == 3 && len(got) == 2
	})
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("voters %+v, want %+v", got, want)
		}
	}
}

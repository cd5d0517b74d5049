package consensus

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A voter leaving for good that leads again after it handed leadership
// over (it won an election before the voter it handed over to was heard
// from) removes itself and steps down, instead of leading a ledger it no
// longer serves until it exits; the others then lead without it.
func TestLeavingVoterThatLeadsAgainRemovesItself(t *testing.T) {
	c := newTestCluster(t, 3)
	l, _ := c.waitLeader(10 * time.Second)
	s := c.servers[l]
	if err := s.TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	n := -1
	wait.For(t, 10*time.Second, "another voter to lead", func() bool { n = c.leader(); return n >= 0 && n != l })
	// Leadership comes back to the leaving voter, as an election it won
	// would give it.
	if err := c.servers[n].raft.LeadershipTransferToServer(raft.ServerID(s.cfg.ID), c.trans[l].LocalAddr()).Error(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the leaving voter to lead again", s.IsLeader)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Nobody else removes it here (no gossip, no reconcile of a voter
	// that left): only the voter itself can.
	if removed, itself := s.AwaitRemoval(ctx, nil); !removed || !itself {
		t.Fatalf("removed %v, by itself %v: the leaving voter still leads or is still a voter", removed, itself)
	}
	wait.For(t, 10*time.Second, "a leader among the others, without the voter that left", func() bool {
		for i, o := range c.servers {
			if i == l || !o.IsLeader() {
				continue
			}
			peers, err := o.Peers()
			return err == nil && len(peers) == 2 && !slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == s.cfg.ID })
		}
		return false
	})
}

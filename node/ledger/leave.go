package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/llmesh/llmesh/consensus"
)

// removeTimeout bounds how long a leaving voter waits to be removed from
// the Raft configuration.
const removeTimeout = 10 * time.Second

// HandOverLeadership has a leading voter hand leadership to another one
// before it goes, so that the ledger does not wait an election timeout.
func (l *Ledger) HandOverLeadership() {
	if l.server == nil || !l.server.IsLeader() || l.soleVoter() {
		return
	}
	if err := l.server.TransferLeadership(); err != nil {
		l.log.Warn("could not hand over Raft leadership; the others will elect a leader", "err", err)
		return
	}
	l.log.Info("Raft leadership handed over")
}

// AwaitRemoval waits, after the node left gossip, until the leader has
// removed this voter from the Raft configuration (its reconcile loop does
// it for a voter that left, while the rest keep a quorum), so that a
// drained voter does not count against the quorum; at most removeTimeout.
// A voter that leads again meanwhile removes itself (Server.AwaitRemoval).
func (l *Ledger) AwaitRemoval(ctx context.Context) {
	if l.server == nil || l.soleVoter() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	switch removed, itself := l.server.AwaitRemoval(ctx, l.peersElsewhere); {
	case itself:
		l.log.Info("removed from the Raft configuration by itself, having led again while leaving")
	case removed:
		l.log.Info("removed from the Raft configuration")
	default:
		l.log.Warn("still in the Raft configuration: the leader will remove this voter once it sees it left")
	}
}

// soleVoter reports whether this voter is the only one in the Raft
// configuration: there is no one to hand over to or be removed by.
func (l *Ledger) soleVoter() bool {
	peers, err := l.server.Peers()
	if err != nil {
		return false
	}
	for _, p := range peers {
		if p.Voter && p.ID != l.name {
			return false
		}
	}
	return true
}

// peersElsewhere asks the leader whether this voter is still in the
// configuration: a removed voter's own log may never learn it.
func (l *Ledger) peersElsewhere(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	peers, err := l.Peers(rctx, true) // served by the leader
	if err != nil || len(peers) == 0 {
		return false
	}
	return !slices.ContainsFunc(peers, func(p consensus.Peer) bool { return p.ID == l.name })
}

// Peers reads the Raft configuration: from the leader when
// linearizable, else from any voter (this one if it is one).
func (l *Ledger) Peers(ctx context.Context, linearizable bool) ([]consensus.Peer, error) {
	b, _, err := l.client.Read(ctx, "peers", linearizable)
	if err != nil {
		return nil, err
	}
	var peers []consensus.Peer
	if err := json.Unmarshal(b, &peers); err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	return peers, nil
}

// Version returns the ledger version the voters agreed on: this voter's
// replica's, or, on another node, a voter's (asked within a second).
func (l *Ledger) Version(ctx context.Context) (int, error) {
	if l.server != nil {
		var v int
		l.server.FSM().Read(func(x *consensus.Ledger) { v = x.Version() })
		return v, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, _, err := l.client.Read(ctx, "version", false)
	if err != nil {
		return 0, err
	}
	var v int
	if err := json.Unmarshal(b, &v); err != nil {
		return 0, fmt.Errorf("version: %w", err)
	}
	return v, nil
}

// leaderName asks a voter who leads, for a node that is not one.
func (l *Ledger) leaderName(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	peers, err := l.Peers(ctx, false)
	if err != nil {
		return ""
	}
	for _, p := range peers {
		if p.Leader {
			return p.ID
		}
	}
	return ""
}

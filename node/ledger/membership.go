package ledger

import (
	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
)

// membership gives the consensus layer the voters gossip knows, and this
// node itself.
type membership struct {
	self     string
	mesh     *gossip.Mesh  // nil when the node does not gossip
	raftAddr func() string // this voter's Raft address; "" on other nodes
	rpcAddr  func() string
}

// Voters implements consensus.Membership: each with the ledger version
// its gossip metadata advertises. Without gossip, the voters are this
// node when it is one, of this build's version.
func (m membership) Voters() []consensus.VoterInfo {
	var out []consensus.VoterInfo
	if m.mesh == nil {
		if addr := m.raftAddr(); addr != "" {
			out = append(out, consensus.VoterInfo{ID: m.self, RaftAddr: addr, RPCAddr: m.rpcAddr(), State: "alive", Version: consensus.LedgerVersion})
		}
		return out
	}
	for _, mem := range m.mesh.Members() {
		if mem.Meta.Voter {
			out = append(out, consensus.VoterInfo{ID: mem.Name, RaftAddr: mem.Meta.Raft, RPCAddr: mem.Meta.RPC, State: mem.State,
				Version: mem.Meta.LedgerVersion})
		}
	}
	return out
}

// Gone implements consensus.Membership: a node failed, left, or unknown.
func (m membership) Gone(node string) bool {
	if node == m.self {
		return false
	}
	if m.mesh == nil {
		return true
	}
	for _, mem := range m.mesh.Members() {
		if mem.Name == node {
			return mem.State == "failed" || mem.State == "left"
		}
	}
	return true
}

package node

// Rate share left on peers: each node gossips what is left of its shares
// in its load report, and a node whose own share is spent forwards there
// (forward.View.Spare reads the reports).

import "github.com/llmesh/llmesh/gossip"

// loadReport is what this node gossips of its load: requests in flight,
// the rate share it has left of each limited provider, and the room the
// self-hosted providers it scrapes have.
func (n *Node) loadReport() gossip.Load {
	l := gossip.Load{InFlight: int(n.inFlight.Load())}
	if n.ledger != nil {
		for _, s := range n.ledger.Rates().Spares(n.now()) {
			if len(l.Spare) == gossip.MaxSpares {
				break
			}
			l.Spare = append(l.Spare, gossip.Spare{Provider: s.Provider, Requests: s.Requests})
		}
	}
	for _, g := range n.engines.Summaries() {
		if len(l.Engines) == gossip.MaxEngines {
			break
		}
		l.Engines = append(l.Engines, gossip.Engine{Provider: g.Provider, Replicas: g.Replicas, Running: g.Running, Waiting: g.Waiting, KVUsage: g.KVUsage})
	}
	return l
}

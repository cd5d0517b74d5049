package node

// Rate share left on peers: each node gossips what is left of its shares
// in its load report, and a node whose own share is spent forwards there.

import (
	"time"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

var _ route.SpareView = (*meshView)(nil)

type spareNode struct {
	name, region string
	jurisdiction region.Jurisdiction
	rtt          time.Duration
	requests     int
}

// Spare implements route.SpareView from the peers' gossiped load
// reports (at most viaRefresh old, plus gossip's delay): a peer whose
// share ran out since answers that it is over it, and the request moves
// on.
func (v *meshView) Spare(provider, inRegion string, j region.Jurisdiction, i int) (string, string, time.Duration, bool) {
	for _, c := range v.snapshot().spares[provider] {
		if c.requests > 0 && (inRegion == "" || c.region == inRegion) && (j == "" || c.jurisdiction == j) {
			if i == 0 {
				return c.name, c.region, c.rtt, true
			}
			i--
		}
	}
	return "", "", 0, false
}

// loadReport is what this node gossips of its load: requests in flight
// and the rate share it has left of each limited provider.
func (n *Node) loadReport() gossip.Load {
	l := gossip.Load{InFlight: int(n.inFlight.Load())}
	if n.ledger != nil {
		for _, s := range n.ledger.rates.Spares(n.now()) {
			if len(l.Spare) == gossip.MaxSpares {
				break
			}
			l.Spare = append(l.Spare, gossip.Spare{Provider: s.Provider, Requests: s.Requests})
		}
	}
	return l
}

package node

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/llmesh/llmesh/route"
)

// prober sends a one-token request to providers nobody in this node's
// region has called for a while, so their health is known before a user
// request finds out. One node per region probes each provider: the one
// chosen by rendezvous hashing of the provider's name over the region's
// alive, non-draining nodes, so the choice moves only when membership
// does. The result feeds the tracker and so the gossip, like any attempt.
type prober struct {
	n    *Node
	idle time.Duration
}

// newProber returns nil when probes are disabled.
func newProber(n *Node, idle time.Duration) *prober {
	if idle <= 0 {
		return nil
	}
	return &prober{n: n, idle: idle}
}

func (p *prober) run(stop <-chan struct{}) {
	t := time.NewTicker(max(p.idle/6, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, o := range p.due(p.n.now()) {
			select {
			case <-stop:
				return
			default:
			}
			p.probe(o, stop)
		}
	}
}

// due returns one offer of each provider this node should probe now.
func (p *prober) due(now time.Time) []*route.Offer {
	n := p.n
	recent := map[string]bool{} // providers called lately in this region
	for _, ps := range n.tracker.Snapshot(now) {
		if now.Sub(ps.LastAttempt) < p.idle {
			recent[ps.Provider] = true
		}
	}
	var regionNodes []string
	if n.mesh != nil {
		regionNodes = n.mesh.AliveInRegion(n.s.Region)
		inRegion := map[string]bool{}
		for _, name := range regionNodes {
			inRegion[name] = true
		}
		for _, r := range n.mesh.Reports() {
			if inRegion[r.Observer] && r.IdleFor < p.idle {
				recent[r.Provider] = true
			}
		}
	}
	var out []*route.Offer
	for _, pv := range n.catalog().Providers() {
		if recent[pv.Name] || (pv.Reach == route.ReachRegion && pv.Region != n.s.Region) || len(pv.Models) == 0 {
			continue
		}
		// A cooldown learned anywhere in the mesh holds for probes too.
		if n.planner().Health.Health(pv.Name, now).CoolingUntil.After(now) {
			continue
		}
		if len(regionNodes) > 0 && chooseProber(pv.Name, regionNodes) != n.s.Name {
			continue
		}
		if o := offerOf(n.catalog(), pv); o != nil {
			out = append(out, o)
		}
	}
	return out
}

// offerOf finds pv's offer of its first model.
func offerOf(c *route.Catalog, pv *route.Provider) *route.Offer {
	for _, o := range c.Offers(pv.Models[0].Name) {
		if o.Provider == pv {
			return o
		}
	}
	return nil
}

// chooseProber picks the node of nodes that probes provider.
func chooseProber(provider string, nodes []string) string {
	best, bestScore := "", uint64(0)
	for _, name := range nodes {
		h := fnv.New64a()
		h.Write([]byte(provider))
		h.Write([]byte{0})
		h.Write([]byte(name))
		if s := h.Sum64(); best == "" || s > bestScore {
			best, bestScore = name, s
		}
	}
	return best
}

func (p *prober) probe(o *route.Offer, stop <-chan struct{}) {
	n := p.n
	ctx, cancel := context.WithTimeout(context.Background(), n.s.Executor.FirstByteTimeout)
	defer cancel()
	go func() { // the node stopping abandons the probe
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := n.exec.Probe(ctx, o)
	if res == nil || len(res.Attempts) == 0 {
		return // not attempted: ejected and not yet due, cooling down, out of rate
	}
	provider := o.Provider.Name
	outcome := string(res.Attempts[len(res.Attempts)-1].Outcome)
	n.metrics.probes.WithLabelValues(provider, outcome).Inc()
	n.metrics.probeCost.WithLabelValues(provider).Add(res.Cost)
	n.metrics.probeTokens.WithLabelValues(provider).Add(float64(res.Usage.PromptTokens + res.Usage.CompletionTokens))
	n.log.Debug("probed an idle provider", "provider", provider, "outcome", outcome, "err", err)
}

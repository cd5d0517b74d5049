package node

import (
	"context"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/route"
)

// prober sends a one-token request to providers nobody in this node's
// region has called for a while, so their health is known before a user
// request finds out. One node per region probes each provider: the one
// chosen by rendezvous hashing of the provider's name over the region's
// alive, non-draining nodes, so the choice moves only when membership
// does. The result feeds the tracker and so the gossip, like any attempt.
type prober struct {
	proberDeps
	idle time.Duration
}

// proberDeps are what the prober works with.
type proberDeps struct {
	self, region string
	now          func() time.Time
	tracker      *route.Tracker
	// mesh is the gossip's view of the region's nodes and their reports;
	// nil for a node alone.
	mesh interface {
		AliveInRegion(region string) []string
		Reports() []gossip.ProviderReport
	}
	// routing returns the current catalog and planner (a reload replaces
	// both).
	routing func() (*route.Catalog, *route.Planner)
	exec    *route.Executor
	timeout time.Duration // a probe's, to its first byte
	metrics *metrics
	log     *slog.Logger
}

// newProber returns the node's prober, nil when probes are disabled.
func (n *Node) newProber() *prober {
	if n.s.ProbeIdle <= 0 {
		return nil
	}
	p := &prober{idle: n.s.ProbeIdle, proberDeps: proberDeps{self: n.s.Name, region: n.s.Region, now: n.now,
		tracker: n.tracker, exec: n.exec, timeout: n.s.Executor.FirstByteTimeout, metrics: n.metrics, log: n.log,
		routing: func() (*route.Catalog, *route.Planner) { rt := n.rt.Load(); return rt.catalog, rt.planner }}}
	if n.mesh != nil {
		p.mesh = n.mesh
	}
	return p
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
		for _, o := range p.due(p.now()) {
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
	recent := map[string]bool{} // providers called lately in this region
	for _, ps := range p.tracker.Snapshot(now) {
		if now.Sub(ps.LastAttempt) < p.idle {
			recent[ps.Provider] = true
		}
	}
	var regionNodes []string
	if p.mesh != nil {
		regionNodes = p.mesh.AliveInRegion(p.region)
		inRegion := map[string]bool{}
		for _, name := range regionNodes {
			inRegion[name] = true
		}
		for _, r := range p.mesh.Reports() {
			if inRegion[r.Observer] && r.IdleFor < p.idle {
				recent[r.Provider] = true
			}
		}
	}
	catalog, planner := p.routing()
	var out []*route.Offer
	for _, pv := range catalog.Providers() {
		if recent[pv.Name] || (pv.Reach == route.ReachRegion && pv.Region != p.region) || len(pv.Models) == 0 {
			continue
		}
		// A cooldown learned anywhere in the mesh holds for probes too.
		if planner.Health.Health(pv.Name, now).CoolingUntil.After(now) {
			continue
		}
		if len(regionNodes) > 0 && chooseProber(pv.Name, regionNodes) != p.self {
			continue
		}
		if o := offerOf(catalog, pv); o != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	go func() { // the node stopping abandons the probe
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := p.exec.Probe(ctx, o)
	if res == nil || len(res.Attempts) == 0 {
		return // not attempted: ejected and not yet due, cooling down, out of rate
	}
	provider := o.Provider.Name
	outcome := string(res.Attempts[len(res.Attempts)-1].Outcome)
	p.metrics.probes.WithLabelValues(provider, outcome).Inc()
	p.metrics.probeCost.WithLabelValues(provider).Add(res.Cost)
	p.metrics.probeTokens.WithLabelValues(provider).Add(float64(res.Usage.PromptTokens + res.Usage.CompletionTokens))
	p.log.Debug("probed an idle provider", "provider", provider, "outcome", outcome, "err", err)
}

// Package probe sends a one-token request to providers nobody in this
// node's region has called for a while, so their health is known before
// a user request finds out. One node per region probes each provider:
// the one chosen by rendezvous hashing of the provider's name over the
// region's alive, non-draining nodes, so the choice moves only when
// membership does. The result feeds the tracker and so the gossip, like
// any attempt.
package probe

import (
	"context"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/route"
)

// Config is what the prober works with.
type Config struct {
	// Self and Region are the probing node and its region.
	Self, Region string
	// Idle is how long a provider goes uncalled in the region before it
	// is probed; 0 or less: no probes.
	Idle time.Duration
	// Timeout bounds a probe, to its first byte.
	Timeout time.Duration
	Now     func() time.Time
	Tracker *route.Tracker
	// Mesh is the gossip's view of the region's nodes and their reports;
	// nil for a node alone.
	Mesh Mesh
	// Routing returns the current catalog and planner (a reload replaces
	// both).
	Routing func() (*route.Catalog, *route.Planner)
	Exec    *route.Executor
	// Probed hears of each probe made: its provider, outcome and result.
	Probed func(provider, outcome string, res *route.Result)
	Log    *slog.Logger
}

// Mesh is the part of the gossip the prober reads.
type Mesh interface {
	AliveInRegion(region string) []string
	Reports() []gossip.ProviderReport
}

// Prober probes idle providers until stopped.
type Prober struct{ cfg Config }

// New returns a prober, nil when probes are disabled.
func New(cfg Config) *Prober {
	if cfg.Idle <= 0 {
		return nil
	}
	return &Prober{cfg: cfg}
}

// Run probes every sixth of Idle until stop is closed.
func (p *Prober) Run(stop <-chan struct{}) {
	t := time.NewTicker(max(p.cfg.Idle/6, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, o := range p.due(p.cfg.Now()) {
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
func (p *Prober) due(now time.Time) []*route.Offer {
	recent := map[string]bool{} // providers called lately in this region
	for _, ps := range p.cfg.Tracker.Snapshot(now) {
		if now.Sub(ps.LastAttempt) < p.cfg.Idle {
			recent[ps.Provider] = true
		}
	}
	var regionNodes []string
	if p.cfg.Mesh != nil {
		regionNodes = p.cfg.Mesh.AliveInRegion(p.cfg.Region)
		inRegion := map[string]bool{}
		for _, name := range regionNodes {
			inRegion[name] = true
		}
		for _, r := range p.cfg.Mesh.Reports() {
			if inRegion[r.Observer] && r.IdleFor < p.cfg.Idle {
				recent[r.Provider] = true
			}
		}
	}
	catalog, planner := p.cfg.Routing()
	var out []*route.Offer
	for _, pv := range catalog.Providers() {
		if recent[pv.Name] || (pv.Reach == route.ReachRegion && pv.Region != p.cfg.Region) || len(pv.Models) == 0 {
			continue
		}
		// A cooldown learned anywhere in the mesh holds for probes too.
		if planner.Health.Health(pv.Name, now).CoolingUntil.After(now) {
			continue
		}
		if len(regionNodes) > 0 && chooseProber(pv.Name, regionNodes) != p.cfg.Self {
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

func (p *Prober) probe(o *route.Offer, stop <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	go func() { // the node stopping abandons the probe
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := p.cfg.Exec.Probe(ctx, o)
	if res == nil || len(res.Attempts) == 0 {
		return // not attempted: ejected and not yet due, cooling down, out of rate
	}
	provider := o.Provider.Name
	outcome := string(res.Attempts[len(res.Attempts)-1].Outcome)
	p.cfg.Probed(provider, outcome, res)
	p.cfg.Log.Debug("probed an idle provider", "provider", provider, "outcome", outcome, "err", err)
}

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/ledger"
	"github.com/llmesh/llmesh/route"
)

// routing is the catalog and the planner over it, replaced together by a
// reload; a request plans with the pair it loaded at its start.
type routing struct {
	catalog *route.Catalog
	planner *route.Planner
	// since is when each model and group became available here (Unix
	// seconds): GET /v1/models' created. A reload keeps it for those
	// that stay.
	since map[string]int64
}

// newRouting is the routing of catalog and planner at now, keeping the
// times of old's models (nil at start).
func newRouting(catalog *route.Catalog, planner *route.Planner, old *routing, now time.Time) *routing {
	rt := &routing{catalog: catalog, planner: planner, since: map[string]int64{}}
	for _, name := range catalog.Names() {
		rt.since[name] = now.Unix()
		if old != nil {
			if t, ok := old.since[name]; ok {
				rt.since[name] = t
			}
		}
	}
	return rt
}

func (n *Node) catalog() *route.Catalog { return n.rt.Load().catalog }
func (n *Node) planner() *route.Planner { return n.rt.Load().planner }

// Reload applies cfg's providers (addresses, keys, models, prices, priorities, limits) and
// model groups without dropping traffic: requests under way finish with
// what they planned, new ones plan with the new catalog. Health, rate
// shares and affinity of providers that remain are kept. Anything else
// that changed (the node section, regions, tenants, timeouts) needs a
// restart: Reload refuses the file, naming the field, and the node keeps
// its configuration. Changed limits are written to the ledger.
func (n *Node) Reload(cfg *Config) error {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	s, err := config.Resolve(cfg, config.Env{Getenv: n.getenv, ReadFile: n.readFile, PrivateIP: config.PrivateIP})
	if err != nil {
		return err
	}
	if f := config.RestartField(n.cfg, cfg); f != "" {
		return fmt.Errorf("%s changed: restart the node to apply it (only providers and groups reload)", f)
	}
	catalog, err := route.NewCatalog(s.Providers, s.Groups...)
	if err != nil {
		return err
	}
	old := n.rt.Load()
	p := *old.planner
	p.Catalog = catalog
	switch q := n.quota.(type) {
	case *route.Limiter:
		q.SetProviders(catalog.Providers())
	case *consensus.RateHolder:
		q.SetCapacities(ledger.RateCapacities(catalog.Providers()))
	}
	n.rt.Store(newRouting(catalog, &p, old, n.now()))
	n.cfg = cfg
	n.log.Info("configuration reloaded", "providers", len(catalog.Providers()), "models", len(catalog.Models()))
	if n.ledger != nil {
		n.putRates(old.catalog, catalog)
	}
	return nil
}

// putRates writes to the ledger the mesh-wide limits that a reload
// changed, in the background: the leader hands out shares of them from
// its next reconcile.
func (n *Node) putRates(was, now *route.Catalog) {
	var cmds []consensus.Command
	for _, p := range now.Providers() {
		if o := was.Provider(p.Name); o != nil && o.RPM == p.RPM && o.TPM == p.TPM {
			continue
		}
		if p.RPM == 0 && p.TPM == 0 && was.Provider(p.Name) == nil {
			continue
		}
		b, _ := json.Marshal(consensus.RateCapacity{Provider: p.Name, RPM: int64(p.RPM), TPM: int64(p.TPM)})
		cmds = append(cmds, consensus.Command{ID: newCommandID(n.s.Name), Type: consensus.CmdPutRate, Body: b})
	}
	if len(cmds) == 0 {
		return
	}
	n.loops.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		go func() {
			select {
			case <-n.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for _, c := range cmds {
			if _, err := n.ledger.Client().Apply(ctx, c); err != nil {
				n.log.Warn("could not write a reloaded rate limit to the ledger", "err", err)
			}
		}
	})
}

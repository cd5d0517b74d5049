package des

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// build makes the world: regions, providers, the ledger and its
// tenants, and each region's nodes.
func (w *world) build() error {
	var rs []region.Region
	for _, r := range w.s.Regions {
		rs = append(rs, region.Region{Name: r.Name, Jurisdiction: region.Jurisdiction(r.Jurisdiction)})
		w.juris[r.Name] = region.Jurisdiction(r.Jurisdiction)
	}
	m, err := region.NewMap(rs)
	if err != nil {
		return err
	}
	w.regions = m
	if err := w.buildProviders(); err != nil {
		return err
	}
	if err := w.buildEngines(); err != nil {
		return err
	}
	w.startScrapes()
	if err := w.seedLedger(); err != nil {
		return err
	}
	policy := w.routePolicy()
	for _, r := range w.s.Regions {
		for i := range r.Nodes {
			if err := w.buildNode(r.Name, i, policy); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildProviders makes the catalog, the providers' own limits and the
// leader's allocator of rate shares.
func (w *world) buildProviders() error {
	var ps []route.Provider
	for i := range w.s.Providers {
		p := &w.s.Providers[i]
		w.specs[p.Name] = p
		js := p.Jurisdictions
		if len(js) == 0 {
			js = []string{string(w.juris[p.Region])}
		}
		var set []region.Jurisdiction
		for _, j := range js {
			set = append(set, region.Jurisdiction(j))
		}
		reach := route.ReachGlobal
		if p.Reach == "region" {
			reach = route.ReachRegion
		}
		rp := route.Provider{Name: p.Name, Kind: route.KindOpenAI, Region: p.Region, Reach: reach, Jurisdictions: region.NewSet(set...),
			BaseURL: "http://" + p.Name + ".invalid", Priority: p.Priority, RPM: p.RPM, TPM: p.TPM}
		for r := range p.Replicas {
			rp.Replicas = append(rp.Replicas, fmt.Sprintf("http://%s-%d.invalid", p.Name, r))
		}
		for _, md := range p.Models {
			rp.Models = append(rp.Models, route.Model{Name: md.Name, InputUSDPerMTok: md.InputUSDPerMTok, OutputUSDPerMTok: md.OutputUSDPerMTok})
		}
		ps = append(ps, rp)
	}
	var err error
	if w.catalog, err = route.NewCatalog(slices.Clone(ps)); err != nil {
		return err
	}
	w.providers = ps
	w.limiter = route.NewLimiter(w.catalog.Providers())
	var caps []consensus.RateCapacity
	for _, p := range w.s.Providers {
		if p.RPM > 0 || p.TPM > 0 {
			caps = append(caps, consensus.RateCapacity{Provider: p.Name, RPM: int64(p.RPM), TPM: int64(p.TPM)})
		}
		w.replicas = w.replicas || p.Replicas > 1
	}
	if len(caps) > 0 {
		w.alloc = consensus.NewRateAllocator(caps, 0, 0)
	}
	return nil
}

// seedLedger makes the ledger, held by the first region's voter, with
// the tenants seeded as a node seeds them from its configuration.
func (w *world) seedLedger() error {
	w.ledger = consensus.NewLedger()
	w.leader = w.s.Regions[0].Name
	for i := range w.s.Tenants {
		t := &w.s.Tenants[i]
		w.tenants[t.Name] = t
		ct := consensus.Tenant{Name: t.Name, Residency: t.Residency}
		if t.BudgetUSD > 0 {
			ct.Budget = &consensus.Budget{Limit: consensus.RoundNanos(t.BudgetUSD), Period: "total"}
		}
		b, _ := json.Marshal(ct)
		if r := w.ledger.Apply(consensus.Command{ID: "seed/tenant/" + t.Name, Type: consensus.CmdSeedTenant, Time: w.clock().UnixNano(), Body: b}); r.Err != "" {
			return fmt.Errorf("des: seeding tenant %s: %s", t.Name, r.Err)
		}
	}
	return nil
}

// routePolicy is the planner's policy of the run.
func (w *world) routePolicy() route.Policy {
	switch w.policy {
	case "round-robin":
		w.rr = &roundRobin{index: map[string]int{}}
		for i, p := range w.catalog.Providers() {
			w.rr.index[p.Name] = i
		}
		w.rr.n = len(w.catalog.Providers())
		return w.rr
	case "cheapest-first":
		return cheapestFirst{}
	case "latency-first":
		return latencyFirst{}
	}
	return route.CostFirst{}
}

// buildNode makes region's node i: its catalog (its own when providers
// have replicas), tracker, planner, rate and budget holders, and the
// executor that admits its attempts.
func (w *world) buildNode(regionName string, i int, policy route.Policy) error {
	n := &simNode{name: fmt.Sprintf("%s-%d", regionName, i+1), region: regionName, catalog: w.catalog}
	if w.replicas {
		var err error
		if n.catalog, err = route.NewCatalog(slices.Clone(w.providers)); err != nil {
			return err
		}
		n.catalog.Deterministic()
	}
	n.tracker = route.NewTracker(route.DefaultHealthConfig(), route.TrackerHooks{})
	n.planner = &route.Planner{Self: n.name, Region: regionName, Catalog: n.catalog, Health: n.tracker, Policy: policy,
		Regions: w.regions, Mesh: meshView{w: w, from: regionName}}
	if w.scr != nil {
		n.planner.Engines, n.planner.Remote = w.scr, w.scr
	}
	if w.alloc != nil {
		n.rates = consensus.NewRateHolder(n.name, rateCapacities(n.catalog.Providers()), w.renewRates(n),
			func() int { return len(w.nodes) }, func() bool { return false })
		n.rates.Drive(w.clock)
		n.planner.Quota = n.rates
	}
	if w.policy == "llmesh" {
		n.planner.Affinity = route.NewAffinity(1 << 22)
	}
	n.budget = consensus.NewBudgetHolder(n.name, w.apply(n), w.budgeted)
	n.budget.Drive(w.clock, w.s.Seed*1000003+uint64(len(w.nodes)))
	n.exec, n.far = w.executor(n, n), map[string]*route.Executor{}
	w.nodes = append(w.nodes, n)
	w.nodeByName[n.name] = n
	w.byRegion[regionName] = append(w.byRegion[regionName], n)
	return nil
}

// renewRates is a node's way to the leader's rate allocator: direct,
// unless its region is cut off from the leader's.
func (w *world) renewRates(n *simNode) func(context.Context, []consensus.Demand) ([]consensus.Grant, time.Duration, time.Duration, error) {
	return func(_ context.Context, ds []consensus.Demand) ([]consensus.Grant, time.Duration, time.Duration, error) {
		if w.cut(n.region, w.leader, w.now) {
			return nil, 0, 0, errors.New("des: the leader's region is cut off")
		}
		return w.alloc.Renew(n.name, ds, w.clock())
	}
}

// renew keeps a node's rate shares renewed as its Run loop would: when
// the leader says, or a second after a failure.
func (w *world) renew(n *simNode) {
	var step func()
	step = func() {
		wait, err := n.rates.Renew(context.Background())
		if err != nil {
			wait = time.Second
		}
		if w.now < w.s.Duration+time.Hour {
			w.at(w.now+wait, step)
		}
	}
	w.at(w.now, step)
}

// apply is a node's way to the ledger: direct, unless its region is cut
// off from the ledger's.
func (w *world) apply(n *simNode) func(context.Context, consensus.Command) (consensus.Result, error) {
	return func(_ context.Context, cmd consensus.Command) (consensus.Result, error) {
		if w.cut(n.region, w.leader, w.now) {
			return consensus.Result{}, errors.New("des: the ledger's region is cut off")
		}
		cmd.Time = w.clock().UnixNano()
		return w.ledger.Apply(cmd), nil
	}
}

// budgeted lists the tenants with a budget (the holders ask for it every
// sync: built once).
func (w *world) budgeted() map[string]bool {
	if w.withBudget == nil {
		w.withBudget = map[string]bool{}
		for name, t := range w.tenants {
			if t.BudgetUSD > 0 {
				w.withBudget[name] = true
			}
		}
	}
	return w.withBudget
}

// tick keeps a node's budget holder syncing at its interval of virtual
// time, as its Run loop would, while the run lasts. A sync with nothing
// to send changes nothing, so it is skipped unless requests touched the
// holder or its NextSync has come (everySync turns the skipping off: the
// test that both give the same run).
func (w *world) tick(n *simNode) {
	n.touched = true // the first sync asks for an epoch and escrow
	var step func()
	step = func() {
		if now := w.clock(); w.opts.everySync || n.touched || (!n.due.IsZero() && !now.Before(n.due)) {
			_ = n.budget.Sync(context.Background(), false)
			n.touched, n.due = false, n.budget.NextSync(now)
		}
		if w.now < w.s.Duration+time.Hour {
			w.at(w.now+n.budget.Interval(), step)
		}
	}
	w.at(w.now, step)
}

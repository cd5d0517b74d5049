package des

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// epoch is virtual time zero: the planner, the health tracker, the
// limiter and the ledger see epoch plus the simulated offset.
var epoch = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Network and protocol timings the model assumes.
const (
	failFast       = 100 * time.Millisecond // a refused or failed call answers this fast
	forwardTimeout = 5 * time.Second        // a forward into a cut-off region gives up after this
	detectAfter    = 5 * time.Second        // gossip marks a cut-off region's nodes failed after this
	maxAttempts    = 3                      // as the executor's default
)

// Result is what one policy did with the scenario.
type Result struct {
	Policy        string `json:"policy"`
	Requests      int    `json:"requests"`
	OK            int    `json:"ok"`
	Failed        int    `json:"failed"`         // every attempt failed, or nothing to try
	BudgetRefused int    `json:"budget_refused"` // 402: the tenant's budget is spent
	EscrowWait    int    `json:"escrow_wait"`    // 429: the budget left is other nodes' escrow
	Failovers     int    `json:"failovers"`      // attempts beyond the first
	// Upstream429 counts calls a provider refused for its own limits:
	// what the mesh's rate shares are there to prevent.
	Upstream429 int     `json:"upstream_429"`
	CostUSD     float64 `json:"cost_usd"`
	SavedVsRR   float64 `json:"saved_vs_round_robin"` // fraction of round-robin's cost
	LatencyP50  float64 `json:"latency_p50_ms"`
	LatencyP90  float64 `json:"latency_p90_ms"`
	LatencyP99  float64 `json:"latency_p99_ms"`
	TTFTP50     float64 `json:"ttft_p50_ms"`
	TTFTP99     float64 `json:"ttft_p99_ms"`
	// AffinityHitRate is the share of a session's later turns served by
	// the provider (and replica) of its previous turn, whose prompt cache
	// is warm.
	AffinityHitRate     float64 `json:"affinity_hit_rate"`
	ResidencyViolations int     `json:"residency_violations"` // must be 0
	OverspendUSD        float64 `json:"overspend_usd"`        // must be 0
	// CostByHour is the cost of what was served, hour by hour.
	CostByHour []float64 `json:"cost_by_hour"`
	// LoadByRegion is the requests served by providers of each region.
	LoadByRegion map[string]int `json:"load_by_region"`
	// SpentByTenant is what each tenant was served, in USD.
	SpentByTenant map[string]float64 `json:"spent_by_tenant"`
	latencies     []float64          // ms, of answered requests
	ttfts         []float64          // ms, of answered streams
}

// Policies are the policies a run compares, in order: round-robin first,
// the baseline of "saved".
var Policies = []string{"round-robin", "cheapest-first", "latency-first", "llmesh"}

// Run simulates the scenario under each policy in Policies, each from the
// same seed and the same workload.
func Run(s *Scenario) ([]Result, error) {
	var out []Result
	for _, p := range Policies {
		r, err := RunPolicy(s, p)
		if err != nil {
			return nil, err
		}
		out = append(out, *r)
	}
	for i := range out {
		if rr := out[0].CostUSD; rr > 0 {
			out[i].SavedVsRR = round6((rr - out[i].CostUSD) / rr)
		}
	}
	return out, nil
}

// world is one policy's simulation.
type world struct {
	s          *Scenario
	policy     string
	now        time.Duration
	seq        uint64
	events     eventHeap
	regions    *region.Map
	juris      map[string]region.Jurisdiction // by region
	catalog    *route.Catalog
	providers  []route.Provider // as configured, for each node's own catalog
	replicas   bool             // some provider has replicas
	alloc      *consensus.RateAllocator
	nodeByName map[string]*simNode
	specs      map[string]*ProviderSpec
	limiter    *route.Limiter // each provider's own limits
	nodes      []*simNode
	byRegion   map[string][]*simNode
	ledger     *consensus.Ledger
	leader     string // the ledger's region
	tenants    map[string]*TenantSpec
	rr         *roundRobin
	res        *Result
	lastProv   map[string]string // by session: the provider (and replica) of its last answered turn
	wl         *rand.Rand        // the workload's stream, the same under every policy
	reqID      uint64
	withBudget map[string]bool
	laterOK    int // answered requests that were a session's later turn
	hits       int // of those, served by the previous turn's provider and replica
}

type simNode struct {
	name, region string
	planner      *route.Planner
	tracker      *route.Tracker
	budget       *consensus.BudgetHolder
	// rates is the node's share of the limited providers' capacity,
	// leased from the leader; nil when no provider is limited.
	rates *consensus.RateHolder
	// catalog is the node's own when providers have replicas: each node
	// keeps its own ring of sessions and requests in flight.
	catalog *route.Catalog
	// touched says a request reserved or settled budget since the
	// holder's last sync; due is when the holder next has something to
	// send otherwise (zero: nothing).
	touched bool
	due     time.Time
}

// RunPolicy simulates the scenario under one policy.
func RunPolicy(s *Scenario, policy string) (*Result, error) {
	if !slices.Contains(Policies, policy) {
		return nil, fmt.Errorf("des: unknown policy %q (have %v)", policy, Policies)
	}
	w := &world{s: s, policy: policy, juris: map[string]region.Jurisdiction{}, specs: map[string]*ProviderSpec{},
		byRegion: map[string][]*simNode{}, nodeByName: map[string]*simNode{}, tenants: map[string]*TenantSpec{}, lastProv: map[string]string{},
		wl:  rand.New(rand.NewPCG(s.Seed, 0x11e5)),
		res: &Result{Policy: policy, LoadByRegion: map[string]int{}, SpentByTenant: map[string]float64{}, CostByHour: make([]float64, int(math.Ceil(s.Duration.Hours())))}}
	if err := w.build(); err != nil {
		return nil, err
	}
	for _, n := range w.nodes {
		if len(w.budgeted()) > 0 {
			w.tick(n)
		}
		if n.rates != nil {
			w.renew(n)
		}
	}
	w.at(w.nextArrival(0), func() { w.arrive() })
	for w.events.Len() > 0 {
		e := heap.Pop(&w.events).(*event)
		if e.t > s.Duration+time.Hour { // what was under way has finished
			break
		}
		w.now = e.t
		e.fn()
	}
	w.finish()
	return w.res, nil
}

func (w *world) clock() time.Time { return epoch.Add(w.now) }

// at schedules fn at virtual time t; events at the same time run in the
// order they were scheduled.
func (w *world) at(t time.Duration, fn func()) {
	w.seq++
	heap.Push(&w.events, &event{t: t, seq: w.seq, fn: fn})
}

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
	// The ledger, held by the first region's voter; tenants seeded as a
	// node seeds them from its configuration.
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
	var policy route.Policy = route.CostFirst{}
	switch w.policy {
	case "round-robin":
		w.rr = &roundRobin{index: map[string]int{}}
		for i, p := range w.catalog.Providers() {
			w.rr.index[p.Name] = i
		}
		w.rr.n = len(w.catalog.Providers())
		policy = w.rr
	case "cheapest-first":
		policy = cheapestFirst{}
	case "latency-first":
		policy = latencyFirst{}
	}
	for _, r := range w.s.Regions {
		for i := range r.Nodes {
			n := &simNode{name: fmt.Sprintf("%s-%d", r.Name, i+1), region: r.Name, catalog: w.catalog}
			if w.replicas {
				if n.catalog, err = route.NewCatalog(slices.Clone(w.providers)); err != nil {
					return err
				}
				for _, p := range n.catalog.Providers() {
					if p.Ring != nil {
						p.Ring.Deterministic()
					}
				}
			}
			n.tracker = route.NewTracker(route.DefaultHealthConfig(), route.TrackerHooks{})
			n.planner = &route.Planner{Self: n.name, Region: r.Name, Catalog: n.catalog, Health: n.tracker, Policy: policy,
				Regions: w.regions, Mesh: meshView{w: w, from: r.Name}}
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
			w.nodes = append(w.nodes, n)
			w.nodeByName[n.name] = n
			w.byRegion[r.Name] = append(w.byRegion[r.Name], n)
		}
	}
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

// cut reports whether regions a and b cannot reach each other at t.
func (w *world) cut(a, b string, t time.Duration) bool {
	if a == b {
		return false
	}
	for _, p := range w.s.Partitions {
		if t >= p.Start && t < p.End && slices.Contains(p.Regions, a) != slices.Contains(p.Regions, b) {
			return true
		}
	}
	return false
}

func (w *world) rtt(a, b string) time.Duration {
	if a == b {
		return w.s.RTT.Local
	}
	for _, p := range w.s.RTT.Pairs {
		if p.A == a && p.B == b || p.A == b && p.B == a {
			return p.RTT
		}
	}
	return w.s.RTT.Default
}

// meshView is a node's gossip view: the via node of a region, unless
// gossip has noticed that the region is cut off.
type meshView struct {
	w    *world
	from string
}

func (v meshView) Via(r string) (string, time.Duration, bool) {
	nodes := v.w.byRegion[r]
	if len(nodes) == 0 || v.w.cut(v.from, r, v.w.now-detectAfter) && v.w.cut(v.from, r, v.w.now) {
		return "", 0, false
	}
	return nodes[0].name, v.w.rtt(v.from, r), true
}

// rate is the session arrival rate at virtual time t, per second.
func (w *world) rate(t time.Duration) float64 {
	r := w.s.Workload.SessionsPerHour / 3600
	if sh := w.s.Workload.DailyShape; len(sh) == 24 {
		r *= sh[int(t.Hours())%24]
	}
	return r
}

// nextArrival draws the next session arrival after t (a Poisson process
// with a time-varying rate, by thinning).
func (w *world) nextArrival(t time.Duration) time.Duration {
	peak := w.s.Workload.SessionsPerHour / 3600
	for _, f := range w.s.Workload.DailyShape {
		peak = math.Max(peak, w.s.Workload.SessionsPerHour/3600*f)
	}
	for {
		t += time.Duration(w.wl.ExpFloat64() / peak * float64(time.Second))
		if t >= w.s.Duration || w.wl.Float64()*peak <= w.rate(t) {
			return t
		}
	}
}

// session is one client's conversation: its requests share a key.
type session struct {
	key    string // its affinity key
	tenant *TenantSpec
	node   *simNode
	model  string
	stream bool
	left   int
}

func (w *world) arrive() {
	if w.now >= w.s.Duration {
		return
	}
	w.reqID++
	s := &session{key: fmt.Sprintf("s%d", w.reqID), tenant: w.pickTenant()}
	regions := s.tenant.Regions
	if len(regions) == 0 {
		for _, r := range w.s.Regions {
			regions = append(regions, r.Name)
		}
	}
	nodes := w.byRegion[regions[w.wl.IntN(len(regions))]]
	s.node = nodes[w.wl.IntN(len(nodes))]
	s.model = w.pickModel()
	s.stream = w.wl.Float64() < w.s.Workload.Stream
	s.left = 1
	for w.wl.Float64() < 1-1/w.s.Workload.Turns {
		s.left++
	}
	w.at(w.now, func() { w.turn(s, 0) })
	w.at(w.nextArrival(w.now), func() { w.arrive() })
}

func (w *world) pickTenant() *TenantSpec {
	total := 0.0
	for _, t := range w.s.Tenants {
		total += t.Weight
	}
	x := w.wl.Float64() * total
	for i := range w.s.Tenants {
		if x -= w.s.Tenants[i].Weight; x < 0 {
			return &w.s.Tenants[i]
		}
	}
	return &w.s.Tenants[len(w.s.Tenants)-1]
}

func (w *world) pickModel() string {
	total := 0.0
	for _, m := range w.s.Workload.Models {
		total += m.Weight
	}
	x := w.wl.Float64() * total
	for _, m := range w.s.Workload.Models {
		if x -= m.Weight; x < 0 {
			return m.Name
		}
	}
	return w.s.Workload.Models[len(w.s.Workload.Models)-1].Name
}

// lognormal draws from the log-normal with median m and 99th percentile
// p99, given a standard normal z.
func lognormal(m, p99, z float64) float64 {
	if p99 <= m {
		return m
	}
	return m * math.Exp(z*math.Log(p99/m)/2.3263478740408408)
}

// turn is one request of a session; the next is drawn now, from the
// workload's stream, whatever this one's fate.
func (w *world) turn(s *session, i int) {
	prompt := int(lognormal(float64(w.s.Workload.PromptTokens.Median), float64(w.s.Workload.PromptTokens.P99), w.wl.NormFloat64()))
	completion := int(lognormal(float64(w.s.Workload.CompletionTokens.Median), float64(w.s.Workload.CompletionTokens.P99), w.wl.NormFloat64()))
	w.reqID++
	id := w.reqID
	if i+1 < s.left {
		think := time.Duration(w.wl.ExpFloat64() * float64(w.s.Workload.ThinkTime))
		w.at(w.now+think, func() { w.turn(s, i+1) })
	}
	w.serve(s, i, id, max(prompt, 1), max(completion, 1))
}

// serve plans and runs one request at its node.
func (w *world) serve(s *session, turn int, id uint64, prompt, completion int) {
	w.res.Requests++
	n := s.node
	key := s.key
	req := &route.Request{Chat: route.SyntheticChat(s.model, prompt, completion, s.stream, key), Tenant: s.tenant.Name, Session: key}
	if s.tenant.Residency != "" {
		req.Residency = region.Residency{Jurisdiction: region.Jurisdiction(s.tenant.Residency)}
	}
	now := w.clock()
	if w.rr != nil {
		w.rr.next++
	}
	budgeted := s.tenant.BudgetUSD > 0
	plan, err := n.planner.Plan(req, now)
	if err != nil {
		w.res.Failed++
		return
	}
	elapsed := time.Duration(0)
	sent := 0 // calls made: a target refused before the call is not one
	call := func() {
		if sent > 0 {
			w.res.Failovers++
		}
		sent++
	}
	for a, t := range plan.Targets {
		if a == maxAttempts {
			break
		}
		name := t.Provider()
		spec := w.specs[name]
		at := w.now + elapsed
		var hold route.BudgetHold = unbudgeted{}
		if budgeted {
			n.touched = true
			h, err := n.budget.TryReserve(s.tenant.Name, t.MaxCost, w.clock().Add(elapsed))
			var retry *consensus.RetryAfterError
			if errors.As(err, &retry) {
				// The holder kicks its sync loop, which asks the leader at
				// once: a Raft round trip, here immediate. Once.
				_ = n.budget.Sync(context.Background(), false)
				h, err = n.budget.TryReserve(s.tenant.Name, t.MaxCost, w.clock().Add(elapsed))
			}
			switch {
			case errors.Is(err, consensus.ErrBudgetExceeded):
				w.res.BudgetRefused++
				return
			case err != nil:
				w.res.EscrowWait++
				return
			}
			hold = h
		}
		// The hop to a via node, when the provider is another region's.
		hop := time.Duration(0)
		if t.Via != "" {
			if w.cut(n.region, t.ViaRegion, at) {
				call()
				elapsed += forwardTimeout
				hold.Settle(0)
				continue
			}
			hop = w.rtt(n.region, t.ViaRegion)
		} else if spec.Region != n.region {
			hop = w.rtt(n.region, spec.Region) // a global provider far away
		}
		adm, ok := n.tracker.Acquire(name, now.Add(elapsed))
		if !ok {
			hold.Settle(0)
			continue
		}
		// The node that calls the provider (this one, or the via node)
		// spends its own rate share and places the session on its own
		// ring.
		caller := n
		if t.Via != "" {
			caller = w.nodeByName[t.Via]
		}
		if caller.rates != nil {
			if ok, _ := caller.rates.Take(name, t.Tokens, now.Add(elapsed)); !ok {
				n.tracker.Release(adm)
				hold.Settle(0)
				continue
			}
		}
		ring, replica := caller.catalog.Provider(name).Ring, -1
		if ring != nil {
			replica = t.Replica
			if t.Via != "" { // the via node picks the replica itself
				var buf [8]int
				replica = ring.Order(key, nil, now.Add(elapsed), buf[:0])[0]
			}
			ring.Acquire(replica)
		}
		// failed gives back what the attempt took.
		call()
		failed := func() {
			hold.Settle(0)
			if caller.rates != nil {
				caller.rates.Return(name, t.Tokens, now.Add(elapsed))
			}
			if ring != nil {
				ring.Release(replica)
			}
		}
		u := w.uniform(id, a)
		tokens := prompt + completion
		switch {
		case inWindow(spec.Outages, at) || u < spec.ErrorRate:
			elapsed += hop + failFast
			n.tracker.Failure(adm, now.Add(elapsed))
		default:
			if ok, _ := w.limiter.Take(name, tokens, now.Add(elapsed)); !ok {
				elapsed += hop + failFast
				n.tracker.RateLimited(adm, time.Second, now.Add(elapsed))
				w.res.Upstream429++
				if caller.rates != nil {
					caller.rates.RateLimited(name)
				}
				failed()
				continue
			}
			z := w.normal(id, a)
			ttft := time.Duration(lognormal(float64(spec.TTFT.Median), float64(spec.TTFT.P99), z))
			gen := time.Duration(float64(completion) / spec.TokensPerSecond * float64(time.Second))
			n.tracker.Success(adm, ttft, ttft+gen)
			cost := (float64(prompt)*t.Offer.Model.InputUSDPerMTok + float64(completion)*t.Offer.Model.OutputUSDPerMTok) / 1e6
			total := elapsed + hop + ttft + gen
			if ring != nil {
				ring.Seat(key, replica, now.Add(elapsed))
			}
			w.answered(s, turn, name, replica, spec, elapsed+hop+ttft, total, cost, req.Residency)
			w.at(w.now+total, func() {
				hold.Settle(cost)
				n.touched = true
				if caller.rates != nil && tokens != t.Tokens {
					caller.rates.Return(name, t.Tokens-tokens, w.clock())
				}
				if ring != nil {
					ring.Release(replica)
				}
			})
			return
		}
		failed()
	}
	w.res.Failed++
}

func (w *world) answered(s *session, turn int, provider string, replica int, spec *ProviderSpec, ttft, total time.Duration, cost float64, res region.Residency) {
	r := w.res
	r.OK++
	r.CostUSD += cost
	r.CostByHour[min(int(w.now.Hours()), len(r.CostByHour)-1)] += cost
	r.LoadByRegion[spec.Region]++
	r.SpentByTenant[s.tenant.Name] += cost
	r.latencies = append(r.latencies, float64(total)/1e6)
	if s.stream {
		r.ttfts = append(r.ttfts, float64(ttft)/1e6)
	}
	p := w.catalog.Provider(provider)
	if !res.Allows(p.Jurisdictions) {
		r.ResidencyViolations++
	}
	key := s.key
	served := provider
	if replica >= 0 {
		served = provider + "#" + strconv.Itoa(replica)
	}
	if turn > 0 {
		w.laterOK++
		if w.lastProv[key] == served {
			w.hits++
		}
	}
	if turn+1 < s.left {
		w.lastProv[key] = served
	} else {
		delete(w.lastProv, key)
	}
	if w.policy == "llmesh" {
		s.node.planner.Affinity.Remember(key, provider)
	}
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
		if now := w.clock(); everySync || n.touched || (!n.due.IsZero() && !now.Before(n.due)) {
			_ = n.budget.Sync(context.Background(), false)
			n.touched, n.due = false, n.budget.NextSync(now)
		}
		if w.now < w.s.Duration+time.Hour {
			w.at(w.now+n.budget.Interval(), step)
		}
	}
	w.at(w.now, step)
}

// everySync makes every node's holder sync at every interval.
var everySync = false

func inWindow(ws []Window, t time.Duration) bool {
	for _, x := range ws {
		if t >= x.Start && t < x.End {
			return true
		}
	}
	return false
}

// uniform and normal are a request attempt's own random draws: the same
// under every policy, whatever order the others ran in.
func (w *world) uniform(id uint64, attempt int) float64 {
	return float64(splitmix(w.s.Seed^id*0x9e3779b97f4a7c15^uint64(attempt)<<56)>>11) / (1 << 53)
}

func (w *world) normal(id uint64, attempt int) float64 {
	u1 := math.Max(w.uniform(id, attempt+16), 1e-12)
	u2 := w.uniform(id, attempt+32)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// finish turns counts into the reported figures.
func (w *world) finish() {
	r := w.res
	for _, n := range w.nodes {
		_ = n.budget.Sync(context.Background(), true)
	}
	for _, t := range w.s.Tenants {
		if t.BudgetUSD > 0 {
			r.OverspendUSD += math.Max(0, r.SpentByTenant[t.Name]-t.BudgetUSD)
		}
	}
	slices.Sort(r.latencies)
	slices.Sort(r.ttfts)
	r.LatencyP50, r.LatencyP90, r.LatencyP99 = pct(r.latencies, .5), pct(r.latencies, .9), pct(r.latencies, .99)
	r.TTFTP50, r.TTFTP99 = pct(r.ttfts, .5), pct(r.ttfts, .99)
	if w.laterOK > 0 {
		r.AffinityHitRate = round6(float64(w.hits) / float64(w.laterOK))
	}
	r.CostUSD = round6(r.CostUSD)
	r.OverspendUSD = round6(r.OverspendUSD)
	for i := range r.CostByHour {
		r.CostByHour[i] = round6(r.CostByHour[i])
	}
	for k, v := range r.SpentByTenant {
		r.SpentByTenant[k] = round6(v)
	}
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return round6(sorted[min(int(q*float64(len(sorted))), len(sorted)-1)])
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// unbudgeted is the hold of a tenant without a budget: nothing to settle.
type unbudgeted struct{}

func (unbudgeted) Settle(float64) {}

// The baseline policies, ordering the same filtered targets as llmesh's.

// roundRobin rotates through the providers, one step a request, blind to
// price and speed.
type roundRobin struct {
	index map[string]int
	n     int
	next  int
}

func (*roundRobin) Name() string { return "round-robin" }

func (p *roundRobin) Less(_ *route.Request, a, b *route.Target) bool {
	ra := (p.index[a.Provider()] - p.next%p.n + p.n) % p.n
	rb := (p.index[b.Provider()] - p.next%p.n + p.n) % p.n
	return ra < rb
}

// cheapestFirst orders by expected price alone.
type cheapestFirst struct{}

func (cheapestFirst) Name() string { return "cheapest-first" }

func (cheapestFirst) Less(_ *route.Request, a, b *route.Target) bool {
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	return a.Provider() < b.Provider()
}

// latencyFirst orders by observed latency (unobserved counts as fast).
type latencyFirst struct{}

func (latencyFirst) Name() string { return "latency-first" }

func (latencyFirst) Less(req *route.Request, a, b *route.Target) bool {
	la, lb := a.Health.Latency+a.ViaRTT, b.Health.Latency+b.ViaRTT
	if req.Chat.Stream {
		la, lb = a.Health.TTFT+a.ViaRTT, b.Health.TTFT+b.ViaRTT
	}
	if la != lb {
		return la < lb
	}
	return a.Provider() < b.Provider()
}

type event struct {
	t   time.Duration
	seq uint64
	fn  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

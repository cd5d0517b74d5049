package des

import (
	"container/heap"
	"context"
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
	TTFTP90     float64 `json:"ttft_p90_ms"`
	TTFTP99     float64 `json:"ttft_p99_ms"`
	// PrefixHitRate is the prompt tokens the providers' engine replicas
	// found in their prefix caches over those they looked up; absent
	// without engines.
	PrefixHitRate float64 `json:"prefix_hit_rate,omitempty"`
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
	// ServedBy is the requests each provider served.
	ServedBy map[string]int `json:"served_by"`
	// Phases are the workload's phases (workload.phases), each with the
	// requests that arrived in it and the providers that served them.
	Phases []PhaseResult `json:"phases,omitempty"`
	// SpentByTenant is what each tenant was served, in USD.
	SpentByTenant map[string]float64 `json:"spent_by_tenant"`
	latencies     []float64          // ms, of answered requests
	ttfts         []float64          // ms, of answered streams
	blocked       int                // targets the executor's guard refused to try
}

// PhaseResult is one workload phase's requests: those that arrived in
// it, and which providers served them.
type PhaseResult struct {
	Start    time.Duration  `json:"start_ns"`
	End      time.Duration  `json:"end_ns"`
	Requests int            `json:"requests"`
	ServedBy map[string]int `json:"served_by"`
}

// Policies are the policies a run compares, in order: round-robin first,
// the baseline of "saved".
var Policies = []string{"round-robin", "cheapest-first", "latency-first", "llmesh"}

// Run simulates the scenario under each policy in Policies, each from the
// same seed and the same workload.
func Run(s *Scenario) ([]Result, error) { return run(s, runOpts{}) }

// runOpts are tests' variations of a run.
type runOpts struct {
	// everySync makes every node's holder sync at every interval.
	everySync bool
	// stalePlans plans as if tenants had no residency (see world.plan).
	stalePlans bool
}

func run(s *Scenario, o runOpts) ([]Result, error) {
	var out []Result
	for _, p := range Policies {
		r, err := runPolicy(s, p, o)
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
	engines    map[string][]*simReplica // by provider, its replicas' engines
	scr        *scrapes                 // the engines' readings the planners see; nil without engines
	// tenantChains are the block hashes of each tenant's shared prefix.
	tenantChains map[tenantBlock]*blockChain
	limiter      *route.Limiter // each provider's own limits
	nodes        []*simNode
	byRegion     map[string][]*simNode
	ledger       *consensus.Ledger
	leader       string // the ledger's region
	tenants      map[string]*TenantSpec
	rr           *roundRobin
	res          *Result
	lastProv     map[string]string // by session: the provider (and replica) of its last answered turn
	wl           *rand.Rand        // the workload's stream, the same under every policy
	traced       int               // arrivals taken from the workload's trace
	reqID        uint64
	withBudget   map[string]bool
	laterOK      int // answered requests that were a session's later turn
	hits         int // of those, served by the previous turn's provider and replica
	opts         runOpts
	// elapsed is how far into its attempts the request being served is:
	// its attempts run within one event, at w.now plus elapsed.
	elapsed time.Duration
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
	// exec admits the node's attempts; far, by via node, admits them at
	// the via node (see simRequest.admit).
	exec *route.Executor
	far  map[string]*route.Executor
}

// RunPolicy simulates the scenario under one policy.
func RunPolicy(s *Scenario, policy string) (*Result, error) { return runPolicy(s, policy, runOpts{}) }

func runPolicy(s *Scenario, policy string, o runOpts) (*Result, error) {
	if !slices.Contains(Policies, policy) {
		return nil, fmt.Errorf("des: unknown policy %q (have %v)", policy, Policies)
	}
	w := &world{s: s, policy: policy, opts: o, juris: map[string]region.Jurisdiction{}, specs: map[string]*ProviderSpec{},
		byRegion: map[string][]*simNode{}, nodeByName: map[string]*simNode{}, tenants: map[string]*TenantSpec{}, lastProv: map[string]string{},
		engines: map[string][]*simReplica{}, tenantChains: map[tenantBlock]*blockChain{},
		wl: rand.New(rand.NewPCG(s.Seed, 0x11e5)),
		res: &Result{Policy: policy, LoadByRegion: map[string]int{}, ServedBy: map[string]int{}, SpentByTenant: map[string]float64{},
			CostByHour: make([]float64, int(math.Ceil(s.Duration.Hours()))), Phases: phaseResults(s.Workload.Phases)}}
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

// attemptClock is the executors' clock: the time of the attempt under way.
func (w *world) attemptClock() time.Time { return epoch.Add(w.now + w.elapsed) }

// at schedules fn at virtual time t; events at the same time run in the
// order they were scheduled.
func (w *world) at(t time.Duration, fn func()) {
	w.seq++
	heap.Push(&w.events, &event{t: t, seq: w.seq, fn: fn})
}

// serve plans and runs one request at its node: each target in turn
// through the executor's admission step, then the modelled call.
func (w *world) serve(s *session, turn int, id uint64, prompt, completion int) {
	w.res.Requests++
	if len(w.res.Phases) > 0 {
		w.res.Phases[w.phase(w.now)].Requests++
	}
	req := &route.Request{Chat: route.SyntheticChat(s.model, prompt, completion, s.stream, s.key), Tenant: s.tenant.Name, Session: s.key,
		MaxTTFT: s.tenant.MaxTTFT}
	if s.tenant.Residency != "" {
		req.Residency = region.Residency{Jurisdiction: region.Jurisdiction(s.tenant.Residency)}
	}
	if w.rr != nil {
		w.rr.next++
	}
	plan, err := w.plan(s.node, req)
	if err != nil {
		w.res.Failed++
		return
	}
	r := &simRequest{w: w, s: s, turn: turn, id: id, prompt: prompt, completion: completion, req: req}
	w.elapsed = 0
	defer func() { w.elapsed = 0 }()
	for a := range plan.Targets {
		if a == maxAttempts {
			break
		}
		switch r.try(a, &plan.Targets[a]) {
		case answered:
			return
		case refused:
			return
		}
	}
	w.res.Failed++
}

// plan is the node's plan for req. With stalePlans (a test's), it is
// made as if the tenant had no residency: a plan that breaks the
// invariant, which only the executor's guard keeps from being tried.
func (w *world) plan(n *simNode, req *route.Request) (*route.Plan, error) {
	if w.opts.stalePlans {
		stale := *req
		stale.Residency = region.Residency{}
		return n.planner.Plan(&stale, w.clock())
	}
	return n.planner.Plan(req, w.clock())
}

// simRequest is one request being served, across its attempts.
type simRequest struct {
	w                  *world
	s                  *session
	turn               int
	id                 uint64
	prompt, completion int
	req                *route.Request
	fwd                *route.Request // req as a via node receives it
	sent               int            // calls made: a target refused before the call is not one
}

// verdict is what an attempt leaves the request at.
type verdict int

const (
	next     verdict = iota // on to the next target
	answered                // served
	refused                 // the budget refused it: 402, or 429 waiting for escrow
)

// call counts a call made, and a failover if one came before.
func (r *simRequest) call() {
	if r.sent > 0 {
		r.w.res.Failovers++
	}
	r.sent++
}

// try makes attempt a of the request on t: admitted, the modelled call.
func (r *simRequest) try(a int, t *route.Target) verdict {
	tk, t, hop, v := r.admit(t)
	if tk == nil {
		return v
	}
	w, spec := r.w, r.w.specs[t.Provider()]
	at := w.now + w.elapsed
	r.call()
	if inWindow(spec.Outages, at) || w.uniform(r.id, a) < spec.ErrorRate {
		w.elapsed += hop + failFast
		tk.Settle(route.Report{Outcome: route.OutcomeHTTPError})
		return next
	}
	if ok, _ := w.limiter.Take(t.Provider(), r.prompt+r.completion, w.attemptClock()); !ok {
		w.elapsed += hop + failFast
		w.res.Upstream429++
		tk.Settle(route.Report{Outcome: route.OutcomeRateLimited, RetryAfter: time.Second})
		return next
	}
	if spec.Engine != nil {
		return r.tryEngine(t, tk, hop, spec)
	}
	z := w.normal(r.id, a)
	ttft := time.Duration(lognormal(float64(spec.TTFT.Median), float64(spec.TTFT.P99), z))
	gen := time.Duration(float64(r.completion) / spec.TokensPerSecond * float64(time.Second))
	tk.Report(route.Report{Outcome: route.OutcomeOK, TTFT: ttft, Total: ttft + gen})
	tk.Seat(r.s.key)
	cost := t.Offer.Model.Cost(route.Usage{PromptTokens: r.prompt, CompletionTokens: r.completion})
	total := w.elapsed + hop + ttft + gen
	replica := -1
	if t.Offer.Provider.Ring != nil {
		replica = t.Replica
	}
	w.answered(r.s, r.turn, t.Provider(), replica, spec, cost, r.req.Residency)
	w.timed(r.s.stream, w.elapsed+hop+ttft, total)
	used := route.Usage{PromptTokens: r.prompt, CompletionTokens: r.completion}
	// What the call holds (budget, rate share, the replica's slot) is
	// spent when the answer ends.
	w.at(w.now+total, func() { tk.Spend(route.Report{Answered: true, Known: true, Usage: used}) })
	return answered
}

// admit runs the executor's admission step for t at the request's node
// and returns the ticket, the target as the node that calls the provider
// tries it, and the network hop to that provider; a nil ticket comes with
// the verdict. Through a via node, the hop is modelled first (a cut-off
// region's forward times out) and the via node admits the attempt as its
// executor would: its own guard, rate share and ring, while the health
// learnt of the provider and the budget escrow stay the calling node's
// (gossip's spread of health and the far node's escrow are not modelled).
func (r *simRequest) admit(t *route.Target) (*route.Ticket, *route.Target, time.Duration, verdict) {
	w, n := r.w, r.s.node
	tk, err := n.exec.Admit(context.Background(), r.req, t)
	hop := time.Duration(0)
	switch {
	case err != nil:
	case t.Via != "":
		if w.cut(n.region, t.ViaRegion, w.now+w.elapsed) {
			r.call()
			w.elapsed += forwardTimeout
			return nil, nil, 0, next
		}
		hop = w.rtt(n.region, t.ViaRegion)
		via := w.nodeByName[t.Via]
		t = r.atVia(t, via)
		tk, err = w.farExec(n, via).Admit(context.Background(), r.forwarded(), t)
	case w.specs[t.Provider()].Region != n.region:
		hop = w.rtt(n.region, w.specs[t.Provider()].Region) // a global provider far away
	}
	if err != nil {
		return nil, nil, 0, r.refused(err)
	}
	return tk, t, hop, next
}

// refused counts an admission's refusal: the guard's, a target blocked;
// the budget's ends the request.
func (r *simRequest) refused(err error) verdict {
	var rf *route.Refusal
	errors.As(err, &rf)
	switch {
	case rf.Stage == route.StageGuard:
		r.w.res.blocked++
	case rf.Stage != route.StageBudget:
	case errors.Is(rf.Err, consensus.ErrBudgetExceeded):
		r.w.res.BudgetRefused++
		return refused
	default:
		r.w.res.EscrowWait++
		return refused
	}
	return next
}

// atVia is t as its via node tries it: the provider of the via node's own
// catalog (its ring), on the replica that ring picks for the session.
func (r *simRequest) atVia(t *route.Target, via *simNode) *route.Target {
	off := *t.Offer
	off.Provider = via.catalog.Provider(t.Provider())
	ft := *t
	ft.Offer, ft.Via, ft.ViaRegion, ft.ViaRTT = &off, "", "", 0
	if ring := off.Provider.Ring; ring != nil {
		var buf [8]int
		ft.Replica = ring.Order(r.s.key, nil, r.w.attemptClock(), buf[:0])[0]
	}
	return &ft
}

// forwarded is the request as a via node receives it.
func (r *simRequest) forwarded() *route.Request {
	if r.fwd == nil {
		f := *r.req
		f.Forwarded = true
		r.fwd = &f
	}
	return r.fwd
}

// farExec is the executor with which a via node admits the attempts from
// node from (see simRequest.admit), made on first use.
func (w *world) farExec(from, via *simNode) *route.Executor {
	if e := from.far[via.name]; e != nil {
		return e
	}
	e := w.executor(from, via)
	from.far[via.name] = e
	return e
}

// executor admits attempts with caller's guard, rate share and ring, and
// n's health and budget escrow, in virtual time.
func (w *world) executor(n, caller *simNode) *route.Executor {
	d := route.ExecutorDeps{Guard: route.Guard{Region: caller.region, Regions: w.regions}, Tracker: n.tracker,
		Budget: budgetGate{w: w, n: n}, Transport: noCalls{}, Clock: w.attemptClock}
	if caller.rates != nil {
		d.Quota = caller.rates
	}
	return route.NewExecutor(route.ExecutorConfig{NodeName: caller.name}, d)
}

// answered counts a request served by provider (and replica, -1 without
// replicas), whose answer is on its way; timed records its latency.
func (w *world) answered(s *session, turn int, provider string, replica int, spec *ProviderSpec, cost float64, res region.Residency) {
	r := w.res
	r.OK++
	r.CostUSD += cost
	r.CostByHour[min(int(w.now.Hours()), len(r.CostByHour)-1)] += cost
	r.LoadByRegion[spec.Region]++
	r.ServedBy[provider]++
	if len(r.Phases) > 0 {
		r.Phases[w.phase(w.now)].ServedBy[provider]++
	}
	r.SpentByTenant[s.tenant.Name] += cost
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

// timed records an answer's latency, and a stream's time to first token.
func (w *world) timed(stream bool, ttft, total time.Duration) {
	r := w.res
	r.latencies = append(r.latencies, float64(total)/1e6)
	if stream {
		r.ttfts = append(r.ttfts, float64(ttft)/1e6)
	}
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
	r.TTFTP50, r.TTFTP90, r.TTFTP99 = pct(r.ttfts, .5), pct(r.ttfts, .9), pct(r.ttfts, .99)
	r.PrefixHitRate = w.prefixHitRate()
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

// phaseResults are the empty results of the workload's phases.
func phaseResults(phases []PhaseSpec) []PhaseResult {
	var out []PhaseResult
	var at time.Duration
	for _, ph := range phases {
		out = append(out, PhaseResult{Start: at, End: at + ph.Duration, ServedBy: map[string]int{}})
		at += ph.Duration
	}
	return out
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return round6(sorted[min(int(q*float64(len(sorted))), len(sorted)-1)])
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

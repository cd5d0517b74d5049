package route

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/llmesh/llmesh/region"
)

// Request is what planning and execution know of one admitted request.
type Request struct {
	Chat      *ChatRequest
	Tenant    string
	Residency region.Residency
	// Session is the affinity key: the X-LLMesh-Session header, else the
	// body's user field; "" when there is neither.
	Session string
}

// Target is one way to serve a request: a provider, one of its replicas,
// and the node that calls it.
type Target struct {
	Offer   *Offer
	Replica int    // index into Offer.Endpoints
	Via     string // the node that calls the provider; "" for this node
	// Cost is the expected price in USD: the estimated prompt plus the
	// largest completion the request allows. MaxCost is a true upper
	// bound, what a budget reservation must cover.
	Cost, MaxCost float64
	// Tokens is what the attempt counts against the provider's TPM.
	Tokens int
	Health Health
}

// Provider returns the target's provider name.
func (t *Target) Provider() string { return t.Offer.Provider.Name }

// Endpoint returns the URL the attempt is sent to.
func (t *Target) Endpoint() string { return t.Offer.Endpoints[t.Replica] }

// Skip records a provider serving the model that the plan left out.
type Skip struct {
	Provider string
	Reason   string
	// RetryIn is how long until the reason may lapse by itself (a
	// cooldown or rate window); zero when it will not.
	RetryIn time.Duration
}

// Plan is the ordered list of targets for one request, with what was left
// out and why.
type Plan struct {
	Targets []Target
	Skipped []Skip
	Policy  string
	// PromptTokens is the planning estimate of prompt tokens and
	// PromptUpper its upper bound; OutputTokens the largest completion.
	PromptTokens, PromptUpper, OutputTokens int
}

// Policy orders the targets that passed every hard filter.
type Policy interface {
	Name() string
	// Less reports whether a should be tried before b for req.
	Less(req *Request, a, b *Target) bool
}

// CostFirst is the default policy: providers the mesh sees failing after
// the others, then lowest expected cost, then lowest observed latency
// (time to first token for streams, to the whole answer otherwise; a
// provider not yet observed counts as fast, so it gets tried), then
// priority, then name for a stable order.
type CostFirst struct{}

var _ Policy = CostFirst{}

// Name implements Policy.
func (CostFirst) Name() string { return "cost" }

// Less implements Policy.
func (CostFirst) Less(req *Request, a, b *Target) bool {
	if a.Health.Degraded != b.Health.Degraded {
		return b.Health.Degraded
	}
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	if la, lb := observedLatency(req, a.Health), observedLatency(req, b.Health); la != lb {
		return la < lb
	}
	if pa, pb := a.Offer.Provider.Priority, b.Offer.Provider.Priority; pa != pb {
		return pa < pb
	}
	return a.Provider() < b.Provider()
}

func observedLatency(req *Request, h Health) time.Duration {
	if req.Chat.Stream && h.TTFT > 0 || h.Latency == 0 {
		return h.TTFT
	}
	return h.Latency
}

// Planner turns a request and a read-only view of the providers into a
// Plan. It never blocks and never changes anything: a QuotaGate is only
// asked, never taken from.
type Planner struct {
	// Region is the planning node's region: the only one whose
	// region-reach providers it can call itself.
	Region  string
	Catalog *Catalog
	Health  HealthView
	Quota   QuotaGate // nil: no rate limits
	Policy  Policy    // nil: CostFirst
}

// Plan returns the targets for req in the order to try them. It fails
// with ErrModelNotFound when no provider serves the model,
// ErrNoCompliantProvider when none that does may see the request's data,
// a *RetryAfterError when every compliant one is cooling down or out of
// rate, and ErrNoProvider otherwise.
func (p *Planner) Plan(req *Request, now time.Time) (*Plan, error) {
	offers := p.Catalog.Offers(req.Chat.Model)
	if len(offers) == 0 {
		return nil, fmt.Errorf("%w: %q is not served here; GET /v1/models lists the models", ErrModelNotFound, req.Chat.Model)
	}
	policy := p.Policy
	if policy == nil {
		policy = CostFirst{}
	}
	plan := &Plan{Policy: policy.Name(), Targets: make([]Target, 0, len(offers))}
	plan.PromptTokens, plan.PromptUpper = req.Chat.PromptEstimate()
	compliant := 0
	for _, o := range offers {
		pv := o.Provider
		if !req.Residency.Allows(pv.Jurisdictions) {
			plan.Skipped = append(plan.Skipped, Skip{Provider: pv.Name, Reason: "residency " + req.Residency.String() + " not in " + pv.Jurisdictions.String()})
			continue
		}
		compliant++
		if pv.Reach == ReachRegion && pv.Region != p.Region {
			plan.Skipped = append(plan.Skipped, Skip{Provider: pv.Name, Reason: "reachable only from region " + pv.Region})
			continue
		}
		out := req.Chat.N * o.Model.MaxOutputTokens
		if req.Chat.MaxTokens > 0 {
			out = req.Chat.N * req.Chat.MaxTokens
		}
		plan.OutputTokens = max(plan.OutputTokens, out)
		t := Target{
			Offer:   o,
			Replica: pickReplica(o.Endpoints, req.Session),
			Cost:    o.Model.Cost(plan.PromptTokens, out),
			MaxCost: o.Model.Cost(plan.PromptUpper, out),
			Tokens:  plan.PromptTokens + out,
			Health:  p.Health.Health(pv.Name, now),
		}
		switch {
		case t.Health.Ejected:
			plan.Skipped = append(plan.Skipped, Skip{Provider: pv.Name, Reason: "ejected after failures"})
			continue
		case !t.Health.CoolingUntil.IsZero():
			wait := t.Health.CoolingUntil.Sub(now)
			plan.Skipped = append(plan.Skipped, Skip{Provider: pv.Name, Reason: "cooling down after 429", RetryIn: wait})
			continue
		}
		if p.Quota != nil {
			if ok, wait := p.Quota.Allow(pv.Name, t.Tokens, now); !ok {
				plan.Skipped = append(plan.Skipped, Skip{Provider: pv.Name, Reason: "local rate limit", RetryIn: wait})
				continue
			}
		}
		plan.Targets = append(plan.Targets, t)
	}
	if compliant == 0 {
		return plan, fmt.Errorf("%w: %q is served only outside residency %s", ErrNoCompliantProvider, req.Chat.Model, req.Residency)
	}
	if len(plan.Targets) == 0 {
		return plan, plan.unavailable()
	}
	sort.Stable(byPolicy{req, policy, plan.Targets})
	return plan, nil
}

// byPolicy sorts targets in place by a policy, comparing them where they
// lie rather than copies, which would escape through the interface.
type byPolicy struct {
	req    *Request
	policy Policy
	ts     []Target
}

func (s byPolicy) Len() int           { return len(s.ts) }
func (s byPolicy) Less(i, j int) bool { return s.policy.Less(s.req, &s.ts[i], &s.ts[j]) }
func (s byPolicy) Swap(i, j int)      { s.ts[i], s.ts[j] = s.ts[j], s.ts[i] }

// unavailable explains why no target is left: a retry-after error when
// every skip lapses by itself, ErrNoProvider otherwise.
func (plan *Plan) unavailable() error {
	var wait time.Duration
	var reasons []string
	for _, s := range plan.Skipped {
		reasons = append(reasons, s.Provider+": "+s.Reason)
		if strings.HasPrefix(s.Reason, "residency") {
			continue
		}
		if s.RetryIn <= 0 {
			wait = -1
		} else if wait >= 0 && (wait == 0 || s.RetryIn < wait) {
			wait = s.RetryIn
		}
	}
	if wait > 0 {
		return &RetryAfterError{After: wait, Msg: "every provider of the model is rate limited (" + strings.Join(reasons, "; ") + ")"}
	}
	return fmt.Errorf("%w: %s", ErrNoProvider, strings.Join(reasons, "; "))
}

// Explain renders the plan for the X-LLMesh-Route header: the policy, the
// chosen target and what it beat or replaced, in one short ASCII line.
func (plan *Plan) Explain(chosen int, failed []string) string {
	var b strings.Builder
	t := &plan.Targets[chosen]
	fmt.Fprintf(&b, "policy=%s; chose %s (est $%.6f", plan.Policy, t.Provider(), t.Cost)
	if t.Health.TTFT > 0 {
		fmt.Fprintf(&b, ", ttft %dms", t.Health.TTFT.Milliseconds())
	}
	if t.Health.Degraded {
		b.WriteString(", failing on other nodes")
	}
	b.WriteString(")")
	if n := len(plan.Targets) - 1; n > 0 {
		fmt.Fprintf(&b, " of %d candidates", n+1)
	}
	if len(failed) > 0 {
		b.WriteString("; failed over from " + strings.Join(failed, ", "))
	}
	for _, o := range plan.Targets[chosen+1:] {
		if o.Health.Degraded {
			b.WriteString("; ranked down " + o.Provider() + " (failing on other nodes)")
		}
	}
	if len(plan.Skipped) > 0 {
		b.WriteString("; skipped ")
		for i, s := range plan.Skipped {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(s.Provider + " (" + s.Reason + ")")
		}
	}
	return b.String()
}

// pickReplica maps a session to one of endpoints by rendezvous hashing,
// so a session keeps its replica (and its warm prompt cache) and adding or
// removing a replica moves only the sessions that must move. Requests
// without a session are spread at random.
func pickReplica(endpoints []string, session string) int {
	switch {
	case len(endpoints) <= 1:
		return 0
	case session == "":
		return rand.IntN(len(endpoints))
	}
	best, bestScore := 0, uint64(0)
	for i, ep := range endpoints {
		h := fnv.New64a()
		h.Write([]byte(session))
		h.Write([]byte{0})
		h.Write([]byte(ep))
		if s := h.Sum64(); s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

package route

import (
	"fmt"
	"sort"
	"time"

	"github.com/llmesh/llmesh/region"
)

// Request is what planning and execution know of one admitted request.
type Request struct {
	Chat   *ChatRequest
	Tenant string
	// Key is the id of the tenant's API key the request came with
	// (the first 12 hex digits of its SHA-256), carried across
	// forwards; "" when unknown (an older peer's forward).
	Key       string
	Residency region.Residency
	// StrictTransit means the request may pass only through nodes of its
	// residency's jurisdiction, not merely reach providers there.
	StrictTransit bool
	// Session is the affinity key: the X-LLMesh-Session header, else the
	// body's user field; "" when there is neither.
	Session string
	// Forwarded means another node sent the request here to execute: it
	// is planned with this node's own providers only, never forwarded on.
	Forwarded bool
	// Hint names the provider the forwarding node planned for; it is
	// tried first if this node's own plan allows it.
	Hint string
	// ID is the request id, carried across forwards.
	ID string
	// Priority orders requests waiting for admission: lower first
	// (PriorityInteractive before PriorityBatch); FIFO within one.
	Priority int
	// AdmitBy is when waiting for budget escrow or a rate share ends
	// (limits.admission_wait after arrival); zero: no wait.
	AdmitBy time.Time
	// Spilled means a peer whose own rate share of Hint is spent sent
	// the request here: it counted the request as its demand, so this
	// node's share serves it without counting it as this node's.
	Spilled bool
	// Replanned means the request is planned again after waiting for a
	// rate share: its demand was counted the first time.
	Replanned bool
	// TraceParent is the W3C traceparent sent to the provider (and, by a
	// node, to the peer it forwards through); "" sends none. TraceState
	// is the caller's tracestate, passed on with it.
	TraceParent, TraceState string
	// MaxTTFT is the tenant's time-to-first-token objective (tenants'
	// max_ttft); zero: none. A provider whose every replica is predicted
	// to start later goes after the other compliant providers (Spill).
	MaxTTFT time.Duration
	// Tags is the request's canonical tag set (ParseTags: sorted,
	// comma-joined; "" for none), carried across forwards: its cost is
	// attributed to it.
	Tags string
	// Trailers means the client sent TE: trailers: a stream's cost is
	// also sent as an HTTP trailer.
	Trailers bool

	prefix PromptPrefix // its prompt's prefix, hashed on first use (Prefix)
}

// Request priorities, from the tenant's priority setting.
const (
	PriorityInteractive = 0
	PriorityBatch       = 1
)

// Target is one way to serve a request: a provider, one of its replicas,
// and the node that calls it.
type Target struct {
	Offer   *Offer
	Replica int    // index into the provider's replicas (its Ring)
	Via     string // the node that calls the provider; "" for this node
	// ViaRegion is Via's region and ViaRTT the estimated round trip to it.
	ViaRegion string
	ViaRTT    time.Duration
	// Cost is the expected price in USD: the estimated prompt, the share
	// of it the provider's cache has been serving (Health.CacheHit) at
	// the cached input price, plus the largest completion the request
	// allows. MaxCost is a true upper bound, what a budget reservation
	// must cover: it assumes no cache hit.
	Cost, MaxCost float64
	// Tokens is what the attempt counts against the provider's TPM.
	Tokens int
	Health Health
	// Sticky means the session's last provider, Hinted the provider the
	// forwarding node planned for: either is tried first while healthy.
	Sticky, Hinted bool
	// Spill means this node's own rate share of the provider is spent
	// and Via is a peer that has some left.
	Spill bool
	// OverTTFT, when not empty, says why the target was put after the
	// other providers' ("spilled: predicted TTFT 900ms > max_ttft
	// 500ms"): every replica of its provider is predicted to start later
	// than the request's objective. It is still a target, tried when the
	// others fail or are not there: a request is never sent to a
	// provider it may not use because its own are busy.
	OverTTFT string
	// ContextFallback means the target serves one of the group's
	// larger-context models: it is tried only after a provider refused
	// the prompt as too long (FallbackContextLength).
	ContextFallback bool

	choice int32 // 1 + its index in Plan.Replicas; 0: no replica choice
}

// Provider returns the target's provider name.
func (t *Target) Provider() string { return t.Offer.Provider.Name }

// Endpoint returns the chat completions URL of the target's replica; the
// executor sends another API's request to that API's path beside it.
func (t *Target) Endpoint() string { return t.Offer.Endpoints[t.Replica] }

// ReplicaName is the name of the target's replica, as X-LLMesh-Replica
// gives it: never its address, which clients need not see.
func (t *Target) ReplicaName() string { return t.Offer.Provider.ReplicaName(t.Replica) }

// Skip records a provider serving the model that the plan left out.
type Skip struct {
	Provider string
	Reason   string
	// Residency means it was left out because the request's data may not
	// go there (or through there): such skips make a plan with nothing
	// left a no_compliant_provider.
	Residency bool
	// RetryIn is how long until the reason may lapse by itself (a
	// cooldown or rate window); zero when it will not.
	RetryIn time.Duration
	// Lease means the reason is a rate share not yet granted (or not
	// renewed), not the share's use: the mesh's lease mechanics.
	Lease bool
}

// Plan is the ordered list of targets for one request, with what was left
// out and why.
type Plan struct {
	Targets []Target
	Skipped []Skip
	Policy  string
	// Group is the model group the request named, if it named one, and
	// Choice how a member was picked (weights, tiers).
	Group, Choice string
	// MaxTTFT is the time-to-first-token objective planned for: the
	// tighter of the tenant's and the group's; zero: none.
	MaxTTFT time.Duration
	// PromptTokens is the planning estimate of prompt tokens and
	// PromptUpper its upper bound; OutputTokens the largest completion.
	PromptTokens, PromptUpper, OutputTokens int
	// Replicas says why each replica target is where it is
	// (ReplicaChoice); empty when no provider planned has replicas.
	Replicas []ReplicaChoice
	// FallbackOn are the classes of answer the group falls back on.
	FallbackOn FallbackClass

	contextModels []string    // the group's larger-context models, when it falls back on context_length
	targetRoom    [1]Target   // a plan of one target allocates none
	rankRoom      [1][]*Offer // nor a model's one rank of offers
}

// Policy orders the targets that passed every hard filter.
type Policy interface {
	Name() string
	// Less reports whether a should be tried before b for req.
	Less(req *Request, a, b *Target) bool
}

// CostFirst is the default policy: the session's sticky provider first,
// providers the mesh sees failing after the others, then lowest expected
// cost (a warm prompt cache makes a provider cheaper), then lowest expected latency (time to first token for streams, to
// the whole answer otherwise, plus the round trip to a via node; a
// provider not yet observed counts as fast, so it gets tried), then
// priority, then name for a stable order.
type CostFirst struct{}

var _ Policy = CostFirst{}

// Name implements Policy.
func (CostFirst) Name() string { return "cost" }

// Less implements Policy.
func (CostFirst) Less(req *Request, a, b *Target) bool {
	// Stickiness holds only while the provider is healthy.
	if as, bs := (a.Sticky || a.Hinted) && !a.Health.Degraded, (b.Sticky || b.Hinted) && !b.Health.Degraded; as != bs {
		return as
	}
	if a.Health.Degraded != b.Health.Degraded {
		return b.Health.Degraded
	}
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	if la, lb := expectedLatency(req, a), expectedLatency(req, b); la != lb {
		return la < lb
	}
	if pa, pb := a.Offer.Provider.Priority, b.Offer.Provider.Priority; pa != pb {
		return pa < pb
	}
	return a.Provider() < b.Provider()
}

func expectedLatency(req *Request, t *Target) time.Duration {
	h := t.Health
	l := h.TTFT
	if !(req.Chat.Stream && h.TTFT > 0 || h.Latency == 0) {
		l = h.Latency
	}
	return l + t.ViaRTT
}

// MeshView is what the planner needs to know of the other nodes: which
// node of a region should call that region's providers for a request.
// gossip provides it.
type MeshView interface {
	// Via returns the alive, non-draining node of region nearest by
	// coordinate RTT and least loaded, and the estimated RTT to it; ok is
	// false when the region has none.
	Via(region string, api API) (node string, rtt time.Duration, ok bool)
}

// SpareView finds peers with unspent rate share of a provider, for a
// node whose own share is spent. gossip provides it.
type SpareView interface {
	// Spare returns the i-th (from 0) of the alive, non-draining peers
	// that have share of provider left, nearest by RTT first, in region
	// inRegion ("" for any) and, when j is not empty, in a region of
	// jurisdiction j; ok is false past the last.
	Spare(provider, inRegion string, j region.Jurisdiction, i int) (node, nodeRegion string, rtt time.Duration, ok bool)
}

// Planner turns a request and a read-only view of the providers into a
// Plan. It never blocks and never changes anything: a QuotaGate is only
// asked, never taken from.
type Planner struct {
	// Self and Region are the planning node and its region: the only
	// region whose region-reach providers it calls itself.
	Self, Region string
	Catalog      *Catalog
	Health       HealthView
	// Replicas is the health of individual replicas, by endpoint's
	// base; nil: replicas are not tracked apart.
	Replicas HealthView
	Quota    QuotaGate // nil: no rate limits
	Policy   Policy    // nil: CostFirst
	// Regions maps regions to jurisdictions, for strict transit.
	Regions *region.Map
	// Mesh finds via nodes for other regions' providers; nil: a node
	// alone, which skips them.
	Mesh MeshView
	// Affinity remembers each session's provider; nil: none.
	Affinity *Affinity
	// Spares finds peers with rate share left where this node's is
	// spent; nil: a node over its share skips the provider.
	Spares SpareView
	// Engines reports self-hosted replicas' engine load; nil: replicas
	// are weighed by this node's requests in flight alone.
	Engines EngineSignals
	// Remote reports other regions' self-hosted providers' engine load,
	// to hold a via target to the request's max_ttft; nil: not held.
	Remote RemoteEngines
	// ReplicaCost predicts replicas' time to first token for
	// ReplicaPrefix; the zero value is DefaultReplicaCost.
	ReplicaCost ReplicaCost
}

func (p *Planner) cost() ReplicaCost {
	if p.ReplicaCost.PrefillTokensPerSecond <= 0 {
		return DefaultReplicaCost()
	}
	return p.ReplicaCost
}

// Plan returns the targets for req in the order to try them. It fails
// with ErrModelNotFound when no provider serves the model,
// ErrNoCompliantProvider when none that does may see the request's data
// (or every one that may is unavailable), a *RetryAfterError when every
// candidate is cooling down or out of rate, and ErrNoProvider otherwise.
func (p *Planner) Plan(req *Request, now time.Time) (*Plan, error) {
	plan := &Plan{}
	plan.PromptTokens, plan.PromptUpper = req.Chat.PromptEstimate()
	ranks, err := p.offers(req, plan)
	if err != nil {
		return nil, err
	}
	if req.StrictTransit && req.Residency.Restricted() && !p.inJurisdiction(p.Region, req.Residency.Jurisdiction) {
		return plan, fmt.Errorf("%w: with strict transit, residency %s keeps this tenant's requests on nodes in %s, and node %s is in region %s; send them to a node in %s",
			ErrNoCompliantProvider, req.Residency, req.Residency, p.Self, p.Region, req.Residency)
	}
	policy := p.Policy
	if policy == nil {
		policy = CostFirst{}
	}
	plan.Policy = policy.Name()
	plan.MaxTTFT = tighter(req.MaxTTFT, plan.MaxTTFT)
	sticky := ""
	if p.Affinity != nil && req.Session != "" {
		sticky = p.Affinity.Provider(req.Session)
	}
	// Offers come in ranks (a weighted group's chosen member, then the
	// others): a later rank is planned only when the earlier ones left no
	// target.
	compliant := 0
	for _, offers := range ranks {
		compliant += p.planOffers(req, plan, offers, sticky, now)
		if len(plan.Targets) > 0 {
			break
		}
	}
	if compliant == 0 {
		if pr := req.Chat.Prior; pr != nil && plan.residencySkips() > 0 {
			return plan, fmt.Errorf("%w: previous response %s is held by %s, outside residency %s", ErrNoCompliantProvider, pr.ID, pr.Provider, req.Residency)
		}
		if plan.residencySkips() > 0 {
			return plan, fmt.Errorf("%w: %q is served only outside residency %s", ErrNoCompliantProvider, req.Chat.Model, req.Residency)
		}
		return plan, plan.unavailable(req)
	}
	if len(plan.Targets) == 0 {
		return plan, plan.unavailable(req)
	}
	if len(plan.Targets) > 1 { // (the interface's box is an allocation)
		sort.Stable(byPolicy{req, policy, plan.Targets})
	}
	spillSlow(plan.Targets)
	p.planContextFallback(req, plan, policy, sticky, now)
	return plan, nil
}

// tighter is the smaller of two objectives, zero meaning none.
func tighter(a, b time.Duration) time.Duration {
	if a <= 0 || b > 0 && b < a {
		return b
	}
	return a
}

// spillSlow moves the targets predicted past the request's max_ttft
// after the others, keeping each part's order: spill-over to the next
// compliant provider, and back when the prediction falls again.
func spillSlow(ts []Target) {
	k := 0
	for i := range ts {
		if ts[i].OverTTFT == "" {
			k++
		}
	}
	if k == 0 || k == len(ts) {
		return
	}
	out := make([]Target, 0, len(ts))
	for pass := range 2 {
		for i := range ts {
			if (ts[i].OverTTFT == "") == (pass == 0) {
				out = append(out, ts[i])
			}
		}
	}
	copy(ts, out)
}

// planOffers adds a target for each offer that passes every hard filter
// (a target per replica, in the order of its replica policy), records
// why the others were left out, and returns how many were compliant.
func (p *Planner) planOffers(req *Request, plan *Plan, offers []*Offer, sticky string, now time.Time) int {
	compliant := 0
	if plan.Targets == nil {
		n := len(offers)
		for _, o := range offers {
			if r := o.Provider.Ring; r != nil {
				n += len(r.replicas) - 1 // a target per replica
			}
		}
		if plan.Targets = plan.targetRoom[:0]; n > len(plan.targetRoom) {
			plan.Targets = make([]Target, 0, n)
		}
	}
	for _, o := range offers {
		pv := o.Provider
		if pr := req.Chat.Prior; pr != nil && pv.Name != pr.Provider {
			plan.skip(pv.Name, "previous_response_id "+pr.ID+" is held by "+pr.Provider, false, 0)
			continue
		}
		if !req.Residency.Allows(pv.Jurisdictions) {
			plan.skip(pv.Name, "residency "+req.Residency.String()+" not in "+pv.Jurisdictions.String(), true, 0)
			continue
		}
		t := Target{Offer: o}
		if pv.Kind == KindAnthropic && (req.Chat.API == APICompletions || req.Chat.Choices() > 1) {
			plan.skip(pv.Name, "a Messages provider serves neither legacy completions nor more than one choice", false, 0)
			continue
		}
		if pv.Reach == ReachRegion && pv.Region != p.Region {
			if req.StrictTransit && req.Residency.Restricted() && !p.inJurisdiction(pv.Region, req.Residency.Jurisdiction) {
				plan.skip(pv.Name, "strict transit: region "+pv.Region+" is outside "+req.Residency.String(), true, 0)
				continue
			}
			if req.Forwarded || p.Mesh == nil {
				plan.skip(pv.Name, "reachable only from region "+pv.Region, false, 0)
				continue
			}
			node, rtt, ok := p.Mesh.Via(pv.Region, req.Chat.API)
			if !ok {
				plan.skip(pv.Name, "no node of region "+pv.Region+" that serves the "+req.Chat.API.String()+" API is available to call it", false, 0)
				continue
			}
			t.Via, t.ViaRegion, t.ViaRTT = node, pv.Region, rtt
			t.OverTTFT = p.remoteOverTTFT(pv, plan)
		}
		compliant++
		out := req.Chat.Choices() * o.Model.MaxOutputTokens
		switch {
		case req.Chat.API == APIEmbeddings:
			out = 0 // an embedding is priced by its input alone
		case req.Chat.MaxTokens > 0:
			out = req.Chat.Choices() * req.Chat.MaxTokens
		}
		plan.OutputTokens = max(plan.OutputTokens, out)
		t.Health = p.Health.Health(pv.Name, now)
		// The expected cost counts the share of the prompt the provider's
		// cache has been serving; the bound assumes none of it cached.
		t.Cost = o.Model.ExpectedCost(plan.PromptTokens, t.Health.CacheHit, out)
		t.MaxCost = o.Model.Cost(Usage{PromptTokens: plan.PromptUpper, CompletionTokens: out})
		t.Tokens = plan.PromptTokens + out
		t.Sticky = pv.Name == sticky
		t.Hinted = req.Hint != "" && pv.Name == req.Hint
		switch {
		case t.Health.Ejected:
			plan.skip(pv.Name, "ejected after failures", false, 0)
			continue
		case !t.Health.CoolingUntil.IsZero():
			plan.skip(pv.Name, "cooling down after 429", false, t.Health.CoolingUntil.Sub(now))
			continue
		}
		if p.Quota != nil && t.Via == "" {
			allow := p.Quota.Allow
			if sa, ok := p.Quota.(spillAllower); ok && (req.Replanned || req.Spilled && pv.Name == req.Hint) {
				allow = sa.AllowSpilled
			}
			if ok, wait := allow(pv.Name, t.Tokens, now); !ok {
				if !p.spill(req, t, plan) {
					plan.skipQuota(p.Quota, pv.Name, t.Tokens, wait, now)
				}
				continue
			}
		}
		plan.Targets = p.appendReplicas(plan.Targets, &t, req, plan, now)
	}
	return compliant
}

// spillAllower is a QuotaGate that can ask for a request a peer spilled
// here without counting a refusal as this node's demand.
type spillAllower interface {
	AllowSpilled(provider string, tokens int, now time.Time) (bool, time.Duration)
}

// maxSpill is how many peers with share left a plan tries, nearest
// first: one that went away since gossip last heard of it is not the end.
const maxSpill = 2

// spill adds targets sending t through peers that have rate share of its
// provider left, for a node whose own share is spent: peers that can
// reach the provider and, with strict transit, lie in the residency's
// jurisdiction. A forwarded request is not forwarded again. It reports
// whether it added any.
func (p *Planner) spill(req *Request, t Target, plan *Plan) bool {
	if p.Spares == nil || p.Mesh == nil || req.Forwarded {
		return false
	}
	pv := t.Offer.Provider
	inRegion := ""
	if pv.Reach == ReachRegion {
		inRegion = pv.Region
	}
	var j region.Jurisdiction
	strict := req.StrictTransit && req.Residency.Restricted()
	if strict {
		j = req.Residency.Jurisdiction
	}
	added := 0
	for i := 0; added < maxSpill; i++ {
		node, nodeRegion, rtt, ok := p.Spares.Spare(pv.Name, inRegion, j, i)
		if !ok {
			break
		}
		if node == p.Self || (inRegion != "" && nodeRegion != inRegion) || (strict && !p.inJurisdiction(nodeRegion, j)) {
			continue
		}
		st := t
		st.Via, st.ViaRegion, st.ViaRTT, st.Spill = node, nodeRegion, rtt, true
		plan.Targets = append(plan.Targets, st)
		added++
	}
	return added > 0
}

// offers returns the offers for the request's model, or for the members
// of the group it names, in ranks: a weighted group's chosen member, then
// (as fallbacks only) the others.
func (p *Planner) offers(req *Request, plan *Plan) ([][]*Offer, error) {
	name := req.Chat.Model
	g := p.Catalog.Group(name)
	if g == nil {
		offers := p.Catalog.Offers(name)
		if len(offers) == 0 {
			return nil, fmt.Errorf("%w: %q is not served here; GET /v1/models lists the models", ErrModelNotFound, name)
		}
		if offers[0].Model.API != req.Chat.API.served() {
			return nil, &InvalidRequestError{Param: "model", Msg: fmt.Sprintf("%q is a model for %s, not %s: send it to POST /v1%s",
				name, offers[0].Model.API, req.Chat.API, offers[0].Model.API.path())}
		}
		plan.rankRoom[0] = offers
		return plan.rankRoom[:], nil
	}
	if a := p.Catalog.Offers(g.Members[0])[0].Model.API; a != req.Chat.API.served() {
		return nil, &InvalidRequestError{Param: "model", Msg: fmt.Sprintf("%q is a group of models for %s, not %s: send it to POST /v1%s",
			name, a, req.Chat.API, a.path())}
	}
	plan.Group = g.Name
	plan.MaxTTFT = g.MaxTTFT
	plan.FallbackOn = g.FallbackOn
	if g.FallbackOn.Has(FallbackContextLength) {
		plan.contextModels = g.ContextFallback
	}
	members, weighted, choice := g.choose(req.Session, plan.PromptTokens)
	plan.Choice = choice
	var ranks [][]*Offer
	if weighted {
		ranks = append(ranks, p.Catalog.Offers(members[0]))
		members = members[1:]
	}
	var rest []*Offer
	for _, m := range members {
		rest = append(rest, p.Catalog.Offers(m)...)
	}
	return append(ranks, rest), nil
}

func (p *Planner) inJurisdiction(regionName string, j region.Jurisdiction) bool {
	if p.Regions == nil {
		return false
	}
	r, ok := p.Regions.Lookup(regionName)
	return ok && r.Jurisdiction == j
}

func (plan *Plan) skip(provider, reason string, residency bool, retry time.Duration) {
	plan.Skipped = append(plan.Skipped, Skip{Provider: provider, Reason: reason, Residency: residency, RetryIn: retry})
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

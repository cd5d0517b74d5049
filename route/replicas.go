package route

import (
	"fmt"
	"math"
	"time"
)

// ReplicaPolicy orders a provider's replicas for a request: the first is
// the one chosen, the rest its failover order.
type ReplicaPolicy string

const (
	// ReplicaPrefix, the default, predicts each replica's time to first
	// token from the prompt prefix its cache is expected to hold
	// (PrefixIndex) and its load (ReplicaCost), and chooses the lowest.
	// Knowing nothing of either, it is ReplicaSession; a request with no
	// prefix to follow (no key, shorter than a chunk) goes least loaded.
	ReplicaPrefix ReplicaPolicy = "prefix"
	// ReplicaSession is bounded-load consistent hashing of the session
	// (Ring); a request without one goes least loaded.
	ReplicaSession ReplicaPolicy = "session"
	// ReplicaLeastLoaded chooses the fewest requests in flight for the
	// replica's capacity, ties in rotation.
	ReplicaLeastLoaded ReplicaPolicy = "least_loaded"
	// ReplicaRoundRobin chooses each request the next replica in turn.
	ReplicaRoundRobin ReplicaPolicy = "round_robin"
)

// ReplicaPolicies are the policies a provider may name.
var ReplicaPolicies = []ReplicaPolicy{ReplicaPrefix, ReplicaSession, ReplicaLeastLoaded, ReplicaRoundRobin}

// ReplicaReason is what put a replica target where it is.
type ReplicaReason string

const (
	// ReasonPredicted: ordered by predicted time to first token.
	ReasonPredicted ReplicaReason = "predicted_ttft"
	// ReasonSession: the session's consistent-hash order, nothing being
	// known of prefixes or load.
	ReasonSession ReplicaReason = "session_hash"
	// ReasonPrefixHash: the consistent-hash order of the prompt's first
	// chunk (a request with no session), nothing being known.
	ReasonPrefixHash ReplicaReason = "prefix_hash"
	// ReasonLeastLoaded: fewest requests in flight for its capacity.
	ReasonLeastLoaded ReplicaReason = "least_loaded"
	// ReasonRoundRobin: the next in rotation.
	ReasonRoundRobin ReplicaReason = "round_robin"
)

// ReplicaCost is how ReplicaPrefix predicts a replica's time to first
// token for a prompt of P tokens of which C are expected in its cache:
//
//	TTFT = PerWaiting × waiting + PerRunning × running / weight + (P − C) / PrefillTokensPerSecond
//
// running and waiting are the engine's figures when fresh (its requests
// from every node), and this node's requests in flight beyond them, sent
// since the engine's last reading, join its queue if it had one (or its
// KV cache was fuller than KVHigh) and its batch otherwise; without
// fresh figures, this node's requests in flight, all counted as running. A KV cache fuller than KVHigh counts as up to one
// more request waiting (new sequences wait for blocks). weight is the
// replica's capacity over the mean capacity (1 when none is given). Only
// the figures' ratios matter: a warm replica keeps a request until the
// wait for it outweighs the prefill it saves.
type ReplicaCost struct {
	// PrefillTokensPerSecond is an engine's prefill rate.
	PrefillTokensPerSecond float64
	// PerRunning is what each request being generated beside this one
	// adds to its first token.
	PerRunning time.Duration
	// PerWaiting is what each request queued ahead of it adds.
	PerWaiting time.Duration
	// KVHigh is the KV cache usage from which new sequences wait.
	KVHigh float64
	// MaxEngineAge is how old an engine's figures may be and still be
	// used.
	MaxEngineAge time.Duration
}

// DefaultReplicaCost is a mid-sized model on one GPU: 10,000 prefill
// tokens a second; 5 ms a running request (continuous batching makes
// each decode step a little longer, it does not make a new prompt wait);
// 250 ms a waiting one (about a typical prompt's prefill); waits from 90%
// of the KV cache; figures used for 15 s. A warm 4,000-token prefix then
// keeps a request until its replica has about 80 more running, or one or
// two more waiting, than a cold one.
func DefaultReplicaCost() ReplicaCost {
	return ReplicaCost{PrefillTokensPerSecond: 10000, PerRunning: 5 * time.Millisecond, PerWaiting: 250 * time.Millisecond,
		KVHigh: 0.9, MaxEngineAge: 15 * time.Second}
}

// ReplicaChoice is why a replica target is where it is in its plan, what
// explain and X-LLMesh-Route show.
type ReplicaChoice struct {
	Policy ReplicaPolicy
	Reason ReplicaReason
	// CachedTokens is the prompt tokens its cache is expected to hold.
	CachedTokens int
	// InFlight is the requests this node has in flight on it, Capacity
	// its max_concurrent (0: unbounded).
	InFlight, Capacity int
	// Engine is what its engine last reported, when Fresh.
	Engine EngineLoad
	Fresh  bool
	// TTFT is the predicted time to first token (ReasonPredicted).
	TTFT time.Duration
	// Full is how many of the provider's replicas were passed over at
	// their max_concurrent.
	Full int
}

// ReplicaChoice returns why target i's replica was chosen, nil for a
// target of a provider without replicas.
func (plan *Plan) ReplicaChoice(i int) *ReplicaChoice {
	if c := plan.Targets[i].choice; c > 0 {
		return &plan.Replicas[c-1]
	}
	return nil
}

// replicaFigures is what one choice knows of each replica, by index.
// It is kept apart from replicaChoosing, whose pointers reach calls that
// keep them, so that the buffers of a handful of replicas stay on the
// stack.
type replicaFigures struct {
	held   []int // of the request's prefix hashes
	ttft   []time.Duration
	engine []EngineLoad
	fresh  []bool
}

// appendReplicas adds t for each of its provider's replicas in the order
// its replica policy gives (the first the one chosen; replicas at their
// max_concurrent left out, ejected ones after the first only when every
// one is), or t alone for a provider without replicas. A provider whose
// every live replica is at its max_concurrent is skipped.
func (p *Planner) appendReplicas(ts []Target, t *Target, req *Request, plan *Plan, now time.Time) []Target {
	if t.Offer.Provider.Ring == nil || t.Via != "" {
		return append(ts, *t) // a via node picks the replica itself
	}
	return p.appendChosen(ts, t, req, plan, now)
}

// appendChosen is appendReplicas for a provider with replicas, apart so
// that the others' planning does without its frame.
func (p *Planner) appendChosen(ts []Target, t *Target, req *Request, plan *Plan, now time.Time) []Target {
	pv := t.Offer.Provider
	ring := pv.Ring
	var excluded func(int) bool
	if p.Replicas != nil {
		excluded = func(i int) bool { return p.Replicas.Health(pv.ReplicaKey(i), now).Ejected }
	}
	n := len(ring.replicas)
	var (
		orderBuf, heldBuf [16]int
		ttftBuf           [16]time.Duration
		engineBuf         [16]EngineLoad
		freshBuf          [16]bool
	)
	order := orderBuf[:0]
	fig := replicaFigures{held: heldBuf[:], ttft: ttftBuf[:], engine: engineBuf[:], fresh: freshBuf[:]}
	if n > len(heldBuf) {
		order = make([]int, 0, n)
		fig = replicaFigures{held: make([]int, n), ttft: make([]time.Duration, n), engine: make([]EngineLoad, n), fresh: make([]bool, n)}
	}
	c := replicaChoosing{p: p, pv: pv, ring: ring, excluded: excluded}
	order, reason := c.order(req, plan.PromptTokens, now, order, &fig)
	// Replicas at their max_concurrent are left out; a provider whose
	// every live replica is goes to the next provider of the plan.
	full, live := 0, 0
	kept := order[:0]
	for _, i := range order {
		if excluded != nil && excluded(i) {
			kept = append(kept, i)
			continue
		}
		live++
		if cp := pv.Capacity(i); cp > 0 && ring.InFlight(i) >= int64(cp) {
			full++
			continue
		}
		kept = append(kept, i)
	}
	if live > 0 && full == live {
		plan.skip(pv.Name, fmt.Sprintf("every replica is at its max_concurrent (%d of %d live)", full, live), false, time.Second)
		return ts
	}
	over := overTTFT(plan.MaxTTFT, reason, kept, excluded, fig.ttft)
	if plan.Replicas == nil {
		plan.Replicas = make([]ReplicaChoice, 0, len(kept))
	}
	for k, i := range kept {
		if k > 0 && excluded != nil && excluded(i) {
			break
		}
		plan.Replicas = append(plan.Replicas, ReplicaChoice{
			Policy: pv.ReplicaPolicy, Reason: reason, InFlight: int(ring.InFlight(i)), Capacity: pv.Capacity(i),
			CachedTokens: c.cached(&fig, plan.PromptTokens, i), Engine: fig.engine[i], Fresh: fig.fresh[i], TTFT: fig.ttft[i], Full: full,
		})
		rt := *t
		rt.Replica, rt.choice, rt.OverTTFT = i, int32(len(plan.Replicas)), over
		ts = append(ts, rt)
	}
	return ts
}

// overTTFT says why a provider spills when every live replica of kept is
// predicted to start later than objective, "" when one is not (or there
// is no objective, or no prediction to hold it to).
func overTTFT(objective time.Duration, reason ReplicaReason, kept []int, excluded func(int) bool, ttft []time.Duration) string {
	if objective <= 0 || reason != ReasonPredicted {
		return ""
	}
	best := time.Duration(-1)
	for _, i := range kept {
		if excluded != nil && excluded(i) {
			continue
		}
		if best < 0 || ttft[i] < best {
			best = ttft[i]
		}
	}
	if best <= objective {
		return ""
	}
	return spilledReason(best, objective)
}

// remoteOverTTFT holds another region's self-hosted provider to the
// plan's max_ttft from what its region gossips of its engines: a replica
// is taken to hold its share of the queue and of the running requests,
// and none of the prompt cached (its prefixes are not known here). It
// says why the provider spills, "" when it does not or nothing is known.
func (p *Planner) remoteOverTTFT(pv *Provider, plan *Plan) string {
	if plan.MaxTTFT <= 0 || p.Remote == nil {
		return ""
	}
	e, ok := p.Remote.Engine(pv.Name, pv.Region)
	if !ok || e.Replicas <= 0 {
		return ""
	}
	if ttft := p.cost().remoteTTFT(e, plan.PromptTokens); ttft > plan.MaxTTFT {
		return spilledReason(ttft, plan.MaxTTFT)
	}
	return ""
}

// remoteTTFT is ReplicaCost's prediction for a replica of e holding its
// mean share of e's load and nothing of the prompt.
func (m ReplicaCost) remoteTTFT(e RemoteEngine, prompt int) time.Duration {
	n := float64(e.Replicas)
	waiting, running := float64(e.Waiting)/n, float64(e.Running)/n
	if e.KVUsage > m.KVHigh {
		waiting += min(e.KVUsage-m.KVHigh, 1-m.KVHigh) / (1 - m.KVHigh)
	}
	prefill := float64(prompt) / m.PrefillTokensPerSecond
	return time.Duration(waiting*float64(m.PerWaiting) + running*float64(m.PerRunning) + prefill*float64(time.Second))
}

// spilledReason is what explain and X-LLMesh-Route say of a provider
// predicted past the objective.
func spilledReason(predicted, objective time.Duration) string {
	return fmt.Sprintf("spilled: predicted TTFT %dms > max_ttft %dms", predicted.Milliseconds(), objective.Milliseconds())
}

// replicaChoosing is one provider's replica choice under way.
type replicaChoosing struct {
	p        *Planner
	pv       *Provider
	ring     *Ring
	excluded func(int) bool
	prefix   *PromptPrefix // ReplicaPrefix with an index: the request's
}

// order fills out with the replicas in the order of the provider's
// policy and says what decided it.
func (c *replicaChoosing) order(req *Request, prompt int, now time.Time, out []int, fig *replicaFigures) ([]int, ReplicaReason) {
	policy := c.pv.ReplicaPolicy
	switch policy {
	case ReplicaRoundRobin:
		n := len(c.ring.replicas)
		for k, start := 0, c.ring.Turn(); k < n; k++ {
			out = append(out, (start+k)%n)
		}
		return moveExcludedLast(out, c.excluded), ReasonRoundRobin
	case ReplicaLeastLoaded:
		return c.leastLoaded(out), ReasonLeastLoaded
	}
	if policy == ReplicaPrefix && c.pv.Prefix != nil {
		c.prefix = req.Prefix(c.pv.Prefix.Seed())
	}
	var reason ReplicaReason
	switch {
	case req.Session != "":
		out, reason = c.ring.Order(req.Session, c.excluded, now, out), ReasonSession
	case c.prefix != nil && len(c.prefix.Hashes) > 0:
		out, reason = c.ring.OrderAt(c.prefix.Hashes[0], c.excluded, out), ReasonPrefixHash
	default:
		out, reason = c.leastLoaded(out), ReasonLeastLoaded
	}
	if policy != ReplicaPrefix || !c.observe(now, fig) {
		return out, reason // nothing known: as the ring (or load) has it
	}
	c.predict(prompt, out, fig)
	return out, ReasonPredicted
}

// observe reads what is known of the replicas: the prefix each holds and
// its engine's load. It reports whether anything is.
func (c *replicaChoosing) observe(now time.Time, fig *replicaFigures) bool {
	n := len(c.ring.replicas)
	known := c.prefix != nil && c.pv.Prefix.Held(c.prefix.Hashes, n, now, fig.held)
	if c.p.Engines == nil {
		return known
	}
	maxAge := c.p.cost().MaxEngineAge
	for i := range n {
		e, ok := c.p.Engines.Replica(c.pv.Name, i)
		if ok && !e.Stale && (e.At.IsZero() || now.Sub(e.At) <= maxAge) {
			fig.engine[i], fig.fresh[i] = e, true
			known = true
		}
	}
	return known
}

// predict orders out, the fallback order, by predicted time to first
// token to the millisecond; ties go to the longer prefix held, then to
// the fallback order. Ejected replicas stay last.
func (c *replicaChoosing) predict(prompt int, out []int, fig *replicaFigures) {
	m := c.p.cost()
	meanCap := c.meanCapacity()
	for _, i := range out {
		running, waiting := float64(c.ring.InFlight(i)), 0.0
		if e := fig.engine[i]; fig.fresh[i] {
			// This node's requests beyond what the engine reported were
			// sent since its reading: they join its batch while it has
			// room for them, its queue beyond.
			extra := max(running-float64(e.Running+e.Waiting), 0)
			joined := min(extra, m.room(e))
			running, waiting = float64(e.Running)+joined, float64(e.Waiting)+extra-joined
			if e.KVUsage > m.KVHigh {
				waiting += min(e.KVUsage-m.KVHigh, 1-m.KVHigh) / (1 - m.KVHigh)
			}
		}
		weight := 1.0
		if cp := c.pv.Capacity(i); cp > 0 {
			weight = float64(cp) / meanCap
		}
		prefill := float64(prompt-c.cached(fig, prompt, i)) / m.PrefillTokensPerSecond
		fig.ttft[i] = time.Duration(waiting*float64(m.PerWaiting) + running/weight*float64(m.PerRunning) + prefill*float64(time.Second))
	}
	live := len(out)
	for live > 0 && c.excluded != nil && c.excluded(out[live-1]) {
		live--
	}
	// An insertion sort, stable: a handful of replicas, and no closure
	// to escape.
	for k := 1; k < live; k++ {
		for j := k; j > 0 && fig.before(out[j], out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
}

// room is how many more requests like those it runs an engine is taken
// to have room for in its batch: none once it queues or its KV cache is
// fuller than KVHigh; else as many as the KV cache left free holds, at
// what each of those running holds (running × (1 − usage) / usage);
// unbounded when it reports nothing in its cache.
func (m ReplicaCost) room(e EngineLoad) float64 {
	switch {
	case e.Waiting > 0 || e.KVUsage > m.KVHigh:
		return 0
	case e.Running == 0 || e.KVUsage <= 0:
		return math.Inf(1)
	}
	return math.Floor(float64(e.Running) * (1 - e.KVUsage) / e.KVUsage)
}

// before reports whether replica a is predicted to answer first, to the
// millisecond, or as soon with more of the prefix held.
func (fig *replicaFigures) before(a, b int) bool {
	ta, tb := fig.ttft[a].Milliseconds(), fig.ttft[b].Milliseconds()
	if ta != tb {
		return ta < tb
	}
	return fig.held[a] > fig.held[b]
}

// cached is the prompt tokens replica i's cache is expected to hold.
func (c *replicaChoosing) cached(fig *replicaFigures, prompt, i int) int {
	if c.prefix == nil {
		return 0
	}
	return c.prefix.CachedTokens(fig.held[i], prompt)
}

// leastLoaded fills out with the replicas by fewest requests in flight
// for their capacity, ties in rotation (so that idle replicas share a
// trickle), ejected ones last.
func (c *replicaChoosing) leastLoaded(out []int) []int {
	n := len(c.ring.replicas)
	for k, start := 0, c.ring.Turn(); k < n; k++ {
		out = append(out, (start+k)%n)
	}
	meanCap := c.meanCapacity()
	load := func(i int) float64 {
		w := meanCap
		if cp := c.pv.Capacity(i); cp > 0 {
			w = float64(cp)
		}
		return float64(c.ring.InFlight(i)) / w
	}
	for k := 1; k < n; k++ {
		for j := k; j > 0 && load(out[j]) < load(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return moveExcludedLast(out, c.excluded)
}

// meanCapacity is the mean of the capacities given, 1 when none is.
func (c *replicaChoosing) meanCapacity() float64 {
	sum, k := 0, 0
	for _, cp := range c.pv.ReplicaCapacity {
		if cp > 0 {
			sum += cp
			k++
		}
	}
	if k == 0 {
		return 1
	}
	return float64(sum) / float64(k)
}

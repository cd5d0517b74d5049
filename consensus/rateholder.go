package consensus

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// RateHolder is a node's share of each rate-limited provider's mesh-wide
// capacity, leased from the leader and renewed in the background; the
// request path only reads and counts it (its Allow, Take and Return are
// the quota gate node/ plugs into route's planner). A request is
// admitted while what the node sent the provider in the last minute stays
// under its share, in requests and in tokens.
//
// Without a lease in force (before the first renewal, or once it expired
// because the leader could not be reached) a node sends nothing to a
// limited provider: another node may hold the whole capacity, and the
// guarantee comes before availability. Only in a mesh with no voters at
// all, where no share can exist, does each node take an even part of the
// capacity for itself.
type RateHolder struct {
	node  string
	caps  map[string][2]float64 // provider → configured rpm, tpm (0: none)
	renew func(ctx context.Context, demands []Demand) ([]Grant, time.Duration, time.Duration, error)
	nodes func() int // nodes in the mesh, for the even part
	// noVoters reports that the mesh has no voters: no ledger, no shares.
	noVoters func() bool
	renewed  bool // a renewal succeeded
	window   time.Duration
	now      func() time.Time

	mu     sync.Mutex
	shares map[string]*rateShare
	// kick asks Run to renew now (Kick), not at the leader's refresh;
	// kicked is when it last did.
	kick   chan struct{}
	kicked time.Time
	// report: renewals say what was sent (ReportUsage); seq numbers them.
	report bool
	seq    uint64
	// journalKick asks the journal for a record now (EnableJournal); nil:
	// no journal, no ceilings.
	journalKick func()
	// recovered are the journal's sends of shares not held when they
	// were recovered (Recover), by name: a share SetCapacities makes
	// starts with them.
	recovered map[string][]RateSent
}

type rateShare struct {
	rpm, tpm  float64
	unlimited bool
	expires   time.Time
	saw429    bool
	sent      []time.Time // requests taken, oldest first (within the window)
	tokens    []tokenRec  // tokens taken, oldest first
	tokenSum  float64
	wanted    []time.Time // attempts, and requests refused for want of a share
	// frozen holds, while a renewal that reported what was sent is under
	// way or failed, the share to what was sent then (ReportUsage).
	frozen             bool
	frozenRPM, frozenT float64
	// frozenAt is when the share was first held so since its last grant:
	// a renewal (or renewals failing) that long is the ledger's slowness.
	frozenAt time.Time
	// The journal's counters (ratejournal.go): requests and tokens
	// taken, cumulative, the ceilings on them the journal made durable,
	// what the last record held, the most tokens one take took, and the
	// pace of takes.
	taken, ceilReq, lastTaken  int64
	tokTaken, ceilTok, lastTok float64
	maxTok                     float64
	reqPace, tokPace           pace
}

// RateSlack is what a node adds to a provider's one-minute window when
// it counts what it sent: a request sent at the end of a minute reaches
// the provider a little later, maybe through a peer, and must not land
// in the provider's next minute beside a full share.
const RateSlack = time.Second

// recentDemand is the span over which a rise in demand is measured.
const recentDemand = 10 * time.Second

// maxWanted bounds the demand a node counts per window: beyond it, it
// already asks for more than any capacity.
const maxWanted = 1 << 17

type tokenRec struct {
	at time.Time
	n  float64
}

// NewRateHolder returns a holder for the providers of caps that have a
// limit. renew asks the leader for shares; nodes counts the mesh.
func NewRateHolder(node string, caps []RateCapacity, renew func(context.Context, []Demand) ([]Grant, time.Duration, time.Duration, error), nodes func() int, noVoters func() bool) *RateHolder {
	h := &RateHolder{node: node, caps: map[string][2]float64{}, renew: renew, nodes: nodes, noVoters: noVoters,
		window: time.Minute + RateSlack, now: time.Now, shares: map[string]*rateShare{}, kick: make(chan struct{}, 1)}
	for _, c := range caps {
		if c.RPM > 0 || c.TPM > 0 {
			h.caps[c.Provider] = [2]float64{float64(c.RPM), float64(c.TPM)}
			h.shares[c.Provider] = &rateShare{}
		}
	}
	return h
}

// limits returns the share in force for s now.
func (h *RateHolder) limits(p string, s *rateShare, now time.Time) (rpm, tpm float64) {
	if s.unlimited {
		return math.Inf(1), math.Inf(1)
	}
	if now.Before(s.expires) {
		if s.frozen {
			return math.Min(s.rpm, s.frozenRPM), math.Min(s.tpm, s.frozenT)
		}
		return s.rpm, s.tpm
	}
	if !h.noVoters() {
		return 0, 0
	}
	c, n := h.caps[p], float64(max(h.nodes(), 1))
	rpm, tpm = math.Inf(1), math.Inf(1)
	if c[0] > 0 {
		rpm = math.Floor(c[0] / n)
	}
	if c[1] > 0 {
		tpm = math.Floor(c[1] / n)
	}
	return rpm, tpm
}

func (s *rateShare) trim(now time.Time, window time.Duration) {
	cut := now.Add(-window)
	i, _ := slices.BinarySearchFunc(s.sent, cut, func(t, c time.Time) int { return t.Compare(c) })
	s.sent = s.sent[i:]
	j := 0
	for j < len(s.tokens) && !s.tokens[j].at.After(cut) {
		s.tokenSum -= s.tokens[j].n
		j++
	}
	s.tokens = s.tokens[j:]
	k, _ := slices.BinarySearchFunc(s.wanted, cut, func(t, c time.Time) int { return t.Compare(c) })
	s.wanted = s.wanted[k:]
}

func (h *RateHolder) check(provider string, tokens int, now time.Time, take, demand bool) (bool, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checkLocked(provider, tokens, now, take, demand)
}

func (h *RateHolder) checkLocked(provider string, tokens int, now time.Time, take, demand bool) (bool, time.Duration) {
	s := h.shares[provider]
	if s == nil {
		return true, 0 // no mesh-wide limit
	}
	s.trim(now, h.window)
	rpm, tpm := h.limits(provider, s, now)
	okReq := float64(len(s.sent)) < rpm
	okTok := s.tokenSum+float64(tokens) <= tpm
	// Demand is every attempt, and every request refused for want of a
	// share: what the node would send if it could.
	if demand && (take || !okReq || !okTok) && len(s.wanted) < maxWanted {
		s.wanted = append(s.wanted, now)
	}
	if !okReq || !okTok {
		wait := time.Second
		if !okReq && len(s.sent) > 0 {
			wait = max(s.sent[0].Add(h.window).Sub(now), time.Second)
		}
		return false, wait
	}
	if !h.underCeilingLocked(provider, s, tokens) {
		return false, journalWait
	}
	if take {
		s.taken++
		s.tokTaken += float64(tokens)
		s.maxTok = max(s.maxTok, float64(tokens))
		s.sent = append(s.sent, now)
		s.tokens = append(s.tokens, tokenRec{at: now, n: float64(tokens)})
		s.tokenSum += float64(tokens)
	}
	return true, 0
}

// Allow reports whether an attempt costing tokens fits the share now
// and, if not, how long until it could. It takes nothing.
func (h *RateHolder) Allow(provider string, tokens int, now time.Time) (bool, time.Duration) {
	return h.check(provider, tokens, now, false, true)
}

// Take counts one request and tokens against the share if both fit.
func (h *RateHolder) Take(provider string, tokens int, now time.Time) (bool, time.Duration) {
	return h.check(provider, tokens, now, true, true)
}

// AllowSpilled is Allow for a request a peer sent here because its own
// share was spent (see TakeSpilled).
func (h *RateHolder) AllowSpilled(provider string, tokens int, now time.Time) (bool, time.Duration) {
	return h.check(provider, tokens, now, false, false)
}

// TakeSpilled is Take for a request a peer sent here because its own
// share was spent: the peer counts it as its demand, so it is not this
// node's (were it both, the share would move to where the requests do not
// arrive, and be stranded should this node die).
func (h *RateHolder) TakeSpilled(provider string, tokens int, now time.Time) (bool, time.Duration) {
	return h.check(provider, tokens, now, true, false)
}

// Return gives back tokens taken but not used: they are
// taken off the newest entry (a negative count adds what was used beyond
// the estimate).
func (h *RateHolder) Return(provider string, tokens int, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.shares[provider]
	if s == nil || len(s.tokens) == 0 {
		return
	}
	last := &s.tokens[len(s.tokens)-1]
	d := math.Min(float64(tokens), last.n)
	last.n -= d
	s.tokenSum -= d
	if d < 0 {
		// Used beyond the estimate: taken, and the journal's next
		// record says so (tokens given back are not: more counted,
		// never less).
		s.tokTaken -= d
	}
}

// RateLimited tells the holder a provider answered 429: the next renewal
// reports it, and the leader hands out less of that provider.
func (h *RateHolder) RateLimited(provider string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.shares[provider]; s != nil {
		s.saw429 = true
	}
}

// Run renews the shares until ctx ends: at once, then as the leader asks.
func (h *RateHolder) Run(ctx context.Context) {
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-h.kick:
		}
		h.mu.Lock()
		limited := len(h.caps) > 0
		h.mu.Unlock()
		if !limited { // until a reload limits a provider
			wait = time.Second
			continue
		}
		refresh, err := h.renewOnce(ctx)
		if err != nil {
			wait = time.Second
			continue
		}
		wait = h.nextRenewal(refresh)
	}
}

// renewOnce sends one renewal and applies the grants.
func (h *RateHolder) renewOnce(ctx context.Context) (time.Duration, error) {
	now := h.now()
	h.mu.Lock()
	demands := make([]Demand, 0, len(h.shares))
	for _, p := range sortedKeys(h.shares) {
		s := h.shares[p]
		s.trim(now, h.window)
		// Demand: requests asked for over the last minute, or at the
		// rate of the last ten seconds if that is more (demand that just
		// rose), with a margin; tokens in proportion to what was sent.
		recent, _ := slices.BinarySearchFunc(s.wanted, now.Add(-recentDemand), func(t, c time.Time) int { return t.Compare(c) })
		want := max(float64(len(s.wanted)), float64(len(s.wanted)-recent)*float64(time.Minute)/float64(recentDemand)) * 1.25
		perReq := 1.0
		if len(s.sent) > 0 {
			perReq = s.tokenSum / float64(len(s.sent))
		}
		d := Demand{Provider: p, WantRPM: want, WantTPM: want * math.Max(perReq, 1), Saw429: s.saw429, Nodes: h.nodes()}
		if now.Before(s.expires) {
			d.HeldRPM, d.HeldTPM = s.rpm, s.tpm
		}
		if h.report {
			// From now until the grant arrives, no more than was sent:
			// the ledger counts this node's earlier grants no longer.
			d.Reports, d.SentRPM, d.SentTPM = true, float64(len(s.sent)), s.tokenSum
			s.frozen, s.frozenRPM, s.frozenT = true, d.SentRPM, d.SentTPM
			if s.frozenAt.IsZero() {
				s.frozenAt = now
			}
		}
		demands = append(demands, d)
	}
	if h.report {
		h.seq++
		for i := range demands {
			demands[i].Seq = h.seq
		}
	}
	h.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	grants, lease, refresh, err := h.renew(rctx, demands)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewed = true
	for _, g := range grants {
		s := h.shares[g.Provider]
		if s == nil {
			continue
		}
		s.rpm, s.tpm, s.unlimited = g.RPM, g.TPM, g.Unlimited
		s.expires = now.Add(lease)
		s.saw429, s.frozen, s.frozenAt = false, false, time.Time{}
	}
	return refresh, nil
}

// Drive hands the holder to a simulator: its clock is now, and instead
// of Run, the simulator calls Renew when the last renewal said to.
func (h *RateHolder) Drive(now func() time.Time) {
	h.mu.Lock()
	h.now = now
	h.mu.Unlock()
}

// Renew sends one renewal, as Run does, and returns when to renew next.
func (h *RateHolder) Renew(ctx context.Context) (time.Duration, error) { return h.renewOnce(ctx) }

// Ready reports whether the holder can admit requests to limited
// providers: it has renewed once, or the mesh has no voters, or no
// provider is limited.
func (h *RateHolder) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.renewed || len(h.caps) == 0 || h.noVoters()
}

// SetCapacities follows a reload of the providers' limits: shares of providers
// still limited are kept, new ones start empty until the next renewal
// (within the leader's refresh interval, a few seconds), those no longer
// limited are dropped.
func (h *RateHolder) SetCapacities(limits []RateCapacity) {
	h.mu.Lock()
	caps := map[string][2]float64{}
	shares := map[string]*rateShare{}
	added := false
	for _, c := range limits {
		if c.RPM > 0 || c.TPM > 0 {
			caps[c.Provider] = [2]float64{float64(c.RPM), float64(c.TPM)}
			added = added || caps[c.Provider] != h.caps[c.Provider]
			if s := h.shares[c.Provider]; s != nil {
				shares[c.Provider] = s
			} else {
				s = &rateShare{}
				if recs, ok := h.recovered[c.Provider]; ok {
					h.restoreLocked(s, recs, h.now())
					delete(h.recovered, c.Provider)
				}
				shares[c.Provider] = s
			}
		}
	}
	h.caps, h.shares = caps, shares
	h.mu.Unlock()
	if added {
		h.Kick() // a new or changed limit: renew now rather than at the refresh
	}
}

// SpareShare is what is left of this node's share of one provider in the
// current window.
type SpareShare struct {
	Provider string
	Requests int
}

// Spares returns, for each limited provider this node holds a share of,
// the requests it may still send in the current window (by the request
// share, or by the token share at the tokens its requests have averaged),
// most first: peers whose own share is spent forward to it.
func (h *RateHolder) Spares(now time.Time) []SpareShare {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []SpareShare
	for _, p := range sortedKeys(h.shares) {
		s := h.shares[p]
		if s.unlimited || !now.Before(s.expires) {
			continue
		}
		s.trim(now, h.window)
		left := math.Inf(1)
		if !math.IsInf(s.rpm, 0) {
			left = s.rpm - float64(len(s.sent))
		}
		if !math.IsInf(s.tpm, 0) {
			perReq := 1.0
			if len(s.sent) > 0 {
				perReq = math.Max(s.tokenSum/float64(len(s.sent)), 1)
			}
			left = math.Min(left, (s.tpm-s.tokenSum)/perReq)
		}
		if math.IsInf(left, 0) {
			continue
		}
		out = append(out, SpareShare{Provider: p, Requests: int(math.Max(0, math.Floor(left)))})
	}
	slices.SortStableFunc(out, func(a, b SpareShare) int { return b.Requests - a.Requests })
	return out
}

// Shares returns each provider's share in force, for operators.
func (h *RateHolder) Shares(now time.Time) map[string][2]float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][2]float64{}
	for p, s := range h.shares {
		rpm, tpm := h.limits(p, s, now)
		out[p] = [2]float64{rpm, tpm}
	}
	return out
}

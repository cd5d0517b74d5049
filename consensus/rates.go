package consensus

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Demand is what one node wants of one provider's rate capacity, and what
// it holds now.
type Demand struct {
	Provider         string
	WantRPM, WantTPM float64
	HeldRPM, HeldTPM float64
	Saw429           bool // the provider refused this node since its last renewal
}

// Grant is a node's share of one provider's capacity, per minute.
type Grant struct {
	Provider  string
	RPM, TPM  float64
	Unlimited bool // no mesh-wide limit
}

// allocator is the leader's division of each provider's RPM and TPM among
// the nodes that ask, in proportion to their demand, as Google's Doorman
// does. It is soft state, rebuilt by each new leader.
//
// Limits are per minute, and a node admits a request only while what it
// sent in the last minute is below its current share. A node's count over
// any minute is therefore at most the largest share it held during that
// minute, so the allocator treats a node as holding the largest share it
// was granted over the last window plus its lease, and never hands out
// more than the capacity minus what the others hold in that sense. A share
// taken from one node reaches another only once the window has passed.
//
// After a leadership change, a new leader does not know what nodes hold
// until they renew: for one lease plus one window it only confirms, never
// raises, what each node says it holds (Doorman's learning mode). The
// ledger records until when shares granted so far may matter (a leader
// marks it every few seconds while it grants), so a leader that finds no
// such mark — a new cluster, or one idle for a while — has nothing to
// learn and grants at once.
//
// A provider's own 429s shrink the capacity handed out (multiplicatively;
// it recovers slowly while no node reports one).
type allocator struct {
	lease, window time.Duration

	mu         sync.Mutex
	caps       map[string]RateCapacity
	factor     map[string]*backoff
	holders    map[string]map[string]*holding // provider → node
	learnUntil time.Time
	granted    time.Time // the last grant of a limited share
	// ready is set once this leader has learned what it must and marked
	// in the ledger that it grants; until then it grants nothing.
	ready bool
}

type holding struct {
	wantRPM, wantTPM float64
	seen             time.Time
	grants           []grantRec // recent, oldest first
}

type grantRec struct {
	expires  time.Time
	rpm, tpm float64
}

// backoff is the fraction of a provider's capacity handed out.
type backoff struct {
	f    float64
	last time.Time // of the last cut
}

func newAllocator(lease, window time.Duration) *allocator {
	if lease <= 0 {
		lease = 30 * time.Second
	}
	if window <= 0 {
		window = time.Minute
	}
	return &allocator{
		lease: lease, window: window,
		caps:    map[string]RateCapacity{},
		factor:  map[string]*backoff{},
		holders: map[string]map[string]*holding{},
	}
}

// startLearning begins a new leader's term: what nodes hold is unknown
// until marked, a time the ledger recorded (zero: nothing to learn).
func (a *allocator) startLearning(now, marked time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holders = map[string]map[string]*holding{}
	a.ready = false
	a.learnUntil = time.Time{}
	if marked.After(now) {
		a.learnUntil = now.Add(a.lease + a.window)
		if marked.Before(a.learnUntil) {
			a.learnUntil = marked
		}
	}
}

// RateHandover is what a leader handing over leadership granted: every
// node's shares that may still matter, and its demand. The next leader
// starts from it instead of learning for a lease and a window. Times are
// relative to the handover, so that the two leaders' clocks need not
// agree: the next leader counts them from when it reads the record,
// which is later, so never too early.
type RateHandover struct {
	// LearnFor is how much longer the handing leader was itself still
	// learning (it cannot vouch for shares its predecessor granted); the
	// next leader goes on learning for that long. In ns.
	LearnFor int64       `json:"learn_for,omitempty"`
	Shares   []HeldShare `json:"shares"`
}

// HeldShare is one node's shares of one provider, as a leader granted them.
type HeldShare struct {
	Provider string       `json:"provider"`
	Node     string       `json:"node"`
	WantRPM  float64      `json:"want_rpm"`
	WantTPM  float64      `json:"want_tpm"`
	Grants   []ShareGrant `json:"grants"`
}

// ShareGrant is one grant: for how much longer it counts (its lease and
// then the window, in ns), and how much. -1 stands for unlimited.
type ShareGrant struct {
	CountsFor int64   `json:"counts_for"`
	RPM       float64 `json:"rpm"`
	TPM       float64 `json:"tpm"`
}

// handover stops granting and returns what the allocator granted, for
// the next leader.
func (a *allocator) handover(now time.Time) RateHandover {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ready = false
	h := RateHandover{Shares: []HeldShare{}}
	if now.Before(a.learnUntil) {
		h.LearnFor = int64(a.learnUntil.Sub(now))
	}
	for _, p := range sortedKeys(a.holders) {
		hs := a.holders[p]
		a.prune(hs, now)
		for _, node := range sortedKeys(hs) {
			ho := hs[node]
			sh := HeldShare{Provider: p, Node: node, WantRPM: ho.wantRPM, WantTPM: ho.wantTPM}
			for _, g := range ho.grants {
				if left := g.expires.Add(a.window).Sub(now); left > 0 {
					// The allocator counts a grant until its expiry plus the
					// window: record that whole span as a shorter lease.
					sh.Grants = append(sh.Grants, ShareGrant{CountsFor: int64(left), RPM: finite(g.rpm), TPM: finite(g.tpm)})
				}
			}
			h.Shares = append(h.Shares, sh)
		}
	}
	return h
}

// finite maps an unlimited share to -1 (JSON has no infinity).
func finite(v float64) float64 {
	if math.IsInf(v, 0) {
		return -1
	}
	return v
}

// handoverSlack is what the next leader adds to every span of a
// handover: the time the record took to reach it is already on its side.
const handoverSlack = time.Second

// startFrom begins a new leader's term from a handover: it knows what
// every node holds, so it grants at once (or, if the handing leader was
// still learning, learns for the rest of that).
func (a *allocator) startFrom(h *RateHandover, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holders = map[string]map[string]*holding{}
	a.ready = false
	a.learnUntil = time.Time{}
	if h.LearnFor > 0 {
		a.learnUntil = now.Add(time.Duration(h.LearnFor) + handoverSlack)
	}
	for _, sh := range h.Shares {
		hs := a.holders[sh.Provider]
		if hs == nil {
			hs = map[string]*holding{}
			a.holders[sh.Provider] = hs
		}
		ho := &holding{wantRPM: sh.WantRPM, wantTPM: sh.WantTPM, seen: now}
		for _, g := range sh.Grants {
			rpm, tpm := g.RPM, g.TPM
			if rpm < 0 {
				rpm = math.Inf(1)
			}
			if tpm < 0 {
				tpm = math.Inf(1)
			}
			// expires + window = now + CountsFor + slack.
			exp := now.Add(time.Duration(g.CountsFor) + handoverSlack - a.window)
			ho.grants = append(ho.grants, grantRec{expires: exp, rpm: rpm, tpm: tpm})
			if last := exp.Add(-a.lease); last.After(a.granted) {
				a.granted = last
			}
		}
		hs[sh.Node] = ho
	}
}

// isReady reports whether the allocator grants.
func (a *allocator) isReady() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ready
}

// setReady lets the allocator grant (ready) or stops it.
func (a *allocator) setReady(ready bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ready = ready
}

// errNotGranting answers renewals before a new leader is ready.
var errNotGranting = fmt.Errorf("%w: the new leader is not granting rate shares yet", ErrNoLeader)

// horizon is until when the shares granted so far may matter, for the
// ledger's mark; zero when none was granted.
func (a *allocator) horizon() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.granted.IsZero() {
		return time.Time{}
	}
	return a.granted.Add(a.lease + a.window)
}

func (a *allocator) setCapacities(caps []RateCapacity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.caps = map[string]RateCapacity{}
	for _, c := range caps {
		a.caps[c.Provider] = c
	}
}

// grant answers one node's renewal.
func (a *allocator) grant(node string, demands []Demand, now time.Time) ([]Grant, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ready {
		return nil, errNotGranting
	}
	out := make([]Grant, 0, len(demands))
	for _, d := range demands {
		c, ok := a.caps[d.Provider]
		if !ok || (c.RPM == 0 && c.TPM == 0) {
			out = append(out, Grant{Provider: d.Provider, Unlimited: true})
			continue
		}
		f := a.cut(d.Provider, d.Saw429, now)
		hs := a.holders[d.Provider]
		if hs == nil {
			hs = map[string]*holding{}
			a.holders[d.Provider] = hs
		}
		h := hs[node]
		if h == nil {
			h = &holding{}
			hs[node] = h
		}
		h.wantRPM, h.wantTPM, h.seen = max(d.WantRPM, 1), max(d.WantTPM, 1), now
		if now.Before(a.learnUntil) && len(h.grants) == 0 && (d.HeldRPM > 0 || d.HeldTPM > 0) {
			// Learning: what the node says it holds counts as held.
			h.grants = append(h.grants, grantRec{expires: now.Add(a.lease), rpm: d.HeldRPM, tpm: d.HeldTPM})
		}
		g := Grant{Provider: d.Provider}
		g.RPM = a.share(hs, node, now, float64(c.RPM)*f, func(h *holding) float64 { return h.wantRPM }, func(r grantRec) float64 { return r.rpm }, d.HeldRPM)
		g.TPM = a.share(hs, node, now, float64(c.TPM)*f, func(h *holding) float64 { return h.wantTPM }, func(r grantRec) float64 { return r.tpm }, d.HeldTPM)
		if c.RPM == 0 {
			g.RPM = math.Inf(1)
		}
		if c.TPM == 0 {
			g.TPM = math.Inf(1)
		}
		h.grants = append(h.grants, grantRec{expires: now.Add(a.lease), rpm: g.RPM, tpm: g.TPM})
		a.granted = now
		a.prune(hs, now)
		out = append(out, g)
	}
	return out, nil
}

// share computes one node's share of one dimension (requests or tokens)
// of capacity c.
func (a *allocator) share(hs map[string]*holding, node string, now time.Time, c float64,
	want func(*holding) float64, of func(grantRec) float64, held float64) float64 {
	if c == 0 {
		return 0
	}
	// Others hold what they may have sent in the window, whether or not
	// they still ask: a node that went quiet may have sent its share.
	var others float64
	active := 0
	for name, h := range hs {
		if name != node {
			others += a.committed(h, now, of)
		}
		if now.Sub(h.seen) <= a.lease {
			active++
		}
	}
	// Every node wants at least half an even share, so that one that
	// starts or idles can still send at once; beyond that, what it asked
	// for. Spare capacity is not handed out: a share once granted holds
	// its capacity for a window, and a greedy grant would starve the
	// others for that long. Demand counts refused requests, so a busy
	// node's share grows renewal by renewal.
	floor := c / float64(2*max(active, 1))
	wantOf := func(h *holding) float64 { return max(want(h), floor) }
	var total float64
	for _, h := range hs {
		if now.Sub(h.seen) <= a.lease {
			total += wantOf(h)
		}
	}
	me := hs[node]
	target := wantOf(me)
	if total > c {
		target = c * wantOf(me) / total
	}
	if now.Before(a.learnUntil) {
		target = min(target, held)
	}
	return math.Max(0, math.Floor(min(target, c-others)))
}

// committed is the most a node may have admitted over the last window:
// the largest share it held in it, or since.
func (a *allocator) committed(h *holding, now time.Time, of func(grantRec) float64) float64 {
	var m float64
	for _, g := range h.grants {
		if g.expires.Add(a.window).After(now) {
			m = max(m, of(g))
		}
	}
	return m
}

// prune drops grants that can no longer matter, and nodes with none.
func (a *allocator) prune(hs map[string]*holding, now time.Time) {
	for name, h := range hs {
		i := 0
		for i < len(h.grants)-1 && !h.grants[i].expires.Add(a.window).After(now) {
			i++
		}
		h.grants = h.grants[i:]
		if len(h.grants) == 1 && !h.grants[0].expires.Add(a.window).After(now) && now.Sub(h.seen) > a.lease {
			delete(hs, name)
		}
	}
}

// cut shrinks the handed-out fraction on a 429 (at most every five
// seconds, to 0.8 of what it was, never below a tenth) and otherwise lets
// it recover by a hundredth a renewal.
func (a *allocator) cut(provider string, saw429 bool, now time.Time) float64 {
	b := a.factor[provider]
	if b == nil {
		b = &backoff{f: 1}
		a.factor[provider] = b
	}
	switch {
	case saw429 && now.Sub(b.last) >= 5*time.Second:
		b.f = math.Max(0.1, b.f*0.8)
		b.last = now
	case !saw429:
		b.f = math.Min(1, b.f+0.01)
	}
	return b.f
}

// RateAllocator is the leader's division of rate capacity, for a
// simulator that plays the leader without Raft: ready at once, with
// nothing to learn.
type RateAllocator struct{ a *allocator }

// NewRateAllocator returns an allocator of caps with the lease and
// window a Server would use (zero: its defaults).
func NewRateAllocator(caps []RateCapacity, lease, window time.Duration) *RateAllocator {
	a := newAllocator(lease, window)
	a.setCapacities(caps)
	a.setReady(true)
	return &RateAllocator{a: a}
}

// Renew answers one node's renewal as a leader would: its grants, their
// lease and when to renew.
func (x *RateAllocator) Renew(node string, demands []Demand, now time.Time) ([]Grant, time.Duration, time.Duration, error) {
	g, err := x.a.grant(node, demands, now)
	return g, x.a.lease, x.a.refresh(), err
}

// refresh is how often a node renews its shares.
func (a *allocator) refresh() time.Duration { return a.lease / 6 }

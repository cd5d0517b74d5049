package consensus

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Demand is what one node wants of one provider's rate capacity, and what
// it holds now.
type Demand struct {
	Provider         string
	WantRPM, WantTPM float64
	HeldRPM, HeldTPM float64
	Saw429           bool // the provider refused this node since its last renewal
	// Nodes is how many nodes the asking node sees in the mesh: until
	// they have all asked, the leader divides as if they had.
	Nodes int
	// Reports means SentRPM and SentTPM are what the node sent in the
	// last window when it asked, and that it admits no more than that
	// until this renewal's grant arrives (ReportUsage): its earlier
	// grants bound nothing after.
	Reports          bool
	SentRPM, SentTPM float64
	// Seq orders the renewals of one boot; 0 when unknown.
	Seq uint64
}

// Grant is a node's share of one provider's capacity, per minute.
type Grant struct {
	Provider  string
	RPM, TPM  float64
	Unlimited bool // no mesh-wide limit
}

// Rate shares are ledger state. The division of each provider's RPM and
// TPM among the nodes that ask, in proportion to their demand (as Google's
// Doorman does it), is computed by the state machine when a renewal is
// applied, and every grant is recorded there before the node learns of
// it. So a new leader knows every share still in force from its own
// replica: there is nothing to learn after a leader change, and a node
// keeps its share through an election.
//
// Limits are per minute, and a node admits a request only while what it
// sent in the last minute is below its current share. A node's count over
// any minute is therefore at most the largest share it held during that
// minute, so a node counts as holding the largest share it was granted
// over the last window plus its lease, and no grant exceeds the capacity
// minus what the others hold in that sense. A share taken from one node
// reaches another only once the window has passed.
//
// A restarted node forgets what it sent: the grants of its earlier boot
// are kept apart, as another holder's, until they can no longer matter.
//
// A provider's own 429s shrink the capacity handed out (multiplicatively;
// it recovers slowly while no node reports one).

// RatesCmd is the body of CmdRates: one node's renewal, applied by the
// leader on its behalf.
type RatesCmd struct {
	Node string `json:"node"`
	// Boot is a nonce of the node's process; 0 when unknown (an older
	// node), which is taken to be the same process as before.
	Boot    int64    `json:"boot,omitempty"`
	Demands []Demand `json:"demands"`
	// Lease is how long the grants last, Window the rate limits' window,
	// in ns: the leader's settings.
	Lease  int64 `json:"lease"`
	Window int64 `json:"window"`
}

// RateGrant is one grant as the ledger answers it; -1 stands for a
// dimension without a limit (JSON has no infinity).
type RateGrant struct {
	Provider  string  `json:"provider"`
	RPM       float64 `json:"rpm"`
	TPM       float64 `json:"tpm"`
	Unlimited bool    `json:"unlimited,omitempty"`
}

// Grant returns g as the request path uses it: unlimited dimensions as
// +Inf.
func (g RateGrant) Grant() Grant {
	out := Grant{Provider: g.Provider, RPM: g.RPM, TPM: g.TPM, Unlimited: g.Unlimited}
	if g.RPM < 0 {
		out.RPM = math.Inf(1)
	}
	if g.TPM < 0 {
		out.TPM = math.Inf(1)
	}
	return out
}

// rateBook is one provider's shares.
type rateBook struct {
	// Holders by node name; an earlier boot's grants under
	// name#boot.
	Holders map[string]*rateHolding `json:"holders"`
	// Cut is the fraction of the capacity handed out, CutAt the time of
	// the last cut (Unix ns).
	Cut   float64 `json:"cut"`
	CutAt int64   `json:"cut_at,omitempty"`
}

type rateHolding struct {
	Boot    int64       `json:"boot,omitempty"`
	WantRPM float64     `json:"want_rpm"`
	WantTPM float64     `json:"want_tpm"`
	Seen    int64       `json:"seen"`   // the last renewal, Unix ns; 0 for an earlier boot
	Grants  []rateGrant `json:"grants"` // recent, oldest first
	// Report is what the holder said, at its last renewal, it had sent
	// in the window (Demand.Reports): with it, only the last grant
	// bounds what it sends after. Nil from a holder that does not report.
	Report *rateReport `json:"report,omitempty"`
	// Seq is its last renewal's (Demand.Seq).
	Seq uint64 `json:"seq,omitempty"`
}

// rateReport is what a holder sent in the window before At (Unix ns).
type rateReport struct {
	At  int64   `json:"at"`
	RPM float64 `json:"rpm"`
	TPM float64 `json:"tpm"`
}

type rateGrant struct {
	Expires int64   `json:"expires"` // Unix ns
	RPM     float64 `json:"rpm"`     // 0 for a dimension without a limit
	TPM     float64 `json:"tpm"`
}

// Default rate lease and window, when a command names none.
const (
	defaultRateLease  = int64(30 * time.Second)
	defaultRateWindow = int64(time.Minute)
)

// ratesCommand is node's renewal as a command: what it holds is left
// out (the ledger knows it, and an unlimited dimension is infinite,
// which JSON cannot carry).
func ratesCommand(node string, boot int64, demands []Demand, lease, window time.Duration) (Command, error) {
	ds := make([]Demand, len(demands))
	for i, d := range demands {
		ds[i] = Demand{Provider: d.Provider, WantRPM: finiteWant(d.WantRPM), WantTPM: finiteWant(d.WantTPM), Saw429: d.Saw429, Nodes: d.Nodes,
			Reports: d.Reports, SentRPM: finiteWant(d.SentRPM), SentTPM: finiteWant(d.SentTPM), Seq: d.Seq}
	}
	return newCommand("", CmdRates, RatesCmd{Node: node, Boot: boot, Demands: ds, Lease: int64(lease), Window: int64(window)})
}

// clampWant bounds a node's stated demand to what any capacity could be
// (a peer's bug must not make a share NaN or infinite in the ledger).
// A node that asks for nothing wants one, so that it can send at once
// when a request comes; one that reports what it sent (reports) wants
// nothing then: it asks for share when a request waits for it
// (RateHolder.Kick), and an idle node's one would keep a small capacity
// (a key's few requests a minute) from the node that uses it until the
// idle node's next renewal.
func clampWant(v float64, reports bool) float64 {
	least := 1.0
	if reports {
		least = 0
	}
	if math.IsNaN(v) {
		return least
	}
	return min(max(v, least), 1e15)
}

func finiteWant(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return math.MaxFloat32
	}
	return v
}

// rates applies one node's renewal and returns its grants.
func (l *Ledger) rates(c RatesCmd, now int64) []RateGrant {
	lease, window := c.Lease, c.Window
	if lease <= 0 {
		lease = defaultRateLease
	}
	if window <= 0 {
		window = defaultRateWindow
	}
	if l.s.Shares == nil {
		l.s.Shares = map[string]*rateBook{}
	}
	out := make([]RateGrant, 0, len(c.Demands))
	for _, d := range c.Demands {
		capy := l.capacity(d.Provider)
		if capy == nil || (capy.RPM == 0 && capy.TPM == 0) {
			out = append(out, RateGrant{Provider: d.Provider, RPM: -1, TPM: -1, Unlimited: true})
			continue
		}
		rb := l.s.Shares[d.Provider]
		if rb == nil {
			rb = &rateBook{Cut: 1}
			l.s.Shares[d.Provider] = rb
		}
		if rb.Holders == nil { // (a snapshot's empty book)
			rb.Holders = map[string]*rateHolding{}
		}
		f := rb.cut(d.Saw429, now)
		h := rb.Holders[c.Node]
		if h != nil && c.Boot != 0 && h.Boot != 0 && h.Boot != c.Boot {
			// The node restarted and forgot what it sent: its earlier
			// grants count as another holder's.
			h.WantRPM, h.WantTPM, h.Seen = 0, 0, 0
			ghost := c.Node + "#" + strconv.FormatInt(h.Boot, 36)
			if g := rb.Holders[ghost]; g != nil { // that boot again: both count
				g.reportAsGrant()
				h.reportAsGrant()
				h.Grants = append(g.Grants, h.Grants...)
				slices.SortStableFunc(h.Grants, byExpiry)
			}
			rb.Holders[ghost] = h
			h = nil
		}
		if h == nil {
			h = &rateHolding{Boot: c.Boot}
			rb.Holders[c.Node] = h
		}
		if d.Seq != 0 && d.Seq <= h.Seq {
			// An older renewal applied late: the node holds a later
			// grant, and this one never reaches it.
			out = append(out, RateGrant{Provider: d.Provider})
			continue
		}
		h.Seq = d.Seq
		if d.Reports { // what it sent now bounds what it sent before
			h.Report = &rateReport{At: now, RPM: math.Max(d.SentRPM, 0), TPM: math.Max(d.SentTPM, 0)}
		} else {
			h.reportAsGrant()
		}
		if c.Boot != 0 {
			h.Boot = c.Boot
		}
		h.WantRPM, h.WantTPM, h.Seen = clampWant(d.WantRPM, d.Reports), clampWant(d.WantTPM, d.Reports), now
		g := RateGrant{Provider: d.Provider, RPM: -1, TPM: -1}
		rec := rateGrant{Expires: now + lease}
		if capy.RPM > 0 {
			g.RPM = rb.share(c.Node, now, lease, window, d.Nodes, float64(capy.RPM)*f,
				func(h *rateHolding) float64 { return h.WantRPM }, func(r rateGrant) float64 { return r.RPM })
			rec.RPM = g.RPM
		}
		if capy.TPM > 0 {
			g.TPM = rb.share(c.Node, now, lease, window, d.Nodes, float64(capy.TPM)*f,
				func(h *rateHolding) float64 { return h.WantTPM }, func(r rateGrant) float64 { return r.TPM })
			rec.TPM = g.TPM
		}
		h.Grants = append(h.Grants, rec)
		rb.prune(now, lease, window)
		out = append(out, g)
	}
	return out
}

// share computes node's share of one dimension (requests or tokens) of
// capacity c. Holders are visited in name order: the sums are the same
// on every replica.
func (rb *rateBook) share(node string, now, lease, window int64, nodes int, c float64,
	want func(*rateHolding) float64, of func(rateGrant) float64) float64 {
	if c <= 0 {
		return 0
	}
	names := sortedKeys(rb.Holders)
	// Others hold what they may have sent in the window, whether or not
	// they still ask: a node that went quiet may have sent its share.
	var others float64
	active := 0
	for _, name := range names {
		h := rb.Holders[name]
		if name != node {
			others += committed(h, now, window, of)
		}
		if h.Seen != 0 && now-h.Seen <= lease {
			active++
		}
	}
	// Every node wants at least a sixteenth of an even share, so that one
	// that starts or idles can still send at once (and one whose share
	// is spent forwards to peers with some left); beyond that, what it
	// asked for. The floor is small because a node that dies strands
	// its share for a lease and a window; it counts the nodes the asker
	// sees, so that the first to ask after a start does not take the
	// floor of a mesh of one. Spare capacity is not handed out: a share
	// once granted holds its capacity for a window, and a greedy grant
	// would starve the others for that long. Demand counts refused requests, so a busy
	// node's share grows renewal by renewal.
	floor := c / float64(16*max(active, nodes, 1))
	wantOf := func(h *rateHolding) float64 { return max(want(h), floor) }
	var total float64
	for _, name := range names {
		if h := rb.Holders[name]; h.Seen != 0 && now-h.Seen <= lease {
			total += wantOf(h)
		}
	}
	target := wantOf(rb.Holders[node])
	if total > c {
		// A reporting holder whose part of the division comes to less
		// than one (request or token) is granted nothing when it asks:
		// its want takes nothing from the others' parts either, or a
		// small capacity (a key's few requests a minute) would never
		// reach whole the node that uses it. (Providers' holders do not
		// report: their division is as it was, on voters of every
		// version alike.)
		rest := total
		for _, name := range names {
			if h := rb.Holders[name]; name != node && h.Report != nil && h.Seen != 0 && now-h.Seen <= lease && c*wantOf(h)/total < 1 {
				rest -= wantOf(h)
			}
		}
		if rest > c {
			target = c * target / rest
		}
	}
	return math.Max(0, math.Floor(min(target, c-others)))
}

// committed is the most a holder may admit in a window that reaches
// past now: the largest share it held in the last window, or since. A
// holder that reports what it sent (Demand.Reports) held nothing more
// than that from its last renewal until that renewal's grant, the last,
// reached it; so its earlier grants no longer count, and what it sent
// counts for a window after it said so.
func committed(h *rateHolding, now, window int64, of func(rateGrant) float64) float64 {
	var m float64
	grants := h.Grants
	if r := h.Report; r != nil && len(grants) > 0 {
		grants = grants[len(grants)-1:]
		if r.At+window > now {
			m = of(rateGrant{RPM: r.RPM, TPM: r.TPM})
		}
	}
	for _, g := range grants {
		if g.Expires+window > now {
			m = max(m, of(g))
		}
	}
	return m
}

// prune drops grants that can no longer matter (of a holder that
// reports what it sent, every grant but the last: see committed), and
// holders with none that have not renewed for a lease.
func (rb *rateBook) prune(now, lease, window int64) {
	for _, name := range sortedKeys(rb.Holders) {
		h := rb.Holders[name]
		i := 0
		if h.Report != nil {
			i = max(len(h.Grants)-1, 0)
		}
		for i < len(h.Grants)-1 && h.Grants[i].Expires+window <= now {
			i++
		}
		h.Grants = h.Grants[i:]
		if (len(h.Grants) == 0 || h.Grants[0].Expires+window <= now) && (h.Seen == 0 || now-h.Seen > lease) {
			delete(rb.Holders, name)
		}
	}
}

// reportAsGrant makes a holder's report a grant of what it sent, which
// counts for a window after it as the report does: its grants alone
// then bound it (before a renewal that does not report, or when two of
// a node's boots' grants are merged). Earlier grants of a reporting
// holder are gone (prune), and the report bounds what they let it send.
func (h *rateHolding) reportAsGrant() {
	if r := h.Report; r != nil {
		h.Grants = append(h.Grants, rateGrant{Expires: r.At, RPM: r.RPM, TPM: r.TPM})
		slices.SortStableFunc(h.Grants, byExpiry)
		h.Report = nil
	}
}

func byExpiry(a, b rateGrant) int { return cmp.Compare(a.Expires, b.Expires) }

// cut shrinks the handed-out fraction on a 429 (at most every five
// seconds, to 0.8 of what it was, never below a tenth) and otherwise lets
// it recover by a hundredth a renewal.
func (rb *rateBook) cut(saw429 bool, now int64) float64 {
	switch {
	case saw429 && now-rb.CutAt >= int64(5*time.Second):
		rb.Cut = math.Max(0.1, rb.Cut*0.8)
		rb.CutAt = now
	case !saw429:
		rb.Cut = math.Min(1, rb.Cut+0.01)
	}
	return rb.Cut
}

// ShareView is one node's share of one provider as the ledger records it.
type ShareView struct {
	Provider string  `json:"provider"`
	Node     string  `json:"node"`
	RPM      float64 `json:"rpm"` // the latest grant; 0 for no limit
	TPM      float64 `json:"tpm"`
	// Expires is when the latest grant's lease ends (Unix ns).
	Expires int64 `json:"expires"`
	// CommittedRPM and CommittedTPM are what the holder counts against
	// the capacity now: what it may have sent in a window reaching past
	// the ledger's time. Ghost marks an earlier boot's grants (the node
	// restarted without its journal): capacity nobody can use until
	// they lapse.
	CommittedRPM float64 `json:"committed_rpm"`
	CommittedTPM float64 `json:"committed_tpm"`
	Ghost        bool    `json:"ghost,omitempty"`
}

// Shares returns the latest grant of every holder, sorted by provider
// then node; an earlier boot's grants are named node#boot.
func (l *Ledger) Shares() []ShareView {
	out := []ShareView{}
	now := l.s.Time
	window := defaultRateWindow + int64(RateSlack)
	for _, p := range sortedKeys(l.s.Shares) {
		rb := l.s.Shares[p]
		for _, n := range sortedKeys(rb.Holders) {
			h := rb.Holders[n]
			if len(h.Grants) == 0 {
				continue
			}
			g := h.Grants[len(h.Grants)-1]
			out = append(out, ShareView{Provider: p, Node: n, RPM: g.RPM, TPM: g.TPM, Expires: g.Expires,
				CommittedRPM: committed(h, now, window, func(r rateGrant) float64 { return r.RPM }),
				CommittedTPM: committed(h, now, window, func(r rateGrant) float64 { return r.TPM }),
				Ghost:        strings.Contains(n, "#")})
		}
	}
	return out
}

// RateHandover is what a leader of an earlier version recorded when it
// handed leadership over (CmdRateHandover). Shares are ledger state now;
// the record is read from old logs and snapshots and otherwise ignored.
type RateHandover struct {
	LearnFor int64             `json:"learn_for,omitempty"`
	Shares   []json.RawMessage `json:"shares"`
}

// RateAllocator is the ledger's division of rate capacity, for a
// simulator that plays the leader without Raft.
type RateAllocator struct {
	l             *Ledger
	lease, window time.Duration
}

// NewRateAllocator returns an allocator of caps with the lease and
// window a Server would use (zero: its defaults).
func NewRateAllocator(caps []RateCapacity, lease, window time.Duration) *RateAllocator {
	if lease <= 0 {
		lease = time.Duration(defaultRateLease)
	}
	if window <= 0 {
		window = time.Duration(defaultRateWindow)
	}
	l := NewLedger()
	for _, c := range caps {
		cc := c
		l.s.Rates[c.Provider] = &cc
	}
	return &RateAllocator{l: l, lease: lease, window: window}
}

// Renew answers one node's renewal as a leader would: its grants, their
// lease and when to renew.
func (x *RateAllocator) Renew(node string, demands []Demand, now time.Time) ([]Grant, time.Duration, time.Duration, error) {
	gs := x.l.rates(RatesCmd{Node: node, Demands: demands, Lease: int64(x.lease), Window: int64(x.window + RateSlack)}, now.UnixNano())
	out := make([]Grant, len(gs))
	for i, g := range gs {
		out[i] = g.Grant()
	}
	return out, x.lease, rateRefresh(x.lease), nil
}

// rateRefresh is how often a node renews its shares.
func rateRefresh(lease time.Duration) time.Duration { return lease / 6 }

// errNoRates reports a renewal the ledger did not answer.
var errNoRates = fmt.Errorf("%w: the ledger answered no rate shares", ErrInvalid)

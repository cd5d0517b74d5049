package consensus

// A node's sync with the ledger: its spend reported, escrow granted,
// given back or recalled, and the leases it holds after.

import (
	"slices"
	"time"
)

// current reports whether b are its tenant's books for the period that
// contains now.
func (l *Ledger) current(b *Books, now int64) bool {
	bud := l.budgetOf(b.Tenant)
	if bud == nil || b.Carry != "" {
		return false
	}
	p, _ := periodOf(now, bud.Period)
	return p == b.Period
}

// headroom is what node could still spend of b's period were every
// other live node to give its escrow back: the limit, less what was
// settled, less what other nodes hold in leases that expired (b's own,
// and those of books carried into b).
func (l *Ledger) headroom(b *Books, node string, now int64) Nanos {
	h := b.Limit - b.Settled
	expired := func(b *Books) {
		for name, le := range b.Leases {
			if name != node && le.Expires < now {
				h -= le.Reserved()
			}
		}
	}
	expired(b)
	if b.inbound > 0 {
		for _, src := range l.s.Books {
			if src.carryTo == b {
				expired(src)
			}
		}
	}
	return max(h, 0)
}

// recalling reports whether a node was short of escrow lately.
func (b *Books) recalling(now int64) bool {
	return b.ShortAt != 0 && now-b.ShortAt < RecallWindow
}

// SyncCmd is one node's periodic batch: the cumulative spend on each of
// its leases, the escrow it wants added, and a renewal of every lease it
// holds. Spend is cumulative per lease, so a report applied twice, or an
// older one applied after a newer, changes nothing.
type SyncCmd struct {
	Node string `json:"node"`
	// Epoch identifies the node's boot, as the ledger assigned it; Seq
	// orders its syncs within it. A node that has none yet sends 0 and
	// is given a new one, which first forfeits the leases of its older
	// epochs: a restarted node cannot account for what it spent before.
	// A sync from an epoch older than the node's latest is refused.
	Epoch int64 `json:"epoch"`
	// Boot is a nonce of the node's process: a request for an epoch that
	// arrives twice (a retry, a delayed copy) gets the same one.
	Boot  int64       `json:"boot"`
	Seq   uint64      `json:"seq"`
	Usage []UsageItem `json:"usage,omitempty"`
	Want  []WantItem  `json:"want,omitempty"`
	// TTL is how long the node's leases last from this sync, in ns.
	TTL int64 `json:"ttl"`
	// Spend is what the node charged and the ledger has not acknowledged
	// (every tenant's, budgeted or not), in reports oldest first.
	Spend []SpendReport `json:"spend,omitempty"`
	// Recover, in a new boot's first sync (Epoch 0), is what the node's
	// spend journal says of its last boot: the ledger settles that
	// boot's leases at what they may have spent and takes the rest of
	// their escrow back, instead of writing it all off (recover.go).
	Recover *Recovery `json:"recover,omitempty"`
}

// UsageItem is the cumulative spend on one lease.
type UsageItem struct {
	Tenant  string `json:"tenant"`
	Period  string `json:"period"`
	Spent   Nanos  `json:"spent"`
	Release bool   `json:"release,omitempty"` // the node is done with the lease
	// Cap, when set, gives escrow back: the lease keeps at most this much
	// granted over its life (never less than it spent). It is absolute,
	// so a report applied twice gives back nothing more.
	Cap *Nanos `json:"cap,omitempty"`
	// Before, when set, is what the lease had spent when the node learned
	// that its budget changed: of a lease whose books no longer count
	// (LeaseView.Carried), that much stays in them, and only the rest is
	// settled in the books in force. Unset, all of what it reports is.
	Before *Nanos `json:"before,omitempty"`
}

// WantItem asks for more escrow for a tenant's current period.
type WantItem struct {
	Tenant string `json:"tenant"`
	Amount Nanos  `json:"amount"`
	// Need is the part of Amount that requests waiting at the node lack
	// (the rest is ahead of demand). Books that cannot grant it recall
	// idle escrow from the other nodes.
	Need Nanos `json:"need,omitempty"`
}

// SyncResult is every lease the node holds after the sync.
type SyncResult struct {
	Epoch  int64       `json:"epoch"` // the node's epoch
	Leases []LeaseView `json:"leases"`
	// Exhausted names tenants whose budget could not cover what was
	// wanted.
	Exhausted []string `json:"exhausted,omitempty"`
	// Stale means the sync was older than one applied, or of an older
	// epoch: nothing in it was applied, and an older epoch's node must
	// not spend.
	Stale bool `json:"stale,omitempty"`
	// SpendSeq is the last of the node's spend reports the ledger has
	// applied (this boot's): the node drops what it sent up to it.
	SpendSeq uint64 `json:"spend_seq,omitempty"`
	// Version is the ledger version the voters agreed on: what the node
	// may send (version.go).
	Version int `json:"version,omitempty"`
}

// LeaseView is a lease as its node sees it.
type LeaseView struct {
	Tenant  string `json:"tenant"`
	Period  string `json:"period"`
	End     int64  `json:"end"` // the period's end, Unix ns
	Granted Nanos  `json:"granted"`
	Spent   Nanos  `json:"spent"`
	Expires int64  `json:"expires"`
	// ExpiresIn is how long the lease had left when the sync applied,
	// in ns: a node measures it on its own clock, whatever the leader's
	// says. It never runs past the period's end.
	ExpiresIn int64 `json:"expires_in"`
	// Remaining is what the tenant's books could still grant.
	Remaining Nanos `json:"remaining"`
	// Headroom is the limit less what was settled and less the escrow of
	// other nodes' expired leases (nodes gone quiet, whose escrow stays
	// reserved until they report or it is written off): what could still
	// be spent in the period if every live node gave its escrow back. A
	// request costing more cannot be served.
	Headroom Nanos `json:"headroom"`
	// Recall means some node asked for escrow the books could not grant
	// within the last RecallWindow: this node should give back escrow it
	// is not using and reserve exactly, request by request, for a while.
	Recall bool `json:"recall,omitempty"`
	// Current means these are the tenant's books for the period the
	// ledger is in (its budget's period may have changed, from a month to
	// a day say: then a lease of later end is not the current one).
	Current bool `json:"current,omitempty"`
	// Carried means the account's budget changed away from these books
	// (another period, or none): the lease is recalled. The node spends
	// nothing more from it and gives it back once what is reserved on
	// it has settled; what it spends meanwhile counts in the books in
	// force.
	Carried bool `json:"carried,omitempty"`
	// Rev is the revision of the account's budget now (Budget.Rev; 0 for
	// none): escrow granted under an older one is not spent.
	Rev int64 `json:"rev,omitempty"`
}

// RecallWindow is how long after a node was short of escrow the other
// nodes are asked to give back what they are not using.
const RecallWindow = int64(3 * time.Second)

func (l *Ledger) sync(c SyncCmd, now int64) *SyncResult {
	seq := l.s.Nodes[c.Node]
	switch {
	case c.Epoch == 0 && seq != nil && seq.Boot == c.Boot:
		// This boot asked before (a retry or a delayed copy): the same
		// epoch, and nothing else in a request for one.
		r := l.syncResult(c.Node, now, nil)
		r.Stale = c.Seq <= seq.Seq
		if !r.Stale {
			c.Epoch = seq.Epoch
			break
		}
		return r
	case c.Epoch == 0:
		// A new boot: a new epoch, after every epoch the ledger has seen
		// of the node; what older ones hold is settled at what the
		// node's journal says they may have spent, or else written off.
		epoch := now
		if seq != nil {
			epoch = max(epoch, seq.Epoch+1)
			old := seq.Epoch
			l.recoverBoot(c.Node, seq, c.Recover, now)
			l.forfeit(c.Node, func(le *Lease) bool { return le.Epoch <= old })
		} else {
			l.recoverUnknown(c.Recover, now)
		}
		seq = &nodeSeq{Boot: c.Boot, Epoch: epoch}
		l.s.Nodes[c.Node] = seq
		c.Epoch = epoch
	case seq == nil || c.Epoch != seq.Epoch || c.Seq <= seq.Seq:
		r := l.syncResult(c.Node, now, nil)
		r.Stale = true
		return r
	}
	seq.Seq = c.Seq
	for _, r := range c.Spend {
		if r.Seq > seq.SpendSeq {
			l.attribute(r.Rows, now)
			seq.SpendSeq = r.Seq
		}
	}
	for _, u := range c.Usage {
		b := l.s.Books[u.Tenant+"/"+u.Period]
		if b == nil {
			continue
		}
		le := b.Leases[c.Node]
		if le == nil || le.Epoch != c.Epoch {
			continue // released, forfeited, or another life's
		}
		b.settle(le, u.Spent, u.Before)
		if u.Cap != nil && *u.Cap < le.Granted {
			b.change(le, func(le *Lease) { le.Granted = max(*u.Cap, le.Spent) })
		}
		if u.Release {
			b.dropLease(c.Node)
		}
	}
	var exhausted []string
	for _, w := range c.Want {
		bud := l.budgetOf(w.Tenant)
		if bud == nil || w.Amount < 0 {
			continue
		}
		b := l.books(w.Tenant, bud, now)
		le := b.Leases[c.Node]
		if le == nil {
			le = &Lease{Node: c.Node, Epoch: c.Epoch}
			b.Leases[c.Node] = le
		}
		b.Over = b.Over && b.free() < 0
		grant := min(w.Amount, b.free())
		if need := min(w.Need, w.Amount); grant < need {
			// What a waiting request needs is granted whole or not at
			// all: a part would only strand escrow where it cannot be
			// spent. Nodes holding idle escrow are asked to give it back.
			grant = 0
			b.ShortAt = now
		}
		if grant < w.Amount {
			exhausted = append(exhausted, w.Tenant)
		}
		if grant > 0 {
			b.change(le, func(le *Lease) { le.Granted += grant })
		}
	}
	l.renew(c.Node, c.Epoch, now, now+max(c.TTL, 0))
	l.close(now)
	return l.syncResult(c.Node, now, exhausted)
}

// renew extends the expiry of node's leases of this epoch, never past
// their period's end: a day's escrow is not spent the next day.
func (l *Ledger) renew(node string, epoch, now, until int64) {
	for _, b := range l.s.Books {
		if le := b.Leases[node]; le != nil && le.Epoch == epoch {
			le.Expires = max(le.Expires, min(until, b.End))
		}
	}
}

func (l *Ledger) syncResult(node string, now int64, exhausted []string) *SyncResult {
	r := &SyncResult{Leases: []LeaseView{}, Exhausted: exhausted, Version: l.s.Version}
	seq := l.s.Nodes[node]
	if seq == nil {
		return r
	}
	r.Epoch, r.SpendSeq = seq.Epoch, seq.SpendSeq
	var keys []string
	for k, b := range l.s.Books {
		if le := b.Leases[node]; le != nil && le.Epoch == seq.Epoch {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	r.Leases = make([]LeaseView, 0, len(keys))
	for _, k := range keys {
		b := l.s.Books[k]
		if le := b.Leases[node]; le != nil {
			var rev int64
			if bud := l.budgetOf(b.Tenant); bud != nil {
				rev = bud.Rev
			}
			r.Leases = append(r.Leases, LeaseView{
				Tenant: b.Tenant, Period: b.Period, End: b.End, Granted: le.Granted, Spent: le.Spent,
				Expires: le.Expires, ExpiresIn: max(le.Expires-now, 0), Remaining: max(b.free(), 0),
				Headroom: l.headroom(b, node, now), Recall: b.recalling(now), Current: l.current(b, now),
				Carried: b.Carry != "", Rev: rev,
			})
		}
	}
	return r
}

// EscrowView is what a node holding escrow it is not using polls the
// ledger for: the accounts some node is short of escrow for (Recalls),
// and every budget's revision, by account (Budget.Rev).
type EscrowView struct {
	Recalls []string         `json:"recalls"`
	Revs    map[string]int64 `json:"revs"`
}

// Escrow returns the EscrowView as of the last command applied.
func (l *Ledger) Escrow() EscrowView {
	revs := map[string]int64{}
	for a, b := range l.budgetIndex() {
		revs[a] = b.Rev
	}
	return EscrowView{Recalls: l.Recalls(), Revs: revs}
}

// Recalls returns the tenants whose books a node was short of escrow on
// lately (as of the last command applied), sorted: nodes holding escrow
// of theirs they are not using give it back.
func (l *Ledger) Recalls() []string {
	out := []string{}
	for _, k := range sortedKeys(l.s.Books) {
		if b := l.s.Books[k]; b.recalling(l.s.Time) && !slices.Contains(out, b.Tenant) {
			out = append(out, b.Tenant)
		}
	}
	return out
}

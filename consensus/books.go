package consensus

// A tenant's (or a key's) books for a period: what was settled, the
// escrow leased to each node, and what operators see of them.

// Books are one tenant's accounts for one period. Settled is money known
// spent; each lease holds escrow a node may spend; their sum never
// exceeds Limit (unless an operator lowers the limit below it, which
// stops new grants but cannot take back escrow already granted).
type Books struct {
	Tenant    string            `json:"tenant"`
	Period    string            `json:"period"`
	End       int64             `json:"end"` // Unix ns; the period's end
	Limit     Nanos             `json:"limit"`
	Settled   Nanos             `json:"settled"`
	Forfeited Nanos             `json:"forfeited"` // escrow written off as spent
	Overspend Nanos             `json:"overspend"` // spend reported beyond escrow
	Leases    map[string]*Lease `json:"leases"`    // by node
	// ShortAt is when a node last asked for escrow the books could not
	// grant (Unix ns): someone is waiting, and nodes holding idle escrow
	// are asked to give it back (LeaseView.Recall).
	ShortAt int64 `json:"short_at,omitempty"`
	// Carry, set when the account's budget changed away from these books
	// (another period, or none), names the books in force since ("-":
	// none). Their leases are recalled: what they spend from then on,
	// and the escrow they still hold, count there (budgetchange.go).
	Carry string `json:"carry,omitempty"`
	// Over means an operator lowered the limit below what was settled and
	// held: nothing is granted until it fits again.
	Over bool `json:"over,omitempty"`

	// reserved is the sum of the leases' Reserved, kept as they change
	// (change, dropLease) so that a sync need not add up every node's
	// lease; Restore recomputes it. inbound is the same sum over the
	// leases of books carried into these, and carryTo the books Carry
	// names (nil for none).
	reserved Nanos
	inbound  Nanos
	carryTo  *Books
}

// Lease is escrow granted to one node for one tenant and period.
type Lease struct {
	Node    string `json:"node"`
	Epoch   int64  `json:"epoch"`   // the node's boot, which made the lease
	Granted Nanos  `json:"granted"` // escrow granted over the lease's life
	Spent   Nanos  `json:"spent"`   // cumulative spend reported
	Expires int64  `json:"expires"` // Unix ns: the node must renew by then
	// Before, once the node has said so (UsageItem.Before), is what the
	// lease had spent when its node learned that the budget changed away
	// from its books: until then the node spends under the old budget.
	Before *Nanos `json:"before,omitempty"`
}

// Reserved is the escrow still outstanding.
func (l *Lease) Reserved() Nanos { return max(l.Granted-l.Spent, 0) }

// Reserved is the escrow outstanding across every lease of b.
func (b *Books) Reserved() Nanos { return b.reserved }

// change applies f to le, a lease of b, keeping b's sum of reserved
// escrow (and that of the books b carries into).
func (b *Books) change(le *Lease, f func(*Lease)) {
	d := -le.Reserved()
	f(le)
	d += le.Reserved()
	b.reserved += d
	if b.carryTo != nil {
		b.carryTo.inbound += d
	}
}

// dropLease removes node's lease from b.
func (b *Books) dropLease(node string) {
	if le := b.Leases[node]; le != nil {
		b.change(le, func(le *Lease) { le.Granted = le.Spent })
		delete(b.Leases, node)
	}
}

// free is what b could still grant: its limit less what was settled and
// what is held, its own leases' and those carried into it.
func (b *Books) free() Nanos { return b.Limit - b.Settled - b.reserved - b.inbound }

func (b *Books) sumReserved() Nanos {
	var r Nanos
	for _, l := range b.Leases {
		r += l.Reserved()
	}
	return r
}

// BookView is one tenant's period as operators see it.
type BookView struct {
	Tenant    string `json:"tenant"`
	Period    string `json:"period"`
	Limit     Nanos  `json:"limit"`
	Settled   Nanos  `json:"settled"`
	Reserved  Nanos  `json:"reserved"`
	Remaining Nanos  `json:"remaining"`
	Forfeited Nanos  `json:"forfeited"`
	Overspend Nanos  `json:"overspend"`
	Leases    int    `json:"leases"`
	// Expired counts leases past their expiry and still holding escrow:
	// their nodes went quiet; the escrow stays until reported or forfeited.
	Expired int `json:"expired_leases"`
}

// Books returns every open book, sorted by tenant and period.
func (l *Ledger) Books() []BookView {
	out := []BookView{}
	for _, k := range sortedKeys(l.s.Books) {
		b := l.s.Books[k]
		v := BookView{Tenant: b.Tenant, Period: b.Period, Limit: b.Limit, Settled: b.Settled, Reserved: b.Reserved(),
			Forfeited: b.Forfeited, Overspend: b.Overspend, Leases: len(b.Leases)}
		v.Remaining = max(b.Limit-v.Settled-v.Reserved, 0)
		for _, le := range b.Leases {
			if le.Expires <= l.s.Time && le.Reserved() > 0 {
				v.Expired++
			}
		}
		out = append(out, v)
	}
	return out
}

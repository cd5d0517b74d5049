package consensus

// A node restarted with its data: its spend journal's account of the
// boot before, applied in the new boot's first sync.

// Recovery is what a node's spend journal held of its last boot when it
// stopped (BudgetHolder.Recover).
type Recovery struct {
	// Boot and Epoch name the boot it speaks of: the ledger applies it
	// only to the epoch it last gave the node, of that boot.
	Boot  int64 `json:"boot"`
	Epoch int64 `json:"epoch"`
	// Leases are that boot's leases, each with the most it may have
	// spent (JournalLease.Bound) as Spent.
	Leases []UsageItem `json:"leases,omitempty"`
	// Complete means the journal held every lease the boot reserved
	// from: a lease of that epoch it does not name spent nothing beyond
	// what the ledger was told.
	Complete bool `json:"complete,omitempty"`
	// Spend are that boot's spend reports the ledger may not have
	// applied, under that boot's numbers.
	Spend []SpendReport `json:"spend,omitempty"`
	// Prior is the boot before it, for a ledger that never heard of
	// this one (it never synced).
	Prior *Recovery `json:"prior,omitempty"`
}

// VersionJournal is the ledger version from which a new boot's
// Recovery is applied.
const VersionJournal = 2

// recoverBoot applies node's journal account r of its last boots,
// before a new epoch writes off what is left of the boot the ledger knew
// (seq): that boot's leases are settled at what the journal says they
// may have spent and given back (all of them, at what the ledger was
// told, when its journal never learned its epoch: it reserved nothing),
// and the spend reports the ledger had not applied are, that boot's and
// those of the boots after it that never synced. A journal that does not
// know the boot the ledger does (it was lost) changes nothing.
func (l *Ledger) recoverBoot(node string, seq *nodeSeq, r *Recovery, now int64) {
	if l.s.Version < VersionJournal {
		return
	}
	var newer []*Recovery
	for ; r != nil && r.Boot != seq.Boot; r = r.Prior {
		newer = append(newer, r)
	}
	if r == nil || r.Epoch != seq.Epoch && r.Epoch != 0 {
		return
	}
	for _, sr := range r.Spend {
		if sr.Seq > seq.SpendSeq {
			l.attribute(sr.Rows, now)
			seq.SpendSeq = sr.Seq
		}
	}
	for _, n := range newer { // never synced: none of their reports applied
		for _, sr := range n.Spend {
			l.attribute(sr.Rows, now)
		}
	}
	named := map[string]bool{}
	for _, u := range r.Leases {
		k := u.Tenant + "/" + u.Period
		named[k] = true
		b := l.s.Books[k]
		if b == nil {
			continue
		}
		le := b.Leases[node]
		if le == nil || le.Epoch != seq.Epoch {
			continue
		}
		// Never more than was granted: no reservation can have been.
		b.settle(le, min(max(u.Spent, le.Spent), max(le.Granted, le.Spent)), nil)
		b.dropLease(node)
	}
	if !r.Complete {
		return
	}
	for _, k := range sortedKeys(l.s.Books) {
		if b := l.s.Books[k]; !named[k] {
			if le := b.Leases[node]; le != nil && le.Epoch == seq.Epoch {
				b.dropLease(node) // nothing reserved from it: given back
			}
		}
	}
}

// recoverUnknown applies the spend reports of r's boots for a node the
// ledger has never heard of: none of them synced (a sync makes the node
// known), so none of their reports was applied. They hold no escrow.
func (l *Ledger) recoverUnknown(r *Recovery, now int64) {
	if l.s.Version < VersionJournal {
		return
	}
	for ; r != nil; r = r.Prior {
		for _, sr := range r.Spend {
			l.attribute(sr.Rows, now)
		}
	}
}

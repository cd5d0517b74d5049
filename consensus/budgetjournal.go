package consensus

// A budget holder's journal: what a node must keep on disk so that,
// restarted after a crash, it can tell the ledger what it may have
// spent instead of having its escrow written off whole.
//
// The request path writes nothing. Each lease counts, in memory, the
// upper bounds it has reserved (reservedCum) and those of the holds that
// settled (settledUp), and never reserves past a ceiling. The journal
// (node/journal) writes each lease's spend, settled bounds and a ceiling
// ahead of what is reserved, fsyncs, and only then lets the holder reserve
// up to that ceiling. So after a crash, whatever happened since the last
// record, the lease spent at most
//
//	spent + (ceiling - settledUp)
//
// of the record: every hold settled since spent at most its bound, and
// every hold not settled (dead with the process) is counted at its
// bound. The ceiling runs ahead by a few flushes' worth of reservations,
// so a request waits for the disk only when it outruns that.

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// JournalLease is one lease's counters as the journal keeps them.
type JournalLease struct {
	Tenant string `json:"tenant"`
	Period string `json:"period"`
	// Spent is what settled, at the actual costs; SettledUp the upper
	// bounds of the holds that settled; Ceiling the most the lease may
	// have reserved in all (cumulative upper bounds).
	Spent     Nanos `json:"spent"`
	SettledUp Nanos `json:"settled_up"`
	Ceiling   Nanos `json:"ceiling"`
	// Gone means the lease was given back or written off: the journal
	// forgets it.
	Gone bool `json:"gone,omitempty"`
}

// Bound is the most the lease may have spent when the record was
// written, whatever happened after it.
func (j JournalLease) Bound() Nanos { return j.Spent + max(j.Ceiling-j.SettledUp, 0) }

// BudgetJournal is a budget holder's part of a journal record: its boot
// and epoch, and its leases (those that changed since the last record,
// or all of them).
type BudgetJournal struct {
	Boot   int64          `json:"boot"`
	Epoch  int64          `json:"epoch"`
	Leases []JournalLease `json:"leases,omitempty"`
}

// journalAhead is how far a ceiling runs ahead of what is reserved (or
// taken): this long of the recent pace (at its fastest over the last
// second and the one under way), so that a journal writing every 100 ms
// keeps ahead of steady demand, and a crash leaves at most this long of
// reservations counted at their bounds. A burst past it waits for a
// record, asked for at once: a few milliseconds.
const journalAhead = 100 * time.Millisecond

// pace measures how fast a cumulative count grows: over the last whole
// second, or the second under way if it is faster already.
type pace struct {
	at   time.Time // when the second under way began
	base float64   // the count then
	rate float64   // per second, over the last whole second
}

// ahead is journalAhead of the pace of count at now.
func (p *pace) ahead(count float64, now time.Time) float64 {
	if el := now.Sub(p.at); el >= time.Second {
		p.rate = (count - p.base) / el.Seconds()
		p.at, p.base = now, count
	}
	return max(p.rate, count-p.base) * journalAhead.Seconds()
}

// EnableJournal makes the holder reserve only within the ceilings its
// journal has made durable (Journal); kick is called, and must not
// block, when a reservation waits for the next record. Call it before
// Run.
func (h *BudgetHolder) EnableJournal(kick func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.journalKick = kick
}

// underCeilingLocked reports whether l may reserve upper more within the
// ceiling its journal has made durable; when not, the journal is asked
// for a record at once.
func (h *BudgetHolder) underCeilingLocked(l *localLease, upper Nanos) bool {
	if h.journalKick == nil || l.reservedCum+upper <= l.ceiling {
		return true
	}
	l.largest = max(l.largest, upper) // the next ceiling makes room for it
	h.journalKick()
	return false
}

// Journal returns the holder's part of the next journal record (every
// lease when full, else those that changed) and commit, to call once the
// record is durable: it lets the leases reserve up to the ceilings the
// record holds, and serves requests that waited for them. A record that
// is not made durable (commit not called) counts as never written: the
// next one carries what it held again.
func (h *BudgetHolder) Journal(full bool, now time.Time) (BudgetJournal, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := BudgetJournal{Boot: h.boot, Epoch: h.epoch}
	if h.journaled == nil {
		h.journaled = map[*localLease]JournalLease{}
	}
	type raise struct {
		l       *localLease
		ceiling Nanos
	}
	var raises []raise
	var live []JournalLease
	written := map[*localLease]JournalLease{}
	seen := map[*localLease]bool{}
	for _, l := range append(h.leaseList(), h.retired...) {
		seen[l] = true
		// Ahead of what is reserved by a few flushes of recent demand
		// (and room for the largest request four times over), never past
		// what the escrow lets it reserve.
		want := l.reservedCum + max(Nanos(l.pace.ahead(float64(l.reservedCum), now)), 2*l.largest)
		want = min(want, l.reservedCum+max(l.free(), 0))
		ceiling := max(l.ceiling, want)
		rec := JournalLease{Tenant: l.tenant, Period: l.period, Spent: l.spent, SettledUp: l.settledUp, Ceiling: ceiling}
		if old, ok := h.journaled[l]; full || !ok || old != rec {
			live = append(live, rec)
			written[l] = rec
		}
		if ceiling > l.ceiling {
			raises = append(raises, raise{l, ceiling})
		}
	}
	// Leases gone come first: the journal keys leases by tenant and
	// period, and a lease gone may have the books of one granted since.
	var gone []*localLease
	for _, l := range h.journaledLeases() {
		if !seen[l] {
			if !full {
				rec := h.journaled[l]
				rec.Gone = true
				j.Leases = append(j.Leases, rec)
			}
			gone = append(gone, l)
		}
	}
	j.Leases = append(j.Leases, live...)
	return j, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for l, rec := range written {
			h.journaled[l] = rec
		}
		for _, l := range gone {
			delete(h.journaled, l)
		}
		if len(gone) > 0 && len(h.need) > 0 {
			h.kickLocked() // a tenant's new lease waited for this record
		}
		for _, r := range raises {
			r.l.ceiling = max(r.l.ceiling, r.ceiling)
		}
		h.serveLocked(h.now())
	}
}

// journaledLeases returns the leases the journal holds, by tenant and
// period (a record's order does not depend on map order).
func (h *BudgetHolder) journaledLeases() []*localLease {
	out := make([]*localLease, 0, len(h.journaled))
	for l := range h.journaled {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *localLease) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.period, b.period))
	})
	return out
}

// RecoveryOf is a boot's account as its journal held it when the node
// stopped (the last record of each lease, and its spend reports not
// acknowledged); prior, if not nil, is the boot before it, for a ledger
// that never heard of this one.
func RecoveryOf(j BudgetJournal, spend []SpendReport, prior *Recovery) *Recovery {
	r := &Recovery{Boot: j.Boot, Epoch: j.Epoch, Spend: spend, Complete: true, Prior: prior}
	for _, l := range j.Leases {
		if !l.Gone {
			r.Leases = append(r.Leases, UsageItem{Tenant: l.Tenant, Period: l.Period, Spent: l.Bound()})
		}
	}
	return r
}

// Recover hands the holder what its journal held of the node's last
// boots: its first sync tells the ledger, which settles each lease of
// the boot it knows at what it may have spent and takes the rest of its
// escrow back at once, instead of writing it all off. Call it before
// Run.
func (h *BudgetHolder) Recover(r *Recovery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recovery = r
}

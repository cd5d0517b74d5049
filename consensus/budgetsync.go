package consensus

// A node's syncs with the leader, one Raft command per interval: spend
// reported cumulatively per lease, escrow asked ahead of need, idle escrow
// parked or given back, and the leader's answer absorbed.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// sync sends one batch: spend not yet acknowledged, top-ups, renewals;
// release asks to give every lease back (shutdown).
func (h *BudgetHolder) sync(ctx context.Context, release bool) error {
	now := h.now()
	h.mu.Lock()
	if !release {
		h.parkIdleLocked(now)
		if h.synced && h.quietLocked(now) {
			h.mu.Unlock()
			return nil
		}
	}
	c := SyncCmd{Node: h.node, Epoch: h.epoch, TTL: int64(h.ttl)}
	quiet := true
	all := append(h.retired[:len(h.retired):len(h.retired)], h.leaseList()...)
	for _, l := range all {
		retiring := release || h.isRetired(l)
		// A lease is given back only once nothing is reserved on it: a
		// reservation under way settles into it and must be reported.
		done := retiring && l.inflight == 0
		var cp, before *Nanos
		if (l.stale || l.carried) && h.version >= VersionBudgetRevisions {
			// The budget changed: what was spent when the node learned
			// of it stays in the old books, should they no longer count.
			b := l.before
			before = &b
		}
		if !retiring && (h.givesBackLocked(l, now) || l.stale) || retiring && !done && l.free() > 0 {
			// Exact mode, a budget changed, or a lease retired that waits
			// for its reservations to settle: keep what is reserved, give
			// the rest back (the wants below ask for exactly what waiting
			// requests need). Nothing more is reserved from what is given
			// back: the lease here shrinks now.
			keep := l.spent + l.inflight
			l.granted = keep
			cp = &keep
		}
		if l.spent != l.reported || done || cp != nil {
			c.Usage = append(c.Usage, UsageItem{Tenant: l.tenant, Period: l.period, Spent: l.spent, Release: done, Cap: cp, Before: before})
			quiet = false
		}
		if !retiring && l.expires.Sub(now) < h.ttl/2 {
			quiet = false // renew
		}
	}
	if !release {
		c.Want = h.wantsLocked(now)
		quiet = quiet && len(c.Want) == 0
	}
	if h.spend != nil {
		if c.Spend = h.spend.Reports(); len(c.Spend) > 0 {
			quiet = false
		}
	}
	if quiet && h.synced {
		h.mu.Unlock()
		return nil
	}
	h.seq++
	c.Seq, c.Epoch, c.Boot = h.seq, h.epoch, h.boot
	if h.epoch == 0 {
		c.Recover = h.recovery // the journal's account of the last boot
	}
	knewBudgeted := h.budgeted() != nil
	h.mu.Unlock()

	cmd, err := newCommand(h.node+"/"+strconv.FormatInt(h.boot, 36)+"/"+strconv.FormatUint(c.Seq, 10), CmdSync, c)
	if err != nil {
		return err
	}
	r, err := h.apply(ctx, cmd)
	if err == nil && r.Err != "" {
		err = fmt.Errorf("ledger: %s", r.Err)
	}
	if err != nil || r.Sync == nil {
		return err
	}
	if h.spend != nil {
		h.spend.Ack(r.Sync.SpendSeq)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Sync.Stale {
		if h.epoch != 0 && r.Sync.Epoch != h.epoch {
			// Another boot of this node's name took a newer epoch (an old
			// process's delayed request): the ledger wrote this one's
			// escrow off. Start over with a new epoch.
			h.epoch = 0
			h.leases, h.retired = map[string]*localLease{}, nil
		}
		return fmt.Errorf("ledger: sync %d of epoch %d is stale", c.Seq, c.Epoch)
	}
	if h.epoch != 0 && r.Sync.Epoch != h.epoch {
		return fmt.Errorf("ledger: epoch %d is not this boot's (%d)", r.Sync.Epoch, h.epoch)
	}
	h.epoch, h.version = r.Sync.Epoch, r.Sync.Version
	h.recovery = nil // told: the ledger settled the last boot's leases
	h.absorb(r.Sync, now, c)
	h.synced = true
	h.prefetched = h.prefetched || knewBudgeted
	h.shortRetry = len(r.Sync.Exhausted) > 0
	h.serveLocked(h.now())
	return nil
}

// wantsLocked is the escrow to ask for: for tenants with a budget, and
// any the request path found missing escrow for (before the budgeted set
// is known, every tenant is).
func (h *BudgetHolder) wantsLocked(now time.Time) []WantItem {
	wanted := map[string]bool{}
	for tenant := range h.budgeted() {
		wanted[tenant] = true
	}
	for tenant := range h.need {
		wanted[tenant] = true
	}
	var out []WantItem
	for _, tenant := range sortedKeys(wanted) {
		if w := h.wantLocked(tenant, now); w > 0 {
			var free Nanos
			if l := h.leases[tenant]; l != nil && now.Before(l.expires) {
				free = max(l.free(), 0)
			}
			out = append(out, WantItem{Tenant: tenant, Amount: w, Need: max(h.headLocked(tenant)-free, 0)})
		}
	}
	return out
}

// quietLocked reports, without allocating, whether a sync would have
// nothing to send: no spend to report, no lease to give back or renew,
// no escrow to ask for. Most syncs of a node with many tenants are quiet,
// and a simulator runs hundreds of holders.
func (h *BudgetHolder) quietLocked(now time.Time) bool {
	if len(h.retired) > 0 || h.spend != nil && h.spend.Pending() {
		return false
	}
	for _, l := range h.leases {
		if l.spent != l.reported || l.expires.Sub(now) < h.ttl/2 || h.givesBackLocked(l, now) || l.stale {
			return false
		}
	}
	for tenant := range h.budgeted() {
		if h.wantLocked(tenant, now) > 0 {
			return false
		}
	}
	for tenant := range h.need {
		if h.wantLocked(tenant, now) > 0 {
			return false
		}
	}
	return true
}

func (h *BudgetHolder) leaseList() []*localLease {
	out := make([]*localLease, 0, len(h.leases))
	for _, k := range sortedKeys(h.leases) {
		out = append(out, h.leases[k])
	}
	return out
}

func (h *BudgetHolder) isRetired(l *localLease) bool { return h.leases[l.tenant] != l }

// escrowHorizon is how long a node's escrow should last at its recent
// rate of spending without a top-up: long enough to ride out a Raft
// election, short enough that a node that crashes takes little with it
// (its escrow is written off as spent).
const escrowHorizon = 3 * time.Second

// wantLocked is the escrow to ask for tenant: room for twice the most the
// node has had reserved at once, plus escrowHorizon of spending at the
// recent rate, and for what the request path found missing; never more
// than half of what is left unleased, so that other nodes find some too.
func (h *BudgetHolder) wantLocked(tenant string, now time.Time) Nanos {
	l := h.leases[tenant]
	need := h.need[tenant]
	if l == nil {
		if h.releasing(tenant) || now.Before(h.backoff[tenant]) || (h.parked[tenant] && need == 0) {
			return 0
		}
		delete(h.backoff, tenant)
		return max(need, minEscrow)
	}
	if !now.Before(l.expires) {
		return max(need, minEscrow) // re-granted escrow on renewal
	}
	if l.stale {
		// Escrow afresh under the budget as it is now (what the lease
		// holds free goes back in the same sync).
		return max(need*2, 2*l.peak+Nanos(l.rate*escrowHorizon.Seconds()), 4*l.largest, minEscrow)
	}
	if l.exact(now) {
		// Near the limit: exactly what waiting requests need (what the
		// lease held free goes back in the same sync).
		return max(need-max(l.free(), 0), 0)
	}
	target := max(need*2, 2*l.peak+Nanos(l.rate*escrowHorizon.Seconds()), 4*l.largest)
	if l.largest == 0 {
		target = max(target, minEscrow) // not used yet: what it was fetched ahead with
	}
	// Topped up once a quarter is gone, so that what is free covers at
	// least three quarters of the horizon when a leader election begins.
	free := l.free()
	if free >= target*3/4 && need <= free {
		return 0
	}
	want := target - free
	if half := l.remaining / 2; want > half {
		want = max(half, need-free)
	}
	return max(want, 0)
}

// parkIdleLocked gives escrow back while the books have nothing left
// unleased, in two cases:
//
//   - a lease idle for parkAfter: another node may need it, and an idle
//     node holding it would strand the rest of a small budget. The tenant
//     is parked: the node asks for escrow again when a request needs it;
//   - a lease too small for what a request here needs, while the budget
//     could still cover it (headroom): the escrow is fragmented over the
//     nodes, none able to serve. The node gives its part back and waits a
//     random one to three sync intervals before it asks again, so that
//     one node gathers enough.
//
// Only a lease with nothing reserved and all spend reported is given
// back.
func (h *BudgetHolder) parkIdleLocked(now time.Time) {
	// Candidates in tenant order: the jitter below is drawn in a fixed
	// order, so that a simulator's seeded run repeats.
	var idle []string
	for tenant, l := range h.leases {
		if l.remaining > 0 || l.inflight > 0 || l.spent != l.reported || l.free() <= 0 || l.exact(now) {
			continue // (exact mode gives escrow back itself)
		}
		idle = append(idle, tenant)
	}
	slices.Sort(idle)
	for _, tenant := range idle {
		l := h.leases[tenant]
		need := h.need[tenant]
		switch {
		case need == 0 && now.Sub(l.lastUse) >= parkAfter:
			h.parked[tenant] = true
		case need > l.free() && l.headroom >= need && len(h.waiting) == 0:
			// (Requests waiting in the queue ask for exactly what they
			// need instead, which the books grant whole or recall.)
			h.backoff[tenant] = now.Add(h.interval + h.jitter(2*h.interval+1))
		default:
			continue
		}
		delete(h.leases, tenant)
		h.retired = append(h.retired, l)
	}
}

// releasing reports whether a lease of tenant is being given back and
// the ledger has not acknowledged it yet: until it has, the node asks
// for no new lease of the tenant, whose grant it could mistake for the
// old one.
func (h *BudgetHolder) releasing(tenant string) bool {
	for _, l := range h.retired {
		if l.tenant == tenant {
			return true
		}
	}
	// Nor while the journal still holds a lease of the tenant that is
	// gone: it names leases by their books, and a recovery would take
	// the new lease for it. Its next record says it is gone.
	for l := range h.journaled {
		if l.tenant == tenant && h.leases[tenant] != l {
			if h.journalKick != nil {
				h.journalKick()
			}
			return true
		}
	}
	return false
}

// parkAfter is how long a lease must go unused before it is given back
// to a budget with nothing left unleased.
const parkAfter = 5 * time.Second

// minEscrow is the escrow a node fetches for a tenant before it knows
// what the tenant's requests cost: a tenth of a cent. Once it does, the
// escrow follows demand (what a node that crashes takes with it is about
// escrowHorizon of its spending).
const minEscrow = NanosPerUSD / 1000

// absorb takes the leader's view of this node's leases.
func (h *BudgetHolder) absorb(r *SyncResult, now time.Time, sent SyncCmd) {
	for _, w := range sent.Want {
		if h.need[w.Tenant] <= w.Amount {
			delete(h.need, w.Tenant)
		}
	}
	// What waiting requests need stays asked for until they are served.
	for _, w := range h.waiting {
		if w.needs {
			h.need[w.tenant] = 0
		}
	}
	for _, w := range h.waiting {
		if w.needs {
			h.need[w.tenant] += w.upper
		}
	}
	h.forgetReleasedLocked(sent)
	live := map[*localLease]bool{}
	for _, lv := range r.Leases {
		l := h.find(lv.Tenant, lv.Period)
		switch cur := h.leases[lv.Tenant]; {
		case l == nil:
			l = &localLease{tenant: lv.Tenant, period: lv.Period, end: lv.End, rateAt: now, lastUse: now, rev: lv.Rev}
			if !lv.Carried && (cur == nil || lv.Current || (lv.End >= cur.end && !cur.current)) {
				if cur != nil {
					h.retired = append(h.retired, cur)
				}
				h.leases[lv.Tenant] = l
			} else {
				h.retired = append(h.retired, l)
			}
		case lv.Current && cur != l:
			// A lease given up as retired is the current period's again
			// (the budget's period changed back).
			h.retired = slices.DeleteFunc(h.retired, func(r *localLease) bool { return r == l })
			if cur != nil {
				h.retired = append(h.retired, cur)
			}
			h.leases[lv.Tenant] = l
		}
		l.current = lv.Current
		h.revisedLocked(l, lv, sent)
		live[l] = true
		if !h.isRetired(l) {
			delete(h.parked, lv.Tenant)
		}
		l.granted, l.reported, l.remaining, l.headroom = lv.Granted, max(l.reported, lv.Spent), lv.Remaining, lv.Headroom
		if lv.Recall {
			l.exactUntil = now.Add(exactFor)
		}
		// The leader gave the lease ExpiresIn from when it applied the
		// sync, which is after now; spending stops a fifth of a lease
		// earlier still, clear of any drift between the two clocks.
		l.expires = now.Add(time.Duration(lv.ExpiresIn) - h.ttl/5)
		if dt := now.Sub(l.rateAt).Seconds(); dt >= 1 {
			l.rate = 0.7*l.rate + 0.3*float64(l.spent-l.rateSpent)/dt
			l.rateAt, l.rateSpent = now, l.spent
			l.peak = l.inflight
		}
	}
	for tenant, l := range h.leases {
		if !live[l] && l.inflight == 0 && l.spent == l.reported {
			delete(h.leases, tenant) // released or written off by the ledger
		}
	}
	kept := h.retired[:0]
	for _, l := range h.retired {
		if live[l] || l.inflight > 0 || l.spent != l.reported {
			kept = append(kept, l)
		}
	}
	h.retired = kept
}

// forgetReleasedLocked drops the retired leases this sync gave back with
// nothing reserved on them: they are gone from the ledger even when their
// last spend came with the release (and so was never acknowledged as a
// lease's). Kept, one would be taken for a new lease of the same books
// granted since, and its spend counted again.
func (h *BudgetHolder) forgetReleasedLocked(sent SyncCmd) {
	released := map[[2]string]Nanos{}
	for _, u := range sent.Usage {
		if u.Release {
			released[[2]string{u.Tenant, u.Period}] = u.Spent
		}
	}
	if len(released) == 0 {
		return
	}
	h.retired = slices.DeleteFunc(h.retired, func(l *localLease) bool {
		spent, ok := released[[2]string{l.tenant, l.period}]
		return ok && l.inflight == 0 && l.spent == spent
	})
}

// revisedLocked takes what lv says of l's budget: a lease recalled
// (carried) is retired, to be given back once what is reserved on it
// settles; a revision newer than the lease's makes it stale, unless this
// sync gave back what it held free (then the grant it brings is the new
// budget's).
func (h *BudgetHolder) revisedLocked(l *localLease, lv LeaseView, sent SyncCmd) {
	capped := false
	for _, u := range sent.Usage {
		if u.Tenant == lv.Tenant && u.Period == lv.Period && u.Cap != nil {
			capped = true
		}
	}
	switch {
	case lv.Carried:
		if !l.carried && !l.stale {
			l.before = l.spent
		}
		l.carried, l.stale = true, false
		if h.leases[l.tenant] == l {
			delete(h.leases, l.tenant)
			h.retired = append(h.retired, l)
		}
	case lv.Rev != l.rev && !capped:
		if !l.stale {
			l.stale, l.before = true, l.spent
		}
		h.kickLocked()
	case l.stale && capped && lv.Rev >= h.revs[l.tenant]:
		l.stale = false
	}
	if !lv.Carried {
		l.carried = false // (in force again: the period changed back)
	}
	l.rev = lv.Rev
}

// SetRevs tells the holder the accounts' budget revisions as the node
// read them from the ledger (an account absent has no budget): a lease
// under an older revision reserves nothing more, gives back what it
// holds free and asks afresh at a sync made at once.
func (h *BudgetHolder) SetRevs(revs map[string]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.revs = revs
	for _, l := range append(h.leaseList(), h.retired...) {
		if l.stale || l.carried || l.rev == 0 && revs[l.tenant] == 0 {
			continue // (a ledger that keeps no revisions gives none)
		}
		// A voter's read may lag the leader's answers: only a newer
		// revision, or none at all, is news. (A retired lease reserves
		// nothing, but it too says what it spent before.)
		if r, ok := revs[l.tenant]; ok && r > l.rev || !ok {
			l.stale, l.before = true, l.spent
			h.kickLocked()
		}
	}
}

func (h *BudgetHolder) find(tenant, period string) *localLease {
	if l := h.leases[tenant]; l != nil && l.period == period {
		return l
	}
	for _, l := range h.retired {
		if l.tenant == tenant && l.period == period {
			return l
		}
	}
	return nil
}

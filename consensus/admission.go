package consensus

// The admission queue of a node's budget holder, and the exact mode near
// a budget's limit: requests that the local escrow cannot cover yet wait
// here for a top-up instead of being refused, and escrow a node is not
// using goes back when another node is short of it.

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// waiter is one request in the admission queue.
type waiter struct {
	tenant string
	upper  Nanos
	prio   int
	seq    uint64
	needs  bool          // its upper bound counts in what the node asks for
	done   chan struct{} // closed once hold or err is set
	hold   *Hold
	err    error
}

// DefaultAdmissionQueue bounds the requests a node holds waiting for
// escrow.
const DefaultAdmissionQueue = 1024

// SetAdmission bounds the admission queue (requests waiting for escrow);
// n ≤ 0 keeps the default. Call it before Run.
func (h *BudgetHolder) SetAdmission(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n > 0 {
		h.maxQueue = n
	}
}

// TryReserve is Reserve without waiting: it fails at once, with a
// *RetryAfterError, where Reserve would queue (the top-up it asks
// for is under way). A simulator in virtual time uses it.
func (h *BudgetHolder) TryReserve(tenant string, usd float64, now time.Time) (*Hold, error) {
	if b := h.budgeted(); b != nil && !b[tenant] {
		return &Hold{}, nil
	}
	upper := CeilNanos(usd)
	h.mu.Lock()
	defer h.mu.Unlock()
	hold, err := h.tryLocked(tenant, upper, now)
	if hold != nil || err != nil {
		return hold, err
	}
	h.need[tenant] = max(h.need[tenant], upper)
	h.kickLocked()
	return nil, &RetryAfterError{After: time.Second, Msg: "this node is renewing its budget escrow for the tenant"}
}

// Reserve holds usd of tenant's budget until the hold is settled (node/
// adapts it to route's budget gate). A tenant without a budget gets a hold
// that settles nothing. Otherwise the reservation comes out of the local escrow; when
// that falls short, the request waits in this node's admission queue
// (FIFO within a priority, lower first) for the top-up its shortfall
// asks for, until ctx is done. It fails with ErrBudgetExceeded once what
// the tenant could still spend cannot cover usd, and with a
// *RetryAfterError only when the wait ran out at until (or the
// queue is full): lease mechanics are not the client's problem. A zero
// until does not wait.
func (h *BudgetHolder) Reserve(ctx context.Context, tenant string, usd float64, prio int, until, now time.Time) (*Hold, error) {
	if b := h.budgeted(); b != nil && !b[tenant] {
		return &Hold{}, nil
	}
	upper := CeilNanos(usd)
	h.mu.Lock()
	if !h.queuedAheadLocked(tenant, prio) {
		hold, err := h.tryLocked(tenant, upper, now)
		if hold != nil || err != nil {
			h.mu.Unlock()
			return hold, err
		}
	}
	if h.closing {
		h.mu.Unlock()
		return nil, &RetryAfterError{After: time.Second, Msg: "this node is giving its budget escrow back"}
	}
	if !until.After(now) {
		h.mu.Unlock()
		return nil, &RetryAfterError{After: time.Second, Msg: "this node could not gather enough of the tenant's budget escrow in time (other nodes hold the rest, or the ledger is unreachable); retry"}
	}
	if len(h.waiting) >= h.maxQueue {
		h.mu.Unlock()
		return nil, &RetryAfterError{After: time.Second, Msg: fmt.Sprintf("%d requests are waiting for budget escrow on this node, its most", h.maxQueue)}
	}
	h.waitSeq++
	w := &waiter{tenant: tenant, upper: upper, prio: prio, seq: h.waitSeq, done: make(chan struct{})}
	// A request the escrow covers waits only for the journal's next
	// record (a few milliseconds): it asks the ledger for nothing.
	w.needs = !h.coveredLocked(tenant, upper, now)
	i, _ := slices.BinarySearchFunc(h.waiting, w, func(a, b *waiter) int {
		if a.prio != b.prio {
			return a.prio - b.prio
		}
		return int(a.seq - b.seq)
	})
	h.waiting = slices.Insert(h.waiting, i, w)
	if w.needs {
		h.need[tenant] += upper
		h.kickLocked()
	}
	h.mu.Unlock()

	timer := time.NewTimer(until.Sub(now))
	defer timer.Stop()
	select {
	case <-w.done:
		return w.hold, w.err
	case <-ctx.Done():
	case <-timer.C:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-w.done: // served as the wait ran out
		return w.hold, w.err
	default:
	}
	h.dropWaiterLocked(w)
	return nil, &RetryAfterError{After: time.Second,
		Msg: "this node could not gather enough of the tenant's budget escrow in time (other nodes hold the rest, or the ledger is unreachable); retry"}
}

// queuedAheadLocked reports whether a request of tenant waits at a
// priority as high as prio: a newcomer queues behind it.
func (h *BudgetHolder) queuedAheadLocked(tenant string, prio int) bool {
	for _, w := range h.waiting {
		if w.prio > prio {
			return false
		}
		if w.tenant == tenant {
			return true
		}
	}
	return false
}

// tryLocked reserves upper from tenant's escrow: a hold, or
// ErrBudgetExceeded when the books could not let this node spend upper,
// or neither (wait for a top-up).
func (h *BudgetHolder) tryLocked(tenant string, upper Nanos, now time.Time) (*Hold, error) {
	l := h.leases[tenant]
	if l != nil && l.stale {
		return nil, nil // the budget changed: wait for the ledger's view of it
	}
	if l != nil && !h.closing && now.Before(l.expires) && l.free() >= upper {
		if !h.underCeilingLocked(l, upper) {
			return nil, nil // the journal's next record lets it
		}
		l.inflight += upper
		l.reservedCum += upper
		l.largest = max(l.largest, upper)
		l.peak = max(l.peak, l.inflight)
		l.lastUse = now
		return &Hold{h: h, l: l, upper: upper}, nil
	}
	if l != nil && h.synced && now.Before(l.expires) && l.headroom < upper && l.free() < upper {
		h.kickLocked() // the next request learns of a raised limit at once
		return nil, fmt.Errorf("%w: %s has %v left of its budget for %s, and the request may cost up to %v",
			ErrBudgetExceeded, DescribeAccount(tenant), max(l.headroom, 0), l.period, upper)
	}
	return nil, nil
}

// coveredLocked reports whether tenant's escrow here covers upper, its
// journal's ceiling aside.
func (h *BudgetHolder) coveredLocked(tenant string, upper Nanos, now time.Time) bool {
	l := h.leases[tenant]
	return l != nil && !l.stale && !h.closing && now.Before(l.expires) && l.free() >= upper
}

// serveLocked serves waiting requests the escrow now covers, or refuses
// those the budget never will, in queue order; within a tenant a request
// that must still wait holds back those behind it.
func (h *BudgetHolder) serveLocked(now time.Time) {
	if len(h.waiting) == 0 {
		return
	}
	var blocked map[string]bool
	kept := h.waiting[:0]
	for _, w := range h.waiting {
		if blocked[w.tenant] {
			kept = append(kept, w)
			continue
		}
		hold, err := h.tryLocked(w.tenant, w.upper, now)
		if hold == nil && err == nil {
			if !w.needs && !h.coveredLocked(w.tenant, w.upper, now) {
				// The escrow that covered it went to the requests ahead,
				// or back to the ledger: it is asked for now.
				w.needs = true
				h.need[w.tenant] += w.upper
				h.kickLocked()
			}
			if blocked == nil {
				blocked = map[string]bool{}
			}
			blocked[w.tenant] = true
			kept = append(kept, w)
			continue
		}
		w.hold, w.err = hold, err
		if w.needs {
			h.need[w.tenant] -= w.upper
		}
		close(w.done)
	}
	clear(h.waiting[len(kept):])
	h.waiting = kept
	for t, n := range h.need {
		if n <= 0 {
			delete(h.need, t)
		}
	}
}

// dropWaiterLocked takes a request that gave up out of the queue.
func (h *BudgetHolder) dropWaiterLocked(w *waiter) {
	if i := slices.Index(h.waiting, w); i >= 0 {
		h.waiting = slices.Delete(h.waiting, i, i+1)
		if !w.needs {
			return
		}
		if h.need[w.tenant] -= w.upper; h.need[w.tenant] <= 0 {
			delete(h.need, w.tenant)
		}
	}
}

// Waiting returns how many requests wait for escrow on this node.
func (h *BudgetHolder) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.waiting)
}

// shortRetry is how soon a node asks again for escrow that waiting
// requests need and the books could not grant: others are giving theirs
// back meanwhile.
const shortRetry = 100 * time.Millisecond

// failWaitersLocked answers every waiting request: the node stops.
func (h *BudgetHolder) failWaitersLocked() {
	for _, w := range h.waiting {
		w.err = &RetryAfterError{After: time.Second, Msg: "this node is giving its budget escrow back"}
		close(w.done)
	}
	h.waiting = nil
	clear(h.need)
}

// pollRecalls asks the ledger, while this node holds escrow it has not
// used for an interval, whether another node is short of it, and whether
// a budget changed: a recalled tenant's idle escrow goes back at the next
// sync, and a changed budget's is spent no more. Busy leases learn of
// both from their own syncs, every interval.
func (h *BudgetHolder) pollRecalls(ctx context.Context) {
	now := h.now()
	h.mu.Lock()
	poll := h.recalls != nil && h.synced && now.Sub(h.lastPoll) >= h.interval
	idle := false
	for _, l := range h.leases {
		if l.free() > 0 && !l.exact(now) && now.Sub(l.lastUse) >= h.interval {
			idle = true
		}
	}
	f := h.recalls
	h.mu.Unlock()
	if !poll || !idle {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	tenants, revs, err := f(rctx)
	cancel()
	if err == nil && revs != nil {
		h.SetRevs(revs) // a budget changed: its idle escrow is spent no more
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastPoll = now
	if err != nil {
		return
	}
	for _, t := range tenants {
		if l := h.leases[t]; l != nil && l.free() > 0 {
			l.exactUntil = now.Add(exactFor)
		}
	}
}

// exactFor is how long a node reserves exactly after it learned that
// another was short of the tenant's escrow.
const exactFor = 5 * time.Second

// givesBackLocked reports whether l holds escrow that exact mode gives
// back at the next sync: all it holds free.
func (h *BudgetHolder) givesBackLocked(l *localLease, now time.Time) bool {
	return l.exact(now) && l.free() > 0
}

// headLocked is what the first waiting request of tenant needs: the
// least a top-up must bring for any of them to go (0 when none waits).
func (h *BudgetHolder) headLocked(tenant string) Nanos {
	for _, w := range h.waiting {
		if w.tenant == tenant {
			return w.upper
		}
	}
	return 0
}

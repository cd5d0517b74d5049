package consensus

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// BudgetHolder is a node's escrow of its tenants' budgets: money granted
// by the ledger that the node may spend without asking. The request path
// reserves a true upper bound of each attempt's cost from it and settles
// the actual cost after (node/ adapts it to route's budget gate), under a
// mutex and nothing else. A background loop reports spend to the leader in batches (one
// Raft command per node per interval, cumulative per lease, so a retried
// or reordered report counts once) and tops the escrow up ahead of need.
//
// A node never spends beyond its escrow, and escrow is only granted while
// settled + reserved stays within the limit; so spend never exceeds a
// budget, whatever fails. Escrow of a lease past its expiry is not spent:
// the leader may be about to write it off.
type BudgetHolder struct {
	node  string
	apply func(context.Context, Command) (Result, error)
	// budgeted lists the tenants with a budget; the holder asks escrow for
	// them before their first request.
	budgeted func() map[string]bool
	ttl      time.Duration
	interval time.Duration
	now      func() time.Time
	jitter   func(time.Duration) time.Duration // a random duration in [0, n)

	mu      sync.Mutex
	epoch   int64 // this boot, as the ledger assigned it; 0 until then
	version int   // the ledger's version, as the last sync said
	boot    int64 // a local nonce for command IDs
	seq     uint64
	leases  map[string]*localLease // the current period's lease, by tenant
	retired []*localLease          // older periods, reported then released
	need    map[string]Nanos       // escrow the request path found missing
	// parked are tenants whose idle escrow this node gave back because
	// the books had none left for others: it asks again only on need.
	parked map[string]bool
	// backoff holds, for tenants whose too-small escrow this node gave
	// back, when it may ask again.
	backoff map[string]time.Time
	synced  bool // a sync has succeeded
	// prefetched means a sync succeeded knowing the budgeted tenants:
	// each has been asked escrow before its first request.
	prefetched bool
	closing    bool // giving the escrow back: reserve no more
	crashed    bool // stopping as a crash would: no last sync
	kick       chan struct{}

	// waiting is the admission queue: requests the escrow could not
	// cover yet, by priority then arrival. waitSeq numbers arrivals.
	waiting  []*waiter
	waitSeq  uint64
	maxQueue int
	// recalls reads which tenants some node is short of escrow for, and
	// the budgets' revisions (a stale read of the ledger); nil: never
	// polled.
	recalls    func(context.Context) ([]string, map[string]int64, error)
	lastPoll   time.Time
	shortRetry bool // a waiter went unserved by the last sync: retry soon
	// spend is the node's charges, reported with each sync; nil: none.
	spend *SpendTally
	// revs are the accounts' budget revisions as the node last read the
	// ledger's tenants (SetRevs); nil: not read.
	revs map[string]int64
	// journalKick asks the journal for a record now (EnableJournal);
	// nil: no journal, no ceilings. journaled is each lease as the last
	// record held it; recovery is what the journal held at start, for
	// the first sync.
	journalKick func()
	journaled   map[*localLease]JournalLease
	recovery    *Recovery
}

type localLease struct {
	tenant, period string
	end            int64 // the period's end, leader time
	granted        Nanos // escrow granted, as the leader last said
	spent          Nanos // spent here, cumulative
	reported       Nanos // spent as the leader last acknowledged
	inflight       Nanos // reserved by attempts under way
	expires        time.Time
	remaining      Nanos // the books' unleased budget at the last sync
	headroom       Nanos // what the books could still let this node spend, at the last sync
	// exactUntil: until then the node reserves exactly, request by
	// request, and gives back escrow it is not using (another node was
	// short of it).
	exactUntil time.Time
	// current: the ledger said these are the books of the tenant's
	// current period.
	current bool
	// rev is the budget's revision the ledger last said the lease is
	// under. stale means the budget changed since (a newer revision
	// read, or the lease's books carried): nothing more is reserved
	// from the lease, which gives back what is not reserved at the next
	// sync; before is what it had spent when the node learned so.
	rev     int64
	stale   bool
	before  Nanos
	carried bool // the ledger recalled it: given back once settled
	// The journal's counters (budgetjournal.go): upper bounds reserved
	// and settled, cumulative; the ceiling on reservedCum the journal
	// made durable; the pace of reservations.
	reservedCum, settledUp, ceiling Nanos
	pace                            pace
	lastUse                         time.Time // the last reservation on this lease, or its grant
	largest                         Nanos     // largest reservation seen, to size top-ups
	peak                            Nanos     // most reserved at once since the last sync
	rate                            float64   // spend per second, a moving average
	rateAt                          time.Time
	rateSpent                       Nanos
}

func (l *localLease) free() Nanos { return l.granted - l.spent - l.inflight }

func (l *localLease) exact(now time.Time) bool { return now.Before(l.exactUntil) }

// NewBudgetHolder returns a holder for node; apply sends a command to
// the leader. Its first sync asks the ledger for a new epoch, which
// writes off what an earlier boot of the node held.
//
// budgeted lists the tenants with a budget; a nil map means not known
// yet, and then every tenant is held to escrow (fail closed).
func NewBudgetHolder(node string, apply func(context.Context, Command) (Result, error), budgeted func() map[string]bool) *BudgetHolder {
	return &BudgetHolder{
		node: node, boot: time.Now().UnixNano(), apply: apply, budgeted: budgeted,
		ttl: 30 * time.Second, interval: 500 * time.Millisecond, now: time.Now, jitter: rand.N[time.Duration],
		leases: map[string]*localLease{}, need: map[string]Nanos{}, parked: map[string]bool{}, backoff: map[string]time.Time{}, kick: make(chan struct{}, 1),
		maxQueue: DefaultAdmissionQueue,
	}
}

// SetRecalls gives the holder a way to learn, while it holds escrow it
// is not using, that another node is short of it, and that a budget
// changed: a stale read of the ledger's Escrow view (revs nil from a
// ledger that keeps no revisions). Call it before Run.
func (h *BudgetHolder) SetRecalls(f func(context.Context) (recalls []string, revs map[string]int64, err error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recalls = f
}

// SetSpend has the holder's syncs report the charges tallied in t, every
// tenant's (a node syncs while it has charges to report, budgets or
// not). Call it before Run.
func (h *BudgetHolder) SetSpend(t *SpendTally) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.spend = t
}

// Hold is one reservation of a tenant's budget, out of a lease's escrow.
// The hold of a tenant without a budget (a zero Hold) settles nothing.
type Hold struct {
	h     *BudgetHolder
	l     *localLease
	upper Nanos
}

// Settle replaces the reservation by the actual cost. What it frees may
// serve a waiting request; a lease in exact mode gives it back at once.
func (e *Hold) Settle(usd float64) {
	h := e.h
	if h == nil {
		return
	}
	h.mu.Lock()
	e.l.inflight -= e.upper
	e.l.settledUp += e.upper
	e.l.spent += RoundNanos(usd)
	if e.l.exact(h.now()) {
		h.kickLocked() // report the spend and give back what is free
	}
	h.serveLocked(h.now())
	h.mu.Unlock()
}

func (h *BudgetHolder) kickLocked() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Ready reports whether the holder has synced with the ledger once
// knowing which tenants have a budget: each of them has been asked
// escrow, so a first request need not wait for it.
func (h *BudgetHolder) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.synced && h.prefetched
}

// Run syncs with the ledger until ctx ends, then reports what was spent
// and gives the escrow back (bounded by a few seconds), unless Crash was
// called. It syncs every interval, at once when a request finds the
// escrow short, and again after shortRetry while requests it could not
// serve still wait.
func (h *BudgetHolder) Run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			h.mu.Lock()
			h.closing = true
			crashed := h.crashed
			h.failWaitersLocked()
			h.mu.Unlock()
			if !crashed {
				fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = h.sync(fctx, true)
				cancel()
			}
			return
		case <-t.C:
			h.pollRecalls(ctx)
		case <-h.kick:
		case <-retry.C:
		}
		sctx, cancel := context.WithTimeout(ctx, syncTimeout)
		_ = h.sync(sctx, false)
		cancel()
		h.mu.Lock()
		again := h.shortRetry && len(h.waiting) > 0
		h.mu.Unlock()
		if again {
			retry.Reset(shortRetry)
		}
	}
}

// syncTimeout bounds one sync: a leader that froze or died must not
// hold top-ups up for longer than requests can wait for them; the next
// sync goes to whoever leads by then.
const syncTimeout = 2 * time.Second

// Drive hands the holder to a simulator: its clock is now, its random
// choices come from seed (the same seed, the same run), and instead of
// Run, the simulator calls Sync at the holder's interval of virtual time.
func (h *BudgetHolder) Drive(now func() time.Time, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xb0d9e7))
	h.mu.Lock()
	h.now, h.boot = now, int64(seed&(1<<62-1))
	h.jitter = func(n time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(n))) }
	h.mu.Unlock()
}

// Sync sends one batch to the ledger, as Run does every interval; release
// gives every lease back.
func (h *BudgetHolder) Sync(ctx context.Context, release bool) error { return h.sync(ctx, release) }

// NextSync is when a sync next has something to send if nothing is
// reserved or settled meanwhile: now if it has already; else the earliest
// lease renewal, end of a backoff, or parking of an idle lease; the zero
// time if none. A simulator driving hundreds of holders syncs each at its
// interval only once that time has come or its requests touched it,
// which gives the same run as syncing at every interval.
func (h *BudgetHolder) NextSync(now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.synced || !h.quietLocked(now) {
		return now
	}
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, l := range h.leases {
		earliest(l.expires.Add(-h.ttl / 2)) // see the renewal in sync
		if l.remaining <= 0 && l.inflight == 0 && l.free() > 0 {
			earliest(l.lastUse.Add(parkAfter)) // see parkIdleLocked
		}
	}
	for _, t := range h.backoff {
		earliest(t)
	}
	return next
}

// Interval is how often Run syncs.
func (h *BudgetHolder) Interval() time.Duration { return h.interval }

// Crash makes Run stop without its last sync, as a crash would: the
// escrow stays reserved until the ledger writes it off.
func (h *BudgetHolder) Crash() {
	h.mu.Lock()
	h.crashed, h.closing = true, true
	h.mu.Unlock()
}

// newCommand wraps a body in the command envelope; the leader stamps Time.
func newCommand(id, typ string, body any) (Command, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return Command{}, err
	}
	return Command{ID: id, Type: typ, Body: b}, nil
}

// Escrow reports what the holder holds: leases, escrow still free to
// spend, and escrow reserved by attempts under way.
func (h *BudgetHolder) Escrow() (leases int, free, inflight Nanos) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range append(h.leaseList(), h.retired...) {
		leases++
		free += max(l.free(), 0)
		inflight += l.inflight
	}
	return leases, free, inflight
}

// HeldLease is one budget lease as its holder sees it.
type HeldLease struct {
	Tenant   string    `json:"tenant"`
	Period   string    `json:"period"`
	Granted  Nanos     `json:"granted"`  // escrow granted
	Spent    Nanos     `json:"spent"`    // spent against it so far
	Inflight Nanos     `json:"inflight"` // reserved by attempts under way
	Expires  time.Time `json:"expires"`
}

// Leases returns the budget leases this node holds, by tenant.
func (h *BudgetHolder) Leases() []HeldLease {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HeldLease
	for _, l := range h.leaseList() {
		out = append(out, HeldLease{Tenant: l.tenant, Period: l.period, Granted: l.granted, Spent: l.spent, Inflight: l.inflight, Expires: l.expires})
	}
	slices.SortFunc(out, func(a, b HeldLease) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
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
	// recalls reads which tenants some node is short of escrow for (a
	// stale read of the ledger); nil: never polled.
	recalls    func(context.Context) ([]string, error)
	lastPoll   time.Time
	shortRetry bool // a waiter went unserved by the last sync: retry soon
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
	current   bool
	lastUse   time.Time // the last reservation on this lease, or its grant
	largest   Nanos     // largest reservation seen, to size top-ups
	peak      Nanos     // most reserved at once since the last sync
	rate      float64   // spend per second, a moving average
	rateAt    time.Time
	rateSpent Nanos
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
// is not using, that another node is short of it: a stale read of the
// ledger's recalls. Call it before Run.
func (h *BudgetHolder) SetRecalls(f func(context.Context) ([]string, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recalls = f
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
		var cp *Nanos
		if !retiring && h.givesBackLocked(l, now) {
			// Exact mode: keep what is reserved, give the rest back (the
			// wants below ask for exactly what waiting requests need).
			// Nothing more is reserved from what is given back: the
			// lease here shrinks now.
			keep := l.spent + l.inflight
			l.granted = keep
			cp = &keep
		}
		if l.spent != l.reported || done || cp != nil {
			c.Usage = append(c.Usage, UsageItem{Tenant: l.tenant, Period: l.period, Spent: l.spent, Release: done, Cap: cp})
			quiet = false
		}
		if !retiring && l.expires.Sub(now) < h.ttl/2 {
			quiet = false // renew
		}
	}
	if !release {
		// Tenants with a budget, and any the request path found missing
		// escrow for (before the budgeted set is known, every tenant is).
		wanted := map[string]bool{}
		for tenant := range h.budgeted() {
			wanted[tenant] = true
		}
		for tenant := range h.need {
			wanted[tenant] = true
		}
		for _, tenant := range sortedKeys(wanted) {
			if w := h.wantLocked(tenant, now); w > 0 {
				var free Nanos
				if l := h.leases[tenant]; l != nil && now.Before(l.expires) {
					free = max(l.free(), 0)
				}
				c.Want = append(c.Want, WantItem{Tenant: tenant, Amount: w, Need: max(h.headLocked(tenant)-free, 0)})
				quiet = false
			}
		}
	}
	if quiet && h.synced {
		h.mu.Unlock()
		return nil
	}
	h.seq++
	c.Seq, c.Epoch, c.Boot = h.seq, h.epoch, h.boot
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
	h.epoch = r.Sync.Epoch
	h.absorb(r.Sync, now, c)
	h.synced = true
	h.prefetched = h.prefetched || knewBudgeted
	h.shortRetry = len(r.Sync.Exhausted) > 0
	h.serveLocked(h.now())
	return nil
}

// quietLocked reports, without allocating, whether a sync would have
// nothing to send: no spend to report, no lease to give back or renew,
// no escrow to ask for. Most syncs of a node with many tenants are quiet,
// and a simulator runs hundreds of holders.
func (h *BudgetHolder) quietLocked(now time.Time) bool {
	if len(h.retired) > 0 {
		return false
	}
	for _, l := range h.leases {
		if l.spent != l.reported || l.expires.Sub(now) < h.ttl/2 || h.givesBackLocked(l, now) {
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
		h.need[w.tenant] = 0
	}
	for _, w := range h.waiting {
		h.need[w.tenant] += w.upper
	}
	live := map[*localLease]bool{}
	for _, lv := range r.Leases {
		l := h.find(lv.Tenant, lv.Period)
		switch cur := h.leases[lv.Tenant]; {
		case l == nil:
			l = &localLease{tenant: lv.Tenant, period: lv.Period, end: lv.End, rateAt: now, lastUse: now}
			if cur == nil || lv.Current || (lv.End >= cur.end && !cur.current) {
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

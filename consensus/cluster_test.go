package consensus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"

	"github.com/hashicorp/raft"
)

// testCluster is voters on raft's in-memory transport, fully connected.
type testCluster struct {
	t       testing.TB
	servers []*Server
	trans   []*raft.InmemTransport
	down    []bool
	mu      sync.Mutex

	violations atomic.Int64
	firstBad   atomic.Value
}

func newTestCluster(t testing.TB, n int) *testCluster {
	return newSkewedCluster(t, n, func(int) func() time.Time { return time.Now })
}

// newSkewedCluster gives voter i the clock clockOf(i).
func newSkewedCluster(t testing.TB, n int, clockOf func(i int) func() time.Time) *testCluster {
	t.Helper()
	return newClusterWith(t, n, clockOf, nil)
}

// newClusterWith is newSkewedCluster with edit, if not nil, adjusting
// voter i's configuration before it starts.
func newClusterWith(t testing.TB, n int, clockOf func(i int) func() time.Time, edit func(i int, c *ServerConfig)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, down: make([]bool, n)}
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("v%d", i)))
		c.trans = append(c.trans, tr)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("v%d", i)), Address: addr})
	}
	for i, a := range c.trans {
		for j, b := range c.trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i := range n {
		cfg := ServerConfig{
			ID: fmt.Sprintf("v%d", i), InMemory: true, Transport: c.trans[i], Timings: FastTimings,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ApplyTimeout: time.Second, Clock: clockOf(i),
		}
		if edit != nil {
			edit(i, &cfg)
		}
		s, err := NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Every replica checks the escrow invariant after every apply.
		s.fsm.afterApply = func(l *Ledger, cmd Command, r Result) {
			if err := l.Check(); err != nil {
				c.violations.Add(1)
				c.firstBad.CompareAndSwap(nil, fmt.Sprintf("after %s %s: %v", cmd.Type, cmd.ID, err))
			}
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown() })
		c.servers = append(c.servers, s)
	}
	if err := c.servers[0].bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	c.waitLeader(10 * time.Second)
	return c
}

// leader returns the index of a live leader, or -1.
func (c *testCluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.servers {
		if !c.down[i] && s.IsLeader() {
			return i
		}
	}
	return -1
}

func (c *testCluster) waitLeader(d time.Duration) (int, time.Duration) {
	c.t.Helper()
	i := -1
	took := wait.For(c.t, d, "a leader", func() bool { i = c.leader(); return i >= 0 })
	return i, took
}

// apply sends cmd to whichever voter leads now, as a client's forward
// would; ErrNoLeader while there is none.
func (c *testCluster) apply(ctx context.Context, cmd Command) (Result, error) {
	i := c.leader()
	if i < 0 {
		return Result{}, ErrNoLeader
	}
	return c.servers[i].Apply(ctx, cmd)
}

// partition cuts voter i off from every other, or heals it.
func (c *testCluster) partition(i int, cut bool) {
	for j := range c.trans {
		if i == j {
			continue
		}
		if cut {
			c.trans[i].Disconnect(c.trans[j].LocalAddr())
			c.trans[j].Disconnect(c.trans[i].LocalAddr())
		} else {
			c.trans[i].Connect(c.trans[j].LocalAddr(), c.trans[j])
			c.trans[j].Connect(c.trans[i].LocalAddr(), c.trans[i])
		}
	}
}

// kill stops voter i for good.
func (c *testCluster) kill(i int) {
	c.mu.Lock()
	c.down[i] = true
	c.mu.Unlock()
	c.partition(i, true)
	_ = c.servers[i].Shutdown()
}

// faultyApply wraps apply with what networks do to requests: lost
// before the leader, lost after it (applied, but the client hears an
// error), applied twice, and held back to arrive after later ones.
type faultyApply struct {
	c       *testCluster
	r       *rand.Rand
	mu      sync.Mutex
	delayed []Command
	// frozen holds the node's syncs back, as a process stopped with
	// SIGSTOP would: they go out when it is thawed.
	frozen atomic.Bool
}

func (f *faultyApply) apply(ctx context.Context, cmd Command) (Result, error) {
	for f.frozen.Load() && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // a frozen node's sync waits for the thaw, as a stopped process's would
	}
	f.mu.Lock()
	roll := f.r.IntN(100)
	var late []Command
	if len(f.delayed) > 0 && f.r.IntN(3) == 0 {
		late, f.delayed = f.delayed, nil
	}
	if roll < 5 {
		f.delayed = append(f.delayed, cmd) // reordered: sent again later
	}
	f.mu.Unlock()
	for _, d := range late {
		_, _ = f.c.apply(ctx, d)
	}
	switch {
	case roll < 10:
		return Result{}, errors.New("lost on the way")
	case roll < 15:
		_, _ = f.c.apply(ctx, cmd)
		return Result{}, errors.New("the reply was lost")
	case roll < 20:
		_, _ = f.c.apply(ctx, cmd) // a retry the leader had applied already
	}
	return f.c.apply(ctx, cmd)
}

// TestEscrowHoldsUnderFaults drives budget holders on three nodes against
// 3- and 5-voter clusters through partitions, leader kills, lost,
// duplicated and reordered syncs, frozen nodes (no traffic and no sync for up to 2.7 s, past their leases), node crashes (a holder replaced by a new
// boot that never reported its last spend), and a day's rollover under
// voters whose clocks disagree by up to a second either way. After every
// apply, on every replica, settled + reserved stays within each day's
// limit. After quiescence, what the emulated providers charged lies
// between what was settled less what was written off and what was
// settled; with no crash, the two are equal, exactly.
func TestEscrowHoldsUnderFaults(t *testing.T) {
	for _, voters := range []int{3, 5} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("voters=%d/seed=%d", voters, seed), func(t *testing.T) {
				escrowUnderFaults(t, voters, seed, seed == 2)
			})
		}
	}
}

func escrowUnderFaults(t *testing.T, voters int, seed uint64, crashes bool) {
	r := rand.New(rand.NewPCG(seed, 99))
	// The cluster's day ends 1.5 s into the run.
	midnight := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	offset := time.Until(midnight) - 1500*time.Millisecond
	c := newSkewedCluster(t, voters, func(i int) func() time.Time {
		skew := time.Duration(r.Int64N(int64(2*time.Second))) - time.Second
		return func() time.Time { return time.Now().Add(offset + skew) }
	})
	const limit = NanosPerUSD
	seedCmd, _ := newCommand("seed-acme", CmdSeedTenant, Tenant{Name: "acme", Budget: &Budget{Limit: limit, Period: PeriodDay}})
	if _, err := c.apply(context.Background(), seedCmd); err != nil {
		t.Fatal(err)
	}
	run := &escrowRun{c: c, r: r, seed: seed, voters: voters}
	ctx, stop := context.WithCancel(context.Background())
	for n := range run.slots {
		run.slots[n] = &escrowSlot{}
		run.start(ctx, n)
		run.spend(ctx, n)
	}
	// Faults: partitions that heal, leader kills keeping a quorum, and
	// (with crashes) a node replaced by a new boot.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		run.fault(ctx, crashes)
	}
	stop()
	run.traffic.Wait()
	run.loops.Wait()
	run.quiesce(t)
	run.checkBooks(t)
}

// escrowSlot is one node of escrowUnderFaults: its budget holder, the
// faulty path its syncs take, and whether it is frozen.
type escrowSlot struct {
	h      atomic.Pointer[BudgetHolder]
	cancel context.CancelFunc
	fa     atomic.Pointer[faultyApply]
	frozen atomic.Bool                // no traffic and no sync: a stopped process
	tally  atomic.Pointer[SpendTally] // the boot's charges, reported with its syncs
}

// escrowRun is one run of escrowUnderFaults: three nodes spending one
// budget through a cluster under faults, and what the faults did.
type escrowRun struct {
	c              *testCluster
	r              *rand.Rand
	seed           uint64
	voters         int
	slots          [3]*escrowSlot
	charged        atomic.Int64 // what the emulated providers billed, in nanos
	loops, traffic sync.WaitGroup

	killed, crashed, frozen int
}

// start boots node n's budget holder (again, after a crash).
func (e *escrowRun) start(ctx context.Context, n int) {
	budgeted := func() map[string]bool { return map[string]bool{"acme": true} }
	fa := &faultyApply{c: e.c, r: rand.New(rand.NewPCG(e.seed, uint64(n)+uint64(time.Now().UnixNano())))}
	e.slots[n].fa.Store(fa)
	h := NewBudgetHolder(fmt.Sprintf("node%d", n), fa.apply, budgeted)
	h.interval, h.ttl = 20*time.Millisecond, 2*time.Second
	tally := NewSpendTally()
	h.SetSpend(tally)
	e.slots[n].tally.Store(tally)
	hctx, cancel := context.WithCancel(ctx)
	e.slots[n].h.Store(h)
	e.slots[n].cancel = cancel
	e.loops.Go(func() { h.Run(hctx) })
}

// spend runs node n's traffic until ctx ends: reservations of up to two
// cents, settled at a random part of what was reserved.
func (e *escrowRun) spend(ctx context.Context, n int) {
	rr := rand.New(rand.NewPCG(e.seed, uint64(100+n)))
	e.traffic.Go(func() {
		for ctx.Err() == nil {
			if e.slots[n].frozen.Load() {
				time.Sleep(time.Millisecond) // a frozen node sends nothing until it is thawed
				continue
			}
			upper := float64(1+rr.IntN(20_000)) / 1e6 // up to 2 cents
			hold, err := e.slots[n].h.Load().Reserve(ctx, "acme", upper, n%2, time.Now().Add(20*time.Millisecond), time.Now())
			if err == nil {
				actual := upper * rr.Float64()
				e.charged.Add(int64(RoundNanos(actual)))
				hold.Settle(actual)
				e.slots[n].tally.Load().Charge("acme", fmt.Sprint("key-", n%2), []string{"", "team:a"}[rr.IntN(2)], "m", "p", actual)
			}
			time.Sleep(time.Millisecond) // pacing: about a thousand requests a second per node
		}
	})
}

// fault waits a random while, then injects one fault and heals it.
func (e *escrowRun) fault(ctx context.Context, crashes bool) {
	r, c := e.r, e.c
	time.Sleep(time.Duration(100+r.IntN(200)) * time.Millisecond) // traffic runs fault-free this long
	switch i := r.IntN(len(c.servers)); {
	case r.IntN(5) == 0:
		// A node frozen, sometimes past its leases' expiry (2 s):
		// thawed, it must not spend escrow the leader may have
		// written off, nor report twice what it spent.
		n := r.IntN(3)
		fa := e.slots[n].fa.Load()
		e.slots[n].frozen.Store(true)
		fa.frozen.Store(true)
		time.Sleep(time.Duration(200+r.IntN(2500)) * time.Millisecond) // the freeze lasts this long
		fa.frozen.Store(false)
		e.slots[n].frozen.Store(false)
		e.frozen++
	case crashes && r.IntN(4) == 0:
		n := r.IntN(3)
		old := e.slots[n].h.Load()
		old.Crash()
		e.slots[n].cancel()
		e.start(ctx, n)
		e.crashed++
	case r.IntN(3) == 0 && e.killed < (e.voters-1)/2:
		if l := c.leader(); l >= 0 {
			c.kill(l)
			e.killed++
		}
	default:
		c.mu.Lock()
		down := c.down[i]
		c.mu.Unlock()
		if !down {
			c.partition(i, true)
			time.Sleep(time.Duration(50+r.IntN(300)) * time.Millisecond) // the partition lasts this long
			c.partition(i, false)
		}
	}
}

// quiesce sends the holders' final syncs, which may have met a fault,
// again until they land.
func (e *escrowRun) quiesce(t *testing.T) {
	e.c.waitLeader(10 * time.Second)
	for _, s := range e.slots {
		h := s.h.Load()
		h.apply = e.c.apply
		h.mu.Lock()
		h.crashed, h.closing = false, false
		h.mu.Unlock()
		wait.For(t, 10*time.Second, "a holder's final sync, its spend reported", func() bool {
			return h.sync(context.Background(), true) == nil && !s.tally.Load().Pending()
		})
	}
}

// checkBooks checks the invariants after quiescence: no day settled
// over its limit, nothing reserved or overspent, and what the providers
// charged between what was settled less what was written off and what
// was settled (exactly what was settled with no crash).
func (e *escrowRun) checkBooks(t *testing.T) {
	c := e.c
	if n := c.violations.Load(); n > 0 {
		t.Fatalf("%d invariant violations; first: %v", n, c.firstBad.Load())
	}
	l := c.leader()
	var books []BookView
	if err := c.servers[l].ReadLinearizable(func(led *Ledger) { books = led.Books() }); err != nil {
		t.Fatal(err)
	}
	var settled, forfeited, reserved, over Nanos
	for _, b := range books {
		if b.Settled > b.Limit {
			t.Fatalf("day %s settled %v over its limit %v", b.Period, b.Settled, b.Limit)
		}
		settled, forfeited, reserved, over = settled+b.Settled, forfeited+b.Forfeited, reserved+b.Reserved, over+b.Overspend
	}
	got := Nanos(e.charged.Load())
	switch {
	case over != 0 || reserved != 0:
		t.Fatalf("after quiescence: overspend %v, reserved %v (books %+v)", over, reserved, books)
	case e.crashed == 0 && settled != got:
		t.Fatalf("settled %v, charged %v: with no crash they must be equal", settled, got)
	case got > settled || got < settled-forfeited:
		t.Fatalf("charged %v outside [settled %v - written off %v, settled]", got, settled, forfeited)
	}
	// Spend is attributed once per report whatever was lost, repeated or
	// reordered: all of it with no crash; with crashes, no more than was
	// charged, and no less than what the crashed boots' escrow covered.
	var byTenant, byKey SpendView
	if err := c.servers[l].ReadLinearizable(func(led *Ledger) {
		byTenant, byKey = led.Spend(SpendQuery{By: DimTenant}), led.Spend(SpendQuery{By: DimKey})
	}); err != nil {
		t.Fatal(err)
	}
	switch att := byTenant.Total.Nanos; {
	case byKey.Total != byTenant.Total || sumRows(byKey) != att:
		t.Fatalf("by key %+v does not add up to the total %+v", byKey, byTenant.Total)
	case e.crashed == 0 && att != got:
		t.Fatalf("attributed %v, charged %v: with no crash they must be equal", att, got)
	case att > got || att < got-forfeited:
		t.Fatalf("attributed %v outside [charged %v - written off %v, charged]", att, got, forfeited)
	}
	t.Logf("charged %v over %d day(s) through %d voters (%d killed, %d node crashes, %d nodes frozen, %v written off)", got, len(books), e.voters, e.killed, e.crashed, e.frozen, forfeited)
}

// A small budget's escrow, all granted to a node that then idles, comes
// back to the ledger once the books have nothing left, and reaches the
// node that needs it: that node is told to retry (429), never that the
// budget is exhausted (402), while nothing was spent.
func TestIdleEscrowFlowsToTheNodeThatNeedsIt(t *testing.T) {
	c := newSkewedCluster(t, 1, func(int) func() time.Time { return time.Now })
	const limit = NanosPerUSD / 10_000 // $0.0001, less than one node's first escrow
	seedCmd, _ := newCommand("seed-tiny", CmdSeedTenant, Tenant{Name: "tiny", Budget: &Budget{Limit: limit, Period: PeriodTotal}})
	if _, err := c.apply(context.Background(), seedCmd); err != nil {
		t.Fatal(err)
	}
	budgeted := func() map[string]bool { return map[string]bool{"tiny": true} }
	var skewA atomic.Int64 // node A's clock runs ahead when the test says so
	a := NewBudgetHolder("a", c.apply, budgeted)
	a.interval, a.now = 10*time.Millisecond, func() time.Time { return time.Now().Add(time.Duration(skewA.Load())) }
	b := NewBudgetHolder("b", c.apply, budgeted)
	b.interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var loops sync.WaitGroup
	defer loops.Wait()
	defer cancel()
	loops.Go(func() { a.Run(ctx) })
	wait.For(t, 10*time.Second, "a to hold the whole budget", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		l := a.leases["tiny"]
		return l != nil && l.granted == limit
	})
	loops.Go(func() { b.Run(ctx) })
	wait.For(t, 10*time.Second, "b to sync", func() bool { return b.Ready() })
	const upper = 0.00002
	if _, err := b.TryReserve("tiny", upper, time.Now()); err == nil || errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("b reserved with a's escrow out, or was told the budget is spent: %v", err)
	}
	skewA.Store(int64(2 * parkAfter)) // a has been idle long enough
	var hold *Hold
	wait.For(t, 10*time.Second, "b to get escrow a gave back", func() bool {
		h, err := b.TryReserve("tiny", upper, time.Now())
		if errors.Is(err, ErrBudgetExceeded) {
			t.Fatalf("b was told the budget is spent: %v", err)
		}
		hold = h
		return err == nil
	})
	hold.Settle(upper / 2)
}

// A lease given back whose release is lost on the way is released again
// before the node asks for a new lease of the tenant: its spend is
// settled once, and the new escrow is the node's to spend.
func TestParkedLeaseLostReleaseSettlesOnce(t *testing.T) {
	c := newSkewedCluster(t, 1, func(int) func() time.Time { return time.Now })
	const limit = NanosPerUSD / 10_000 // $0.0001
	seedCmd, _ := newCommand("seed-tiny", CmdSeedTenant, Tenant{Name: "tiny", Budget: &Budget{Limit: limit, Period: PeriodTotal}})
	if _, err := c.apply(context.Background(), seedCmd); err != nil {
		t.Fatal(err)
	}
	var drop atomic.Bool
	apply := func(ctx context.Context, cmd Command) (Result, error) {
		if drop.CompareAndSwap(true, false) {
			return Result{}, errors.New("lost on the way")
		}
		return c.apply(ctx, cmd)
	}
	var skew atomic.Int64
	h := NewBudgetHolder("a", apply, func() map[string]bool { return map[string]bool{"tiny": true} })
	h.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	ctx := context.Background()
	sync := func() {
		t.Helper()
		if err := h.sync(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	hold, err := h.TryReserve("tiny", 0.00003, h.now())
	if err != nil {
		t.Fatal(err)
	}
	hold.Settle(0.00003)
	sync() // reports the spend
	skew.Store(int64(2 * parkAfter))
	drop.Store(true)
	if err := h.sync(ctx, false); err == nil { // parks; the release is lost
		t.Fatal("the dropped sync succeeded")
	}
	if _, err := h.TryReserve("tiny", 0.00002, h.now()); err == nil {
		t.Fatal("reserved from a parked lease")
	}
	for range 4 {
		sync()
	}
	hold, err = h.TryReserve("tiny", 0.00002, h.now())
	if err != nil {
		t.Fatalf("no new escrow after the release: %v", err)
	}
	hold.Settle(0.00001)
	sync()
	var books []BookView
	if err := c.servers[c.leader()].ReadLinearizable(func(l *Ledger) { books = l.Books() }); err != nil {
		t.Fatal(err)
	}
	b := books[0]
	if want := RoundNanos(0.00004); b.Settled != want || b.Overspend != 0 {
		t.Fatalf("settled %v (want %v), overspend %v", b.Settled, want, b.Overspend)
	}
}

func sumRows(v SpendView) Nanos {
	var n Nanos
	for _, r := range v.Rows {
		n += r.Nanos
	}
	return n
}

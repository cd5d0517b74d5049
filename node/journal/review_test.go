package journal

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
)

// stopWriter stops the journal's writer goroutine: the test writes every
// record itself (Flush), so that it decides what one record holds.
func stopWriter(n *node) {
	n.j.cancel()
	<-n.j.done
}

// holdsUntilCeiling reserves usd from acme until the journal's ceiling
// refuses it (without writing a record), and returns the holds.
func holdsUntilCeiling(t *testing.T, n *node, now time.Time, usd float64) []*consensus.Hold {
	t.Helper()
	var out []*consensus.Hold
	for range 100 {
		h, _ := n.budget.TryReserve("acme", usd, now)
		if h == nil {
			return out
		}
		out = append(out, h)
	}
	t.Fatal("the ceiling never refused a reservation")
	return nil
}

// leaseBound is the bound the replayed journal gives acme's lease (-1:
// the journal holds no lease).
func leaseBound(st *State) consensus.Nanos {
	for _, l := range st.Budget.Leases {
		if l.Tenant == "acme" && l.Period == consensus.PeriodTotal {
			return l.Bound()
		}
	}
	return -1
}

// A record that failed to be written must not count as written: the next
// record carries the ceiling again, and no ceiling is used before a
// record holding it is durable. Here the disk refuses one record (full);
// the next record, written, must hold the lease's ceiling, or a crash
// after the holder reserved up to it leaves the ledger an account that
// settles less than was spent.
func TestReviewFailedRecordRaisesNoCeilingUnwritten(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	n, _ := w.boot(t, dir, Config{Flush: time.Hour})
	stopWriter(n)
	if err := n.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// The lease has no ceiling yet: the first reservation asks for a
	// record.
	if h, _ := n.budget.TryReserve("acme", 0.0001, w.now()); h != nil {
		t.Fatal("a reservation before any record of the lease's ceiling")
	}
	// The disk is full for one record.
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	good := n.j.f
	n.j.mu.Lock()
	n.j.f = full
	n.j.mu.Unlock()
	if err := n.j.Flush(); err == nil {
		t.Fatal("a record written to a full disk")
	}
	n.j.mu.Lock()
	n.j.f = good
	n.j.mu.Unlock()
	full.Close()
	// The disk has room again: the writer's next record.
	if err := n.j.Flush(); err != nil {
		t.Fatal(err)
	}
	holds := holdsUntilCeiling(t, n, w.now(), 0.0001)
	reserved := consensus.CeilNanos(0.0001) * consensus.Nanos(len(holds))
	n.j.Kill()
	n.budget.Crash()

	w.advance(time.Second)
	again, st := w.boot(t, dir, Config{})
	if b := leaseBound(st); len(holds) > 0 && b < reserved {
		t.Errorf("%d holds of $0.0001 reserved after the failed record, but the journal bounds the lease at %v (epoch %d)",
			len(holds), b, st.Budget.Epoch)
	}
	if err := again.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if b := w.books(t); b.Settled < reserved {
		t.Errorf("the books settled %v after the restart, less than the %v the dead holds may have spent: an overspend", b.Settled, reserved)
	}
}

// A lease given back (parked) and a new lease of the same books granted
// before the journal's next record: that record holds the new lease, and
// the old one as gone. Replayed, it must leave the new lease's record in
// place; if the old one's "gone" comes after it, the journal forgets the
// lease the node is spending from, and a crash gives its escrow back as
// if nothing were reserved.
func TestReviewGoneLeaseDoesNotEraseItsSuccessor(t *testing.T) {
	w := newWorld(t)
	// A budget the first lease takes whole: the books have nothing left
	// unleased, so an idle lease is parked (given back).
	w.admin(consensus.CmdPutTenant, consensus.Tenant{Name: "acme", KeySHA256: []string{strings.Repeat("a", 64)},
		Budget: &consensus.Budget{Limit: consensus.NanosPerUSD / 1000, Period: consensus.PeriodTotal}})
	dir := t.TempDir()
	n, _ := w.boot(t, dir, Config{Flush: time.Hour})
	stopWriter(n)
	if err := n.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if err := n.j.Flush(); err != nil { // the first lease's record
		t.Fatal(err)
	}
	if leases, _, _ := n.budget.Escrow(); leases != 1 {
		t.Fatalf("%d leases after the first sync", leases)
	}
	// Idle past parkAfter: the lease is given back.
	w.advance(6 * time.Second)
	if err := n.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if leases, _, _ := n.budget.Escrow(); leases != 0 {
		t.Fatalf("%d leases after the idle lease's sync: it was not given back", leases)
	}
	// A request arrives: a new lease of the same books, at once.
	if h, _ := n.budget.TryReserve("acme", 0.0001, w.now()); h != nil {
		t.Fatal("a reservation without a lease")
	}
	askAgain(t, n)
	if h, _ := n.budget.TryReserve("acme", 0.0001, w.now()); h != nil {
		t.Fatal("a reservation before any record of the new lease's ceiling")
	}
	// The journal's next record: the new lease's ceiling, the old one gone.
	if err := n.j.Flush(); err != nil {
		t.Fatal(err)
	}
	holds := holdsUntilCeiling(t, n, w.now(), 0.0001)
	if len(holds) == 0 {
		t.Fatal("the record let nothing be reserved")
	}
	reserved := consensus.CeilNanos(0.0001) * consensus.Nanos(len(holds))
	n.j.Kill()
	n.budget.Crash()

	w.advance(time.Second)
	again, st := w.boot(t, dir, Config{})
	if b := leaseBound(st); b < reserved {
		t.Errorf("%d holds of $0.0001 reserved from the new lease, but the journal bounds it at %v (-1: holds no lease): %+v",
			len(holds), b, st.Budget)
	}
	if err := again.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if b := w.books(t); b.Settled < reserved {
		t.Errorf("the books settled %v after the restart, less than the %v the dead holds may have spent: an overspend", b.Settled, reserved)
	}
}

// A record cut short by a write that failed part-way (the disk filled up,
// here the file size limit) while the node runs on: the records written
// after it, once the disk has room again, must still be read at the next
// start, not make the journal "damaged" and the node unable to start.
func TestReviewPartialWriteLeavesJournalReadable(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	n, _ := w.boot(t, dir, Config{Flush: time.Hour})
	stopWriter(n)
	if err := n.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	n.reserve(t, w.now(), 0.0001).Settle(0.00005)

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip(err)
	}
	lim := old
	lim.Cur = uint64(n.j.size) + 12 // room for a header and a few bytes
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skip(err)
	}
	n.spend.Charge("acme", "k1", "", "m", "p", 0.00005)
	err := n.j.Flush()
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("a record written past the file size limit")
	}
	// Room again: the node goes on, and its writer's next records land.
	n.spend.Charge("acme", "k1", "", "m", "p", 0.00005)
	if err := n.j.Flush(); err != nil {
		t.Fatal(err)
	}
	n.reserve(t, w.now(), 0.0001).Settle(0.00005)
	if err := n.j.Flush(); err != nil {
		t.Fatal(err)
	}
	n.j.Kill()
	n.budget.Crash()
	j, st, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("the journal after a write that failed part-way, and records after it: %v", err)
	}
	defer j.Kill()
	if st.Budget.Epoch == 0 || len(st.Budget.Leases) != 1 {
		t.Fatalf("the journal holds %+v", st.Budget)
	}
}

// A crash during the last record's write can leave the file extended
// over it with zeros (the size reached the disk, the data did not, as
// XFS or ext4 with data=writeback may). That is a torn last record: it
// is cut off, and the records before it are read, rather than the
// journal taken for damaged and the node refused its start.
func TestReviewZeroFilledTailIsATornRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, fileName)
	var whole []byte
	var last []byte
	for i := range 3 {
		b, err := frame(&Record{Time: int64(i + 1), Budget: consensus.BudgetJournal{Boot: 7, Epoch: 9,
			Leases: []consensus.JournalLease{{Tenant: "acme", Period: "total", Spent: consensus.Nanos(i), Ceiling: 100}}}})
		if err != nil {
			t.Fatal(err)
		}
		whole, last = append(whole, b...), b
	}
	// The third record's bytes never reached the disk; its length did.
	torn := append(whole[:len(whole)-len(last)], make([]byte, len(last))...)
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	j, st, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("a last record left as zeros by a crash: %v", err)
	}
	defer j.Kill()
	if st.Time != 2 || st.Budget.Leases[0].Spent != 1 {
		t.Fatalf("after a zero-filled last record: %+v", st)
	}
}

// A reporting rate holder (keys' and tenants' limits) numbers its
// renewals, and the ledger ignores one numbered at or below the last it
// applied ("an older renewal applied late": a share of 0). A restarted
// node goes on under its old boot, numbering from its journal's last
// seq plus 2^20: above every renewal its last process made after its
// last record, the journal assumes. But a holder whose shares take
// nothing writes no record, however often it renews (every 5 s): after
// 2^20 renewals (two months) without a take on this node, a crash
// leaves the restarted node numbering below the ledger's, and every
// share it asks for is 0 until it catches up (as long again).
func TestReviewRestartedHolderNumbersAboveItsLastRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("a million renewals")
	}
	w := newWorld(t)
	dir := t.TempDir()
	var last uint64 // the last renewal's number the ledger applied
	renew := func(_ context.Context, ds []consensus.Demand) ([]consensus.Grant, time.Duration, time.Duration, error) {
		last = max(last, ds[0].Seq)
		return []consensus.Grant{{Provider: "key:acme/k", RPM: 10, TPM: math.Inf(1)}}, 30 * time.Second, 5 * time.Second, nil
	}
	newHolder := func() *consensus.RateHolder {
		h := consensus.NewRateHolder("n", []consensus.RateCapacity{{Provider: "key:acme/k", RPM: 10}}, renew,
			func() int { return 1 }, func() bool { return false })
		h.ReportUsage()
		h.Drive(w.now)
		return h
	}
	j, st, err := Open(Config{Dir: dir, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	keys := newHolder()
	budget := consensus.NewBudgetHolder("n", w.apply, func() map[string]bool { return nil })
	j.Start(Holders{Budgets: budget, Rates: map[string]*consensus.RateHolder{"keys": keys}, RateBoot: 42})
	stopWriter(&node{j: j})
	// Idle: renewals every 5 s, and the journal's writer every 100 ms
	// (here once every 4096 renewals, and after the last: a writer
	// flushing more often writes no less).
	for i := range 1<<20 + 100 {
		if _, err := keys.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		if i%4096 == 0 {
			if err := j.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := j.Flush(); err != nil {
		t.Fatal(err)
	}
	j.Kill()

	_, st, err = Open(Config{Dir: dir, Now: w.now})
	if err != nil {
		t.Fatal(err)
	}
	rec := st.Recovery(w.now())
	again := newHolder()
	again.Recover(rec.Sent["keys"], rec.RateSeq["keys"], w.now())
	before := last
	if _, err := again.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if last <= before {
		t.Errorf("the restarted holder's first renewal is numbered at most %d, at or below the last process's %d (its journal says %d): the ledger takes it for an old renewal",
			last, before, rec.RateSeq["keys"])
	}
}

// The journal names a lease by its tenant and period, the ledger by its
// node, books and epoch. A lease given back (parked) and a new lease of
// the same books granted, then a crash before the journal's next record:
// the journal still holds the old lease, and recovery settles the new
// one at the old one's bound. The new lease reserved nothing (no record
// gave it a ceiling), so what the books settle beyond what was spent is
// the old lease's spend counted a second time.
func TestReviewRecoveryDoesNotChargeAGoneLeaseTwice(t *testing.T) {
	w := newWorld(t)
	w.admin(consensus.CmdPutTenant, consensus.Tenant{Name: "acme", KeySHA256: []string{strings.Repeat("a", 64)},
		Budget: &consensus.Budget{Limit: consensus.NanosPerUSD / 1000, Period: consensus.PeriodTotal}})
	dir := t.TempDir()
	n, _ := w.boot(t, dir, Config{Flush: time.Hour})
	stopWriter(n)
	if err := n.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	var spent consensus.Nanos
	for range 3 {
		n.reserveWaiting(t, w.now(), 0.0001).Settle(0.0001)
		spent += consensus.RoundNanos(0.0001)
	}
	if err := n.budget.Sync(context.Background(), false); err != nil { // reported
		t.Fatal(err)
	}
	if err := n.j.Flush(); err != nil {
		t.Fatal(err)
	}
	// Idle past parkAfter, the budget all leased: given back.
	w.advance(6 * time.Second)
	if err := n.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if leases, _, _ := n.budget.Escrow(); leases != 0 {
		t.Fatalf("%d leases after the idle lease's sync: it was not given back", leases)
	}
	// A request: a new lease of the same books; the node dies before the
	// journal's next record (and the request never reserved).
	if h, _ := n.budget.TryReserve("acme", 0.0001, w.now()); h != nil {
		t.Fatal("a reservation without a lease")
	}
	askAgain(t, n)
	n.j.Kill()
	n.budget.Crash()

	w.advance(time.Second)
	again, _ := w.boot(t, dir, Config{})
	if err := again.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if b := w.books(t); b.Settled > spent {
		t.Errorf("the books settled %v after the restart, though %v was spent and the new lease reserved nothing: the old lease's spend charged twice",
			b.Settled, spent)
	}
}

// reserveWaiting reserves usd as the request path does (Reserve, which
// waits in the admission queue), writing journal records until it is
// served.
func (n *node) reserveWaiting(t *testing.T, now time.Time, usd float64) *consensus.Hold {
	t.Helper()
	type answer struct {
		h   *consensus.Hold
		err error
	}
	done := make(chan answer, 1)
	go func() {
		h, err := n.budget.Reserve(context.Background(), "acme", usd, 0, now.Add(time.Minute), now)
		done <- answer{h, err}
	}()
	for range 1000 {
		select {
		case a := <-done:
			if a.h == nil {
				t.Fatal(a.err)
			}
			return a.h
		case <-time.After(time.Millisecond):
		}
		if err := n.j.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no reservation after a thousand records")
	return nil
}

// askAgain syncs until the holder holds a lease again, writing a journal
// record between syncs, as the writer does when the holder asks for one.
func askAgain(t *testing.T, n *node) {
	t.Helper()
	for range 3 {
		if err := n.budget.Sync(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		if leases, _, _ := n.budget.Escrow(); leases == 1 {
			return
		}
		if err := n.j.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no new lease after three syncs")
}

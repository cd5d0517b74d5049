package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
)

// world is a real ledger that holders sync with directly, on a clock the
// test moves.
type world struct {
	t   *testing.T
	mu  sync.Mutex // the ledger and the clock: the journal's writer reads the clock too
	l   *consensus.Ledger
	at  time.Time
	seq int
}

func (w *world) now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at
}

func (w *world) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at = w.at.Add(d)
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, l: consensus.NewLedger(), at: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	w.admin(consensus.CmdSetVersion, consensus.SetVersion{Version: consensus.VersionJournal})
	w.admin(consensus.CmdPutTenant, consensus.Tenant{Name: "acme", KeySHA256: []string{strings.Repeat("a", 64)},
		Budget: &consensus.Budget{Limit: consensus.NanosPerUSD, Period: consensus.PeriodTotal}})
	return w
}

func (w *world) apply(_ context.Context, c consensus.Command) (consensus.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.Time = w.at.UnixNano()
	return w.l.Apply(c), nil
}

func (w *world) admin(typ string, body any) {
	w.seq++
	b, _ := json.Marshal(body)
	if r, _ := w.apply(context.Background(), consensus.Command{ID: fmt.Sprint("admin/", w.seq), Type: typ, Body: b}); r.Err != "" {
		w.t.Fatal(r.Err)
	}
}

func (w *world) books(t *testing.T) consensus.BookView {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.l.Books() {
		if b.Tenant == "acme" {
			return b
		}
	}
	t.Fatal("no books for acme")
	return consensus.BookView{}
}

// node is one boot of a node: its holders and its journal.
type node struct {
	j      *Journal
	budget *consensus.BudgetHolder
	rates  *consensus.RateHolder
	spend  *consensus.SpendTally
}

// boot opens the journal in dir, hands the holders what it held, and
// starts it.
func (w *world) boot(t *testing.T, dir string, cfg Config) (*node, *State) {
	t.Helper()
	cfg.Dir, cfg.Now = dir, w.now
	j, st, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Kill)
	n := &node{j: j, spend: consensus.NewSpendTally()}
	n.budget = consensus.NewBudgetHolder("n", w.apply, func() map[string]bool { return map[string]bool{"acme": true} })
	n.budget.Drive(w.now, uint64(w.now().UnixNano()))
	n.budget.SetSpend(n.spend)
	renew := func(context.Context, []consensus.Demand) ([]consensus.Grant, time.Duration, time.Duration, error) {
		return []consensus.Grant{{Provider: "p", RPM: 600, TPM: math.Inf(1)}}, time.Hour, time.Minute, nil
	}
	n.rates = consensus.NewRateHolder("n", []consensus.RateCapacity{{Provider: "p", RPM: 600}}, renew, func() int { return 1 }, func() bool { return false })
	n.rates.Drive(w.now)
	rec := st.Recovery(w.now())
	if rec.Budget != nil {
		n.budget.Recover(rec.Budget)
	}
	rateBoot := rec.RateBoot
	if rateBoot == 0 {
		rateBoot = 42
	}
	n.rates.Recover(rec.Sent["providers"], rec.RateSeq["providers"], w.now())
	j.Start(Holders{Budgets: n.budget, Spend: n.spend, Rates: map[string]*consensus.RateHolder{"providers": n.rates}, RateBoot: rateBoot})
	return n, st
}

// reserve reserves usd, writing journal records until the ceilings let
// it (as the writer does when kicked).
func (n *node) reserve(t *testing.T, now time.Time, usd float64) *consensus.Hold {
	t.Helper()
	for range 10 {
		h, err := n.budget.TryReserve("acme", usd, now)
		if h != nil {
			return h
		}
		var ra *consensus.RetryAfterError
		if err != nil && !errors.As(err, &ra) {
			t.Fatal(err)
		}
		_ = n.budget.Sync(context.Background(), false)
		if err := n.j.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no reservation after ten records")
	return nil
}

// A node killed with reservations under way, restarted with its data:
// its first sync gives the ledger its journal's account, which settles
// the dead boot's lease at what it may have spent and takes the rest of
// the escrow back. Nothing is written off, and what the books settle is
// at least what was spent (the holds that died counted at their
// bounds); the spend attributed survives too, and the rate share's sends
// come back.
func TestJournalGivesEscrowBackAfterKill(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	n, _ := w.boot(t, dir, Config{})
	if err := n.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	var spent float64
	var alive []*consensus.Hold
	for i := range 20 {
		w.advance(10 * time.Millisecond)
		h := n.reserve(t, w.now(), 0.0001)
		if i%4 == 3 {
			alive = append(alive, h) // dies with the process
			continue
		}
		h.Settle(0.00004)
		n.spend.Charge("acme", "k1", "", "m", "p", 0.00004)
		spent += 0.00004
		n.take(t, w.now(), 10)
	}
	if err := n.j.Flush(); err != nil {
		t.Fatal(err)
	}
	held := w.books(t).Reserved
	n.j.Kill()
	n.budget.Crash()

	w.advance(2 * time.Second)
	again, st := w.boot(t, dir, Config{})
	if st.Budget.Epoch == 0 || len(st.Budget.Leases) != 1 {
		t.Fatalf("the journal holds %+v", st.Budget)
	}
	if err := again.budget.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	b := w.books(t)
	dead := float64(len(alive)) * 0.0001
	t.Logf("escrow held at the kill %v; books now settled %v, forfeited %v, reserved %v; spent $%.6f and $%.6f died in flight",
		held, b.Settled, b.Forfeited, b.Reserved, spent, dead)
	if b.Forfeited != 0 {
		t.Errorf("%v written off, though the node came back with its journal", b.Forfeited)
	}
	if truth := consensus.RoundNanos(spent + dead); b.Settled < truth {
		t.Errorf("the books settled %v, less than was spent (%v)", b.Settled, truth)
	}
	if b.Settled > consensus.RoundNanos(spent+dead)+held/2 {
		t.Errorf("the books settled %v: the journal's account kept much of the %v escrow the node held", b.Settled, held)
	}
	// The spend attributed before the kill reached the ledger with the
	// first sync of the next boot.
	sp := w.l.Spend(consensus.SpendQuery{By: "key", Since: w.now().Add(-time.Hour).UnixNano()})
	if len(sp.Rows) == 0 || sp.Rows[0].Nanos != consensus.RoundNanos(0.00004)*15 {
		t.Errorf("spend by key after the restart: %+v, want $%.6f", sp.Rows, spent)
	}
	// The restarted node counts what its share sent: all of it, and what
	// its ceiling let it send unrecorded.
	sent := 0
	for _, r := range st.Recovery(w.now()).Sent["providers"]["p"] {
		sent += int(r.Sent)
	}
	if sent < 15 {
		t.Errorf("the rate share's sends recovered: %d, want at least the 15 sent", sent)
	}
}

// take takes one request and tokens of share p, renewing the share and
// writing journal records until it may.
func (n *node) take(t *testing.T, now time.Time, tokens int) {
	t.Helper()
	for range 10 {
		if ok, _ := n.rates.Take("p", tokens, now); ok {
			return
		}
		if _, err := n.rates.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := n.j.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no share after ten records")
}

// A record cut short by a crash ends the replay, and is cut off so that
// what is written next is read; damage anywhere else makes the journal
// unusable rather than be read as a smaller account.
func TestJournalTornTailAndDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, fileName)
	var recs [][]byte
	for i := range 3 {
		b, err := frame(&Record{Time: int64(i + 1), Budget: consensus.BudgetJournal{Boot: 7, Epoch: 9,
			Leases: []consensus.JournalLease{{Tenant: "acme", Period: "total", Spent: consensus.Nanos(i), Ceiling: 100}}}})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, b)
	}
	whole := append(append(append([]byte{}, recs[0]...), recs[1]...), recs[2]...)
	if err := os.WriteFile(path, whole[:len(whole)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	j, st, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if st.Time != 2 || st.Budget.Leases[0].Spent != 1 {
		t.Fatalf("after a torn last record: %+v", st)
	}
	j.Kill()
	if fi, _ := os.Stat(path); fi.Size() != int64(len(recs[0])+len(recs[1])) {
		t.Fatalf("the torn record was not cut off: %d bytes", fi.Size())
	}
	// A flipped byte in the first record, with records after it.
	bad := append([]byte{}, whole...)
	bad[headerLen+3] ^= 0xff
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(Config{Dir: dir}); !errors.Is(err, errDamaged) {
		t.Fatalf("a damaged first record: %v", err)
	}
}

// Two processes on one data directory: the second is refused.
func TestJournalLocked(t *testing.T) {
	dir := t.TempDir()
	j, _, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Kill()
	if _, _, err := Open(Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("a second open: %v", err)
	}
}

// Past its bound the file is rewritten as one record of the whole state,
// which replays to the same state.
func TestJournalCompacts(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	n, _ := w.boot(t, dir, Config{MaxBytes: 4 << 10})
	_ = n.budget.Sync(context.Background(), false)
	for range 200 {
		w.advance(50 * time.Millisecond)
		n.reserve(t, w.now(), 0.00001).Settle(0.000005)
		n.take(t, w.now(), 5)
		if err := n.j.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, fileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 16<<10 {
		t.Fatalf("the journal is %d bytes after 200 records with a 4 KiB bound: it was not compacted", fi.Size())
	}
	want := n.j.state
	n.j.Kill()
	_, got, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(want)
	b, _ := json.Marshal(got)
	if string(a) != string(b) {
		t.Fatalf("replayed after compaction:\n%s\nwant\n%s", b, a)
	}
}

// The boots a journal keeps: the last, and while it has no epoch (it may
// not have synced) those before it, newest first; once it has one, only
// it.
func TestJournalKeepsBootsUntilOneSynced(t *testing.T) {
	var s State
	lease := []consensus.JournalLease{{Tenant: "acme", Period: "total", Spent: 5, Ceiling: 9}}
	s.apply(&Record{Time: 1, Budget: consensus.BudgetJournal{Boot: 1, Epoch: 10, Leases: lease}})
	s.apply(&Record{Time: 2, Budget: consensus.BudgetJournal{Boot: 2}})
	s.apply(&Record{Time: 3, Budget: consensus.BudgetJournal{Boot: 3}})
	r := s.Recovery(time.Unix(0, 4)).Budget
	if r.Boot != 3 || r.Prior == nil || r.Prior.Boot != 2 || r.Prior.Prior == nil || r.Prior.Prior.Boot != 1 ||
		len(r.Prior.Prior.Leases) != 1 || r.Prior.Prior.Leases[0].Spent != 14 {
		t.Fatalf("before boot 3 synced: %+v", r)
	}
	s.apply(&Record{Time: 5, Budget: consensus.BudgetJournal{Boot: 3, Epoch: 20}})
	if r := s.Recovery(time.Unix(0, 6)).Budget; r.Boot != 3 || r.Epoch != 20 || r.Prior != nil {
		t.Fatalf("after boot 3 synced: %+v", r)
	}
}

// A node's first requests, or those a peer spills to it, do not wait for
// a record: the journal's first record (at Start) lets every share take
// a few requests, and a share limited in requests only is never held to
// a ceiling of tokens.
func TestJournalFirstTakesDoNotWait(t *testing.T) {
	w := newWorld(t)
	n, _ := w.boot(t, t.TempDir(), Config{Flush: time.Hour})
	if _, err := n.rates.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if ok, _ := n.rates.Take("p", 100_000, w.now()); !ok {
			t.Fatalf("take %d of 100,000 tokens waited for a record", i+1)
		}
	}
}

package consensus

import (
	"context"
	"testing"
	"time"
)

// A node restarted with its journal goes on as the same rate holder (its
// old boot) and restores what its shares sent in the window. node/ledger
// hands the keys' and tenants' holder its journal's sends (Recover)
// before it has read the ledger's tenants: at that point the holder
// knows only the limits the configuration file gives. The sends of a
// limit set in the ledger alone (llmesh keys set, the admin API) must
// not be lost: the holder, under its old boot, would report an empty
// window to the ledger, which then counts none of what it sent, and the
// node sends its share a second time within the minute.
func TestReviewRecoveredSendsOfALimitNotYetKnown(t *testing.T) {
	const capacity = 10
	now := time.Unix(1_000_000, 0)
	l := rateLedger(t, capacity, 0)
	const boot = 7
	renewal := func(ctx context.Context, ds []Demand) ([]Grant, time.Duration, time.Duration, error) {
		return renew(t, l, "n", boot, ds, now), 30 * time.Second, 5 * time.Second, nil
	}
	var sent []time.Time

	// The first process: a share of the limit, spent.
	h := NewRateHolder("n", []RateCapacity{{Provider: "p", RPM: capacity}}, renewal, func() int { return 1 }, func() bool { return false })
	h.ReportUsage()
	h.Drive(func() time.Time { return now })
	h.EnableJournal(func() {})
	var recs []RateSent // what the journal's records hold
	var seq uint64
	record := func() {
		j, commit := h.Journal(false, now)
		commit()
		seq = j.Seq
		for _, s := range j.Shares {
			recs = append(recs, RateSent{At: time.Unix(0, s.At), Sent: s.Sent, Tokens: s.Tokens})
		}
	}
	for range 3 * capacity {
		if _, err := h.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		record()
		for {
			ok, _, _ := h.TakeAll([]string{"p"}, 0, now, true)
			if !ok {
				break
			}
			sent = append(sent, now)
		}
		now = now.Add(100 * time.Millisecond)
	}
	record() // the last record, durable
	if len(sent) == 0 {
		t.Fatal("the first process sent nothing")
	}

	// It crashes; the next process starts a second later, under the same
	// boot, and is handed what the journal held before it knows the
	// limit (node/ledger: Recover at Listen, the ledger's tenants read
	// at Run).
	now = now.Add(time.Second)
	h = NewRateHolder("n", nil, renewal, func() int { return 1 }, func() bool { return false })
	h.ReportUsage()
	h.Drive(func() time.Time { return now })
	h.Recover(map[string][]RateSent{"p": recs}, seq, now)
	h.SetCapacities([]RateCapacity{{Provider: "p", RPM: capacity}})
	for range 3 * capacity {
		if _, err := h.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		for {
			ok, _, _ := h.TakeAll([]string{"p"}, 0, now, true)
			if !ok {
				break
			}
			sent = append(sent, now)
		}
		now = now.Add(100 * time.Millisecond)
	}
	if len(sent) > capacity {
		t.Errorf("%d requests sent within %v under a limit of %d a minute: the restarted holder lost the window its journal held",
			len(sent), sent[len(sent)-1].Sub(sent[0]), capacity)
	}
}

// Tokens an attempt used beyond its estimate are taken after the fact
// (Return with a negative count): they count in the window, and must
// count in the journal too, or a node restarted under its old boot
// restores a window holding less than it sent, reports that to the
// ledger, and its share's tokens are sent a second time within the
// minute.
func TestReviewJournalCountsTokensBeyondTheEstimate(t *testing.T) {
	const tpm = 150
	now := time.Unix(1_000_000, 0)
	renewal := func(ctx context.Context, ds []Demand) ([]Grant, time.Duration, time.Duration, error) {
		return []Grant{{Provider: "p", RPM: 1000, TPM: tpm}}, 30 * time.Second, 5 * time.Second, nil
	}
	caps := []RateCapacity{{Provider: "p", RPM: 1000, TPM: tpm}}
	h := NewRateHolder("n", caps, renewal, func() int { return 1 }, func() bool { return false })
	h.Drive(func() time.Time { return now })
	h.EnableJournal(func() {})
	if _, err := h.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	var recs []RateSent
	var last RateJournalShare
	record := func() {
		j, commit := h.Journal(false, now)
		commit()
		for _, s := range j.Shares {
			recs = append(recs, RateSent{At: time.Unix(0, s.At), Sent: s.Sent, Tokens: s.Tokens})
			last = s
		}
	}
	record()
	// One request estimated at 10 tokens used 100.
	for i := 0; ; i++ {
		if ok, _ := h.Take("p", 10, now); ok {
			break
		}
		if i == 3 {
			t.Fatal("the share refused 10 tokens")
		}
		record() // the ceiling makes room
	}
	h.Return("p", 10-100, now)
	now = now.Add(100 * time.Millisecond)
	record()
	if ok, _ := h.Allow("p", 60, now); ok {
		t.Fatal("the window admits 60 tokens more after 100 of 150")
	}

	// The node crashes and restarts a second later under the same boot.
	now = now.Add(time.Second)
	again := NewRateHolder("n", caps, renewal, func() int { return 1 }, func() bool { return false })
	again.Drive(func() time.Time { return now })
	// What the ceilings let it take unrecorded counts as sent at the
	// restart (journal.State.Recovery).
	recs = append(recs, RateSent{At: now, Sent: last.CeilReq - last.Taken, Tokens: last.CeilTok - last.TokTaken})
	again.Recover(map[string][]RateSent{"p": recs}, 0, now)
	if _, err := again.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := again.Allow("p", 60, now); ok {
		var tokens float64
		for _, r := range recs {
			tokens += r.Tokens
		}
		t.Errorf("after the restart the window admits 60 tokens more, though 100 of 150 were sent a second ago (the journal recorded %v)", tokens)
	}
}

// waitFor polls cond until it holds, failing the test after a few
// seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Near the limit (exact mode) a node asks the ledger for exactly what its
// waiting requests need. A request that queued behind another of its
// tenant while the escrow here covered it is marked as not needing
// anything from the ledger (it waits "only for the journal"); once the
// request ahead of it takes that escrow and the sync gives the rest
// back, nothing ever asks for it: it waits until limits.admission_wait
// runs out and is answered 503 admission_timeout, though the budget has
// plenty left.
func TestReviewQueuedRequestIsAskedForNearTheLimit(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	l := NewLedger()
	apply := func(_ context.Context, c Command) (Result, error) {
		c.Time = now.UnixNano()
		return l.Apply(c), nil
	}
	c, _ := newCommand("admin/1", CmdPutTenant, Tenant{Name: "acme", KeySHA256: []string{testHash},
		Budget: &Budget{Limit: NanosPerUSD / 100, Period: PeriodTotal}})
	if r, _ := apply(context.Background(), c); r.Err != "" {
		t.Fatal(r.Err)
	}
	budgeted := func() map[string]bool { return map[string]bool{"acme": true} }
	a := NewBudgetHolder("a", apply, budgeted)
	a.Drive(func() time.Time { return now }, 1)
	b := NewBudgetHolder("b", apply, budgeted)
	b.Drive(func() time.Time { return now }, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	hold, err := a.TryReserve("acme", 0.0001, now)
	if hold == nil {
		t.Fatal("a holds no escrow:", err)
	}
	hold.Settle(0.0001)

	// b waits for more than the books have unleased: they recall, and a
	// learns so at its next sync (exact mode).
	go func() { _, _ = b.Reserve(ctx, "acme", 0.0095, 0, now.Add(time.Minute), now) }()
	waitFor(t, "b's request to queue", func() bool { return b.Waiting() == 1 })
	if err := b.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	now = now.Add(100 * time.Millisecond)
	if err := a.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}

	// Two requests at a: the first needs more than a holds, the second
	// less, and queues behind it.
	type answer struct {
		h   *Hold
		err error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() { h, err := a.Reserve(ctx, "acme", 0.002, 0, now.Add(time.Minute), now); first <- answer{h, err} }()
	waitFor(t, "the first request to queue", func() bool { return a.Waiting() == 1 })
	go func() {
		h, err := a.Reserve(ctx, "acme", 0.0005, 0, now.Add(time.Minute), now)
		second <- answer{h, err}
	}()
	waitFor(t, "the second request to queue", func() bool { return a.Waiting() == 2 })

	for i := range 6 {
		now = now.Add(300 * time.Millisecond)
		if err := a.Sync(ctx, false); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if r := <-first; r.h == nil {
				t.Fatalf("the first request was not served: %v", r.err)
			}
		}
		if a.Waiting() == 0 {
			return
		}
	}
	var left Nanos
	for _, v := range l.Books() {
		left += v.Remaining
	}
	t.Errorf("the second request still waits after six syncs in 1.8 s, with %v of the budget unleased: nothing asks the ledger for it", left)
}

// A node's first process charged spend (for tenants without a budget,
// which need no escrow) and never got a sync through (the leader was
// unreachable, a voter's stale reads were not); it crashed, and its
// journal held the reports. The next process's first sync carries them
// (Recovery.Spend), but the ledger, which has never heard of the node,
// applies a journal's account only against a boot it knows: the spend
// is lost, though none of it can have been applied before.
func TestReviewSpendOfANodeTheLedgerNeverKnewIsKept(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	l := NewLedger()
	apply := func(id, typ string, body any) Result {
		c, _ := newCommand(id, typ, body)
		c.Time = now.UnixNano()
		return l.Apply(c)
	}
	if r := apply("v", CmdSetVersion, SetVersion{Version: VersionJournal}); r.Err != "" {
		t.Fatal(r.Err)
	}
	rec := &Recovery{Boot: 1, Complete: true,
		Spend: []SpendReport{{Seq: 1, Rows: charge("acme", "k1", "", "m", "p", 5000)}}}
	r := apply("n/2/1", CmdSync, SyncCmd{Node: "n", Boot: 2, Seq: 1, TTL: int64(30 * time.Second), Recover: rec})
	if r.Err != "" || r.Sync == nil || r.Sync.Epoch == 0 {
		t.Fatalf("the first sync: %+v", r)
	}
	if got := l.Spend(SpendQuery{By: DimTenant, Since: now.Add(-time.Hour).UnixNano()}).Total.Nanos; got != 5000 {
		t.Errorf("spend attributed after the first sync: %v, want the 5000 the journal held", got)
	}
}

package consensus

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func cmd(t testing.TB, id, typ string, at int64, body any) Command {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return Command{ID: id, Type: typ, Time: at, Body: b}
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano()

func TestEscrowLifecycle(t *testing.T) {
	l := NewLedger()
	must := func(r Result) Result {
		t.Helper()
		if r.Err != "" {
			t.Fatal(r.Err)
		}
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	must(l.Apply(cmd(t, "1", CmdSeedTenant, t0, Tenant{Name: "acme", Budget: &Budget{Limit: 10 * NanosPerUSD, Period: PeriodMonth}})))
	// Seeding again changes nothing.
	must(l.Apply(cmd(t, "2", CmdSeedTenant, t0, Tenant{Name: "acme", Budget: &Budget{Limit: 1, Period: PeriodDay}})))
	if tn, _ := l.Tenant("acme"); tn.Budget.Limit != 10*NanosPerUSD {
		t.Fatal("seed replaced an existing tenant")
	}
	ttl := int64(30 * time.Second)
	// A node's first sync (epoch 0) is given an epoch.
	r := must(l.Apply(cmd(t, "3", CmdSync, t0, SyncCmd{Node: "a", Boot: 11, Seq: 1, TTL: ttl, Want: []WantItem{{Tenant: "acme", Amount: 4 * NanosPerUSD}}})))
	ea := r.Sync.Epoch
	if lv := r.Sync.Leases; ea == 0 || len(lv) != 1 || lv[0].Granted != 4*NanosPerUSD || lv[0].Period != "2026-11" || lv[0].ExpiresIn != ttl {
		t.Fatalf("grant: %+v", r.Sync)
	}
	// A delayed copy of the request for an epoch gets the same one.
	if r := must(l.Apply(cmd(t, "3b", CmdSync, t0, SyncCmd{Node: "a", Boot: 11, Seq: 1}))); r.Sync.Epoch != ea || !r.Sync.Stale {
		t.Fatalf("delayed epoch request: %+v", r.Sync)
	}
	r = must(l.Apply(cmd(t, "4", CmdSync, t0, SyncCmd{Node: "b", Boot: 22, Seq: 1, TTL: ttl, Want: []WantItem{{Tenant: "acme", Amount: 8 * NanosPerUSD}}})))
	eb := r.Sync.Epoch
	if lv := r.Sync.Leases; lv[0].Granted != 6*NanosPerUSD || len(r.Sync.Exhausted) != 1 || lv[0].Remaining != 0 {
		t.Fatalf("partial grant: %+v", r.Sync)
	}
	// a spends $1.5 (cumulative); a duplicate and an older report change nothing.
	must(l.Apply(cmd(t, "5", CmdSync, t0+1, SyncCmd{Node: "a", Epoch: ea, Seq: 2, TTL: ttl, Usage: []UsageItem{{Tenant: "acme", Period: "2026-11", Spent: NanosPerUSD * 3 / 2, Release: false}}})))
	dup := must(l.Apply(cmd(t, "5", CmdSync, t0+1, SyncCmd{Node: "a", Epoch: ea, Seq: 2, TTL: ttl, Usage: []UsageItem{{Tenant: "acme", Period: "2026-11", Spent: NanosPerUSD * 3 / 2, Release: false}}})))
	if !dup.Duplicate || dup.Sync == nil || dup.Sync.Leases[0].Spent != NanosPerUSD*3/2 {
		t.Fatalf("a retried sync must learn its leases: %+v", dup)
	}
	if r := must(l.Apply(cmd(t, "6", CmdSync, t0+1, SyncCmd{Node: "a", Epoch: ea, Seq: 1, Usage: []UsageItem{{Tenant: "acme", Period: "2026-11", Spent: NanosPerUSD, Release: false}}}))); !r.Sync.Stale {
		t.Fatal("an older sync was not answered as stale")
	}
	bv := l.Books()[0]
	if bv.Settled != NanosPerUSD*3/2 || bv.Reserved != 10*NanosPerUSD-NanosPerUSD*3/2 {
		t.Fatalf("books %+v", bv)
	}
	// a releases its lease: the rest of its escrow returns.
	must(l.Apply(cmd(t, "7", CmdSync, t0+2, SyncCmd{Node: "a", Epoch: ea, Seq: 3, Usage: []UsageItem{{Tenant: "acme", Period: "2026-11", Spent: 2 * NanosPerUSD, Release: true}}})))
	bv = l.Books()[0]
	if bv.Settled != 2*NanosPerUSD || bv.Reserved != 6*NanosPerUSD || bv.Remaining != 2*NanosPerUSD || bv.Leases != 1 {
		t.Fatalf("after release %+v", bv)
	}
	// b restarts: its new boot's epoch forfeits the old lease's escrow
	// as spent, and the old epoch can no longer sync.
	r = must(l.Apply(cmd(t, "8", CmdSync, t0+3, SyncCmd{Node: "b", Boot: 23, Seq: 1, TTL: ttl})))
	eb2 := r.Sync.Epoch
	bv = l.Books()[0]
	if eb2 <= eb || bv.Settled != 8*NanosPerUSD || bv.Forfeited != 6*NanosPerUSD || bv.Reserved != 0 {
		t.Fatalf("after b's restart (epoch %d → %d) %+v", eb, eb2, bv)
	}
	if r := must(l.Apply(cmd(t, "8b", CmdSync, t0+3, SyncCmd{Node: "b", Epoch: eb, Seq: 9}))); !r.Sync.Stale {
		t.Fatal("the old boot's epoch still syncs")
	}
	// A leader whose clock is behind cannot take time back.
	if r := must(l.Apply(cmd(t, "8c", CmdSync, t0-int64(time.Hour), SyncCmd{Node: "b", Epoch: eb2, Seq: 2, TTL: ttl}))); r.Sync.Leases == nil {
		t.Fatal("sync lost")
	}
	// A new month opens fresh books; the old ones are kept a while.
	next := time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC).UnixNano()
	r = must(l.Apply(cmd(t, "9", CmdSync, next, SyncCmd{Node: "b", Epoch: eb2, Seq: 3, TTL: ttl, Want: []WantItem{{Tenant: "acme", Amount: NanosPerUSD}}})))
	if lv := r.Sync.Leases; len(lv) != 1 || lv[0].Period != "2026-12" || lv[0].Granted != NanosPerUSD {
		t.Fatalf("new period: %+v", r.Sync)
	}
	if bs := l.Books(); len(bs) != 2 || bs[1].Period != "2026-12" {
		t.Fatalf("books after the rollover: %+v", bs)
	}
	later := time.Date(2027, 2, 3, 0, 0, 1, 0, time.UTC).UnixNano()
	must(l.Apply(cmd(t, "10", CmdSync, later, SyncCmd{Node: "b", Epoch: eb2, Seq: 4, Usage: []UsageItem{{Tenant: "acme", Period: "2026-12", Release: true}}})))
	if bs := l.Books(); len(bs) != 0 {
		t.Fatalf("books long ended not closed: %+v", bs)
	}
	// Unknown commands are errors, not panics.
	if r := l.Apply(cmd(t, "11", "launch_rockets", next, nil)); !strings.Contains(r.Err, "unknown command") {
		t.Fatalf("unknown: %+v", r)
	}
}

func TestSnapshotRoundTripIsExact(t *testing.T) {
	l := NewLedger()
	l.Apply(cmd(t, "1", CmdPutTenant, t0, Tenant{Name: "acme", KeySHA256: []string{"ab"}, Residency: "eu", Budget: &Budget{Limit: 5, Period: PeriodDay}}))
	l.Apply(cmd(t, "2", CmdPutRate, t0, RateCapacity{Provider: "p", RPM: 600, TPM: 1000}))
	l.Apply(cmd(t, "3", CmdSync, t0, SyncCmd{Node: "a", Boot: 1, Seq: 1, Want: []WantItem{{Tenant: "acme", Amount: 3}}}))
	a, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m := NewLedger()
	if err := m.Restore(a); err != nil {
		t.Fatal(err)
	}
	b, _ := m.Snapshot()
	if string(a) != string(b) {
		t.Fatalf("snapshot not stable:\n%s\n%s", a, b)
	}
	// The restored ledger still recognises applied IDs.
	if r := m.Apply(cmd(t, "3", CmdSync, t0, SyncCmd{Node: "a", Boot: 1, Seq: 1, Want: []WantItem{{Tenant: "acme", Amount: 3}}})); !r.Duplicate {
		t.Fatal("dedup lost in the snapshot")
	}
}

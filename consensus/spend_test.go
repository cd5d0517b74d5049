package consensus

import (
	"fmt"
	"testing"
	"time"
)

// charge is one report row set: a tenant's total and its one value of
// every dimension, as a tally reports a single charge.
func charge(tenant, key, tags, model, provider string, n Nanos) []SpendRow {
	a := SpendAmount{Nanos: n, Requests: 1}
	return []SpendRow{{Tenant: tenant, Dim: DimTenant, SpendAmount: a}, {Tenant: tenant, Dim: DimKey, Value: key, SpendAmount: a},
		{Tenant: tenant, Dim: DimTag, Value: tags, SpendAmount: a}, {Tenant: tenant, Dim: DimModel, Value: model, SpendAmount: a},
		{Tenant: tenant, Dim: DimProvider, Value: provider, SpendAmount: a}}
}

func rowsOf(v SpendView) map[string]SpendAmount {
	out := map[string]SpendAmount{}
	for _, r := range v.Rows {
		out[r.Tenant+"/"+r.Name] = r.SpendAmount
	}
	return out
}

// checkAddsUp fails t unless every dimension's rows, and every bucket's
// cells, add up to the totals.
func checkAddsUp(t *testing.T, l *Ledger, q SpendQuery) {
	t.Helper()
	total := l.Spend(SpendQuery{By: DimTenant, Since: q.Since, Tenant: q.Tenant}).Total
	for _, by := range []string{DimTenant, DimKey, DimTag, DimModel, DimProvider} {
		q.By = by
		v := l.Spend(q)
		var n Nanos
		var r int64
		for _, row := range v.Rows {
			n, r = n+row.Nanos, r+row.Requests
		}
		if n != total.Nanos || r != total.Requests || v.Total != total {
			t.Fatalf("by %s: rows add up to %v in %d answers, the total is %+v", by, n, r, total)
		}
		for _, b := range v.Buckets {
			var bn Nanos
			for _, c := range b.Rows {
				bn += c
			}
			if bn != b.Total.Nanos || len(b.Rows) != len(v.Rows) {
				t.Fatalf("by %s: bucket %d's cells add up to %v of %v", by, b.Start, bn, b.Total.Nanos)
			}
		}
	}
}

// A report counts once: when the sync carrying it is retried (its ID
// applied already), when it is sent again with a later sync because the
// answer was lost, and when an older sync arrives late; a node's new
// boot numbers its reports afresh.
func TestSpendReportAppliedOnce(t *testing.T) {
	l := NewLedger()
	sync := func(id string, c SyncCmd) *SyncResult {
		t.Helper()
		r := l.Apply(cmd(t, id, CmdSync, t0, c))
		if r.Err != "" {
			t.Fatal(r.Err)
		}
		return r.Sync
	}
	first := []SpendReport{{Seq: 1, Rows: charge("acme", "k1", "team:a", "m", "p", 100)}}
	r := sync("a1", SyncCmd{Node: "a", Boot: 7, Seq: 1, Spend: first})
	ep := r.Epoch
	if r.SpendSeq != 1 {
		t.Fatalf("spend seq %d", r.SpendSeq)
	}
	sync("a1", SyncCmd{Node: "a", Boot: 7, Seq: 1, Spend: first}) // the same command again
	// The answer was lost: report 1 goes again, with report 2.
	second := append(first, SpendReport{Seq: 2, Rows: charge("acme", "k2", "", "m", "p", 20)})
	if r := sync("a2", SyncCmd{Node: "a", Epoch: ep, Seq: 2, Spend: second}); r.SpendSeq != 2 {
		t.Fatalf("spend seq %d", r.SpendSeq)
	}
	// A late copy of an older sync is stale: nothing in it applies.
	if r := sync("a1-late", SyncCmd{Node: "a", Epoch: ep, Seq: 2, Spend: []SpendReport{{Seq: 3, Rows: charge("acme", "k1", "", "m", "p", 1000)}}}); !r.Stale {
		t.Fatal("a late sync was applied")
	}
	// A new boot of the node starts its reports at 1 again.
	sync("b1", SyncCmd{Node: "a", Boot: 8, Seq: 1, Spend: []SpendReport{{Seq: 1, Rows: charge("acme", "k1", "team:a", "m", "p", 3)}}})
	got := rowsOf(l.Spend(SpendQuery{By: DimKey}))
	want := map[string]SpendAmount{"acme/k1": {103, 2}, "acme/k2": {20, 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("by key %v, want %v", got, want)
	}
	if got := rowsOf(l.Spend(SpendQuery{By: DimTag})); got["acme/team:a"] != (SpendAmount{103, 2}) || got["acme/"+SpendUntagged] != (SpendAmount{20, 1}) {
		t.Fatalf("by tag %v", got)
	}
	checkAddsUp(t, l, SpendQuery{})
}

// What a tenant's spend is kept under is bounded: SpendCap values of a
// dimension, the rest under (other), every dimension still adding up to
// the total; hourly buckets for SpendHours, daily ones for SpendDays; a
// value not charged for SpendDays frees its place, and a tenant idle
// that long goes.
func TestSpendIsBounded(t *testing.T) {
	l := NewLedger()
	seq := uint64(0)
	at := t0
	report := func(rows []SpendRow) {
		t.Helper()
		seq++
		r := l.Apply(cmd(t, fmt.Sprint("s", seq), CmdSync, at, SyncCmd{Node: "a", Boot: 1, Seq: seq, Spend: []SpendReport{{Seq: seq, Rows: rows}}}))
		if r.Err != "" {
			t.Fatal(r.Err)
		}
	}
	var rows []SpendRow
	for i := range SpendCap + 6 {
		rows = append(rows, charge("acme", fmt.Sprintf("key%02d", i), "", "m", "p", 10)...)
	}
	report(rows)
	byKey := l.Spend(SpendQuery{By: DimKey})
	if len(byKey.Rows) != SpendCap+1 || byKey.Rows[0].Name != SpendOther || byKey.Rows[0].Nanos != 60 {
		t.Fatalf("%d rows, the first %+v", len(byKey.Rows), byKey.Rows[0])
	}
	checkAddsUp(t, l, SpendQuery{})
	// Three days of hourly charges from another key: hours beyond
	// SpendHours are gone, days are all there.
	for range 72 {
		at += int64(time.Hour)
		report(charge("acme", "late", "", "m", "p", 1))
	}
	b := l.s.Spend["acme"]
	if len(b.Hours) != SpendHours || len(b.Days) != 4 {
		t.Fatalf("%d hours, %d days", len(b.Hours), len(b.Days))
	}
	if v := l.Spend(SpendQuery{By: DimKey, Since: at - int64(24*time.Hour)}); v.Step != "hour" || v.Total.Nanos != 25 {
		t.Fatalf("the last day: %s, %+v", v.Step, v.Total)
	}
	if v := l.Spend(SpendQuery{By: DimKey, Since: at - int64(10*24*time.Hour)}); v.Step != "day" || v.Total.Nanos != 72+700 || len(v.Buckets) != 4 {
		t.Fatalf("ten days: %s, %+v in %d buckets", v.Step, v.Total, len(v.Buckets))
	}
	checkAddsUp(t, l, SpendQuery{Since: at - int64(10*24*time.Hour)})
	// Two months later the old keys have left their places.
	at += int64(SpendDays * 24 * time.Hour)
	report(charge("acme", "new", "", "m", "p", 1))
	if n := len(l.s.Spend["acme"].Seen[DimKey]); n != 1 || len(l.s.Spend["acme"].Days) != 1 {
		t.Fatalf("%d keys seen, %d days kept", n, len(l.s.Spend["acme"].Days))
	}
	at += int64((SpendDays + 1) * 24 * time.Hour)
	report(charge("other", "k", "", "m", "p", 1))
	if _, ok := l.s.Spend["acme"]; ok {
		t.Fatal("an idle tenant's spend outlived its horizon")
	}
}

// A snapshot carries spend exactly, and a snapshot from before spend was
// attributed (no spend, no report numbers) loads: the node's next
// report applies.
func TestSpendSnapshot(t *testing.T) {
	l := NewLedger()
	l.Apply(cmd(t, "1", CmdSync, t0, SyncCmd{Node: "a", Boot: 1, Seq: 1, Spend: []SpendReport{{Seq: 1, Rows: charge("acme", "k", "x", "m", "p", 5)}}}))
	a, _ := l.Snapshot()
	m := NewLedger()
	if err := m.Restore(a); err != nil {
		t.Fatal(err)
	}
	if b, _ := m.Snapshot(); string(a) != string(b) || fmt.Sprint(m.Spend(SpendQuery{By: DimTag})) != fmt.Sprint(l.Spend(SpendQuery{By: DimTag})) {
		t.Fatalf("not the same after a round trip:\n%s\n%s", a, b)
	}
	// Written by the version before spend attribution.
	const old = `{"tenants":{"acme":{"name":"acme","key_sha256":["ab"],"budget":{"limit":5000000000,"period":"day"}}},"rates":{},` +
		`"books":{"acme/2026-11-29":{"tenant":"acme","period":"2026-11-29","end":1795996800000000000,"limit":5000000000,"settled":1500,` +
		`"forfeited":0,"overspend":0,"leases":{"a":{"node":"a","epoch":1795953600000000000,"granted":1000000000,"spent":1500,` +
		`"expires":1795953631000000000}}}},"nodes":{"a":{"boot":7,"epoch":1795953600000000000,"seq":2}},"applied":[{"id":"1",` +
		`"time":1795953600000000000},{"id":"2","time":1795953600000000000},{"id":"3","time":1795953601000000000}],"time":1795953601000000000}`
	o := NewLedger()
	if err := o.Restore([]byte(old)); err != nil {
		t.Fatal(err)
	}
	if v := o.Spend(SpendQuery{By: DimTenant}); len(v.Rows) != 0 || o.Books()[0].Settled != 1500 {
		t.Fatalf("old snapshot: %+v %+v", v, o.Books())
	}
	r := o.Apply(cmd(t, "4", CmdSync, 1795953602000000000, SyncCmd{Node: "a", Epoch: 1795953600000000000, Seq: 3,
		Usage: []UsageItem{{Tenant: "acme", Period: "2026-11-29", Spent: 2500}},
		Spend: []SpendReport{{Seq: 1, Rows: charge("acme", "ab", "", "m", "p", 1000)}}}))
	if r.Err != "" || r.Sync.SpendSeq != 1 || o.Books()[0].Settled != 2500 || o.Spend(SpendQuery{By: DimTenant}).Total.Nanos != 1000 {
		t.Fatalf("after an old snapshot: %+v, books %+v", r, o.Books())
	}
}

// A tally keeps SpendCap values of a dimension per tenant and folds the
// rest under (other); what it sent goes again until acknowledged, with
// at most maxUnacked reports waiting.
func TestSpendTally(t *testing.T) {
	tl := NewSpendTally()
	for i := range SpendCap + 2 {
		tl.Charge("acme", fmt.Sprint("k", i), "", "m", "p", 0.000001)
	}
	rs := tl.Reports()
	if len(rs) != 1 || rs[0].Seq != 1 {
		t.Fatalf("%+v", rs)
	}
	keys := map[string]SpendAmount{}
	for _, r := range rs[0].Rows {
		if r.Dim == DimKey {
			keys[r.Value] = r.SpendAmount
		}
		if r.Dim == DimTenant && r.SpendAmount != (SpendAmount{Nanos: 1000 * (SpendCap + 2), Requests: SpendCap + 2}) {
			t.Fatalf("total %+v", r)
		}
	}
	if len(keys) != SpendCap+1 || keys[SpendOther] != (SpendAmount{2000, 2}) {
		t.Fatalf("%d keys, other %+v", len(keys), keys[SpendOther])
	}
	for i := range maxUnacked + 2 {
		tl.Charge("acme", "k", "", "m", "p", float64(i))
		rs = tl.Reports()
	}
	if len(rs) != maxUnacked || rs[0].Seq != 1 || !tl.Pending() {
		t.Fatalf("%d reports waiting, the first %d", len(rs), rs[0].Seq)
	}
	tl.Ack(2)
	if rs = tl.Reports(); rs[0].Seq != 3 || len(rs) != maxUnacked-1 {
		t.Fatalf("after ack: %d reports from %d", len(rs), rs[0].Seq)
	}
	tl.Ack(rs[len(rs)-1].Seq)
	if tl.Pending() {
		t.Fatal("pending after every report was acknowledged")
	}
}

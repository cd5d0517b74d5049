package consensus

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// The ledger's version only rises: a lower or equal set_version changes
// nothing, a malformed one fails, and every sync's result tells it.
func TestSetVersionRatchets(t *testing.T) {
	l := NewLedger()
	if l.Version() != 0 {
		t.Fatalf("a new ledger is at version %d", l.Version())
	}
	var log []Command // what l applied, for a second replica
	apply := func(c Command) Result { log = append(log, c); return l.Apply(c) }
	steps := []struct {
		set, want int
		fails     bool
	}{{1, 1, false}, {2, 2, false}, {1, 2, false}, {2, 2, false}, {0, 2, false}, {-1, 2, true}, {5, 5, false}}
	for i, s := range steps {
		r := apply(cmd(t, string(rune('a'+i)), CmdSetVersion, t0, SetVersion{Version: s.set}))
		if (r.Err != "") != s.fails || l.Version() != s.want {
			t.Fatalf("set_version %d: err %q, version %d; want %d", s.set, r.Err, l.Version(), s.want)
		}
	}
	if r := apply(Command{ID: "bad", Type: CmdSetVersion, Time: t0, Body: json.RawMessage(`"2"`)}); !strings.Contains(r.Err, ErrInvalid.Error()) || l.Version() != 5 {
		t.Fatalf("an undecodable set_version: %q, version %d", r.Err, l.Version())
	}
	r := apply(cmd(t, "sync", CmdSync, t0, SyncCmd{Node: "a", Boot: 1, Seq: 1}))
	if r.Sync == nil || r.Sync.Version != 5 {
		t.Fatalf("a sync's result: %+v", r.Sync)
	}
	// A second replica applying the same log agrees byte for byte.
	m := NewLedger()
	for _, c := range log {
		m.Apply(c)
	}
	a, _ := l.Snapshot()
	b, _ := m.Snapshot()
	if string(a) != string(b) || m.Version() != 5 {
		t.Fatalf("replicas differ:\n%s\n%s", a, b)
	}
}

// A snapshot keeps the version; one written before versions (no
// "version") restores at 0.
func TestVersionSnapshot(t *testing.T) {
	l := NewLedger()
	l.Apply(cmd(t, "1", CmdSetVersion, t0, SetVersion{Version: 2}))
	a, _ := l.Snapshot()
	m := NewLedger()
	if err := m.Restore(a); err != nil {
		t.Fatal(err)
	}
	if m.Version() != 2 {
		t.Fatalf("restored at version %d", m.Version())
	}
	if b, _ := m.Snapshot(); string(a) != string(b) {
		t.Fatalf("not the same after a round trip:\n%s\n%s", a, b)
	}
	// Written by the build before versions.
	const old = `{"tenants":{"acme":{"name":"acme","key_sha256":["ab"]}},"rates":{},"books":{},"nodes":{},"applied":[],"time":1795953601000000000}`
	o := NewLedger()
	o.Apply(cmd(t, "x", CmdSetVersion, t0, SetVersion{Version: 2}))
	if err := o.Restore([]byte(old)); err != nil {
		t.Fatal(err)
	}
	if o.Version() != 0 {
		t.Fatalf("an old snapshot restored at version %d", o.Version())
	}
	if b, _ := o.Snapshot(); strings.Contains(string(b), `"version"`) {
		t.Fatalf("a ledger at version 0 writes it: %s", b)
	}
}

// commandVersion tells what each command needs from its type and, where
// a type gained fields, its body.
func TestCommandVersion(t *testing.T) {
	h := keyHash("sk-a")
	capped, rpm := Nanos(5), int64(1)
	for _, c := range []struct {
		typ  string
		body any
		want int
	}{
		{CmdSeedTenant, Tenant{Name: "acme", KeySHA256: []string{h}, Residency: "eu", StrictTransit: true, Budget: &Budget{Limit: 1, Period: PeriodDay}}, 0},
		{CmdPutTenant, Tenant{Name: "acme", Revoked: []string{h}, FileKeysRevoked: true}, 0},
		{CmdPutTenant, Tenant{Name: "acme", Limits: &Limits{RPM: 10}}, 1},
		{CmdSeedTenant, Tenant{Name: "acme", LimitsLive: true}, 1},
		{CmdSeedTenant, Tenant{Name: "acme", Keys: []KeySettings{{KeySHA256: h, Name: "app"}}}, 1},
		{CmdSetBudget, map[string]any{"tenant": "acme", "budget": Budget{Limit: 1, Period: PeriodMonth}}, 0},
		{CmdAddKey, AddKey{Tenant: "acme", KeySHA256: h}, 0},
		{CmdRevokeKey, RevokeKey{Tenant: "acme", All: true}, 0},
		{CmdSeedRate, RateCapacity{Provider: "p", RPM: 1}, 0},
		{CmdPutRate, RateCapacity{Provider: "p", RPM: 1}, 0},
		{CmdForfeit, map[string]any{"node": "a", "expired_before": 1}, 0},
		{CmdSync, SyncCmd{Node: "a", Boot: 1, Seq: 1, Usage: []UsageItem{{Tenant: "acme", Spent: 1}}, Want: []WantItem{{Tenant: "acme", Amount: 1}}}, 0},
		{CmdSync, SyncCmd{Node: "a", Usage: []UsageItem{{Tenant: "acme", Cap: &capped}}}, 1},
		{CmdSync, SyncCmd{Node: "a", Want: []WantItem{{Tenant: "acme", Amount: 2, Need: 1}}}, 1},
		{CmdSync, SyncCmd{Node: "a", Spend: []SpendReport{{Seq: 1}}}, 1},
		{CmdSync, SyncCmd{Node: "a", Recover: &Recovery{Boot: 1, Epoch: 2}}, 2},
		{CmdSync, SyncCmd{Node: "a", Usage: []UsageItem{{Tenant: "acme", Spent: 2, Before: &capped}}}, 2},
		{CmdRates, RatesCmd{Node: "a"}, 1},
		{CmdSetKey, SetKey{Tenant: "acme", Key: h, RPM: &rpm}, 1},
		{CmdSetTenantLimits, SetTenantLimits{Tenant: "acme", RPM: &rpm}, 1},
		{CmdSeedKeys, SeedKeys{Tenant: "acme"}, 1},
		{CmdRateMark, map[string]any{"until": 1}, 0},
		{CmdRateHandover, RateHandover{}, 0},
		{CmdSetVersion, SetVersion{Version: 2}, 2},
		{"from_a_later_build", map[string]any{}, LedgerVersion + 1},
	} {
		if got := commandVersion(cmd(t, "x", c.typ, t0, c.body)); got != c.want {
			t.Errorf("%s %+v needs version %d, want %d", c.typ, c.body, got, c.want)
		}
	}
	// A body that does not decode needs nothing more: every version
	// refuses it.
	if v := commandVersion(Command{Type: CmdPutTenant, Body: json.RawMessage(`[`)}); v != 0 {
		t.Errorf("an undecodable put_tenant needs %d", v)
	}
	// Every type the state machine applies needs at most this build's
	// version, and one it does not know needs more.
	for _, typ := range []string{CmdSeedTenant, CmdPutTenant, CmdSetBudget, CmdAddKey, CmdRevokeKey, CmdSeedRate, CmdPutRate, CmdSync,
		CmdForfeit, CmdRates, CmdRateMark, CmdRateHandover, CmdSetKey, CmdSetTenantLimits, CmdSeedKeys, CmdSetVersion} {
		r := NewLedger().Apply(Command{Type: typ, Body: json.RawMessage(`{}`)})
		if strings.Contains(r.Err, ErrUnknownCommand.Error()) || commandVersion(Command{Type: typ, Body: json.RawMessage(`{}`)}) > LedgerVersion {
			t.Errorf("%s: applied %q, needs %d", typ, r.Err, commandVersion(Command{Type: typ}))
		}
	}
}

// A replica whose build supports less than the ledger's version says so,
// after a set_version and after a restore.
func TestFSMVersionAhead(t *testing.T) {
	f := NewFSM()
	var told []int
	f.versionAhead = func(v int) { told = append(told, v) }
	apply := func(i uint64, v int) {
		b, _ := json.Marshal(cmd(t, string(rune('a'+i)), CmdSetVersion, t0, SetVersion{Version: v}))
		f.Apply(&raft.Log{Index: i, Data: b})
	}
	apply(1, LedgerVersion)
	if len(told) != 0 {
		t.Fatalf("told %v at this build's version", told)
	}
	apply(2, LedgerVersion+1)
	snap, _ := f.l.Snapshot()
	g := NewFSM()
	g.versionAhead = f.versionAhead
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if len(told) != 2 || told[0] != LedgerVersion+1 || told[1] != LedgerVersion+1 {
		t.Fatalf("told %v", told)
	}
}

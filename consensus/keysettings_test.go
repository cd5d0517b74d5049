package consensus

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

// keyLedger is a ledger holding tenant acme with keys a and b.
func keyLedger(t *testing.T) (l *Ledger, a, b string, apply func(id, typ string, body any) string) {
	t.Helper()
	l = NewLedger()
	a, b = keyHash("sk-a"), keyHash("sk-b")
	apply = func(id, typ string, body any) string {
		t.Helper()
		r := l.Apply(cmd(t, id, typ, t0, body))
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
		return r.Err
	}
	if e := apply("seed", CmdSeedTenant, Tenant{Name: "acme", KeySHA256: []string{a, b}}); e != "" {
		t.Fatal(e)
	}
	return l, a, b, apply
}

// A key's settings are set piece by piece, naming the key by its id, its
// name or its hash; names are unique within the tenant; each setting is
// cleared on its own; a revoked key's settings go with it.
func TestSetKey(t *testing.T) {
	l, a, b, apply := keyLedger(t)
	if e := apply("1", CmdSetKey, SetKey{Tenant: "acme", Key: KeyID(a), Name: ptr("app-a"), Models: &[]string{"llama-3-8b"}, RPM: ptr(int64(120))}); e != "" {
		t.Fatal(e)
	}
	if e := apply("2", CmdSetKey, SetKey{Tenant: "acme", Key: "app-a", TPM: ptr(int64(5000)), Budget: &Budget{Limit: 50 * NanosPerUSD, Period: PeriodMonth}}); e != "" {
		t.Fatal(e)
	}
	tn, _ := l.Tenant("acme")
	k := tn.Key(a)
	if k == nil || k.Name != "app-a" || !slices.Equal(k.Models, []string{"llama-3-8b"}) || *k.Limits != (Limits{RPM: 120, TPM: 5000}) ||
		k.Budget.Limit != 50*NanosPerUSD || !k.Live || !k.Allows("llama-3-8b") || k.Allows("gpt-4o") {
		t.Fatalf("key a: %+v", k)
	}
	// The copy is the caller's own.
	k.Models[0] = "changed"
	if tn, _ := l.Tenant("acme"); tn.Key(a).Models[0] != "llama-3-8b" {
		t.Fatal("Tenant returned the ledger's own slice")
	}
	if e := apply("3", CmdSetKey, SetKey{Tenant: "acme", Key: b, Name: ptr("app-a")}); !strings.Contains(e, `another key named "app-a"`) {
		t.Fatalf("a second key named app-a: %q", e)
	}
	for i, bad := range []SetKey{
		{Tenant: "acme", Key: "nope"}, {Tenant: "acme", Key: "0000000000"}, {Tenant: "globex", Key: a},
		{Tenant: "acme", Key: a, RPM: ptr(int64(-1))}, {Tenant: "acme", Key: a, Name: ptr("a/b")},
		{Tenant: "acme", Key: a, Models: &[]string{""}}, {Tenant: "acme", Key: a, Budget: &Budget{Limit: 1, Period: "week"}},
	} {
		if e := apply("4/"+string(rune('a'+i)), CmdSetKey, bad); e == "" {
			t.Fatalf("%+v was applied", bad)
		}
	}
	// Cleared one by one: the name, the allow-list, a limit, the budget.
	if e := apply("5", CmdSetKey, SetKey{Tenant: "acme", Key: a, Name: ptr(""), Models: &[]string{}, RPM: ptr(int64(0)), ClearBudget: true}); e != "" {
		t.Fatal(e)
	}
	tn, _ = l.Tenant("acme")
	if k := tn.Key(a); k.Name != "" || len(k.Models) != 0 || *k.Limits != (Limits{TPM: 5000}) || k.Budget != nil {
		t.Fatalf("cleared: %+v", k)
	}
	if e := apply("6", CmdSetKey, SetKey{Tenant: "acme", Key: a, TPM: ptr(int64(0))}); e != "" {
		t.Fatal(e)
	}
	if tn, _ := l.Tenant("acme"); tn.Key(a).Limits != nil {
		t.Fatalf("no limit left: %+v", tn.Key(a))
	}
	// A key of another tenant cannot be set here.
	apply("7", CmdAddKey, AddKey{Tenant: "globex", KeySHA256: keyHash("sk-g"), Create: &Tenant{}})
	if e := apply("8", CmdSetKey, SetKey{Tenant: "acme", Key: keyHash("sk-g"), RPM: ptr(int64(1))}); !strings.Contains(e, "another tenant") {
		t.Fatalf("another tenant's key: %q", e)
	}
	if e := apply("9", CmdRevokeKey, RevokeKey{Tenant: "acme", Keys: []string{a}}); e != "" {
		t.Fatal(e)
	}
	if tn, _ := l.Tenant("acme"); tn.Key(a) != nil {
		t.Fatal("a revoked key kept its settings")
	}
	if e := apply("10", CmdSetKey, SetKey{Tenant: "acme", Key: a, RPM: ptr(int64(1))}); !strings.Contains(e, "revoked") {
		t.Fatalf("settings of a revoked key: %q", e)
	}
}

// A file's settings are seeded where no operator changed them live: a
// later seed replaces the file's own, never a live change, and drops the
// file's settings of keys it no longer lists. Tenant limits likewise.
func TestSeedKeysYieldsToLiveChanges(t *testing.T) {
	l, a, b, apply := keyLedger(t)
	seed := SeedKeys{Tenant: "acme", Limits: &Limits{RPM: 1200}, Keys: []KeySettings{
		{KeySHA256: a, Name: "app-a", Models: []string{"llama-3-8b"}, Limits: &Limits{RPM: 120}},
		{KeySHA256: b, Name: "app-b"},
	}}
	if e := apply("1", CmdSeedKeys, seed); e != "" {
		t.Fatal(e)
	}
	tn, _ := l.Tenant("acme")
	if tn.Key(a).Name != "app-a" || tn.Key(b).Name != "app-b" || tn.Key(a).Live || *tn.Limits != (Limits{RPM: 1200}) {
		t.Fatalf("seeded: %+v", tn)
	}
	if e := apply("2", CmdSetKey, SetKey{Tenant: "acme", Key: "app-a", Models: &[]string{"gpt-4o"}}); e != "" {
		t.Fatal(e)
	}
	if e := apply("3", CmdSetTenantLimits, SetTenantLimits{Tenant: "acme", TPM: ptr(int64(9000))}); e != "" {
		t.Fatal(e)
	}
	// The file changed: b is no longer listed, a's allow-list differs,
	// the tenant's limits went.
	seed2 := SeedKeys{Tenant: "acme", Keys: []KeySettings{{KeySHA256: a, Name: "file-a", Models: []string{"x"}}}}
	if e := apply("4", CmdSeedKeys, seed2); e != "" {
		t.Fatal(e)
	}
	tn, _ = l.Tenant("acme")
	if k := tn.Key(a); k.Name != "app-a" || !slices.Equal(k.Models, []string{"gpt-4o"}) || !k.Live {
		t.Fatalf("a live change was replaced by the file: %+v", k)
	}
	if tn.Key(b) != nil {
		t.Fatalf("the file's settings of a key it no longer lists stayed: %+v", tn.Key(b))
	}
	if *tn.Limits != (Limits{RPM: 1200, TPM: 9000}) || !tn.LimitsLive {
		t.Fatalf("live tenant limits: %+v", tn.Limits)
	}
	if e := apply("5", CmdSeedKeys, SeedKeys{Tenant: "nope"}); !strings.Contains(e, ErrNoTenant.Error()) {
		t.Fatalf("seed of an unknown tenant: %q", e)
	}
	// Replacing the tenant keeps its keys' settings and limits.
	if e := apply("6", CmdPutTenant, Tenant{Name: "acme", KeySHA256: []string{a, b}}); e != "" {
		t.Fatal(e)
	}
	if tn, _ := l.Tenant("acme"); tn.Key(a) == nil || tn.Limits == nil {
		t.Fatalf("a replacement dropped the settings: %+v", tn)
	}
	if e := apply("7", CmdSetTenantLimits, SetTenantLimits{Tenant: "acme", RPM: ptr(int64(0)), TPM: ptr(int64(0))}); e != "" {
		t.Fatal(e)
	}
	if tn, _ := l.Tenant("acme"); tn.Limits != nil {
		t.Fatalf("cleared tenant limits: %+v", tn.Limits)
	}
}

// A key with a budget has books of its own, kept as a tenant's are:
// escrow is granted within the key's limit (whatever its tenant's), and a
// key's books name the key's account.
func TestKeyBudgetIsEscrowOfItsOwn(t *testing.T) {
	l, a, _, apply := keyLedger(t)
	if e := apply("1", CmdSetBudget, map[string]any{"tenant": "acme", "budget": Budget{Limit: 100 * NanosPerUSD, Period: PeriodMonth}}); e != "" {
		t.Fatal(e)
	}
	if e := apply("2", CmdSetKey, SetKey{Tenant: "acme", Key: a, Budget: &Budget{Limit: 2 * NanosPerUSD, Period: PeriodDay}}); e != "" {
		t.Fatal(e)
	}
	acct := KeyAccount("acme", KeyID(a))
	r := l.Apply(cmd(t, "3", CmdSync, t0, SyncCmd{Node: "n", Boot: 1, Seq: 1, TTL: int64(30 * time.Second),
		Want: []WantItem{{Tenant: acct, Amount: 5 * NanosPerUSD}, {Tenant: "acme", Amount: 5 * NanosPerUSD}}}))
	if r.Err != "" {
		t.Fatal(r.Err)
	}
	got := map[string]Nanos{}
	for _, lv := range r.Sync.Leases {
		got[lv.Tenant+" "+lv.Period] = lv.Granted
	}
	if got[acct+" 2026-11-29"] != 2*NanosPerUSD || got["acme 2026-11"] != 5*NanosPerUSD || !slices.Contains(r.Sync.Exhausted, acct) {
		t.Fatalf("grants %v, exhausted %v", got, r.Sync.Exhausted)
	}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	// An account of a key without a budget, or of no key, is granted nothing.
	r = l.Apply(cmd(t, "4", CmdSync, t0, SyncCmd{Node: "n", Epoch: r.Sync.Epoch, Seq: 2, TTL: int64(30 * time.Second),
		Want: []WantItem{{Tenant: KeyAccount("acme", "000000000000"), Amount: 1}}}))
	if len(r.Sync.Leases) != 2 {
		t.Fatalf("a key without a budget was granted escrow: %+v", r.Sync.Leases)
	}
	// Lowering the key's budget applies to its current books (what was
	// granted stays granted, as for a tenant).
	l.Apply(cmd(t, "5", CmdSetKey, t0, SetKey{Tenant: "acme", Key: a, Budget: &Budget{Limit: NanosPerUSD, Period: PeriodDay}}))
	for _, bv := range l.Books() {
		if bv.Tenant == acct && bv.Limit != NanosPerUSD {
			t.Fatalf("key books %+v", bv)
		}
	}
}

// Keys' and tenants' limits are rate capacities the ledger divides as it
// does providers': a key's shares never add up to more than its limit, a
// key or tenant without one is unlimited, and a limit removed makes the
// next grant unlimited.
func TestKeyAndTenantRateCapacity(t *testing.T) {
	l, a, _, apply := keyLedger(t)
	apply("1", CmdSetKey, SetKey{Tenant: "acme", Key: a, RPM: ptr(int64(120))})
	apply("2", CmdSetTenantLimits, SetTenantLimits{Tenant: "acme", TPM: ptr(int64(10000))})
	key, tenant, other := KeyRate("acme", KeyID(a)), TenantRate("acme"), KeyRate("acme", KeyID(keyHash("sk-b")))
	if c := l.capacity(key); c == nil || c.RPM != 120 || c.TPM != 0 {
		t.Fatalf("key capacity %+v", c)
	}
	if c := l.capacity(tenant); c == nil || c.TPM != 10000 {
		t.Fatalf("tenant capacity %+v", c)
	}
	if c := l.capacity(other); c != nil {
		t.Fatalf("a key without limits: %+v", c)
	}
	now := time.Unix(0, t0)
	var total float64
	for i, node := range []string{"x", "y", "z"} {
		gs := renew(t, l, node, 1, []Demand{{Provider: key, WantRPM: 1000, Nodes: 3}, {Provider: other, WantRPM: 1000, Nodes: 3}}, now.Add(time.Duration(i)*time.Second))
		if gs[1].Unlimited != true {
			t.Fatalf("the other key was limited: %+v", gs[1])
		}
		total += gs[0].RPM
	}
	if total > 120 || total < 100 {
		t.Fatalf("the key's shares add up to %v of 120", total)
	}
	apply("3", CmdSetKey, SetKey{Tenant: "acme", Key: a, RPM: ptr(int64(0))})
	if g := renew(t, l, "x", 1, []Demand{{Provider: key, WantRPM: 1}}, now.Add(5*time.Second)); !g[0].Unlimited {
		t.Fatalf("after the limit went: %+v", g[0])
	}
}

// TakeAll takes from every limit a request is under or from none, and
// names the one that is spent.
func TestTakeAllOrNone(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	caps := []RateCapacity{{Provider: "key:t/k", RPM: 2}, {Provider: "tenant:t", RPM: 3}}
	h := NewRateHolder("n", caps, nil, func() int { return 1 }, func() bool { return true })
	names := []string{"key:t/k", "tenant:t"}
	for i := range 2 {
		if ok, _, _ := h.TakeAll(names, 10, now, true); !ok {
			t.Fatalf("request %d refused", i)
		}
	}
	ok, wait, spent := h.TakeAll(names, 10, now.Add(time.Second), true)
	if ok || spent != "key:t/k" || wait < 59*time.Second {
		t.Fatalf("third: %v %v %q", ok, wait, spent)
	}
	// The tenant's share was not taken by the refused request: another
	// key of the tenant still has one request of it.
	if ok, _, _ := h.TakeAll([]string{"key:t/other", "tenant:t"}, 10, now.Add(time.Second), true); !ok {
		t.Fatal("the refused request took the tenant's share")
	}
	if ok, _, spent := h.TakeAll([]string{"key:t/other", "tenant:t"}, 10, now.Add(time.Second), true); ok || spent != "tenant:t" {
		t.Fatalf("the tenant's fourth: %v %q", ok, spent)
	}
	if rpm, tpm := h.Capacity("tenant:t"); rpm != 3 || tpm != 0 {
		t.Fatalf("capacity %d %d", rpm, tpm)
	}
	h.Kick()
	h.Kick() // never blocks
	select {
	case <-h.kick:
	default:
		t.Fatal("Kick did not ask for a renewal")
	}
}

// A snapshot holding keys' settings and tenant limits restores exactly,
// and one written before they existed still loads.
func TestSnapshotWithKeySettings(t *testing.T) {
	l, a, _, apply := keyLedger(t)
	apply("1", CmdSetKey, SetKey{Tenant: "acme", Key: a, Name: ptr("app"), Models: &[]string{"m"}, RPM: ptr(int64(5)), Budget: &Budget{Limit: 9, Period: PeriodTotal}})
	apply("2", CmdSetTenantLimits, SetTenantLimits{Tenant: "acme", RPM: ptr(int64(50))})
	s1, err := l.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m := NewLedger()
	if err := m.Restore(s1); err != nil {
		t.Fatal(err)
	}
	s2, _ := m.Snapshot()
	if string(s1) != string(s2) {
		t.Fatalf("not stable:\n%s\n%s", s1, s2)
	}
	if tn, _ := m.Tenant("acme"); tn.Key(a).Name != "app" || tn.Limits.RPM != 50 {
		t.Fatalf("restored %+v", tn)
	}
	old := `{"tenants":{"acme":{"name":"acme","key_sha256":["` + a + `"],"budget":{"limit":5,"period":"day"}}},"rates":{},"books":{},"nodes":{},"applied":[],"time":1}`
	o := NewLedger()
	if err := o.Restore([]byte(old)); err != nil {
		t.Fatal(err)
	}
	if tn, _ := o.Tenant("acme"); tn.Keys != nil || tn.Limits != nil || tn.Budget.Limit != 5 {
		t.Fatalf("an older snapshot: %+v", tn)
	}
	if r := o.Apply(cmd(t, "x", CmdSetKey, t0, SetKey{Tenant: "acme", Key: KeyID(a), Name: ptr("n")})); r.Err != "" {
		t.Fatal(r.Err)
	}
}

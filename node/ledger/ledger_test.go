package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// TestMain fails the run if a goroutine the tests started outlives them.
func TestMain(m *testing.M) {
	os.Exit(wait.NoLeaks(m))
}

func testCatalog(t *testing.T) *route.Catalog {
	t.Helper()
	p := func(name string, rpm, tpm int) route.Provider {
		return route.Provider{Name: name, Kind: route.KindOpenAI, Region: "r1", Reach: route.ReachGlobal,
			BaseURL: "http://" + name + ".test", Jurisdictions: region.NewSet("EU"), RPM: rpm, TPM: tpm,
			Models: []route.Model{{Name: "m", InputUSDPerMTok: 1, OutputUSDPerMTok: 2}}}
	}
	c, err := route.NewCatalog([]route.Provider{p("limited", 60, 1000), p("free", 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A new leader seeds the file's tenants (keys as hex, residency, strict
// transit, budget in nanodollars) and the limited providers' capacities,
// each under an id that makes a second seed a no-op.
func TestSeedCommands(t *testing.T) {
	key := sha256.Sum256([]byte("sk-acme"))
	s := &config.Runtime{Tenants: []config.Tenant{
		{Name: "acme", Keys: [][sha256.Size]byte{key}, Residency: region.Residency{Jurisdiction: "EU"}, StrictTransit: true,
			Budget: &config.BudgetSection{USD: 2.5, Period: consensus.PeriodMonth}},
		{Name: "free"},
	}}
	cmds := seedCommands(s, testCatalog(t))
	var ids []string
	for _, c := range cmds {
		id := c.ID
		if c.Type == consensus.CmdSeedKeys {
			id = id[:strings.LastIndex(id, "/")] // then a digest of the settings
		}
		ids = append(ids, id)
	}
	if want := []string{"seed/tenant/acme", "seed/keys/acme", "seed/tenant/free", "seed/keys/free", "seed/rate/limited"}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	cmds = slices.DeleteFunc(cmds, func(c consensus.Command) bool { return c.Type == consensus.CmdSeedKeys })
	var acme consensus.Tenant
	if err := json.Unmarshal(cmds[0].Body, &acme); err != nil || cmds[0].Type != consensus.CmdSeedTenant {
		t.Fatal(cmds[0].Type, err)
	}
	if acme.Residency != "EU" || !acme.StrictTransit || len(acme.KeySHA256) != 1 || acme.KeySHA256[0] != hex.EncodeToString(key[:]) ||
		acme.Budget == nil || acme.Budget.Limit != consensus.RoundNanos(2.5) || acme.Budget.Period != consensus.PeriodMonth {
		t.Errorf("acme seeded as %+v", acme)
	}
	var rate consensus.RateCapacity
	if err := json.Unmarshal(cmds[2].Body, &rate); err != nil || cmds[2].Type != consensus.CmdSeedRate {
		t.Fatal(cmds[2].Type, err)
	}
	if rate != (consensus.RateCapacity{Provider: "limited", RPM: 60, TPM: 1000}) {
		t.Errorf("rate seeded as %+v", rate)
	}
	if caps := RateCapacities(testCatalog(t).Providers()); len(caps) != 2 || caps[1] != (consensus.RateCapacity{Provider: "free"}) {
		t.Errorf("capacities %+v: every provider, unlimited ones at zero", caps)
	}
}

// Without gossip, the voters are this node when it is one, of this
// build's ledger version, and every other node is gone.
func TestMembershipWithoutGossip(t *testing.T) {
	raft := ""
	m := membership{self: "a", raftAddr: func() string { return raft }, rpcAddr: func() string { return "127.0.0.1:2" }}
	if v := m.Voters(); len(v) != 0 {
		t.Errorf("a node that is no voter lists voters %v", v)
	}
	raft = "127.0.0.1:1"
	want := []consensus.VoterInfo{{ID: "a", RaftAddr: "127.0.0.1:1", RPCAddr: "127.0.0.1:2", State: "alive", Version: consensus.LedgerVersion}}
	if v := m.Voters(); !slices.Equal(v, want) {
		t.Errorf("voters %v, want %v", v, want)
	}
	if m.Gone("a") || !m.Gone("b") {
		t.Errorf("gone: self %v, another %v", m.Gone("a"), m.Gone("b"))
	}
}

// A node in a mesh with no voters spends what the file says: it is not
// ready until its loops have run once, knows no ledger policy, and
// settles and closes without leaving a goroutine behind.
func TestNoVotersReadyThenSettles(t *testing.T) {
	s := &config.Runtime{Name: "a", Tenants: []config.Tenant{{Name: "acme"}}, AdmissionQueue: 10}
	cat := testCatalog(t)
	l, err := New(s, cat, Deps{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now,
		Catalog: func() *route.Catalog { return cat }, RPCAddr: func() string { return "" },
		ObserveApply: func(time.Duration) {}, SetTenants: func([]consensus.Tenant) { t.Error("tenants set without a ledger to read") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Server() != nil {
		t.Fatal("a node that is no voter has a Raft server")
	}
	if l.Ready() {
		t.Fatal("ready before the budgeted tenants are known")
	}
	l.Run()
	wait.For(t, 5*time.Second, "the ledger part to be ready", l.Ready)
	if _, ok := l.Policy("acme"); ok {
		t.Error("a policy without a ledger read")
	}
	if st := l.Status(context.Background(), time.Now()); st.Raft != "" || st.Leader != "" || st.Waiting != 0 {
		t.Errorf("status %+v", st)
	}
	l.Settle()
	l.Close()
}

// The keys' and tenants' settings in force: the ledger's where it holds
// some, else the file's; their limits as rate capacities, their budgets
// as accounts, their names by account. A file's settings seed under an
// id that changes with them.
func TestGovernanceLedgerOverFile(t *testing.T) {
	s1, s2 := sha256.Sum256([]byte("sk-1")), sha256.Sum256([]byte("sk-2"))
	h1, h2 := hex.EncodeToString(s1[:]), hex.EncodeToString(s2[:])
	file := []config.Tenant{{Name: "acme", Limits: &consensus.Limits{RPM: 1200}, KeySettings: []consensus.KeySettings{
		{KeySHA256: h1, Name: "one", Limits: &consensus.Limits{RPM: 120}, Budget: &consensus.Budget{Limit: 5, Period: "day"}},
		{KeySHA256: h2, Name: "two", Limits: &consensus.Limits{TPM: 1000}},
	}}}
	g := governanceOf(file, nil)
	want := []consensus.RateCapacity{{Provider: "tenant:acme", RPM: 1200}, {Provider: consensus.KeyRate("acme", consensus.KeyID(h1)), RPM: 120},
		{Provider: consensus.KeyRate("acme", consensus.KeyID(h2)), TPM: 1000}}
	slices.SortFunc(want[1:], func(a, b consensus.RateCapacity) int { return strings.Compare(a.Provider, b.Provider) })
	if !slices.Equal(g.caps, want) || !g.budgeted[consensus.KeyAccount("acme", consensus.KeyID(h1))] || g.names[consensus.KeyAccount("acme", consensus.KeyID(h2))] != "two" {
		t.Fatalf("the file's: %+v", g)
	}
	ledger := []consensus.Tenant{{Name: "acme", LimitsLive: true, Keys: []consensus.KeySettings{{KeySHA256: h1, Name: "uno", Live: true}}},
		{Name: "other", Limits: &consensus.Limits{TPM: 7}}}
	g = governanceOf(file, ledger)
	want = []consensus.RateCapacity{{Provider: consensus.KeyRate("acme", consensus.KeyID(h2)), TPM: 1000}, {Provider: "tenant:other", TPM: 7}}
	if !slices.Equal(g.caps, want) || len(g.budgeted) != 0 || g.names[consensus.KeyAccount("acme", consensus.KeyID(h1))] != "uno" {
		t.Fatalf("with the ledger's: %+v", g)
	}
	a, b := seedKeyCommands(file[0]), seedKeyCommands(file[0])
	file[0].KeySettings[1].Name = "deux"
	if c := seedKeyCommands(file[0]); a.ID != b.ID || c.ID == a.ID || a.Type != consensus.CmdSeedKeys || !strings.HasPrefix(a.ID, "seed/keys/acme/") {
		t.Fatalf("seed ids %q %q %q", a.ID, b.ID, c.ID)
	}
}

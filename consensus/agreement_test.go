package consensus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// fakeMembership is gossip as a test sets it: the voters, each alive at
// the address raft's in-memory transport gives it, with the ledger
// version it advertises.
type fakeMembership struct {
	mu     sync.Mutex
	voters []VoterInfo
}

func (m *fakeMembership) Voters() []VoterInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.voters)
}

func (m *fakeMembership) Gone(string) bool { return false }

// advertise has voter id advertise version, adding it if new.
func (m *fakeMembership) advertise(id string, version int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := slices.IndexFunc(m.voters, func(v VoterInfo) bool { return v.ID == id }); i >= 0 {
		m.voters[i].Version = version
		return
	}
	m.voters = append(m.voters, VoterInfo{ID: id, RaftAddr: id, State: "alive", Version: version})
}

// logLines collects a logger's output for a test to look in.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.Lines(l.b.String()) {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return true
		}
	}
	return false
}

// While one voter advertises ledger version 0, the voters agree on 0:
// set_key and a tenant with limits are refused on the admin path,
// naming that voter, and the file's key settings wait, while a holder's
// sync is not refused. Once it advertises 2, the version rises to 2 on
// every replica, the waiting seed is applied and set_key is accepted. A
// voter of a version below the agreed one is then not added to the
// configuration.
func TestVersionAgreement(t *testing.T) {
	m := &fakeMembership{}
	for i := range 3 {
		m.advertise(fmt.Sprintf("v%d", i), 0) // until the leader is known: none raises
	}
	logs := &logLines{}
	h := keyHash("sk-acme")
	seed := []Command{
		cmd(t, "seed/tenant/acme", CmdSeedTenant, 0, Tenant{Name: "acme", KeySHA256: []string{h}}),
		cmd(t, "seed/keys/acme", CmdSeedKeys, 0, SeedKeys{Tenant: "acme", Limits: &Limits{RPM: 60}}),
	}
	c := newClusterWith(t, 3, func(int) func() time.Time { return time.Now }, func(i int, cfg *ServerConfig) {
		cfg.Membership, cfg.ReconcileInterval, cfg.Seed = m, 20*time.Millisecond, func() []Command { return seed }
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	li, _ := c.waitLeader(10 * time.Second)
	ls := c.servers[li]
	var followers []string
	for i := range c.servers {
		if i != li {
			followers = append(followers, fmt.Sprintf("v%d", i))
		}
	}
	old := followers[1]
	m.advertise(followers[0], LedgerVersion) // the other follower stays at 0
	ctx := context.Background()

	tenant := func(s *Server) (tn Tenant, ok bool) {
		s.fsm.Read(func(l *Ledger) { tn, ok = l.Tenant("acme") })
		return tn, ok
	}
	wait.For(t, 10*time.Second, "the leader to seed the tenant", func() bool { _, ok := tenant(ls); return ok })
	if v, err := ls.raiseVersion(ctx); err != nil || v != 0 {
		t.Fatalf("with %s at 0 the version was raised to %d (%v)", old, v, err)
	}
	// (The tenant is seeded before its keys' settings are tried.)
	wait.For(t, 10*time.Second, "the seed's key settings held back", func() bool { return logs.has("a seed command waits", "seed_keys") })
	if tn, _ := tenant(ls); tn.Limits != nil {
		t.Fatalf("the seed's limits were applied at version 0: %+v", tn.Limits)
	}

	// The admin path: a node's client, on the leader.
	admin := NewClient(ls.cfg.ID, ls, m, PeerAuth{})
	name := "app"
	setKey := cmd(t, "admin/1", CmdSetKey, 0, SetKey{Tenant: "acme", Key: h, Name: &name})
	_, err := admin.Apply(ctx, setKey)
	want := fmt.Sprintf("set_key needs ledger version 1; voter %s (version 0) must be upgraded first", old)
	if !errors.Is(err, ErrLedgerVersion) || !strings.Contains(err.Error(), want) {
		t.Fatalf("set_key at version 0: %v; want %q", err, want)
	}
	// Through the gRPC boundary, as a forward from another node sees it.
	if back := fromStatus(toStatus(err)); !errors.Is(back, ErrLedgerVersion) || back.Error() != err.Error() {
		t.Fatalf("across gRPC: %q, was %q", back, err)
	}
	if _, err := admin.Apply(ctx, cmd(t, "admin/2", CmdPutTenant, 0, Tenant{Name: "globex", Limits: &Limits{TPM: 9}})); !errors.Is(err, ErrLedgerVersion) {
		t.Fatalf("a tenant with limits at version 0: %v", err)
	}
	if _, err := admin.Apply(ctx, cmd(t, "admin/3", CmdPutTenant, 0, Tenant{Name: "globex"})); err != nil {
		t.Fatalf("a tenant of version 0: %v", err)
	}
	// A holder's own sync is its holder's to gate, not the leader's.
	if r, err := admin.Apply(ctx, cmd(t, "sync/1", CmdSync, 0, SyncCmd{Node: "n", Boot: 1, Seq: 1,
		Want: []WantItem{{Tenant: "acme", Amount: 1, Need: 1}}})); err != nil || r.Sync == nil || r.Sync.Version != 0 {
		t.Fatalf("a sync with need at version 0: %+v %v", r, err)
	}
	for i, s := range c.servers {
		if tn, _ := tenant(s); len(tn.Keys) != 0 {
			t.Fatalf("replica %d holds the refused key settings: %+v", i, tn.Keys)
		}
	}

	// A voter sending to a leader whose build cannot gate refuses what
	// that leader does not support.
	m.advertise(ls.cfg.ID, 0)
	fi := slices.Index(c.servers, c.servers[(li+1)%3])
	follower := NewClient(c.servers[fi].cfg.ID, c.servers[fi], m, PeerAuth{})
	wait.For(t, 5*time.Second, "the follower to know the leader", func() bool { id, ok := c.servers[fi].Leader(); return ok && id == ls.cfg.ID })
	if _, err := follower.Apply(ctx, setKey); !errors.Is(err, ErrLedgerVersion) ||
		!strings.Contains(err.Error(), fmt.Sprintf("the leader %s (version 0) must be upgraded first", ls.cfg.ID)) {
		t.Fatalf("set_key sent to a leader of version 0: %v", err)
	}
	m.advertise(ls.cfg.ID, LedgerVersion)

	// The old voter is upgraded: the version rises everywhere, within
	// the leader's next reconcile.
	m.advertise(old, LedgerVersion)
	ls.Reconcile()
	wait.For(t, 10*time.Second, "every replica at the new version", func() bool {
		for _, s := range c.servers {
			if s.agreedVersion() != LedgerVersion {
				return false
			}
		}
		return true
	})
	wait.For(t, 10*time.Second, "the waiting seed applied", func() bool {
		tn, _ := tenant(ls)
		return tn.Limits != nil && tn.Limits.RPM == 60
	})
	if _, err := admin.Apply(ctx, setKey); err != nil {
		t.Fatalf("set_key at version %d: %v", LedgerVersion, err)
	}
	wait.For(t, 10*time.Second, "every replica to hold the key's name", func() bool {
		for _, s := range c.servers {
			if tn, _ := tenant(s); tn.Key(h) == nil || tn.Key(h).Name != name {
				return false
			}
		}
		return true
	})
	peers, err := ls.Peers()
	if err != nil || len(peers) != 3 || slices.ContainsFunc(peers, func(p Peer) bool { return p.Version != LedgerVersion }) {
		t.Fatalf("peers %+v %v", peers, err)
	}

	// A voter of an older build is no longer added.
	m.advertise("v9", 0)
	ls.Reconcile()
	wait.For(t, 10*time.Second, "the warning about v9", func() bool { return logs.has("not added to the Raft configuration", "voter=v9") })
	if peers, _ := ls.Peers(); slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == "v9" }) {
		t.Fatalf("a voter of version 0 was added at version %d: %+v", LedgerVersion, peers)
	}
	if c.violations.Load() != 0 {
		t.Fatal(c.firstBad.Load())
	}
}

// Package ledger is a node's part in the Raft ledger: a voter's replica,
// the client that reaches the leader, the budget escrow and rate shares
// the request path spends from (as the gates route declares), the
// tenants read back from the ledger, leaving the Raft configuration on a
// drain, and the ledger's metrics. It takes the few things of the node it
// uses (Deps) and knows nothing of the node itself.
package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/journal"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// Ledger is a node's part in the Raft ledger: a voter's replica (nil on
// other nodes), the client that reaches the leader, and the holders the
// request path spends from.
type Ledger struct {
	name    string // this node's
	log     *slog.Logger
	server  *consensus.Server
	client  *consensus.Client
	budgets *consensus.BudgetHolder
	rates   *consensus.RateHolder
	// subjects are this node's shares of keys' and tenants' own limits;
	// gov what the request path reads of their settings.
	subjects *consensus.RateHolder
	gov      atomic.Pointer[governance]
	now      func() time.Time
	// fileTenants are the file's, which hold where the ledger has none.
	fileTenants []config.Tenant
	// spend tallies every charge this node settles, reported with the
	// budget holder's syncs.
	spend *consensus.SpendTally
	// journal keeps what the holders must not forget in a crash (nil:
	// journal.disabled); journalCfg where and how often.
	journal    *journal.Journal
	journalCfg journal.Config

	// budgeted holds the tenants with a budget, once read from the
	// ledger; until then it holds nil and every tenant is held to escrow.
	budgeted atomic.Pointer[map[string]bool]
	// configBudgeted are the tenants the file gives a budget: what holds
	// in a mesh with no voters, where nothing can have changed them.
	configBudgeted map[string]bool
	// policies are the tenants' residency and strict transit as the
	// ledger holds them, once read.
	policies atomic.Pointer[map[string]Policy]
	// setTenants hands the ledger's tenants to the request path each
	// time they change.
	setTenants func([]consensus.Tenant)
	members    membership
	// refresh asks the tenant refresh to read the ledger now, through
	// the leader (RefreshTenants).
	refresh chan struct{}

	cancel context.CancelFunc
	loops  sync.WaitGroup
}

// Deps are what a node's part in the ledger uses of the node.
type Deps struct {
	Log *slog.Logger
	Now func() time.Time
	// Catalog returns the providers as now configured (a reload
	// replaces them): a new leader seeds their capacities.
	Catalog func() *route.Catalog
	Mesh    *gossip.Mesh  // nil when the node does not gossip
	RPCAddr func() string // the gRPC listener's address, once open
	// ObserveApply records how long a command took to apply, on a
	// leading voter.
	ObserveApply func(time.Duration)
	// SetTenants receives the ledger's tenants each time they change.
	SetTenants func([]consensus.Tenant)
	// Tuning, if not nil, adjusts a voter's Raft settings (tests and the
	// demo use faster timings or in-memory stores).
	Tuning func(*consensus.ServerConfig)
}

// New builds the node's part in the ledger from its resolved
// configuration (s.Ledger set) and its catalog at start-up; it opens
// nothing: Listen and Run do.
func New(s *config.Runtime, catalog *route.Catalog, d Deps) (*Ledger, error) {
	l := &Ledger{name: s.Name, log: d.Log, setTenants: d.SetTenants, configBudgeted: map[string]bool{}, now: d.Now, fileTenants: s.Tenants,
		refresh: make(chan struct{}, 1), journalCfg: journal.Config{Dir: s.JournalDir, Flush: s.JournalFlush, Log: d.Log.With("component", "journal"), Now: d.Now}}
	if l.now == nil {
		l.now = time.Now
	}
	gov := governanceOf(s.Tenants, nil)
	l.gov.Store(gov)
	l.members = membership{self: s.Name, mesh: d.Mesh, rpcAddr: d.RPCAddr, raftAddr: func() string {
		if l.server == nil {
			return ""
		}
		return l.server.Addr()
	}}
	for _, t := range s.Tenants {
		if t.Budget != nil {
			l.configBudgeted[t.Name] = true
		}
	}
	maps.Copy(l.configBudgeted, gov.budgeted)
	var unknown map[string]bool
	l.budgeted.Store(&unknown)
	if s.Raft != nil {
		cfg := *s.Raft
		cfg.Seed = func() []consensus.Command { return seedCommands(s, d.Catalog()) }
		cfg.Membership, cfg.Logger, cfg.Clock = l.members, d.Log.With("component", "raft"), d.Now
		if d.Tuning != nil {
			d.Tuning(&cfg)
		}
		srv, err := consensus.NewServer(cfg)
		if err != nil {
			return nil, err
		}
		srv.ObserveApply(d.ObserveApply)
		l.server = srv
	}
	auth := consensus.PeerAuth{Token: s.RPCToken}
	if s.TLS != nil {
		auth.TLS = s.TLS.Client
	}
	l.client = consensus.NewClient(s.Name, l.server, l.members, auth)
	l.budgets = consensus.NewBudgetHolder(s.Name, l.client.Apply, func() map[string]bool { return *l.budgeted.Load() })
	l.budgets.SetAdmission(s.AdmissionQueue)
	l.spend = consensus.NewSpendTally()
	l.budgets.SetSpend(l.spend)
	l.budgets.SetRecalls(func(ctx context.Context) ([]string, map[string]int64, error) {
		b, _, err := l.client.Read(ctx, "escrow", false)
		if err == nil {
			var v consensus.EscrowView
			err = json.Unmarshal(b, &v)
			return v.Recalls, v.Revs, err
		}
		// A voter older than the escrow view: recalls only.
		if b, _, err = l.client.Read(ctx, "recalls", false); err != nil {
			return nil, nil, err
		}
		var tenants []string
		err = json.Unmarshal(b, &tenants)
		return tenants, nil, err
	})
	nodes := func() int {
		if d.Mesh == nil {
			return 1
		}
		alive := 0
		for _, m := range d.Mesh.Members() {
			if m.State == "alive" || m.State == "draining" {
				alive++
			}
		}
		return alive
	}
	noVoters := func() bool { return len(l.members.Voters()) == 0 }
	l.rates = consensus.NewRateHolder(s.Name, RateCapacities(catalog.Providers()), l.client.Rates, nodes, noVoters)
	l.subjects = consensus.NewRateHolder(s.Name, gov.caps, l.client.Rates, nodes, noVoters)
	l.subjects.ReportUsage() // a key's share moves to where its requests arrive within a renewal
	return l, nil
}

// seedCommands are the configuration's tenants and provider capacities,
// applied by each new leader where the ledger has none yet.
func seedCommands(s *config.Runtime, catalog *route.Catalog) []consensus.Command {
	var out []consensus.Command
	for _, t := range s.Tenants {
		ct := consensus.Tenant{Name: t.Name, Residency: string(t.Residency.Jurisdiction), StrictTransit: t.StrictTransit}
		for _, k := range t.Keys {
			ct.KeySHA256 = append(ct.KeySHA256, fmt.Sprintf("%x", k))
		}
		if t.Budget != nil {
			ct.Budget = &consensus.Budget{Limit: consensus.RoundNanos(t.Budget.USD), Period: t.Budget.Period}
		}
		b, _ := json.Marshal(ct)
		out = append(out, consensus.Command{ID: "seed/tenant/" + t.Name, Type: consensus.CmdSeedTenant, Body: b},
			seedKeyCommands(t))
	}
	for _, p := range catalog.Providers() {
		if p.RPM > 0 || p.TPM > 0 {
			b, _ := json.Marshal(consensus.RateCapacity{Provider: p.Name, RPM: int64(p.RPM), TPM: int64(p.TPM)})
			out = append(out, consensus.Command{ID: "seed/rate/" + p.Name, Type: consensus.CmdSeedRate, Body: b})
		}
	}
	return out
}

// Listen opens the spend journal (and hands the holders what it held of
// the node's last boot) and the Raft transport (voters); it runs before
// the node announces itself, so the announcement carries its address.
func (l *Ledger) Listen(ctx context.Context) error {
	if err := l.openJournal(); err != nil {
		return err
	}
	if l.server != nil {
		if err := l.server.Start(ctx); err != nil {
			return fmt.Errorf("node.raft: %w", err)
		}
	}
	return nil
}

// Run starts the holders' loops and the tenant refresh; Settle stops
// them.
func (l *Ledger) Run() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	if l.journal != nil {
		l.journal.Start(journal.Holders{Budgets: l.budgets, Spend: l.spend, RateBoot: l.client.Boot(),
			Rates: map[string]*consensus.RateHolder{journalProviders: l.rates, journalSubjects: l.subjects}})
	}
	l.loops.Go(func() { l.budgets.Run(ctx) })
	l.loops.Go(func() { l.rates.Run(ctx) })
	l.loops.Go(func() { l.subjects.Run(ctx) })
	l.loops.Go(func() { l.refreshTenants(ctx) })
}

// TenantRefresh is how often a node reads the ledger's tenants: a key
// added or revoked holds on every node that reaches a voter within this
// and one read's round trip.
const TenantRefresh = time.Second

// refreshTenants keeps the tenants, their keys (added and revoked with
// llmesh tenants) and the set of budgeted tenants in step with the
// ledger: what the admin API changes live reaches every node this way.
func (l *Ledger) refreshTenants(ctx context.Context) {
	wait := time.Duration(0) // at once, then every TenantRefresh (faster until known)
	var last []byte          // the tenants last read: unchanged, nothing is rebuilt
	for {
		linearizable := false
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-l.refresh:
			linearizable = true // after a change made here: read it back
		}
		wait = TenantRefresh
		if *l.budgeted.Load() == nil {
			wait = 200 * time.Millisecond
		}
		if len(l.members.Voters()) == 0 {
			l.budgeted.Store(&l.configBudgeted)
			l.setGovernance(nil)
			last = nil // the file's alone now: the next read is taken whole
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		b, _, err := l.client.Read(rctx, "tenants", linearizable)
		cancel()
		if err != nil || bytes.Equal(b, last) {
			continue
		}
		var ts []consensus.Tenant
		if json.Unmarshal(b, &ts) != nil {
			continue
		}
		last = b
		// The file's budgeted tenants count whatever the ledger says (it
		// may not have been seeded yet): the set fails closed.
		m := maps.Clone(l.configBudgeted)
		pol := make(map[string]Policy, len(ts))
		revs := map[string]int64{}
		for _, t := range ts {
			if t.Budget != nil {
				m[t.Name] = true
				revs[t.Name] = t.Budget.Rev
			}
			for _, k := range t.Keys {
				if k.Budget != nil {
					revs[consensus.KeyAccount(t.Name, k.ID())] = k.Budget.Rev
				}
			}
			pol[t.Name] = Policy{Residency: region.Residency{Jurisdiction: region.Jurisdiction(t.Residency)}, Strict: t.StrictTransit}
		}
		gov := l.setGovernance(ts)
		maps.Copy(m, gov.budgeted)
		l.budgeted.Store(&m)
		// A budget changed reaches the escrow here within a refresh: its
		// leases under the old revision spend no more.
		l.budgets.SetRevs(revs)
		l.policies.Store(&pol)
		l.setTenants(ts)
	}
}

// RefreshTenants has the node read the ledger's tenants now, through the
// leader: an operator's change made through this node (a budget, a key)
// holds here at once, not at the next refresh. It never blocks.
func (l *Ledger) RefreshTenants() {
	select {
	case l.refresh <- struct{}{}:
	default:
	}
}

// Policy is where a tenant's data may go, as the ledger says.
type Policy struct {
	Residency region.Residency
	Strict    bool // strict transit
}

// Policy returns the ledger's residency and strict transit for tenant,
// when the ledger has been read and holds it.
func (l *Ledger) Policy(tenant string) (Policy, bool) {
	m := l.policies.Load()
	if m == nil {
		return Policy{}, false
	}
	p, ok := (*m)[tenant]
	return p, ok
}

// Ready reports whether the request path can spend: the budgeted tenants
// are known, escrow has synced once if any has a budget, and the rate
// shares have been renewed once.
func (l *Ledger) Ready() bool {
	b := *l.budgeted.Load()
	return b != nil && (len(b) == 0 || l.budgets.Ready()) && l.rates.Ready() && l.subjects.Ready()
}

// Settle reports spend and gives escrow and rate shares back (the
// holders' final sync). The node stops its RPC server first: requests
// forwarded here spend until they end.
func (l *Ledger) Settle() {
	if l.cancel != nil {
		l.cancel()
	}
	l.loops.Wait()
	if l.journal != nil {
		l.journal.Stop() // what the last syncs gave back
	}
}

// Close stops Raft and the client, and closes the journal if Settle did
// not.
func (l *Ledger) Close() {
	if l.journal != nil {
		l.journal.Kill()
	}
	l.client.Close()
	if l.server != nil {
		_ = l.server.Shutdown()
	}
}

// Kill stops everything at once, as a crash would: escrow stays reserved.
func (l *Ledger) Kill() {
	if l.journal != nil {
		l.journal.Kill() // nothing more is written, as in a crash
	}
	l.budgets.Crash()
	if l.server != nil {
		_ = l.server.Shutdown()
	}
	if l.cancel != nil {
		l.cancel()
	}
	l.client.Close()
}

// Server is a voter's Raft replica; nil on other nodes.
func (l *Ledger) Server() *consensus.Server { return l.server }

// Client reaches the leader (or this voter) for reads and commands.
func (l *Ledger) Client() *consensus.Client { return l.client }

// Rates is this node's share of the mesh-wide rates: route's quota gate
// as it is.
func (l *Ledger) Rates() *consensus.RateHolder { return l.rates }

// Budgets is the budgets' escrow as route's budget gate.
func (l *Ledger) Budgets() route.BudgetGate { return budgetGate{h: l.budgets, l: l} }

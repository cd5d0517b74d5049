package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// ledger is a node's part in the Raft ledger: a voter's replica (nil on
// other nodes), the client that reaches the leader, the gRPC server peers
// reach this node on, and the holders the request path spends from.
type ledger struct {
	name    string // this node's
	log     *slog.Logger
	server  *consensus.Server
	client  *consensus.Client
	budgets *consensus.BudgetHolder
	rates   *consensus.RateHolder

	// budgeted holds the tenants with a budget, once read from the
	// ledger; until then it holds nil and every tenant is held to escrow.
	budgeted atomic.Pointer[map[string]bool]
	// configBudgeted are the tenants the file gives a budget: what holds
	// in a mesh with no voters, where nothing can have changed them.
	configBudgeted map[string]bool
	// policies are the tenants' residency and strict transit as the
	// ledger holds them, once read.
	policies atomic.Pointer[map[string]tenantPolicy]
	// setTenants hands the ledger's tenants to the request path each
	// time they change.
	setTenants func([]consensus.Tenant)
	members    membership

	cancel context.CancelFunc
	loops  sync.WaitGroup
}

// LedgerTuning adjusts the Raft server configuration (tests and the demo
// use faster timings or in-memory stores).
type LedgerTuning func(*consensus.ServerConfig)

// ledgerDeps are what a node's part in the ledger uses of the node.
type ledgerDeps struct {
	log *slog.Logger
	now func() time.Time
	// catalog returns the providers as now configured (a reload
	// replaces them): a new leader seeds their capacities.
	catalog func() *route.Catalog
	mesh    *gossip.Mesh  // nil when the node does not gossip
	rpcAddr func() string // the gRPC listener's address, once open
	// observeApply records how long a command took to apply, on a
	// leading voter.
	observeApply func(time.Duration)
	// setTenants receives the ledger's tenants each time they change.
	setTenants func([]consensus.Tenant)
}

func newLedger(s *config.Runtime, catalog *route.Catalog, tuning LedgerTuning, d ledgerDeps) (*ledger, error) {
	l := &ledger{name: s.Name, log: d.log, setTenants: d.setTenants, configBudgeted: map[string]bool{}}
	l.members = membership{self: s.Name, mesh: d.mesh, rpcAddr: d.rpcAddr, raftAddr: func() string {
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
	var unknown map[string]bool
	l.budgeted.Store(&unknown)
	if s.Raft != nil {
		cfg := *s.Raft
		cfg.Seed = func() []consensus.Command { return seedCommands(s, d.catalog()) }
		cfg.Membership, cfg.Logger, cfg.Clock = l.members, d.log.With("component", "raft"), d.now
		if tuning != nil {
			tuning(&cfg)
		}
		srv, err := consensus.NewServer(cfg)
		if err != nil {
			return nil, err
		}
		srv.ObserveApply(d.observeApply)
		l.server = srv
	}
	auth := consensus.PeerAuth{Token: s.RPCToken}
	if s.TLS != nil {
		auth.TLS = s.TLS.Client
	}
	l.client = consensus.NewClient(s.Name, l.server, l.members, auth)
	l.budgets = consensus.NewBudgetHolder(s.Name, l.client.Apply, func() map[string]bool { return *l.budgeted.Load() })
	l.budgets.SetAdmission(s.AdmissionQueue)
	l.budgets.SetRecalls(func(ctx context.Context) ([]string, error) {
		b, _, err := l.client.Read(ctx, "recalls", false)
		if err != nil {
			return nil, err
		}
		var tenants []string
		err = json.Unmarshal(b, &tenants)
		return tenants, err
	})
	l.rates = consensus.NewRateHolder(s.Name, rateCapacities(catalog.Providers()), l.client.Rates, func() int {
		if d.mesh == nil {
			return 1
		}
		alive := 0
		for _, m := range d.mesh.Members() {
			if m.State == "alive" || m.State == "draining" {
				alive++
			}
		}
		return alive
	}, func() bool { return len(l.members.Voters()) == 0 })
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
		out = append(out, consensus.Command{ID: "seed/tenant/" + t.Name, Type: consensus.CmdSeedTenant, Body: b})
	}
	for _, p := range catalog.Providers() {
		if p.RPM > 0 || p.TPM > 0 {
			b, _ := json.Marshal(consensus.RateCapacity{Provider: p.Name, RPM: int64(p.RPM), TPM: int64(p.TPM)})
			out = append(out, consensus.Command{ID: "seed/rate/" + p.Name, Type: consensus.CmdSeedRate, Body: b})
		}
	}
	return out
}

// listen opens the Raft transport (voters); it runs before the node
// announces itself, so the announcement carries its address.
func (l *ledger) listen(ctx context.Context) error {
	if l.server != nil {
		if err := l.server.Start(ctx); err != nil {
			return fmt.Errorf("node.raft: %w", err)
		}
	}
	return nil
}

// run starts the holders' loops and the tenant refresh.
func (l *ledger) run() {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.loops.Go(func() { l.budgets.Run(ctx) })
	l.loops.Go(func() { l.rates.Run(ctx) })
	l.loops.Go(func() { l.refreshTenants(ctx) })
}

// tenantRefresh is how often a node reads the ledger's tenants: a key
// added or revoked holds on every node that reaches a voter within this
// and one read's round trip.
const tenantRefresh = time.Second

// refreshTenants keeps the tenants, their keys (added and revoked with
// llmesh tenants) and the set of budgeted tenants in step with the
// ledger: what the admin API changes live reaches every node this way.
func (l *ledger) refreshTenants(ctx context.Context) {
	wait := time.Duration(0) // at once, then every tenantRefresh (faster until known)
	var last []byte          // the tenants last read: unchanged, nothing is rebuilt
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = tenantRefresh
		if *l.budgeted.Load() == nil {
			wait = 200 * time.Millisecond
		}
		if len(l.members.Voters()) == 0 {
			l.budgeted.Store(&l.configBudgeted)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		b, _, err := l.client.Read(rctx, "tenants", false)
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
		pol := make(map[string]tenantPolicy, len(ts))
		for _, t := range ts {
			if t.Budget != nil {
				m[t.Name] = true
			}
			pol[t.Name] = tenantPolicy{residency: region.Residency{Jurisdiction: region.Jurisdiction(t.Residency)}, strict: t.StrictTransit}
		}
		l.budgeted.Store(&m)
		l.policies.Store(&pol)
		l.setTenants(ts)
	}
}

// tenantPolicy is where a tenant's data may go, as the ledger says.
type tenantPolicy struct {
	residency region.Residency
	strict    bool
}

// policy returns the ledger's residency and strict transit for tenant,
// when the ledger has been read and holds it.
func (l *ledger) policy(tenant string) (tenantPolicy, bool) {
	m := l.policies.Load()
	if m == nil {
		return tenantPolicy{}, false
	}
	p, ok := (*m)[tenant]
	return p, ok
}

// ready reports whether the request path can spend: the budgeted tenants
// are known, escrow has synced once if any has a budget, and the rate
// shares have been renewed once.
func (l *ledger) ready() bool {
	b := *l.budgeted.Load()
	return b != nil && (len(b) == 0 || l.budgets.Ready()) && l.rates.Ready()
}

// settle reports spend and gives escrow and rate shares back (the
// holders' final sync). The node stops its RPC server first: requests
// forwarded here spend until they end.
func (l *ledger) settle() {
	if l.cancel != nil {
		l.cancel()
	}
	l.loops.Wait()
}

// handOverLeadership has a leading voter hand leadership to another one
// before it goes, so that the ledger does not wait an election timeout.
func (l *ledger) handOverLeadership() {
	if l.server == nil || !l.server.IsLeader() || l.soleVoter() {
		return
	}
	if err := l.server.TransferLeadership(); err != nil {
		l.log.Warn("could not hand over Raft leadership; the others will elect a leader", "err", err)
		return
	}
	l.log.Info("Raft leadership handed over")
}

// awaitRemoval waits, after the node left gossip, until the leader has
// removed this voter from the Raft configuration (its reconcile loop does
// it for a voter that left, while the rest keep a quorum), so that a
// drained voter does not count against the quorum; at most removeTimeout.
func (l *ledger) awaitRemoval(ctx context.Context) {
	if l.server == nil || l.soleVoter() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	for {
		peers, err := l.server.Peers()
		if err == nil && !slices.ContainsFunc(peers, func(p consensus.Peer) bool { return p.ID == l.name }) {
			l.log.Info("removed from the Raft configuration")
			return
		}
		if l.peersElsewhere(ctx) {
			l.log.Info("removed from the Raft configuration")
			return
		}
		select {
		case <-ctx.Done():
			l.log.Warn("still in the Raft configuration: the leader will remove this voter once it sees it left")
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// soleVoter reports whether this voter is the only one in the Raft
// configuration: there is no one to hand over to or be removed by.
func (l *ledger) soleVoter() bool {
	peers, err := l.server.Peers()
	if err != nil {
		return false
	}
	for _, p := range peers {
		if p.Voter && p.ID != l.name {
			return false
		}
	}
	return true
}

// peersElsewhere asks the leader whether this voter is still in the
// configuration: a removed voter's own log may never learn it.
func (l *ledger) peersElsewhere(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	peers, err := l.peers(rctx, true) // served by the leader
	if err != nil || len(peers) == 0 {
		return false
	}
	return !slices.ContainsFunc(peers, func(p consensus.Peer) bool { return p.ID == l.name })
}

// peers reads the Raft configuration: from the leader when
// linearizable, else from any voter (this one if it is one).
func (l *ledger) peers(ctx context.Context, linearizable bool) ([]consensus.Peer, error) {
	b, _, err := l.client.Read(ctx, "peers", linearizable)
	if err != nil {
		return nil, err
	}
	var peers []consensus.Peer
	if err := json.Unmarshal(b, &peers); err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	return peers, nil
}

// close stops Raft and the client.
func (l *ledger) close() {
	l.client.Close()
	if l.server != nil {
		_ = l.server.Shutdown()
	}
}

// kill stops everything at once, as a crash would: escrow stays reserved.
func (l *ledger) kill() {
	l.budgets.Crash()
	if l.server != nil {
		_ = l.server.Shutdown()
	}
	if l.cancel != nil {
		l.cancel()
	}
	l.client.Close()
}

// membership gives the consensus layer the voters gossip knows, and this
// node itself.
type membership struct {
	self     string
	mesh     *gossip.Mesh  // nil when the node does not gossip
	raftAddr func() string // this voter's Raft address; "" on other nodes
	rpcAddr  func() string
}

// Voters implements consensus.Membership. Without gossip, the voters are
// this node when it is one.
func (m membership) Voters() []consensus.VoterInfo {
	var out []consensus.VoterInfo
	if m.mesh == nil {
		if addr := m.raftAddr(); addr != "" {
			out = append(out, consensus.VoterInfo{ID: m.self, RaftAddr: addr, RPCAddr: m.rpcAddr(), State: "alive"})
		}
		return out
	}
	for _, mem := range m.mesh.Members() {
		if mem.Meta.Voter {
			out = append(out, consensus.VoterInfo{ID: mem.Name, RaftAddr: mem.Meta.Raft, RPCAddr: mem.Meta.RPC, State: mem.State})
		}
	}
	return out
}

// Gone implements consensus.Membership: a node failed, left, or unknown.
func (m membership) Gone(node string) bool {
	if node == m.self {
		return false
	}
	if m.mesh == nil {
		return true
	}
	for _, mem := range m.mesh.Members() {
		if mem.Name == node {
			return mem.State == "failed" || mem.State == "left"
		}
	}
	return true
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

package consensus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// VoterInfo is one voter as the membership knows it.
type VoterInfo struct {
	ID       string // node name, the Raft server ID
	RaftAddr string // host:port of its Raft transport
	RPCAddr  string // host:port of its gRPC server
	State    string // alive, draining, leaving, failed or left
}

// Membership tells the consensus layer which voters the mesh has, and
// whether a node is gone (failed, left, or unknown). node/ provides it
// from gossip.
type Membership interface {
	Voters() []VoterInfo
	Gone(node string) bool
}

// ForfeitGrace is how long after its lease expired the escrow of a node
// that is gone from the mesh is written off as spent, by the leader: long
// enough for a partition to heal and the node to report.
const ForfeitGrace = 10 * time.Minute

// ServerConfig configures a voter.
type ServerConfig struct {
	// ID is the node's name, its Raft server ID.
	ID string
	// Bind is the Raft transport's host:port; Advertise, if set, the
	// address peers should dial.
	Bind, Advertise string
	// DataDir holds raft.db (raft-boltdb) and the snapshots; ignored
	// with InMemory.
	DataDir string
	// InMemory keeps the log, stable store and snapshots in memory
	// (agent -dev): nothing survives a restart.
	InMemory bool
	// BootstrapExpect bootstraps the cluster once this many voters are
	// seen through the membership, if this node has no Raft state yet.
	BootstrapExpect int
	// Timings returns raft's base configuration; nil means LANTimings.
	Timings func() *raft.Config
	// Transport, when set, replaces the TCP transport (tests use raft's
	// in-memory one).
	Transport raft.Transport
	// TLS, when set, makes the TCP transport mutual TLS: peers without a
	// certificate of the mesh's CA cannot connect.
	TLS *TLSConfig
	// Seed returns the commands a new leader applies first: tenants and
	// rate capacities from the configuration file, applied only where
	// absent.
	Seed func() []Command
	// Membership lists the voters for bootstrap and reconciliation.
	Membership Membership
	// ReconcileInterval is how often the leader matches the Raft
	// configuration to the membership.
	ReconcileInterval time.Duration
	// RateLease is how long a rate share lasts (default 30 s) and
	// RateWindow the window rate limits count over (default 1 min).
	RateLease, RateWindow time.Duration
	// ApplyTimeout bounds one Raft apply.
	ApplyTimeout time.Duration
	// Logger receives the Raft library's logs and this package's.
	Logger *slog.Logger
	// Clock stamps commands on the leader; nil means time.Now.
	Clock func() time.Time
}

// LANTimings are raft's defaults: election after 1 s without a leader.
func LANTimings() *raft.Config { return raft.DefaultConfig() }

// FastTimings suit one machine: a dev agent, the demo, tests.
func FastTimings() *raft.Config {
	c := raft.DefaultConfig()
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 10 * time.Millisecond
	return c
}

// Server is one voter: a Raft replica of the ledger.
type Server struct {
	cfg ServerConfig
	fsm *FSM
	log *slog.Logger
	now func() time.Time
	// rateLease and rateWindow are stamped into the renewals this voter
	// applies while it leads.
	rateLease, rateWindow time.Duration

	raft   *raft.Raft
	trans  raft.Transport
	bolt   *raftboltdb.BoltStore
	leader atomic.Bool

	leaderCh chan bool
	stop     chan struct{}
	nudge    chan struct{} // Reconcile's: the leader reconciles at once
	wg       sync.WaitGroup
	once     sync.Once

	applyObserver func(time.Duration) // metrics
}

// NewServer builds a voter. It opens nothing; Start does.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.ID == "" {
		return nil, errors.New("consensus: a server ID is required")
	}
	if !cfg.InMemory && cfg.DataDir == "" {
		return nil, errors.New("consensus: a data directory is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Timings == nil {
		cfg.Timings = LANTimings
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = 5 * time.Second
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = 5 * time.Second
	}
	return &Server{
		cfg:        cfg,
		fsm:        NewFSM(),
		log:        cfg.Logger,
		now:        cfg.Clock,
		rateLease:  cmp.Or(cfg.RateLease, time.Duration(defaultRateLease)),
		rateWindow: cmp.Or(cfg.RateWindow, time.Duration(defaultRateWindow)),
		nudge:      make(chan struct{}, 1),
		leaderCh:   make(chan bool, 8),
		stop:       make(chan struct{}),
	}, nil
}

// ObserveApply sets a function told how long each apply took (metrics).
// Call it before Start.
func (s *Server) ObserveApply(f func(time.Duration)) { s.applyObserver = f }

// FSM returns the replica's state machine, for reads.
func (s *Server) FSM() *FSM { return s.fsm }

// Start opens the stores and the transport and starts Raft. With
// BootstrapExpect, bootstrapping waits (in the background) until that many
// voters are seen; a node with Raft state never bootstraps.
func (s *Server) Start(ctx context.Context) error {
	rc := s.cfg.Timings()
	rc.LocalID = raft.ServerID(s.cfg.ID)
	rc.NotifyCh = s.leaderCh
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: logWriter{s.log}, Level: hclog.Info})
	rc.SnapshotThreshold = 2048
	rc.TrailingLogs = 4096

	var logs raft.LogStore
	var stable raft.StableStore
	var snaps raft.SnapshotStore
	if s.cfg.InMemory {
		store := raft.NewInmemStore()
		logs, stable, snaps = store, store, raft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(s.cfg.DataDir, "raft")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("consensus: %w", err)
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
		if err != nil {
			return fmt.Errorf("consensus: open raft.db: %w", err)
		}
		s.bolt = bolt
		logs, stable = bolt, bolt
		fs, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, rc.Logger)
		if err != nil {
			bolt.Close()
			return fmt.Errorf("consensus: snapshots: %w", err)
		}
		snaps = fs
	}
	trans := s.cfg.Transport
	if trans == nil {
		t, err := newTCPTransport(s.cfg.Bind, s.cfg.Advertise, s.cfg.TLS, rc.Logger)
		if err != nil {
			s.closeStores()
			return err
		}
		trans = t
	}
	s.trans = trans
	existing, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		s.closeStores()
		return fmt.Errorf("consensus: %w", err)
	}
	r, err := raft.NewRaft(rc, s.fsm, logs, stable, snaps, trans)
	if err != nil {
		s.closeStores()
		return fmt.Errorf("consensus: %w", err)
	}
	s.raft = r
	s.wg.Go(s.leaderWatch)
	switch {
	case existing:
		s.log.Info("raft state found; not bootstrapping", "data_dir", s.cfg.DataDir)
	case s.cfg.BootstrapExpect > 0:
		s.wg.Go(s.bootstrapLoop)
	}
	return nil
}

// Addr returns the Raft transport address peers dial.
func (s *Server) Addr() string {
	if s.trans == nil {
		return ""
	}
	return string(s.trans.LocalAddr())
}

func newTCPTransport(bind, advertise string, tc *TLSConfig, logger hclog.Logger) (*raft.NetworkTransport, error) {
	var adv net.Addr
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			return nil, fmt.Errorf("consensus: advertise address %q: %w", advertise, err)
		}
		adv = a
	}
	if tc != nil {
		layer, err := newTLSStreamLayer(bind, adv, tc)
		if err != nil {
			return nil, fmt.Errorf("consensus: raft transport on %s: %w", bind, err)
		}
		return raft.NewNetworkTransportWithLogger(layer, 4, 10*time.Second, logger), nil
	}
	t, err := raft.NewTCPTransportWithLogger(bind, adv, 4, 10*time.Second, logger)
	if err != nil {
		return nil, fmt.Errorf("consensus: raft transport on %s: %w", bind, err)
	}
	return t, nil
}

func (s *Server) closeStores() {
	if s.bolt != nil {
		_ = s.bolt.Close()
	}
}

// BootstrapSelf bootstraps a one-voter cluster (agent -dev, tests). It
// refuses when Raft state exists.
func (s *Server) BootstrapSelf() error {
	return s.bootstrap([]raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(s.cfg.ID), Address: s.trans.LocalAddr()}})
}

func (s *Server) bootstrap(servers []raft.Server) error {
	f := s.raft.BootstrapCluster(raft.Configuration{Servers: servers})
	if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("consensus: bootstrap: %w", err)
	} else if errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("consensus: bootstrap refused: this node already has Raft state")
	}
	ids := make([]string, len(servers))
	for i, sv := range servers {
		ids[i] = string(sv.ID)
	}
	s.log.Info("raft cluster bootstrapped", "voters", ids)
	return nil
}

// bootstrapLoop waits until exactly BootstrapExpect voters are alive in
// the membership, and the set has stayed the same for a second, then
// bootstraps with exactly them — but only on the voter with the lowest
// name in the set: it becomes the leader and brings the others in. Two
// voters bootstrapping different sets would make two clusters whose first
// entries collide, which Raft can never repair; with one bootstrapper per
// set that needs two voters each lowest in a different view of the mesh.
// A voter that sees more than expected is joining an existing cluster and
// waits for its leader to add it.
func (s *Server) bootstrapLoop() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var last string
	var stableSince time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.raft.Leader() != "" || s.cfg.Membership == nil {
			return // a cluster found us
		}
		var servers []raft.Server
		for _, v := range s.cfg.Membership.Voters() {
			if v.State == "alive" && v.RaftAddr != "" {
				servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.ID), Address: raft.ServerAddress(v.RaftAddr)})
			}
		}
		slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
		key := fmt.Sprint(servers)
		if key != last {
			last, stableSince = key, time.Now()
		}
		if len(servers) != s.cfg.BootstrapExpect || time.Since(stableSince) < time.Second {
			continue
		}
		if string(servers[0].ID) != s.cfg.ID {
			continue // the lowest-named voter bootstraps; this one waits for it
		}
		if err := s.bootstrap(servers); err != nil {
			s.log.Warn("bootstrap failed", "err", err)
		}
		return
	}
}

// leaderWatch runs the leader's duties while this node leads.
func (s *Server) leaderWatch() {
	var stopLeading chan struct{}
	var leading sync.WaitGroup
	defer func() {
		if stopLeading != nil {
			close(stopLeading)
		}
		leading.Wait()
	}()
	for {
		select {
		case <-s.stop:
			return
		case isLeader := <-s.leaderCh:
			s.leader.Store(isLeader)
			switch {
			case isLeader && stopLeading == nil:
				stopLeading = make(chan struct{})
				ch := stopLeading
				leading.Go(func() { s.leaderLoop(ch) })
			case !isLeader && stopLeading != nil:
				close(stopLeading)
				leading.Wait()
				stopLeading = nil
			}
		}
	}
}

// leaderLoop is the leader's work: after a barrier (so the state is
// current), seed the configuration and keep the Raft configuration in
// step with the membership. Rate shares need nothing here: they are
// ledger state, current on this replica once the barrier has passed.
func (s *Server) leaderLoop(stop <-chan struct{}) {
	if err := s.raft.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		s.log.Warn("leader barrier failed", "err", err)
		return
	}
	s.log.Info("raft leadership acquired")
	if s.cfg.Seed != nil {
		for _, c := range s.cfg.Seed() {
			if _, err := s.Apply(context.Background(), c); err != nil {
				s.log.Warn("seeding the ledger failed", "type", c.Type, "err", err)
			}
		}
	}
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		s.reconcile()
		select {
		case <-stop:
			s.log.Info("raft leadership lost")
			return
		case <-s.stop:
			return
		case <-s.nudge: // the membership changed: reconcile at the loop's top
		case <-t.C:
			s.forfeitGone()
		}
	}
}

// reconcile adds alive voters the configuration lacks and removes those
// that left the mesh (drained or left for good; one that comes back is
// added again). A voter is removed only while the voters that remain keep
// a quorum of alive ones, never the last. Failed voters stay: they may
// come back, and removing them would shrink the quorum under a partition.
func (s *Server) reconcile() {
	if s.cfg.Membership == nil {
		return
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	have := map[string]raft.Server{}
	for _, sv := range f.Configuration().Servers {
		have[string(sv.ID)] = sv
	}
	voters := s.cfg.Membership.Voters()
	alive := map[string]bool{s.cfg.ID: true}
	for _, v := range voters {
		if v.State != "failed" && v.State != "left" { // draining voters still vote
			alive[v.ID] = true
		}
	}
	for _, v := range voters {
		sv, in := have[v.ID]
		switch {
		case v.State == "alive" && v.RaftAddr != "" && (!in || string(sv.Address) != v.RaftAddr):
			if err := s.raft.AddVoter(raft.ServerID(v.ID), raft.ServerAddress(v.RaftAddr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
				s.log.Warn("could not add a voter", "voter", v.ID, "err", err)
			} else {
				s.log.Info("voter added", "voter", v.ID, "addr", v.RaftAddr)
			}
		case v.State == "left" && in && v.ID != s.cfg.ID:
			if !quorumWithout(have, alive, v.ID) {
				s.log.Warn("a voter left, but removing it would leave no quorum of alive voters: it stays", "voter", v.ID)
				continue
			}
			if err := s.raft.RemoveServer(raft.ServerID(v.ID), 0, s.cfg.ApplyTimeout).Error(); err != nil {
				s.log.Warn("could not remove a voter that left", "voter", v.ID, "err", err)
			} else {
				delete(have, v.ID)
				s.log.Info("voter removed", "voter", v.ID)
			}
		}
	}
}

// quorumWithout reports whether the configuration have, less the voter
// id, still has a majority of alive voters.
func quorumWithout(have map[string]raft.Server, alive map[string]bool, id string) bool {
	total, up := 0, 0
	for sid, sv := range have {
		if sid == id || sv.Suffrage != raft.Voter {
			continue
		}
		total++
		if alive[sid] {
			up++
		}
	}
	if total == 0 {
		return false
	}
	return up >= total/2+1
}

// forfeitGone writes off the escrow of nodes gone from the mesh whose
// leases expired more than ForfeitGrace ago: they cannot report any more,
// and their escrow would otherwise stay reserved for the whole period.
func (s *Server) forfeitGone() {
	if s.cfg.Membership == nil {
		return
	}
	before := s.now().Add(-ForfeitGrace).UnixNano()
	var nodes []string
	s.fsm.Read(func(l *Ledger) { nodes = l.ExpiredLeases(before) })
	for _, node := range nodes {
		if !s.cfg.Membership.Gone(node) {
			continue
		}
		c, _ := newCommand("", CmdForfeit, map[string]any{"node": node, "expired_before": before})
		if _, err := s.Apply(context.Background(), c); err != nil {
			s.log.Warn("could not write off a gone node's escrow", "node", node, "err", err)
		} else {
			s.log.Info("escrow of a gone node written off as spent", "node", node)
		}
	}
}

// Reconcile asks the leader, if this voter leads, to match the Raft
// configuration to the membership now rather than at its next tick. It
// never blocks.
func (s *Server) Reconcile() {
	select {
	case s.nudge <- struct{}{}:
	default:
	}
}

// IsLeader reports whether this voter leads.
func (s *Server) IsLeader() bool { return s.raft != nil && s.raft.State() == raft.Leader }

// Leader returns the leader's server ID, if one is known.
func (s *Server) Leader() (string, bool) {
	if s.raft == nil {
		return "", false
	}
	_, id := s.raft.LeaderWithID()
	return string(id), id != ""
}

// Apply stamps cmd with this leader's clock and applies it through Raft,
// waiting for it to commit. It fails with ErrNotLeader on a follower.
func (s *Server) Apply(ctx context.Context, cmd Command) (Result, error) {
	if !s.IsLeader() {
		return Result{}, ErrNotLeader
	}
	cmd.Time = s.now().UnixNano()
	b, err := json.Marshal(cmd)
	if err != nil {
		return Result{}, err
	}
	timeout := s.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if timeout <= 0 {
		return Result{}, context.DeadlineExceeded
	}
	start := time.Now()
	f := s.raft.Apply(b, timeout)
	// raft's timeout bounds only the enqueue; the wait for the commit is
	// bounded here. (The future resolves later, at the latest when Raft
	// shuts down; its waiter ends then.)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-time.After(timeout):
		return Result{}, fmt.Errorf("consensus: apply: %w after %v", context.DeadlineExceeded, timeout)
	}
	if err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return Result{}, ErrNotLeader
		}
		return Result{}, fmt.Errorf("consensus: apply: %w", err)
	}
	if s.applyObserver != nil {
		s.applyObserver(time.Since(start))
	}
	r, _ := f.Response().(Result)
	return r, nil
}

// ReadLinearizable runs fn on a state that reflects every write committed
// before the call: the leader confirms its leadership and applies what it
// has committed first (a Raft barrier).
func (s *Server) ReadLinearizable(fn func(*Ledger)) error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	if err := s.raft.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("consensus: barrier: %w", err)
	}
	s.fsm.Read(fn)
	return nil
}

// Peer is one server of the Raft configuration.
type Peer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
}

// Peers returns the Raft configuration as this voter knows it.
func (s *Server) Peers() ([]Peer, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leader := s.raft.LeaderWithID()
	var out []Peer
	for _, sv := range f.Configuration().Servers {
		out = append(out, Peer{ID: string(sv.ID), Address: string(sv.Address), Voter: sv.Suffrage == raft.Voter, Leader: sv.ID == leader})
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Stats returns raft's own statistics (state, term, indexes, last contact).
func (s *Server) Stats() map[string]string {
	if s.raft == nil {
		return nil
	}
	return s.raft.Stats()
}

// LastContact is when this voter last heard from the leader.
func (s *Server) LastContact() time.Time {
	if s.raft == nil {
		return time.Time{}
	}
	return s.raft.LastContact()
}

// State returns the Raft state: Leader, Follower, Candidate, Shutdown.
func (s *Server) State() string {
	if s.raft == nil {
		return "Shutdown"
	}
	return s.raft.State().String()
}

// Snapshot takes a Raft snapshot now (it also happens on its own after
// SnapshotThreshold entries).
func (s *Server) Snapshot() error { return s.raft.Snapshot().Error() }

// TransferLeadership hands leadership to another voter, if this one
// leads. Rate shares and escrow are ledger state: the next leader holds
// them already.
func (s *Server) TransferLeadership() error {
	if !s.IsLeader() {
		return nil
	}
	return s.raft.LeadershipTransfer().Error()
}

// applyRates applies one node's renewal of its rate shares (boot: its
// process, 0 if unknown) and returns the grants, their lease and when to
// renew. It fails with ErrNotLeader on a follower.
func (s *Server) applyRates(ctx context.Context, node string, boot int64, demands []Demand) ([]Grant, time.Duration, time.Duration, error) {
	c, err := ratesCommand(node, boot, demands, s.rateLease, s.rateWindow+RateSlack)
	if err != nil {
		return nil, 0, 0, err
	}
	r, err := s.Apply(ctx, c)
	switch {
	case err != nil:
		return nil, 0, 0, err
	case r.Err != "":
		return nil, 0, 0, fmt.Errorf("ledger: %s", r.Err)
	case r.Rates == nil && len(demands) > 0:
		return nil, 0, 0, errNoRates
	}
	out := make([]Grant, len(r.Rates))
	for i, g := range r.Rates {
		out[i] = g.Grant()
	}
	return out, s.rateLease, rateRefresh(s.rateLease), nil
}

// RemoveSelf asks the leader (this voter, if it leads) to drop this voter
// from the configuration, for a voter leaving for good.
func (s *Server) RemoveSelf() error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	return s.raft.RemoveServer(raft.ServerID(s.cfg.ID), 0, s.cfg.ApplyTimeout).Error()
}

// Shutdown stops Raft and closes its stores. It is idempotent.
func (s *Server) Shutdown() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		if s.raft != nil {
			err = s.raft.Shutdown().Error()
		}
		s.wg.Wait()
		if c, ok := s.trans.(interface{ Close() error }); ok && s.cfg.Transport == nil {
			_ = c.Close()
		}
		s.closeStores()
	})
	return err
}

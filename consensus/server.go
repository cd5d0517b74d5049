package consensus

import (
	"cmp"
	"context"
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
	// Version is the ledger version its build supports, as it
	// advertises it (LedgerVersion); 0 when it advertises none.
	Version int
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

	// warned are the voters the leader warned of as too old to be
	// added, or to stay, with the version they advertised then; its
	// loop's alone, and cleared when it starts leading.
	warned map[string]int
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
	s := &Server{
		cfg:        cfg,
		fsm:        NewFSM(),
		log:        cfg.Logger,
		now:        cfg.Clock,
		rateLease:  cmp.Or(cfg.RateLease, time.Duration(defaultRateLease)),
		rateWindow: cmp.Or(cfg.RateWindow, time.Duration(defaultRateWindow)),
		nudge:      make(chan struct{}, 1),
		leaderCh:   make(chan bool, 8),
		stop:       make(chan struct{}),
		warned:     map[string]int{},
	}
	s.fsm.versionAhead = func(v int) {
		s.log.Error("the ledger's agreed version is above what this build supports: upgrade this node's llmesh, "+
			"as its replica ignores the commands it cannot read", "ledger_version", v, "supported", LedgerVersion)
	}
	return s, nil
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

// Peer is one server of the Raft configuration.
type Peer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
	// Version is the ledger version its build supports: this voter's
	// own, the others' as they advertise it in gossip (0 for none, or
	// not seen).
	Version int `json:"ledger_version"`
}

// Peers returns the Raft configuration as this voter knows it.
func (s *Server) Peers() ([]Peer, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leader := s.raft.LeaderWithID()
	adv := s.advertised()
	var out []Peer
	for _, sv := range f.Configuration().Servers {
		out = append(out, Peer{ID: string(sv.ID), Address: string(sv.Address), Voter: sv.Suffrage == raft.Voter, Leader: sv.ID == leader,
			Version: adv[string(sv.ID)].Version})
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

// RemoveSelf asks the leader (this voter, if it leads) to drop this voter
// from the configuration, for a voter leaving for good.
func (s *Server) RemoveSelf() error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	return s.raft.RemoveServer(raft.ServerID(s.cfg.ID), 0, s.cfg.ApplyTimeout).Error()
}

// AwaitRemoval waits, for a voter leaving for good (after it handed
// leadership over), until it is no longer in the Raft configuration: as
// its own log has it, or as elsewhere (the leader, asked) reports. The
// leader removes a voter that left the mesh; should leadership come
// back to this voter meanwhile (it won an election before the one it
// handed over to was heard from), it removes itself, which makes it step
// down, rather than lead a ledger it no longer serves. It reports
// whether the removal was seen before ctx ended, and whether this voter
// did it itself.
func (s *Server) AwaitRemoval(ctx context.Context, elsewhere func(context.Context) bool) (removed, itself bool) {
	for {
		if s.IsLeader() && s.RemoveSelf() == nil {
			return true, true
		}
		peers, err := s.Peers()
		if err == nil && !slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == s.cfg.ID }) {
			return true, false
		}
		if elsewhere != nil && elsewhere(ctx) {
			return true, false
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, false
		case <-t.C:
		}
	}
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
		if s.cfg.Transport == nil {
			// Close drops the listener only: the pooled connections to
			// peers go too, so that their handlers of them end.
			if c, ok := s.trans.(interface{ CloseStreams() }); ok {
				c.CloseStreams()
			}
			if c, ok := s.trans.(interface{ Close() error }); ok {
				_ = c.Close()
			}
		}
		s.closeStores()
	})
	return err
}

package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/llmesh/llmesh/route"
)

// Tracker is what the mesh needs of a node's own record of its providers:
// a health view to merge peers into, and a snapshot to publish.
type Tracker interface {
	route.HealthView
	Snapshot(now time.Time) []route.ProviderState
}

// Mesh is one node's membership in the gossip pool and its share of what
// the mesh observes.
type Mesh struct {
	cfg     Config
	tracker Tracker
	load    func() Load // the node's own load; Observer, Version and TTL are the mesh's
	now     func() time.Time
	log     *slog.Logger

	st     *store
	view   *View
	coords *coords
	queue  *memberlist.TransmitLimitedQueue

	metaMu    sync.Mutex // serializes SetMeta
	meta      atomic.Pointer[Meta]
	metaBytes atomic.Pointer[[]byte]

	ml     *memberlist.Memberlist
	tr     *transport
	addr   string // advertised gossip address, set by Start
	joined atomic.Bool

	// membersMu guards the member table, kept by memberlist's event
	// callbacks: memberlist's own Node values change under its lock after
	// Members returns them, so they are copied in the callbacks instead.
	membersMu sync.Mutex
	members   map[string]Member
	departed  map[string]departure
	leaving   map[string]time.Time // members that said they are leaving

	nudge chan struct{}
	dirty atomic.Bool
	stop  chan struct{}
	wg    sync.WaitGroup

	shutdownOnce sync.Once
}

// departure is a node that is no longer a member.
type departure struct {
	node  Member
	since time.Time
}

// New builds a mesh member for a node whose own observations come from
// tracker and whose load from load. It opens nothing; Start does.
func New(cfg Config, tracker Tracker, load func() Load) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c, err := newCoords()
	if err != nil {
		return nil, err
	}
	m := &Mesh{
		cfg:     cfg,
		tracker: tracker,
		load:    load,
		now:     time.Now,
		log:     cfg.Logger,
		st: newStore(storeLimits{
			maxTTL:         2 * cfg.ObservationTTL,
			maxHold:        cfg.MaxHold,
			maxPerObserver: 4096,
			known:          cfg.KnownProvider,
		}),
		view:     newView(tracker, cfg.RecentOK),
		coords:   c,
		members:  map[string]Member{},
		departed: map[string]departure{},
		leaving:  map[string]time.Time{},
		nudge:    make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	m.queue = &memberlist.TransmitLimitedQueue{NumNodes: m.numMembers}
	if err := m.setMeta(cfg.Meta); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(&collector{m: m}); err != nil {
			return nil, fmt.Errorf("gossip metrics: %w", err)
		}
	}
	return m, nil
}

// numMembers is the queue's idea of the mesh size, read on every gossip
// round: the member table kept by the event callbacks, not a scan of
// memberlist's nodes under its lock.
func (m *Mesh) numMembers() int {
	m.membersMu.Lock()
	defer m.membersMu.Unlock()
	return max(len(m.members), 1)
}

// View returns the merged health view the planner reads.
func (m *Mesh) View() *View { return m.view }

// Start binds the gossip port, starts memberlist and the publishing loops,
// and joins through the seeds in the background, retrying with backoff
// until one answers.
func (m *Mesh) Start(ctx context.Context) error {
	tr, err := m.listen()
	if err != nil {
		return err
	}
	m.tr = tr
	mc := memberlist.DefaultLANConfig()
	if m.cfg.Memberlist != nil {
		mc = m.cfg.Memberlist()
	}
	mc.Name = m.cfg.Name
	mc.Transport = tr
	mc.BindAddr = m.cfg.BindAddr
	mc.BindPort = tr.inner.GetAutoBindPort()
	mc.AdvertiseAddr = m.cfg.AdvertiseAddr
	mc.AdvertisePort = m.cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = mc.BindPort
	}
	if len(m.cfg.SecretKey) > 0 {
		mc.SecretKey = m.cfg.SecretKey
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.Label = m.cfg.Label
	mc.Delegate = delegate{m}
	mc.Events = events{m}
	mc.Ping = m.coords
	// A node restarted on another address may take its name back once
	// the old one has been dead this long.
	mc.DeadNodeReclaimTime = 30 * time.Second
	mc.Logger = nil
	mc.LogOutput = logWriter{m.log}
	// Set before Create: memberlist's goroutines read the queue at once.
	// Each transmission goes to one peer, and memberlist's multiplier
	// (RetransmitMult × ⌈log10(n+1)⌉ sends) left about one report in
	// thirty missing a node of an eight-node mesh until push/pull caught
	// it up, tens of seconds later; twice as many sends of these small
	// messages make that rare.
	m.queue.RetransmitMult = 2 * mc.RetransmitMult
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return fmt.Errorf("gossip: %w", err)
	}
	m.ml = ml
	self := ml.LocalNode()
	m.addr = net.JoinHostPort(self.Addr.String(), strconv.Itoa(int(self.Port)))
	if len(m.cfg.Seeds) == 0 {
		m.joined.Store(true)
	} else {
		m.wg.Go(m.joinLoop)
	}
	m.wg.Go(m.reconnectLoop)
	m.wg.Go(m.publishLoop)
	m.wg.Go(m.summaryLoop)
	if len(m.cfg.SecretKey) == 0 && !net.ParseIP(self.Addr.String()).IsLoopback() {
		m.log.Warn("gossip is not encrypted: set node.gossip_key_env or node.gossip_key_file")
	}
	m.log.Info("gossip started", "addr", m.Addr(), "seeds", len(m.cfg.Seeds), "encrypted", len(m.cfg.SecretKey) > 0)
	return nil
}

// listen opens memberlist's TCP and UDP listeners. With port 0 the TCP
// listener picks a port and UDP must get the same one, which another
// process may hold: a few tries then.
func (m *Mesh) listen() (*transport, error) {
	var last error
	for range 8 {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{m.cfg.BindAddr},
			BindPort:  m.cfg.BindPort,
			Logger:    slog.NewLogLogger(m.log.Handler(), slog.LevelDebug),
		})
		if err == nil {
			return newTransport(nt), nil
		}
		last = err
		if m.cfg.BindPort != 0 {
			break
		}
	}
	return nil, fmt.Errorf("gossip: listen on %s: %w", net.JoinHostPort(m.cfg.BindAddr, strconv.Itoa(m.cfg.BindPort)), last)
}

// Addr returns the gossip address peers use, once started.
func (m *Mesh) Addr() string { return m.addr }

// Joined reports whether this node has joined the mesh: it has no seeds,
// or one of them answered.
func (m *Mesh) Joined() bool { return m.joined.Load() }

// SetMeta replaces this node's metadata and tells the mesh. Metadata that
// does not fit in MetaLimit bytes is refused with ErrMetaTooLarge and the
// old metadata stays.
func (m *Mesh) SetMeta(meta Meta) error {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	if err := m.setMeta(meta); err != nil {
		return err
	}
	if m.ml != nil {
		return m.ml.UpdateNode(m.cfg.LeaveTimeout)
	}
	return nil
}

func (m *Mesh) setMeta(meta Meta) error {
	b, err := meta.Encode()
	if err != nil {
		return err
	}
	m.meta.Store(&meta)
	m.metaBytes.Store(&b)
	return nil
}

// Meta returns this node's current metadata.
func (m *Mesh) Meta() Meta { return *m.meta.Load() }

// SetState marks this node alive or draining in its metadata.
func (m *Mesh) SetState(s NodeState) error {
	meta := m.Meta()
	meta.State = s
	return m.SetMeta(meta)
}

// Leave tells the mesh this node is going, and waits (up to the configured
// timeout) for that to be heard. Peers mark it left, not failed.
func (m *Mesh) Leave() error {
	if m.ml == nil {
		return nil
	}
	// Announce the leave first — in the metadata, and straight to every
	// member over TCP, as gossip may bring the leave itself first — so
	// that peers record this node as left rather than failed.
	if err := m.SetState(StateLeaving); err != nil {
		m.log.Warn("could not announce the leave", "err", err)
	}
	var e encoder
	e.byte1(msgLeaving)
	e.str(m.cfg.Name)
	var sends sync.WaitGroup
	for _, mem := range m.Members() {
		host, port, err := net.SplitHostPort(mem.Addr)
		p, _ := strconv.Atoi(port)
		if mem.Self || mem.State == "failed" || mem.State == "left" || err != nil {
			continue
		}
		to := &memberlist.Node{Name: mem.Name, Addr: net.ParseIP(host), Port: uint16(p)}
		sends.Go(func() { _ = m.ml.SendReliable(to, e.b) }) // each bounded by memberlist's TCP timeout
	}
	sends.Wait()
	return m.ml.Leave(m.cfg.LeaveTimeout)
}

// Shutdown stops the loops and memberlist without telling anyone: peers
// will find this node failed. Call Leave first to go gracefully. It is
// idempotent.
func (m *Mesh) Shutdown() error {
	var err error
	m.shutdownOnce.Do(func() {
		close(m.stop)
		// memberlist first, so that a join under way fails fast rather
		// than hold the loops for its TCP timeout.
		if m.ml != nil {
			err = m.ml.Shutdown()
		}
		m.wg.Wait()
	})
	return err
}

// Partition cuts this node off from the given gossip addresses (nil
// restores it). It is fault injection for tests of partitions; a running
// mesh never calls it.
func (m *Mesh) Partition(cut func(addr string) bool) {
	if cut == nil {
		m.tr.blocked.Store(nil)
		return
	}
	m.tr.blocked.Store(&cut)
}

// The event callbacks run under memberlist's node lock, so n is read
// there and nowhere else.

package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
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

// Join contacts addrs now and reports how many answered.
func (m *Mesh) Join(addrs []string) (int, error) {
	if m.ml == nil {
		return 0, errors.New("gossip: not started")
	}
	n, err := m.ml.Join(addrs)
	if n > 0 {
		m.joined.Store(true)
		err = nil
	}
	return n, err
}

func (m *Mesh) joinLoop() {
	backoff := m.cfg.JoinBackoff
	for {
		n, err := m.ml.Join(m.cfg.Seeds)
		if n > 0 {
			m.joined.Store(true)
			m.log.Info("joined the mesh", "contacted", n, "members", m.ml.NumMembers())
			return
		}
		m.log.Warn("no seed answered; retrying", "seeds", m.cfg.Seeds, "in", backoff, "err", err)
		jitter := time.Duration(rand.Int64N(int64(backoff)/4 + 1))
		select {
		case <-m.stop:
			return
		case <-time.After(backoff + jitter):
		}
		backoff = min(2*backoff, m.cfg.JoinBackoffMax)
	}
}

// reconnectLoop tries a failed member again every ReconnectInterval, as
// serf does: memberlist itself stops talking to the dead after a while, so
// without it two sides of a healed partition would stay apart.
func (m *Mesh) reconnectLoop() {
	t := time.NewTicker(m.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := m.now()
		var failed []string
		m.membersMu.Lock()
		for name, d := range m.departed {
			if d.node.State == "failed" && now.Sub(d.since) < m.cfg.ReconnectTimeout {
				failed = append(failed, d.node.Addr)
			} else if now.Sub(d.since) >= m.cfg.ReconnectTimeout {
				delete(m.departed, name)
			}
		}
		m.membersMu.Unlock()
		if len(failed) == 0 {
			continue
		}
		addr := failed[rand.IntN(len(failed))]
		if n, _ := m.ml.Join([]string{addr}); n > 0 {
			m.log.Info("reconnected to a failed member", "addr", addr)
		}
	}
}

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

func (m *Mesh) joinedNode(n *memberlist.Node) {
	m.st.join(n.Name)
	mem := m.member(n)
	m.membersMu.Lock()
	m.members[n.Name] = mem
	delete(m.departed, n.Name)
	delete(m.leaving, n.Name)
	m.membersMu.Unlock()
	if m.cfg.OnMembership != nil {
		m.cfg.OnMembership()
	}
}

func (m *Mesh) updatedNode(n *memberlist.Node) {
	mem := m.member(n)
	m.membersMu.Lock()
	if _, ok := m.members[n.Name]; ok {
		m.members[n.Name] = mem
	}
	m.membersMu.Unlock()
}

func (m *Mesh) leftNode(n *memberlist.Node) {
	now := m.now()
	m.st.leave(n.Name)
	m.coords.forget(n.Name)
	m.dirty.Store(true)
	mem := m.member(n)
	m.membersMu.Lock()
	mem.State = "failed"
	if said, ok := m.leaving[n.Name]; (ok && now.Sub(said) < leavingValid) || mem.Meta.State == StateLeaving {
		mem.State = "left"
	}
	delete(m.leaving, n.Name)
	delete(m.members, n.Name)
	m.departed[n.Name] = departure{node: mem, since: now}
	for name, d := range m.departed { // bounded: forget the long gone
		if now.Sub(d.since) > time.Hour {
			delete(m.departed, name)
		}
	}
	m.membersMu.Unlock()
	m.log.Info("member gone", "member", n.Name, "state", mem.State)
	if m.cfg.OnMembership != nil {
		m.cfg.OnMembership()
	}
}

// leavingValid is how long a member's word that it is leaving explains its
// departure: one that said so and then failed later did not leave.
const leavingValid = 30 * time.Second

// recvMsg merges a gossiped message or a push/pull state. New reports
// from gossip are passed on, so they spread epidemically; push/pull state
// is not, as every pair of nodes exchanges it anyway.
func (m *Mesh) recvMsg(b []byte, relay bool) {
	now := m.now()
	d := decoder{b: b[1:]}
	switch b[0] {
	case msgObservation:
		if o, err := decodeObservation(&d); err == nil && m.st.mergeObservation(o, now) {
			m.dirty.Store(true)
			if relay {
				m.queueObservation(m.st.record(o.Observer, o.Provider))
			}
		}
	case msgLoad:
		if l, err := decodeLoad(&d); err == nil && m.st.mergeLoad(l, now) && relay {
			m.queueLoad(m.st.loadRecordOf(l.Observer))
		}
	case msgLeaving:
		if name := d.str(); d.err == nil && name != "" {
			m.membersMu.Lock()
			if _, ok := m.members[name]; ok {
				m.leaving[name] = now
			}
			m.membersMu.Unlock()
		}
	case msgState:
		if d.byte1() < stateVersion || d.err != nil {
			return
		}
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			// A state holds reports only, never another state.
			if rec := d.bytes(); len(rec) > 0 && (rec[0] == msgObservation || rec[0] == msgLoad) {
				m.recvMsg(rec, false)
			}
		}
	}
}

// queueObservation queues r for gossip. Each transmission encodes it
// afresh from its deadlines (see broadcast), so relays never stretch a
// time to live or a cooldown by the time they spent queued.
func (m *Mesh) queueObservation(r *obsRecord) {
	if r == nil {
		return
	}
	rec := *r
	m.queue.QueueBroadcast(&broadcast{name: "o\x00" + rec.Observer + "\x00" + rec.Provider, render: func(e *encoder) {
		o := rec.current(m.now())
		o.encode(e)
	}})
}

func (m *Mesh) queueLoad(l *loadRecord) {
	if l == nil {
		return
	}
	rec := *l
	m.queue.QueueBroadcast(&broadcast{name: "l\x00" + rec.Observer, render: func(e *encoder) {
		c := rec.current(m.now())
		c.encode(e)
	}})
}

// encodeState is the push/pull state: every fresh report, as it stands.
func (m *Mesh) encodeState() []byte {
	now := m.now()
	obs, loads := m.st.snapshot(now)
	var e encoder
	e.byte1(msgState)
	e.byte1(stateVersion)
	e.uvarint(uint64(len(obs) + len(loads)))
	var rec encoder
	for i := range obs {
		rec.b = rec.b[:0]
		o := obs[i].current(now)
		o.encode(&rec)
		e.bytes(rec.b)
	}
	for i := range loads {
		rec.b = rec.b[:0]
		l := loads[i].current(now)
		l.encode(&rec)
		e.bytes(rec.b)
	}
	return e.b
}

// Changed asks for this node's observations to be published now, rather
// than at the next interval. It never blocks.
func (m *Mesh) Changed() {
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

// published is what this node last said of one provider.
type published struct {
	obs Observation
	at  time.Time
}

func (m *Mesh) publishLoop() {
	t := time.NewTicker(m.cfg.PublishInterval)
	defer t.Stop()
	last := map[string]published{}
	var lastLoad struct {
		inFlight int
		spare    []Spare
		at       time.Time
	}
	var version uint64
	next := func(now time.Time) uint64 {
		// Versions order one node's reports, across restarts too.
		version = max(version+1, uint64(now.UnixNano()))
		return version
	}
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		case <-m.nudge:
		}
		now := m.now()
		refresh := m.cfg.ObservationTTL / 3
		for _, ps := range m.tracker.Snapshot(now) {
			held := now.Before(ps.EjectedUntil) || now.Before(ps.Health.CoolingUntil)
			if ps.LastAttempt.IsZero() || (now.Sub(ps.LastAttempt) > m.cfg.ObservationTTL && !held) {
				// Never called, or not for a while: nothing current to
				// say; what was said expires.
				continue
			}
			o := observationOf(m.cfg.Name, ps, now, m.cfg.ObservationTTL)
			prev, ok := last[ps.Provider]
			if ok && !materialChange(prev.obs, o) && now.Sub(prev.at) < refresh {
				continue
			}
			o.Version = next(now)
			if m.st.mergeObservation(o, now) {
				m.queueObservation(m.st.record(o.Observer, o.Provider))
			}
			last[ps.Provider] = published{obs: o, at: now}
			m.dirty.Store(true)
		}
		if m.load != nil {
			l := m.load()
			if now.Sub(lastLoad.at) >= refresh || loadChanged(lastLoad.inFlight, l.InFlight) || sparesChanged(lastLoad.spare, l.Spare) {
				l.Observer, l.Version, l.TTL = m.cfg.Name, next(now), m.cfg.ObservationTTL
				if m.st.mergeLoad(l, now) {
					m.queueLoad(m.st.loadRecordOf(l.Observer))
				}
				lastLoad.inFlight, lastLoad.spare, lastLoad.at = l.InFlight, l.Spare, now
			}
		}
	}
}

func observationOf(self string, ps route.ProviderState, now time.Time, ttl time.Duration) Observation {
	o := Observation{
		Observer: self, Provider: ps.Provider, TTL: ttl,
		TTFT: ps.Health.TTFT, Latency: ps.Health.Latency, ErrorRate: ps.Health.ErrorRate,
		IdleFor:           now.Sub(ps.LastAttempt),
		RemainingRequests: ps.RemainingRequests, RemainingTokens: ps.RemainingTokens,
	}
	if !ps.EjectedUntil.IsZero() {
		o.Ejected = true
		o.EjectedFor = max(ps.EjectedUntil.Sub(now), 0)
	}
	if c := ps.Health.CoolingUntil; c.After(now) {
		o.CoolingFor = c.Sub(now)
	}
	return o
}

// materialChange reports whether o says something the mesh should hear
// before the next refresh: a change of availability, an error rate that
// moved, latency that moved by a fifth, a rate window that emptied.
func materialChange(prev, o Observation) bool {
	switch {
	case prev.Ejected != o.Ejected,
		(prev.CoolingFor > 0) != (o.CoolingFor > 0),
		o.CoolingFor > prev.CoolingFor+time.Second,
		(prev.ErrorRate >= failingErrorRate) != (o.ErrorRate >= failingErrorRate),
		math.Abs(prev.ErrorRate-o.ErrorRate) >= 0.1,
		moved(prev.TTFT, o.TTFT), moved(prev.Latency, o.Latency),
		(prev.RemainingRequests == 0) != (o.RemainingRequests == 0),
		(prev.RemainingTokens == 0) != (o.RemainingTokens == 0):
		return true
	}
	return false
}

func moved(a, b time.Duration) bool {
	if a == 0 || b == 0 {
		return a != b
	}
	r := float64(b) / float64(a)
	return r > 1.2 || r < 1/1.2
}

// sparesChanged reports whether spare rate shares moved enough to tell:
// a provider's share ran out or came back, or moved by a fifth.
func sparesChanged(prev, cur []Spare) bool {
	if len(prev) != len(cur) {
		return true
	}
	for i := range cur {
		p, c := prev[i], cur[i]
		if p.Provider != c.Provider || (p.Requests == 0) != (c.Requests == 0) ||
			float64(abs(c.Requests-p.Requests)) > 0.2*float64(max(p.Requests, 1)) {
			return true
		}
	}
	return false
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// loadChanged reports whether in-flight requests moved enough to tell.
func loadChanged(prev, cur int) bool {
	d := cur - prev
	return d > 4 || d < -4 || (prev == 0) != (cur == 0)
}

// summaryLoop keeps the planner's view of the peers fresh, expires old
// reports and keeps the broadcast queue bounded.
func (m *Mesh) summaryLoop() {
	t := time.NewTicker(m.cfg.SummaryInterval)
	defer t.Stop()
	var lastFull time.Time
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		now := m.now()
		full := now.Sub(lastFull) >= time.Second
		if full {
			lastFull = now
			if m.st.expire(now) > 0 {
				m.dirty.Store(true)
			}
			// (Prune panics on a queue that never held anything.)
			if m.queue.NumQueued() > m.cfg.MaxQueued {
				m.queue.Prune(m.cfg.MaxQueued)
			}
		}
		if m.dirty.Swap(false) || full {
			m.view.update(m.st.summarize(m.cfg.Name, now, m.cfg.ObservationTTL))
		}
	}
}

// Member is one node of the mesh as this node sees it.
type Member struct {
	Name  string
	Addr  string // gossip host:port
	Meta  Meta
	State string // alive, draining, leaving, failed or left
	// RTT is the estimated round trip from this node; RTTKnown is false
	// until coordinates have been exchanged.
	RTT      time.Duration
	RTTKnown bool
	Self     bool
}

func (m *Mesh) member(n *memberlist.Node) Member {
	meta, _ := DecodeMeta(n.Meta)
	mem := Member{
		Name: n.Name,
		Addr: net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port))),
		Meta: meta,
		Self: n.Name == m.cfg.Name,
	}
	// memberlist's Node.State is not kept current (its own nodeState is),
	// so a member listed is alive as far as this node can tell; departed
	// ones are kept by leftNode.
	switch meta.State {
	case StateDraining:
		mem.State = "draining"
	case StateLeaving:
		mem.State = "leaving"
	default:
		mem.State = "alive"
	}
	return mem
}

// Members returns every node this node knows of, the departed included,
// sorted by name, with the estimated RTT to each.
func (m *Mesh) Members() []Member {
	m.membersMu.Lock()
	out := make([]Member, 0, len(m.members)+len(m.departed))
	for _, mem := range m.members {
		out = append(out, mem)
	}
	for _, d := range m.departed {
		out = append(out, d.node)
	}
	m.membersMu.Unlock()
	for i := range out {
		if mem := &out[i]; !mem.Self && mem.State != "failed" && mem.State != "left" {
			mem.RTT, mem.RTTKnown = m.coords.rtt(mem.Name)
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return cmpStr(a.Name, b.Name) })
	return out
}

// AliveInRegion returns the names of the alive, non-draining members of
// region, sorted.
func (m *Mesh) AliveInRegion(region string) []string {
	var out []string
	for _, mem := range m.Members() {
		if mem.State == "alive" && mem.Meta.Region == region {
			out = append(out, mem.Name)
		}
	}
	return out
}

// RTT estimates the round trip to the named member.
func (m *Mesh) RTT(name string) (time.Duration, bool) { return m.coords.rtt(name) }

// ProviderReport is one node's observation of one provider, as this node
// holds it: the row of GET /v1/mesh/providers.
type ProviderReport struct {
	Provider     string        `json:"provider"`
	Observer     string        `json:"observer"`
	Version      uint64        `json:"version"`
	Age          time.Duration `json:"age_ns"`
	TTFT         time.Duration `json:"ttft_ns"`
	Latency      time.Duration `json:"latency_ns"`
	ErrorRate    float64       `json:"error_rate"`
	Ejected      bool          `json:"ejected"`
	EjectedFor   time.Duration `json:"ejected_for_ns"`
	CoolingFor   time.Duration `json:"cooling_for_ns"`
	IdleFor      time.Duration `json:"idle_for_ns"`
	RemainingReq int64         `json:"remaining_requests"`
	RemainingTok int64         `json:"remaining_tokens"`
}

// Reports returns every fresh observation this node holds, its own
// included, sorted by provider and observer.
func (m *Mesh) Reports() []ProviderReport {
	now := m.now()
	obs, _ := m.st.snapshot(now)
	out := make([]ProviderReport, 0, len(obs))
	for i := range obs {
		r := &obs[i]
		c := r.current(now)
		out = append(out, ProviderReport{
			Provider: c.Provider, Observer: c.Observer, Version: c.Version, Age: now.Sub(r.Received),
			TTFT: c.TTFT, Latency: c.Latency, ErrorRate: c.ErrorRate, Ejected: c.Ejected && c.EjectedFor > 0,
			EjectedFor: c.EjectedFor, CoolingFor: c.CoolingFor, IdleFor: c.IdleFor,
			RemainingReq: c.RemainingRequests, RemainingTok: c.RemainingTokens,
		})
	}
	return out
}

// Loads returns each node's fresh load report, by name.
func (m *Mesh) Loads() map[string]Load {
	_, loads := m.st.snapshot(m.now())
	out := make(map[string]Load, len(loads))
	for _, l := range loads {
		out[l.Observer] = l.Load
	}
	return out
}

// QueueDepth returns how many broadcasts wait to be sent.
func (m *Mesh) QueueDepth() int { return m.queue.NumQueued() }

// Bytes returns the gossip bytes this node has sent and received.
func (m *Mesh) Bytes() (sent, received uint64) {
	if m.tr == nil {
		return 0, 0
	}
	return m.tr.sent.Load(), m.tr.recv.Load()
}

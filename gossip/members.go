package gossip

// The membership as this node sees it: memberlist's join, update and
// leave events, the members with their metadata and state, and what they
// report.

import (
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

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

package forward

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// viaRefresh is how old the view's snapshot of gossip may be.
const viaRefresh = 250 * time.Millisecond

// Source is what View reads of gossip (a *gossip.Mesh).
type Source interface {
	Members() []gossip.Member
	Loads() map[string]gossip.Load
}

// View is route.MeshView and route.SpareView over gossip: the via node
// for a region is chosen among its alive, non-draining members that take
// forwards, by RTT and load (region.Nearest). What gossip knows is
// gathered at most every viaRefresh, not per request.
type View struct {
	mesh Source
	mu   sync.Mutex
	at   time.Time
	snap atomic.Pointer[snapshot]
}

var (
	_ route.MeshView      = (*View)(nil)
	_ route.SpareView     = (*View)(nil)
	_ route.RemoteEngines = (*View)(nil)
)

// NewView returns the view of mesh.
func NewView(mesh Source) *View { return &View{mesh: mesh} }

type snapshot struct {
	byRegion map[string][]region.Candidate
	byName   map[string]gossip.Member
	load     map[string]int64 // requests in flight, by node
	// spares are the peers with rate share left, by provider, nearest
	// first.
	spares map[string][]spareNode
	// engines are other nodes' reports of self-hosted providers, by
	// provider and the reporting node's region: the one with the most
	// fresh replicas (the fuller queue on a tie).
	engines map[engineKey]route.RemoteEngine
}

type engineKey struct{ provider, region string }

type spareNode struct {
	name, region string
	jurisdiction region.Jurisdiction
	rtt          time.Duration
	requests     int
}

// Via implements route.MeshView: the nearest, least loaded node of the
// region that serves a forward of api.
func (v *View) Via(regionName string, api route.API) (string, time.Duration, bool) {
	snap := v.snapshot()
	cs := snap.byRegion[regionName]
	if api != route.APIChat {
		cs = slices.DeleteFunc(slices.Clone(cs), func(c region.Candidate) bool { return !api.In(snap.byName[c.Name].Meta.APIs) })
	}
	i := region.Nearest(cs)
	if i < 0 {
		return "", 0, false
	}
	return cs[i].Name, cs[i].RTT, true
}

// Spare implements route.SpareView from the peers' gossiped load
// reports (at most viaRefresh old, plus gossip's delay): a peer whose
// share ran out since answers that it is over it, and the request moves
// on.
func (v *View) Spare(provider, inRegion string, j region.Jurisdiction, i int) (string, string, time.Duration, bool) {
	for _, c := range v.snapshot().spares[provider] {
		if c.requests > 0 && (inRegion == "" || c.region == inRegion) && (j == "" || c.jurisdiction == j) {
			if i == 0 {
				return c.name, c.region, c.rtt, true
			}
			i--
		}
	}
	return "", "", 0, false
}

// Engine implements route.RemoteEngines from the load reports of the
// alive nodes of regionName (at most viaRefresh old, plus gossip's
// delay, and never past their TTL).
func (v *View) Engine(provider, regionName string) (route.RemoteEngine, bool) {
	e, ok := v.snapshot().engines[engineKey{provider, regionName}]
	return e, ok
}

// Member returns the member called name as gossip knew it lately.
func (v *View) Member(name string) (gossip.Member, bool) {
	m, ok := v.snapshot().byName[name]
	return m, ok
}

// Peer is a member as gossip knew it lately, with its load.
type Peer struct {
	gossip.Member
	// Load is its requests in flight.
	Load int64
}

// Peers returns every member gossip knew of lately, this node included,
// by name.
func (v *View) Peers() []Peer {
	snap := v.snapshot()
	out := make([]Peer, 0, len(snap.byName))
	for _, m := range snap.byName {
		out = append(out, Peer{Member: m, Load: snap.load[m.Name]})
	}
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (v *View) snapshot() *snapshot {
	now := time.Now()
	if m := v.snap.Load(); m != nil {
		if !v.mu.TryLock() {
			return m // another request is refreshing it
		}
		defer v.mu.Unlock()
		if now.Sub(v.at) < viaRefresh {
			return m
		}
	} else {
		v.mu.Lock()
		defer v.mu.Unlock()
	}
	v.at = now
	loads := v.mesh.Loads()
	out := &snapshot{byRegion: map[string][]region.Candidate{}, byName: map[string]gossip.Member{}, load: map[string]int64{},
		spares: map[string][]spareNode{}, engines: map[engineKey]route.RemoteEngine{}}
	for _, mem := range v.mesh.Members() {
		out.byName[mem.Name] = mem
		out.load[mem.Name] = int64(loads[mem.Name].InFlight)
		if mem.Self || mem.State != "alive" || mem.Meta.RPC == "" {
			continue
		}
		for _, g := range loads[mem.Name].Engines {
			k := engineKey{g.Provider, mem.Meta.Region}
			old, seen := out.engines[k]
			if g.Replicas > 0 && (!seen || g.Replicas > old.Replicas || g.Replicas == old.Replicas && g.Waiting > old.Waiting) {
				out.engines[k] = route.RemoteEngine{Replicas: g.Replicas, Running: g.Running, Waiting: g.Waiting, KVUsage: g.KVUsage}
			}
		}
		for _, s := range loads[mem.Name].Spare {
			out.spares[s.Provider] = append(out.spares[s.Provider], spareNode{name: mem.Name, region: mem.Meta.Region,
				jurisdiction: region.Jurisdiction(mem.Meta.Jurisdiction), rtt: mem.RTT, requests: s.Requests})
		}
		out.byRegion[mem.Meta.Region] = append(out.byRegion[mem.Meta.Region], region.Candidate{
			Name: mem.Name, RTT: mem.RTT, RTTKnown: mem.RTTKnown, Load: int64(loads[mem.Name].InFlight),
		})
	}
	for _, cs := range out.spares {
		slices.SortStableFunc(cs, func(a, b spareNode) int { return cmp.Compare(a.rtt, b.rtt) })
	}
	v.snap.Store(out)
	return out
}

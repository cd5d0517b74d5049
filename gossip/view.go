package gossip

import (
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/route"
)

// View is the mesh's view of provider health: this node's own tracker,
// with what its peers observe merged in. It implements route.HealthView.
// Reads take no lock and do no I/O: they look up a summary of the peers'
// observations that the mesh rebuilds in the background.
type View struct {
	local route.HealthView
	// recentOK is how recent a success of this node's own must be to
	// outweigh peers that see the provider failing.
	recentOK time.Duration
	sums     atomic.Pointer[map[string]*summary]
}

var _ route.HealthView = (*View)(nil)

func newView(local route.HealthView, recentOK time.Duration) *View {
	v := &View{local: local, recentOK: recentOK}
	empty := map[string]*summary{}
	v.sums.Store(&empty)
	return v
}

// Health implements route.HealthView:
//   - a 429 cooldown any peer learned holds here too;
//   - a provider that at least half the peers reporting on it see failing
//     is Degraded (ranked down) unless this node itself had a good answer
//     from it recently;
//   - peers' latency fills in for a provider this node has not measured.
func (v *View) Health(provider string, now time.Time) route.Health {
	h := v.local.Health(provider, now)
	s := (*v.sums.Load())[provider]
	if s == nil {
		return h
	}
	if s.CoolingUntil.After(now) && s.CoolingUntil.After(h.CoolingUntil) {
		h.CoolingUntil = s.CoolingUntil
	}
	if s.Failing > 0 && 2*s.Failing >= s.Observers && now.Sub(h.LastOK) > v.recentOK {
		h.Degraded = true
	}
	if h.TTFT == 0 {
		h.TTFT = s.TTFT
	}
	if h.Latency == 0 {
		h.Latency = s.Latency
	}
	return h
}

func (v *View) update(m map[string]*summary) { v.sums.Store(&m) }

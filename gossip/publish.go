package gossip

// Publishing this node's own observations and load (when nudged and at
// each interval, only what changed materially), and the summary loop that
// keeps the planner's view of the peers fresh and the queue bounded.

import (
	"math"
	"time"

	"github.com/llmesh/llmesh/route"
)

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
		engines  []Engine
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
			if now.Sub(lastLoad.at) >= refresh || loadChanged(lastLoad.inFlight, l.InFlight) || sparesChanged(lastLoad.spare, l.Spare) ||
				enginesChanged(lastLoad.engines, l.Engines) {
				l.Observer, l.Version, l.TTL = m.cfg.Name, next(now), m.cfg.ObservationTTL
				if m.st.mergeLoad(l, now) {
					m.queueLoad(m.st.loadRecordOf(l.Observer))
				}
				lastLoad.inFlight, lastLoad.spare, lastLoad.engines, lastLoad.at = l.InFlight, l.Spare, l.Engines, now
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

// enginesChanged reports whether a self-hosted provider's room moved
// enough to tell: replicas came or went, its queue started or emptied or
// moved by a fifth, or its KV cache moved by a tenth.
func enginesChanged(prev, cur []Engine) bool {
	if len(prev) != len(cur) {
		return true
	}
	for i := range cur {
		p, c := prev[i], cur[i]
		if p.Provider != c.Provider || p.Replicas != c.Replicas || (p.Waiting == 0) != (c.Waiting == 0) ||
			float64(abs(c.Waiting-p.Waiting)) > 0.2*float64(max(p.Waiting, 1)) ||
			loadChanged(p.Running, c.Running) || math.Abs(c.KVUsage-p.KVUsage) >= 0.1 {
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

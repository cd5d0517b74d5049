package gossip

import (
	"slices"
	"sync"
	"time"
)

// store holds the freshest observation of each (observer, provider) and
// the freshest load report of each node, with deadlines turned into this
// node's clock on arrival.
type store struct {
	mu      sync.RWMutex
	obs     map[obsKey]*obsRecord
	loads   map[string]*loadRecord
	members map[string]bool // observers currently alive in the membership
	// floor is the highest version seen of a node before it left: a
	// relayed report of its previous life must not come back.
	floor map[string]floorMark
}

type obsKey struct{ observer, provider string }

// obsRecord is an observation as this node holds it.
type obsRecord struct {
	Observation
	Received     time.Time
	Expires      time.Time
	EjectedUntil time.Time
	CoolingUntil time.Time
	LastAttempt  time.Time
}

type loadRecord struct {
	Load
	Received, Expires time.Time
}

type floorMark struct {
	version uint64
	at      time.Time
}

func newStore() *store {
	return &store{
		obs:     map[obsKey]*obsRecord{},
		loads:   map[string]*loadRecord{},
		members: map[string]bool{},
		floor:   map[string]floorMark{},
	}
}

// accepts reports whether a report of version from observer may be kept.
func (s *store) accepts(observer string, version uint64) bool {
	if !s.members[observer] {
		return false
	}
	f, ok := s.floor[observer]
	return !ok || version > f.version
}

// mergeObservation keeps o if it is newer than what is held, and reports
// whether it was new (and so worth passing on).
func (s *store) mergeObservation(o Observation, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.accepts(o.Observer, o.Version) {
		return false
	}
	k := obsKey{o.Observer, o.Provider}
	if cur := s.obs[k]; cur != nil && cur.Version >= o.Version {
		return false
	}
	r := &obsRecord{Observation: o, Received: now, Expires: now.Add(o.TTL), LastAttempt: now.Add(-o.IdleFor)}
	if o.Ejected {
		r.EjectedUntil = now.Add(o.EjectedFor)
	}
	if o.CoolingFor > 0 {
		r.CoolingUntil = now.Add(o.CoolingFor)
	}
	s.obs[k] = r
	return true
}

// mergeLoad keeps l if it is newer than what is held.
func (s *store) mergeLoad(l Load, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.accepts(l.Observer, l.Version) {
		return false
	}
	if cur := s.loads[l.Observer]; cur != nil && cur.Version >= l.Version {
		return false
	}
	s.loads[l.Observer] = &loadRecord{Load: l, Received: now, Expires: now.Add(l.TTL)}
	return true
}

// join marks name alive: its reports are accepted from now on.
func (s *store) join(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[name] = true
}

// leave drops everything name reported and refuses its reports until it
// joins again; reports of its previous life stay refused even then.
func (s *store) leave(name string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.members, name)
	top := s.floor[name].version
	for k, r := range s.obs {
		if k.observer == name {
			top = max(top, r.Version)
			delete(s.obs, k)
		}
	}
	if l := s.loads[name]; l != nil {
		top = max(top, l.Version)
		delete(s.loads, name)
	}
	s.floor[name] = floorMark{version: top, at: now}
}

// expire drops reports past their time to live, and floors older than
// keep (a node gone that long is not coming back with old reports).
func (s *store) expire(now time.Time, keep time.Duration) (dropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range s.obs {
		if !now.Before(r.Expires) {
			delete(s.obs, k)
			dropped++
		}
	}
	for k, l := range s.loads {
		if !now.Before(l.Expires) {
			delete(s.loads, k)
			dropped++
		}
	}
	for k, f := range s.floor {
		if now.Sub(f.at) > keep {
			delete(s.floor, k)
		}
	}
	return dropped
}

// summary is what the rest of the mesh says of one provider, reduced to
// what planning needs.
type summary struct {
	Observers int // peers with a fresh observation
	Failing   int // of which see it ejected or mostly failing
	// CoolingUntil is the latest 429 cooldown any peer reported.
	CoolingUntil time.Time
	// TTFT and Latency are the mean of the peers' averages; 0 if none.
	TTFT, Latency time.Duration
}

// failingErrorRate is the error rate at which a peer counts as seeing a
// provider fail even before its outlier detector ejects it.
const failingErrorRate = 0.5

// summarize reduces the fresh observations of nodes other than self to one
// summary per provider.
func (s *store) summarize(self string, now time.Time) map[string]*summary {
	type acc struct {
		summary
		ttftN, latN int
		ttft, lat   time.Duration
	}
	accs := map[string]*acc{}
	s.mu.RLock()
	for k, r := range s.obs {
		if k.observer == self || !now.Before(r.Expires) {
			continue
		}
		a := accs[k.provider]
		if a == nil {
			a = &acc{}
			accs[k.provider] = a
		}
		a.Observers++
		if (r.Ejected && now.Before(r.EjectedUntil)) || r.ErrorRate >= failingErrorRate {
			a.Failing++
		}
		if r.CoolingUntil.After(a.CoolingUntil) {
			a.CoolingUntil = r.CoolingUntil
		}
		if r.TTFT > 0 {
			a.ttft += r.TTFT
			a.ttftN++
		}
		if r.Latency > 0 {
			a.lat += r.Latency
			a.latN++
		}
	}
	s.mu.RUnlock()
	out := make(map[string]*summary, len(accs))
	for p, a := range accs {
		if a.ttftN > 0 {
			a.TTFT = a.ttft / time.Duration(a.ttftN)
		}
		if a.latN > 0 {
			a.Latency = a.lat / time.Duration(a.latN)
		}
		sum := a.summary
		out[p] = &sum
	}
	return out
}

// snapshot returns copies of every fresh observation and load report,
// sorted by provider then observer.
func (s *store) snapshot(now time.Time) ([]obsRecord, []loadRecord) {
	s.mu.RLock()
	obs := make([]obsRecord, 0, len(s.obs))
	for _, r := range s.obs {
		if now.Before(r.Expires) {
			obs = append(obs, *r)
		}
	}
	loads := make([]loadRecord, 0, len(s.loads))
	for _, l := range s.loads {
		if now.Before(l.Expires) {
			loads = append(loads, *l)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(obs, func(a, b obsRecord) int {
		if a.Provider != b.Provider {
			return cmpStr(a.Provider, b.Provider)
		}
		return cmpStr(a.Observer, b.Observer)
	})
	slices.SortFunc(loads, func(a, b loadRecord) int { return cmpStr(a.Observer, b.Observer) })
	return obs, loads
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// current returns o as it stands now: its durations shortened by the
// time it has been held, for passing on.
func (r *obsRecord) current(now time.Time) Observation {
	o := r.Observation
	o.TTL = max(r.Expires.Sub(now), 0)
	o.EjectedFor = max(r.EjectedUntil.Sub(now), 0)
	o.CoolingFor = max(r.CoolingUntil.Sub(now), 0)
	o.IdleFor = max(now.Sub(r.LastAttempt), 0)
	return o
}

func (l *loadRecord) current(now time.Time) Load {
	c := l.Load
	c.TTL = max(l.Expires.Sub(now), 0)
	return c
}

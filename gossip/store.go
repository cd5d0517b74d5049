package gossip

import (
	"slices"
	"sync"
	"time"
)

// store holds the freshest observation of each (observer, provider) and
// the freshest load report of each node, with deadlines turned into this
// node's clock on arrival.
//
// What a peer can make it hold is bounded: reports come only from current
// members, about known providers, a bounded number per observer, with
// their times to live, ejections and cooldowns clamped and their versions
// (nanosecond timestamps) no further ahead of this node's clock than an
// hour. A forged report can therefore mislead for at most its clamped time
// to live; gossip encryption keeps forgers out altogether.
type store struct {
	limits  storeLimits
	mu      sync.RWMutex
	obs     map[obsKey]*obsRecord
	loads   map[string]*loadRecord
	members map[string]bool // observers currently alive in the membership
	count   map[string]int  // observations held per observer
}

// storeLimits bound what the store accepts.
type storeLimits struct {
	maxTTL         time.Duration     // a report's time to live
	maxHold        time.Duration     // an ejection or cooldown it carries
	maxPerObserver int               // observations held per observer
	known          func(string) bool // providers reports may be about; nil: any
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

func newStore(l storeLimits) *store {
	return &store{
		limits:  l,
		obs:     map[obsKey]*obsRecord{},
		loads:   map[string]*loadRecord{},
		members: map[string]bool{},
		count:   map[string]int{},
	}
}

// versionAhead is how far ahead of this node's clock a version may be.
const versionAhead = time.Hour

// accepts reports whether a report of version from observer may be kept.
func (s *store) accepts(observer string, version uint64, now time.Time) bool {
	return s.members[observer] && version <= uint64(now.Add(versionAhead).UnixNano())
}

// mergeObservation keeps o if it is newer than what is held, and reports
// whether it was new (and so worth passing on).
func (s *store) mergeObservation(o Observation, now time.Time) bool {
	if s.limits.known != nil && !s.limits.known(o.Provider) {
		return false
	}
	o.TTL = min(o.TTL, s.limits.maxTTL)
	o.EjectedFor = min(o.EjectedFor, s.limits.maxHold)
	o.CoolingFor = min(o.CoolingFor, s.limits.maxHold)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.accepts(o.Observer, o.Version, now) {
		return false
	}
	k := obsKey{o.Observer, o.Provider}
	cur := s.obs[k]
	if cur != nil && cur.Version >= o.Version {
		return false
	}
	if cur == nil {
		if s.count[o.Observer] >= s.limits.maxPerObserver {
			return false
		}
		s.count[o.Observer]++
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
	l.TTL = min(l.TTL, s.limits.maxTTL)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.accepts(l.Observer, l.Version, now) {
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
// joins again. (A restarted node's reports carry newer versions, its
// versions being timestamps, so a relay of its previous life that arrives
// after it rejoined is superseded by its first publication.)
func (s *store) leave(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.members, name)
	for k := range s.obs {
		if k.observer == name {
			delete(s.obs, k)
		}
	}
	delete(s.count, name)
	delete(s.loads, name)
}

// expire drops reports past their time to live.
func (s *store) expire(now time.Time) (dropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range s.obs {
		if !now.Before(r.Expires) {
			delete(s.obs, k)
			if s.count[k.observer]--; s.count[k.observer] <= 0 {
				delete(s.count, k.observer)
			}
			dropped++
		}
	}
	for k, l := range s.loads {
		if !now.Before(l.Expires) {
			delete(s.loads, k)
			dropped++
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
// summary per provider. A peer counts as seeing a provider fail while its
// ejection lasts, or while its error rate is high and it has called the
// provider within recent: an error rate is a moving average that only new
// attempts move, so an old one says nothing of the provider now.
func (s *store) summarize(self string, now time.Time, recent time.Duration) map[string]*summary {
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
		if (r.Ejected && now.Before(r.EjectedUntil)) || (r.ErrorRate >= failingErrorRate && now.Sub(r.LastAttempt) < recent) {
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

// record returns a copy of the observation held of (observer, provider).
func (s *store) record(observer, provider string) *obsRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r := s.obs[obsKey{observer, provider}]; r != nil {
		c := *r
		return &c
	}
	return nil
}

// loadRecordOf returns a copy of the load report held of observer.
func (s *store) loadRecordOf(observer string) *loadRecord {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if l := s.loads[observer]; l != nil {
		c := *l
		return &c
	}
	return nil
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

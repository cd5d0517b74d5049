package des

import (
	"time"

	"github.com/llmesh/llmesh/route"
)

// scrapeInterval is how often a node reads its replicas' engine metrics,
// as node/engine's scraper does by default.
const scrapeInterval = time.Second

// engineReading is what one scrape read of every engine replica, by
// provider: what a node's planner sees until the next.
type engineReading struct {
	at    time.Duration
	loads map[string][]route.EngineLoad
}

// scrapes keeps the engines' readings as nodes take them: every
// scrapeInterval of virtual time, what each engine replica runs, queues
// and holds, and its prefix hit rate since the last reading. Nodes that
// call a provider themselves plan with the latest (Engines); nodes of
// other regions with the one the provider's region gossiped a gossip
// delay ago (Remote). Every node of the run scrapes at the same instants,
// where live nodes scrape each at its own; otherwise the planner sees
// what a node's scraper would.
type scrapes struct {
	w       *world
	history []engineReading  // oldest first, as far back as gossip lags
	queries map[string][]int // per provider and replica, at the last reading
	hits    map[string][]int
}

// startScrapes takes a reading now and every scrapeInterval while the
// run lasts; without engine providers it does nothing.
func (w *world) startScrapes() {
	if len(w.engines) == 0 {
		return
	}
	w.scr = &scrapes{w: w, queries: map[string][]int{}, hits: map[string][]int{}}
	var step func()
	step = func() {
		w.scr.read()
		if w.now < w.s.Duration {
			w.at(w.now+scrapeInterval, step)
		}
	}
	w.at(0, step)
}

// read takes one reading of every engine replica.
func (s *scrapes) read() {
	w := s.w
	rd := engineReading{at: w.now, loads: map[string][]route.EngineLoad{}}
	for _, p := range w.s.Providers {
		reps := w.engines[p.Name]
		if len(reps) == 0 {
			continue
		}
		if s.queries[p.Name] == nil {
			s.queries[p.Name], s.hits[p.Name] = make([]int, len(reps)), make([]int, len(reps))
		}
		loads := make([]route.EngineLoad, len(reps))
		for i, sr := range reps {
			eng := sr.rep.Engine()
			l, st := eng.Load(), eng.Stats()
			rate := -1.0
			if dq := int(st.PrefixQueries) - s.queries[p.Name][i]; dq > 0 {
				rate = float64(int(st.PrefixHits)-s.hits[p.Name][i]) / float64(dq)
			}
			s.queries[p.Name][i], s.hits[p.Name][i] = int(st.PrefixQueries), int(st.PrefixHits)
			loads[i] = route.EngineLoad{Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage, PrefixHitRate: rate, At: epoch.Add(w.now)}
		}
		rd.loads[p.Name] = loads
	}
	s.history = append(s.history, rd)
	// Keep what a gossiped reading may still be: a gossip delay and an
	// interval back.
	for len(s.history) > 1 && w.now-s.history[1].at >= w.s.GossipDelay {
		s.history = s.history[1:]
	}
}

// latest is the last reading of provider's replicas, nil before one.
func (s *scrapes) latest(provider string) []route.EngineLoad {
	if len(s.history) == 0 {
		return nil
	}
	return s.history[len(s.history)-1].loads[provider]
}

// Replica is route.EngineSignals: the node's own latest scrape.
func (s *scrapes) Replica(provider string, i int) (route.EngineLoad, bool) {
	loads := s.latest(provider)
	if i < 0 || i >= len(loads) {
		return route.EngineLoad{}, false
	}
	return loads[i], true
}

// Engine is route.RemoteEngines: the provider's replicas summed as the
// nodes of its region gossiped them, the reading a gossip delay old.
func (s *scrapes) Engine(provider, _ string) (route.RemoteEngine, bool) {
	if len(s.history) == 0 || s.w.now-s.history[0].at < s.w.s.GossipDelay {
		return route.RemoteEngine{}, false // nothing has arrived yet
	}
	var e route.RemoteEngine
	for _, l := range s.history[0].loads[provider] {
		e.Replicas++
		e.Running += l.Running
		e.Waiting += l.Waiting
		e.KVUsage = max(e.KVUsage, l.KVUsage)
	}
	return e, e.Replicas > 0
}

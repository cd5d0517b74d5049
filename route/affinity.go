package route

import (
	"hash/maphash"
	"sync"
)

// Affinity remembers which provider served each session last, so that a
// conversation keeps hitting the provider whose prompt cache is warm
// while that provider stays healthy and within its share. It holds a
// bounded number of sessions; beyond it, arbitrary old ones are forgotten
// (a forgotten session just loses its preference).
type Affinity struct {
	seed   maphash.Seed
	shards [affinityShards]affinityShard
	limit  int // sessions per shard
}

const affinityShards = 16

type affinityShard struct {
	mu sync.Mutex
	m  map[string]string
}

// NewAffinity returns an Affinity holding up to capacity sessions.
func NewAffinity(capacity int) *Affinity {
	a := &Affinity{seed: maphash.MakeSeed(), limit: max(capacity/affinityShards, 1)}
	for i := range a.shards {
		a.shards[i].m = map[string]string{}
	}
	return a
}

func (a *Affinity) shard(session string) *affinityShard {
	return &a.shards[maphash.String(a.seed, session)%affinityShards]
}

// Provider returns the session's last provider, or "".
func (a *Affinity) Provider(session string) string {
	s := a.shard(session)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[session]
}

// Remember records that provider served session.
func (a *Affinity) Remember(session, provider string) {
	if session == "" {
		return
	}
	s := a.shard(session)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[session]; !ok && len(s.m) >= a.limit {
		n := 0
		for k := range s.m { // forget a sixteenth, arbitrary ones
			delete(s.m, k)
			if n++; n >= max(a.limit/16, 1) {
				break
			}
		}
	}
	s.m[session] = provider
}

package route

import (
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ring places sessions on a provider's replicas by consistent hashing with
// bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2016). A session goes
// to the first replica clockwise from its hash whose load stays within
// c × the mean load after taking it; replicas over the bound, failed or
// draining are passed over. The replica a session lands on holds its
// prompt cache (the KV cache of its conversation), so the session keeps
// its seat there for as long as that replica is healthy and the session
// stays active: its turns never move for balance, only when the replica
// fails or drains, and then only its own sessions move.
//
// The load bounded is the number of active sessions seated on a replica,
// what its cache must hold; an active session is one seen within the
// ring's TTL. Requests without a session key carry no cache and go to the
// replica with the fewest requests in flight.
//
// Order (the planner's) only reads; Seat (the executor's, when it calls a
// replica) records where a session went.
type Ring struct {
	// points are the replicas' places on the ring, sorted: a 56-bit hash
	// in the high bits, the replica's index in the low 8.
	points   []uint64
	replicas []string
	c        float64
	ttl      time.Duration
	perShard int // sessions held per shard

	inFlight []atomic.Int64 // requests in flight, by replica
	seated   []atomic.Int64 // active sessions seated, by replica
	seed     maphash.Seed
	fixed    bool // shard by a fixed hash (Deterministic)
	shards   [ringShards]ringShard
	cursor   atomic.Uint32 // the shard the next Seat looks after, besides its own
	turn     atomic.Uint32 // advanced by each Acquire: the rotation round-robin follows
}

type ringShard struct {
	mu    sync.Mutex
	seats map[string]seat
	swept time.Time
}

type seat struct {
	replica int
	seen    time.Time
}

const (
	// ringVirtual is how many points each replica has on the ring: enough
	// for an even spread of sessions among a handful of replicas.
	ringVirtual = 160
	ringShards  = 16
	// DefaultLoadBound is c: no replica above 1.25 × the mean load.
	DefaultLoadBound = 1.25
	// DefaultSessionTTL is how long a session keeps its seat without a
	// turn: about as long as a serving engine keeps an idle prefix cached.
	DefaultSessionTTL = 10 * time.Minute
	// DefaultRingSessions bounds the sessions a ring remembers; beyond
	// it, the longest idle are forgotten first.
	DefaultRingSessions = 1 << 18
)

// NewRing builds a ring over replicas (their endpoints, by index) with
// load bound c.
func NewRing(replicas []string, c float64) *Ring {
	r := &Ring{
		replicas: replicas, c: c, ttl: DefaultSessionTTL, perShard: DefaultRingSessions / ringShards,
		inFlight: make([]atomic.Int64, len(replicas)), seated: make([]atomic.Int64, len(replicas)),
		seed: maphash.MakeSeed(),
	}
	for i := range r.shards {
		r.shards[i].seats = map[string]seat{}
	}
	r.points = make([]uint64, 0, len(replicas)*ringVirtual)
	for i, rep := range replicas {
		for v := range ringVirtual {
			r.points = append(r.points, hash64(rep, v)&^0xff|uint64(i))
		}
	}
	slices.Sort(r.points)
	return r
}

// MaxReplicas is how many replicas a ring can place: a point keeps the
// replica's index in 8 bits.
const MaxReplicas = 255

// hash64 is FNV-1a of s and salt, spread by splitmix64's finalizer.
func hash64(s string, salt int) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * prime
	}
	for _, b := range [...]byte{byte(salt), byte(salt >> 8), 0x5f} {
		h = (h ^ uint64(b)) * prime
	}
	return mix(h)
}

// mix spreads FNV's output (splitmix64's finalizer).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func (r *Ring) shard(key string) *ringShard {
	if r.fixed {
		return &r.shards[hash64(key, 0)%ringShards]
	}
	return &r.shards[maphash.String(r.seed, key)%ringShards]
}

// Deterministic makes r keep sessions by a fixed hash instead of a
// random seed, so that a seeded simulation repeats (which shard is swept
// when decides when an expired seat stops counting). A node keeps the
// seed: nobody outside can aim session keys at one shard.
func (r *Ring) Deterministic() { r.fixed = true }

// Order returns the replicas in the order to try them for a request of
// session key: first the session's seat if it has one on a replica not
// excluded, else the replica it would be seated on now; then the others
// in ring order, its failover order. Replicas over the load bound come
// after the others, and excluded ones (failed, draining) last. An empty
// key gets the replica with the fewest requests in flight first.
func (r *Ring) Order(key string, excluded func(i int) bool, now time.Time, out []int) []int {
	n := len(r.replicas)
	out = out[:0]
	if n == 0 {
		return out
	}
	if key == "" {
		for i := range n {
			out = append(out, i)
		}
		slices.SortStableFunc(out, func(a, b int) int { return int(r.inFlight[a].Load() - r.inFlight[b].Load()) })
		return moveExcludedLast(out, excluded)
	}
	home := -1
	sh := r.shard(key)
	sh.mu.Lock()
	if s, ok := sh.seats[key]; ok && now.Sub(s.seen) < r.ttl && (excluded == nil || !excluded(s.replica)) {
		home = s.replica
	}
	sh.mu.Unlock()
	return r.order(home, hash64(key, 0), r.seated, excluded, out)
}

// OrderAt is Order for a request placed by hash h (its prompt's first
// chunk) rather than a session, which has no seat to keep: the replicas
// clockwise from h, those whose requests in flight would exceed c × the
// mean after it, and excluded ones, last.
func (r *Ring) OrderAt(h uint64, excluded func(i int) bool, out []int) []int {
	out = out[:0]
	if len(r.replicas) == 0 {
		return out
	}
	return r.order(-1, mix(h), r.inFlight, excluded, out)
}

// order is the replicas clockwise from pos, home (if not -1) first, each
// within the bound on loads.
func (r *Ring) order(home int, pos uint64, loads []atomic.Int64, excluded func(i int) bool, out []int) []int {
	n := len(r.replicas)
	// The bound: c × the mean load per live replica, counting this
	// request's (its session's, if it has no seat yet).
	var total int64
	live := 0
	for i := range n {
		if excluded == nil || !excluded(i) {
			total += loads[i].Load()
			live++
		}
	}
	limit := int64(math.MaxInt64)
	if live > 0 {
		limit = int64(math.Ceil(r.c * float64(total+1) / float64(live)))
	}
	if home >= 0 {
		out = append(out, home)
	}
	start, _ := slices.BinarySearch(r.points, pos&^0xff)
	// Which replicas are placed: a bitmask for the usual handful, a slice
	// beyond 64.
	var seen uint64
	var seenBig []bool
	if n > 64 {
		seenBig = make([]bool, n)
	}
	mark := func(i int) bool {
		if seenBig != nil {
			was := seenBig[i]
			seenBig[i] = true
			return was
		}
		was := seen&(1<<uint(i)) != 0
		seen |= 1 << uint(i)
		return was
	}
	if home >= 0 {
		mark(home)
	}
	var full, bad []int
	for k, placed := 0, len(out); k < len(r.points) && placed < n; k++ {
		i := int(r.points[(start+k)%len(r.points)] & 0xff)
		if mark(i) {
			continue
		}
		placed++
		switch {
		case excluded != nil && excluded(i):
			bad = append(bad, i)
		case loads[i].Load()+1 > limit:
			full = append(full, i) // over the bound: after the others
		default:
			out = append(out, i)
		}
	}
	out = append(out, full...)
	return append(out, bad...)
}

func moveExcludedLast(order []int, excluded func(int) bool) []int {
	if excluded == nil {
		return order
	}
	var bad []int
	kept := order[:0]
	for _, i := range order {
		if excluded(i) {
			bad = append(bad, i)
		} else {
			kept = append(kept, i)
		}
	}
	return append(kept, bad...)
}

// Seat records that session key is served by replica i now: its seat
// there is kept (or moved there) and its TTL renewed.
func (r *Ring) Seat(key string, i int, now time.Time) {
	if key == "" {
		return
	}
	// Each Seat also looks after one other shard in turn, so that expired
	// seats in shards no new session hashes to stop counting too.
	if o := &r.shards[r.cursor.Add(1)%ringShards]; o.mu.TryLock() {
		if now.Sub(o.swept) > r.ttl/8 {
			r.sweep(o, now, 0)
		}
		o.mu.Unlock()
	}
	sh := r.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if now.Sub(sh.swept) > r.ttl/8 {
		r.sweep(sh, now, 0)
	}
	s, ok := sh.seats[key]
	if ok && now.Sub(s.seen) >= r.ttl {
		r.seated[s.replica].Add(-1) // expired, not yet swept
		delete(sh.seats, key)       // so that a sweep does not count it again
		ok = false
	}
	switch {
	case !ok:
		if len(sh.seats) >= r.perShard {
			r.sweep(sh, now, len(sh.seats)/16+1)
		}
		key = strings.Clone(key) // the map outlives the request
		r.seated[i].Add(1)
	case s.replica != i:
		r.seated[s.replica].Add(-1)
		r.seated[i].Add(1)
	}
	sh.seats[key] = seat{replica: i, seen: now}
}

// sweep forgets the shard's expired seats and, when evict > 0, that many
// more of the longest idle.
func (r *Ring) sweep(sh *ringShard, now time.Time, evict int) {
	sh.swept = now
	var oldest []string
	for k, s := range sh.seats {
		if now.Sub(s.seen) >= r.ttl {
			delete(sh.seats, k)
			r.seated[s.replica].Add(-1)
		} else if evict > 0 {
			oldest = append(oldest, k)
		}
	}
	if evict <= 0 || len(oldest) == 0 {
		return
	}
	slices.SortFunc(oldest, func(a, b string) int { return sh.seats[a].seen.Compare(sh.seats[b].seen) })
	for _, k := range oldest[:min(evict, len(oldest))] {
		r.seated[sh.seats[k].replica].Add(-1)
		delete(sh.seats, k)
	}
}

// Acquire counts a request in flight on replica i, and advances the
// rotation; Release ends it.
func (r *Ring) Acquire(i int) {
	r.inFlight[i].Add(1)
	r.turn.Add(1)
}

// TryAcquire is Acquire unless replica i has limit requests in flight
// already (limit 0: none), when it reports false and counts nothing.
func (r *Ring) TryAcquire(i int, limit int) bool {
	if limit <= 0 {
		r.Acquire(i)
		return true
	}
	for {
		n := r.inFlight[i].Load()
		if n >= int64(limit) {
			return false
		}
		if r.inFlight[i].CompareAndSwap(n, n+1) {
			r.turn.Add(1)
			return true
		}
	}
}

// Turn is the replica whose turn it is in rotation: one further for
// every request acquired.
func (r *Ring) Turn() int { return int(r.turn.Load() % uint32(len(r.replicas))) }

// Release ends a request counted by Acquire.
func (r *Ring) Release(i int) { r.inFlight[i].Add(-1) }

// InFlight returns the requests in flight on replica i.
func (r *Ring) InFlight(i int) int64 { return r.inFlight[i].Load() }

// Seated returns the active sessions seated on replica i (sessions idle
// beyond the TTL count until swept).
func (r *Ring) Seated(i int) int64 { return r.seated[i].Load() }

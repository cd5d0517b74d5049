package route

import (
	"math/bits"
	"math/rand/v2"
	"sync"
	"time"
)

// PrefixIndex is an approximate record of which of a provider's replicas
// were recently sent which prompt-prefix chunks (PromptPrefix hashes): a
// guess at what each replica's prefix cache holds, made without asking
// it. It is written when a request is admitted to a replica, not when it
// is answered, so that a burst of requests with one prefix follows the
// first instead of spreading before any is answered.
//
// It is bounded: a fixed number of entries in 8-way sets, the least
// recently written of a full set replaced, allocated a shard at a time as
// they are first written. A replica is remembered for a chunk from half
// the TTL to the TTL after it was last sent it (an entry keeps the
// replicas of the current half and the one before), because an engine's
// cache forgets what it is not sent again. Replicas are bits of a 64-bit
// mask: a provider with more than 64 replicas shares bits (i mod 64), an
// approximation that costs it a cold prefill now and then.
//
// It is safe for concurrent use: 32 shards, each with its own lock held
// for the scan of one set.
type PrefixIndex struct {
	seed   uint64
	half   int64 // an epoch's length in ns: TTL/2
	sets   int   // per shard, a power of two
	shards [prefixShards]prefixShard
}

const (
	prefixShards = 32
	prefixWays   = 8
	// DefaultPrefixEntries bounds an index: 65,536 chunks, about 8M
	// tokens of prefixes, more than a handful of replicas' KV caches
	// hold; 2 MiB when full.
	DefaultPrefixEntries = 1 << 16
	// DefaultPrefixTTL is how long a replica is remembered for a chunk
	// it was sent, at most: an engine under load evicts an idle prefix
	// within minutes.
	DefaultPrefixTTL = 5 * time.Minute
)

type prefixShard struct {
	mu    sync.Mutex
	tick  uint32       // counts writes, for least recently written
	slots []prefixSlot // sets × prefixWays; nil until first written
	_     [24]byte     // a shard to a cache line
}

type prefixSlot struct {
	key       uint64 // a chunk hash; 0: empty
	cur, prev uint64 // replicas sent it in epoch and in the epoch before
	epoch     uint32
	used      uint32 // the shard's tick when last written
}

// NewPrefixIndex returns an index of about entries chunks (at least
// prefixShards × prefixWays) remembering replicas for at most ttl, with a
// random hash seed.
func NewPrefixIndex(entries int, ttl time.Duration) *PrefixIndex {
	sets := 1
	for sets*prefixShards*prefixWays < entries {
		sets *= 2
	}
	return &PrefixIndex{seed: rand.Uint64(), half: max(int64(ttl/2), 1), sets: sets}
}

// Seed is the seed requests' prefixes are hashed with for this index.
func (x *PrefixIndex) Seed() uint64 { return x.seed }

// Deterministic gives x a fixed seed, so that a seeded simulation
// repeats (which entries share a set decides which are replaced). A node
// keeps its random seed: nobody outside can aim prompts at one set.
func (x *PrefixIndex) Deterministic() { x.seed = 0 }

// Entries is how many chunks x can hold.
func (x *PrefixIndex) Entries() int { return prefixShards * x.sets * prefixWays }

func (x *PrefixIndex) epoch(now time.Time) uint32 { return uint32(now.UnixNano() / x.half) }

// slots returns the set of h in sh, its shard, whose lock is held: nil
// when the shard has none yet.
func (x *PrefixIndex) slots(sh *prefixShard, h uint64) []prefixSlot {
	if sh.slots == nil {
		return nil
	}
	i := int(h&uint64(x.sets-1)) * prefixWays
	return sh.slots[i : i+prefixWays]
}

// mask returns the replicas (bit i mod 64) remembered for chunk h at
// epoch e.
func (x *PrefixIndex) mask(h uint64, e uint32) uint64 {
	sh := &x.shards[h>>59]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := x.slots(sh, h)
	for i := range set {
		if s := &set[i]; s.key == h {
			switch age(e, s.epoch) {
			case 0:
				return s.cur | s.prev
			case 1:
				return s.cur
			}
			return 0
		}
	}
	return 0
}

// Record notes that replica was sent a prompt with the chunks hashes.
func (x *PrefixIndex) Record(hashes []uint64, replica int, now time.Time) {
	e, bit := x.epoch(now), uint64(1)<<(uint(replica)%64)
	for _, h := range hashes {
		sh := &x.shards[h>>59]
		sh.mu.Lock()
		if sh.slots == nil {
			sh.slots = make([]prefixSlot, x.sets*prefixWays)
		}
		set := x.slots(sh, h)
		sh.tick++
		s := victim(set, h, e, sh.tick)
		switch a := age(e, s.epoch); {
		case s.key != h:
			*s = prefixSlot{key: h, cur: bit, epoch: e}
		case a == 0:
			s.cur |= bit
		case a == 1:
			s.prev, s.cur, s.epoch = s.cur, bit, e
		default:
			s.prev, s.cur, s.epoch = 0, bit, e
		}
		s.used = sh.tick
		sh.mu.Unlock()
	}
}

// age is how many epochs before e epoch was: 0 for one a moment ahead,
// as a writer whose clock read a little later may leave.
func age(e, epoch uint32) int32 { return max(int32(e-epoch), 0) }

// victim is the slot of set to write h in: its own, else an empty or
// expired one, else the least recently written.
func victim(set []prefixSlot, h uint64, e, tick uint32) *prefixSlot {
	var free, lru *prefixSlot
	for i := range set {
		s := &set[i]
		switch {
		case s.key == h:
			return s
		case free != nil:
		case s.key == 0 || age(e, s.epoch) > 1:
			free = s
		case lru == nil || tick-s.used > tick-lru.used:
			lru = s
		}
	}
	if free != nil {
		return free
	}
	return lru
}

// Held sets held[i], for each of the n replicas, to how many of hashes,
// from the first, replica i is remembered for: the prefix its cache is
// expected to hold. It reports whether any replica holds any. A replica
// remembered for a chunk is taken to hold every chunk before it (they
// were sent together), so it bisects, probing O(log len) entries for each
// group of replicas that hold the same prefix.
func (x *PrefixIndex) Held(hashes []uint64, n int, now time.Time, held []int) bool {
	clear(held[:n])
	if len(hashes) == 0 {
		return false
	}
	all := ^uint64(0)
	if n < 64 {
		all = 1<<uint(n) - 1
	}
	e := x.epoch(now)
	first := x.mask(hashes[0], e) & all
	if first == 0 {
		return false
	}
	var byBit [64]int
	x.bisect(hashes, 1, len(hashes), first, e, &byBit)
	for i := range n {
		held[i] = byBit[i%64]
	}
	return true
}

// bisect sets out[b] for the replicas b of set, each of which holds
// hashes[:lo] and none of which holds more than hashes[:hi].
func (x *PrefixIndex) bisect(hashes []uint64, lo, hi int, set uint64, e uint32, out *[64]int) {
	for set != 0 {
		if lo == hi {
			for m := set; m != 0; m &= m - 1 {
				out[bits.TrailingZeros64(m)] = lo
			}
			return
		}
		mid := (lo + hi + 1) / 2
		if more := x.mask(hashes[mid-1], e) & set; more != 0 {
			x.bisect(hashes, mid, hi, more, e, out)
			set &^= more
		}
		hi = mid - 1
	}
}

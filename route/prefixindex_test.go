package route

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// chain is n distinct chunk hashes, as one prompt's: spread as a hash's
// are (the first outputs of PCGs seeded alike are not).
func chain(rng *rand.Rand, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = mix(rng.Uint64()) | 1
	}
	return out
}

// Each replica is found to hold the prefix it was sent, however long,
// and a replica sent another prompt holds none of this one.
func TestPrefixIndexHeld(t *testing.T) {
	x := NewPrefixIndex(DefaultPrefixEntries, DefaultPrefixTTL)
	rng := rand.New(rand.NewPCG(1, 2))
	c := chain(rng, 300)
	now := time.Unix(1e9, 0)
	x.Record(c, 0, now)
	x.Record(c[:97], 1, now)
	x.Record(c[:1], 2, now)
	x.Record(chain(rng, 50), 3, now)
	held := make([]int, 5)
	if !x.Held(c, 5, now, held) {
		t.Fatal("nothing held")
	}
	if want := []int{300, 97, 1, 0, 0}; !equalInts(held, want) {
		t.Errorf("held %v, want %v", held, want)
	}
	if x.Held(chain(rng, 10), 5, now, held) || held[0] != 0 {
		t.Errorf("an unknown prompt is held: %v", held)
	}
}

// A replica is remembered for a chunk from half the TTL to the TTL after
// it was last sent it, each replica by its own last sending.
func TestPrefixIndexTTL(t *testing.T) {
	ttl := 4 * time.Minute
	x := NewPrefixIndex(1024, ttl)
	c := chain(rand.New(rand.NewPCG(3, 4)), 8)
	t0 := time.Unix(0, 0) // at the start of an epoch
	x.Record(c, 0, t0)
	held := make([]int, 2)
	x.Held(c, 2, t0.Add(ttl/2-time.Second), held)
	if held[0] != 8 || held[1] != 0 {
		t.Errorf("within half the TTL: %v", held)
	}
	x.Record(c, 1, t0.Add(3*time.Minute))
	x.Held(c, 2, t0.Add(3*time.Minute), held)
	if held[0] != 8 || held[1] != 8 {
		t.Errorf("replica 0 within its TTL, 1 just sent it: %v", held)
	}
	x.Held(c, 2, t0.Add(ttl+time.Second), held)
	if held[0] != 0 || held[1] != 8 {
		t.Errorf("past replica 0's TTL, within replica 1's: %v", held)
	}
	if x.Held(c, 2, t0.Add(3*time.Minute+ttl+time.Second), held) {
		t.Errorf("past both TTLs: %v", held)
	}
}

// However many chunks are written, the index holds at most its entries,
// replacing the least recently written: the latest prompt stays whole.
func TestPrefixIndexBounded(t *testing.T) {
	x := NewPrefixIndex(4096, time.Hour)
	rng := rand.New(rand.NewPCG(5, 6))
	now := time.Unix(1e9, 0)
	var last []uint64
	for range 400 {
		last = chain(rng, 100)
		x.Record(last, rng.IntN(4), now)
	}
	n := 0
	for i := range x.shards {
		if len(x.shards[i].slots) > x.sets*prefixWays {
			t.Fatalf("shard %d grew to %d slots", i, len(x.shards[i].slots))
		}
		for _, s := range x.shards[i].slots {
			if s.key != 0 {
				n++
			}
		}
	}
	if n > x.Entries() || x.Entries() != 4096 {
		t.Errorf("%d entries held of %d", n, x.Entries())
	}
	held := make([]int, 4)
	x.Held(last, 4, now, held)
	if max(held[0], held[1], held[2], held[3]) != 100 {
		t.Errorf("the latest prompt, of 100 chunks, is held as %v", held)
	}
}

// Replicas beyond 64 share bits: replica 64 looks like replica 0.
func TestPrefixIndexManyReplicas(t *testing.T) {
	x := NewPrefixIndex(1024, time.Hour)
	c := chain(rand.New(rand.NewPCG(7, 8)), 4)
	now := time.Unix(1e9, 0)
	x.Record(c, 70, now)
	held := make([]int, 100)
	x.Held(c, 100, now, held)
	if held[70] != 4 || held[6] != 4 || held[7] != 0 {
		t.Errorf("replica 70's prefix: %d, 6's %d, 7's %d", held[70], held[6], held[7])
	}
}

// Writers and readers at once, for the race detector: with room for
// every chunk, each finds its own prompt whole.
func TestPrefixIndexConcurrent(t *testing.T) {
	x := NewPrefixIndex(DefaultPrefixEntries, time.Minute)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			held := make([]int, 4)
			now := time.Unix(1e9, 0)
			for range 100 {
				c := chain(rng, 20)
				x.Record(c, g, now)
				x.Held(c, 4, now, held)
				if held[g] != 20 {
					t.Errorf("writer %d: its own prompt held as %v", g, held)
					return
				}
			}
		})
	}
	wg.Wait()
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func BenchmarkPrefixIndex(b *testing.B) {
	x := NewPrefixIndex(DefaultPrefixEntries, DefaultPrefixTTL)
	rng := rand.New(rand.NewPCG(1, 2))
	c := chain(rng, 64) // an 8K-token prompt
	now := time.Unix(1e9, 0)
	for r := range 4 {
		x.Record(c[:16*(r+1)], r, now)
	}
	held := make([]int, 4)
	b.Run("Held", func(b *testing.B) {
		for b.Loop() {
			x.Held(c, 4, now, held)
		}
	})
	b.Run("Record", func(b *testing.B) {
		for b.Loop() {
			x.Record(c, 1, now)
		}
	})
}

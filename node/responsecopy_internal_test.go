package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/forward"
	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// outcomes counts a copier's outcomes.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) count(outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[outcome]++
}

func (o *outcomes) of(outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[outcome]
}

// The queue of copies is bounded: past its size a copy is dropped and
// counted, and enqueue returns at once however slow the sender is.
// Stopped, the copier sends what is queued first; a copy after it
// stopped is dropped.
func TestCopyQueueIsBounded(t *testing.T) {
	var out outcomes
	release := make(chan struct{})
	var sent atomic.Int64
	c := newResponseCopier(4, func(ctx context.Context, j copyJob) string {
		select {
		case <-release:
		case <-ctx.Done():
			return "failed"
		}
		sent.Add(1)
		return "kept"
	}, out.count)
	c.start()
	// The sender takes one and blocks on it; four more fill the queue.
	c.enqueue(copyJob{id: "resp_0"})
	wait.For(t, 5*time.Second, "the sender to take the first copy", func() bool { return len(c.queue) == 0 })
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := 1; i <= 10; i++ {
			c.enqueue(copyJob{id: fmt.Sprintf("resp_%d", i)})
		}
	}()
	wait.For(t, 5*time.Second, "enqueue to return with the sender blocked", func() bool {
		select {
		case <-returned:
			return true
		default:
			return false
		}
	})
	if got := out.of("dropped"); got != 6 {
		t.Fatalf("%d copies dropped, want the 6 past the queue's 4", got)
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.finish(ctx)
	if got := sent.Load(); got != 5 {
		t.Fatalf("%d copies sent before the copier stopped, want the 5 taken", got)
	}
	c.enqueue(copyJob{id: "late"})
	if got := out.of("dropped"); got != 7 {
		t.Fatalf("a copy after finish: %d dropped, want 7", got)
	}
}

// kill stops the copier at once: a send under way is cancelled, and
// what is queued is dropped, counted, not sent.
func TestCopierKillAbandonsTheQueue(t *testing.T) {
	var out outcomes
	c := newResponseCopier(8, func(ctx context.Context, j copyJob) string {
		<-ctx.Done() // a peer that never answers
		return "failed"
	}, out.count)
	c.start()
	for i := range 5 {
		c.enqueue(copyJob{id: fmt.Sprintf("resp_%d", i)})
	}
	wait.For(t, 5*time.Second, "the sender to take a copy", func() bool { return len(c.queue) == 4 })
	killed := make(chan struct{})
	go func() { c.kill(); close(killed) }()
	wait.For(t, 5*time.Second, "kill to return", func() bool {
		select {
		case <-killed:
			return true
		default:
			return false
		}
	})
	if failed, dropped := out.of("failed"), out.of("dropped"); failed != 1 || dropped != 4 {
		t.Fatalf("%d sends failed and %d copies dropped; want the one under way, and the 4 queued", failed, dropped)
	}
	// A copier never started stops at once too.
	newResponseCopier(1, nil, out.count).kill()
	newResponseCopier(1, nil, out.count).finish(context.Background())
}

func peersNamed(names ...string) []forward.Peer {
	out := make([]forward.Peer, len(names))
	for i, n := range names {
		out[i] = forward.Peer{Member: gossip.Member{Name: n}}
	}
	return out
}

func namesOf(ps []forward.Peer) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// The ring ranks the same peers in the same order whatever order they
// come in, so that every node picks the same holder; a peer that leaves
// moves only the responses it held; and responses spread over the peers.
func TestRankHoldersIsOneRing(t *testing.T) {
	names := []string{"eu-1", "eu-2", "eu-3", "eu-4", "eu-5"}
	first := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		id := fmt.Sprintf("resp_%08x", rng.Uint32())
		want := peersNamed(names...)
		rankHolders(id, want)
		shuffled := peersNamed(names...)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		rankHolders(id, shuffled)
		if !slices.Equal(namesOf(shuffled), namesOf(want)) {
			t.Fatalf("%s: %v from one order, %v from another", id, namesOf(want), namesOf(shuffled))
		}
		first[want[0].Name]++
		// eu-3 leaves: only what it held moves, to its second.
		without := peersNamed("eu-1", "eu-2", "eu-4", "eu-5")
		rankHolders(id, without)
		if want[0].Name != "eu-3" && without[0].Name != want[0].Name {
			t.Fatalf("%s moved from %s to %s when eu-3 left", id, want[0].Name, without[0].Name)
		}
		if want[0].Name == "eu-3" && without[0].Name != want[1].Name {
			t.Fatalf("%s moved from eu-3 to %s, not its second %s", id, without[0].Name, want[1].Name)
		}
	}
	for _, n := range names {
		if first[n] < 300 || first[n] > 500 {
			t.Errorf("%s holds %d of 2000 copies; want about 400: %v", n, first[n], first)
		}
	}
}

// The store's bound holds for this node's responses and the copies it
// holds for peers together, the least recently used out; a record over
// a quarter of the bound is not kept.
func TestStoredResponsesBoundCountsCopies(t *testing.T) {
	var held atomic.Int64
	s := responseStore{maxBytes: 1 << 20, held: func(b int) { held.Store(int64(b)) }}
	rec := func(i int, copy bool) *storedResponse {
		return &storedResponse{StoredResponse: route.StoredResponse{ID: fmt.Sprintf("resp_%d", i), Bridged: true,
			Response: []byte(strings.Repeat("x", 100<<10))}, Tenant: "t", Copy: copy}
	}
	for i := range 30 {
		if !s.put(rec(i, i%2 == 1)) {
			t.Fatalf("record %d was not kept", i)
		}
		if s.bytes > s.maxBytes {
			t.Fatalf("after %d records the store holds %d bytes, over %d", i+1, s.bytes, s.maxBytes)
		}
	}
	if int(held.Load()) != s.bytes || s.lru.Len() != 10 {
		t.Fatalf("%d records, %d bytes, gauge %d; want the 10 newest", s.lru.Len(), s.bytes, held.Load())
	}
	if s.peek("t", "resp_19") != nil || s.peek("t", "resp_20") == nil || s.peek("t", "resp_29") == nil || !s.peek("t", "resp_29").Copy {
		t.Fatal("not the 10 newest, copies among them")
	}
	big := &storedResponse{StoredResponse: route.StoredResponse{ID: "big", Bridged: true, Response: make([]byte, 300<<10)}, Tenant: "t"}
	if s.put(big) || s.lru.Len() != 10 {
		t.Fatalf("a record over a quarter of the bound was kept, or evicted others: %d records", s.lru.Len())
	}
	if !s.setPeer("t", "resp_29", "eu-2") || s.peek("t", "resp_29").Peer != "eu-2" || s.setPeer("t", "resp_0", "eu-2") {
		t.Fatal("setPeer")
	}
	if !s.remove("t", "resp_29") || s.remove("t", "resp_29") || int(held.Load()) != s.bytes {
		t.Fatal("remove")
	}
}

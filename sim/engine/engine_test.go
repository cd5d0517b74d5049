package engine

import (
	"container/heap"
	"testing"
	"time"
)

// clock is a fake clock with an event queue: the tests drive engines in
// virtual time, as sim/des does, so that durations can be asserted
// exactly.
type clock struct {
	now    time.Duration
	seq    int
	events timeline
}

type timed struct {
	t   time.Duration
	seq int
	fn  func()
}

type timeline []timed

func (h timeline) Len() int { return len(h) }
func (h timeline) Less(i, j int) bool {
	return h[i].t < h[j].t || h[i].t == h[j].t && h[i].seq < h[j].seq
}
func (h timeline) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timeline) Push(x any)   { *h = append(*h, x.(timed)) }
func (h *timeline) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (c *clock) at(t time.Duration, fn func()) {
	c.seq++
	heap.Push(&c.events, timed{t: t, seq: c.seq, fn: fn})
}

// run runs the events due until the queue is empty or until passes.
func (c *clock) run(until time.Duration) {
	for c.events.Len() > 0 && c.events[0].t <= until {
		e := heap.Pop(&c.events).(timed)
		c.now = e.t
		e.fn()
	}
}

// trace is what a test saw of its requests: when each got its first
// token and finished, and what it found cached.
type trace struct {
	first, done map[uint64]time.Duration
	cached      map[uint64]int
	tokens      map[uint64][]time.Duration // when each token came
}

// harness is an engine of cfg on a fake clock, stepped maxSteps at a time.
func harness(t *testing.T, cfg Config, maxSteps int) (*clock, *Replica, *trace) {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{}
	tr := &trace{first: map[uint64]time.Duration{}, done: map[uint64]time.Duration{}, cached: map[uint64]int{}, tokens: map[uint64][]time.Duration{}}
	r := NewReplica(e, maxSteps, c.at, func(at time.Duration, ev Event) {
		if ev.First {
			tr.first[ev.ID], tr.cached[ev.ID] = at, ev.Cached
		}
		for len(tr.tokens[ev.ID]) < ev.Tokens {
			tr.tokens[ev.ID] = append(tr.tokens[ev.ID], at)
		}
		if ev.Done {
			tr.done[ev.ID] = at
		}
	})
	return c, r, tr
}

// tokens is n token ids from start on: prompts sharing a start share a
// prefix.
func tokens(start, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = start + i
	}
	return out
}

// request asks for output tokens after prompt.
func request(id uint64, prompt []int, output int) Request {
	return Request{ID: id, Prompt: len(prompt), Output: output, Blocks: HashBlocks(prompt, 16)}
}

// slow is an engine whose times are easy to reckon: 1,000 prompt tokens
// a second, 10 ms a step plus 1 ms a decoding sequence.
func slow() Config {
	return Config{MaxRunning: 64, MaxBatchedTokens: 16384, KVBlocks: 4096, PrefillTokensPerSecond: 1000,
		DecodeBase: 10 * time.Millisecond, DecodePerSeq: time.Millisecond}
}

func add(t *testing.T, c *clock, r *Replica, req Request) {
	t.Helper()
	if err := r.Add(c.now, req); err != nil {
		t.Fatal(err)
	}
}

// A prefix found cached is not computed again: the time to the first
// token falls in proportion to the prompt tokens found.
func TestPrefixHitSavesPrefillInProportion(t *testing.T) {
	c, r, tr := harness(t, slow(), 1)
	system := tokens(0, 4000)
	add(t, c, r, request(1, system, 1))
	c.run(time.Hour)
	// Same 4,000 tokens and 96 more; then only the first 2,000 of them.
	add(t, c, r, request(2, append(tokens(0, 4000), tokens(100000, 96)...), 1))
	c.run(time.Hour)
	start := c.now
	add(t, c, r, request(3, append(tokens(0, 2000), tokens(200000, 2096)...), 1))
	c.run(time.Hour)

	if got, want := tr.first[1], 10*time.Millisecond+4*time.Second; got != want {
		t.Errorf("cold prompt: first token at %v, want %v (4,000 tokens at 1,000/s and a step)", got, want)
	}
	if tr.cached[1] != 0 || tr.cached[2] != 4000 || tr.cached[3] != 2000 {
		t.Errorf("cached tokens %v, want 0, 4000, 2000", tr.cached)
	}
	if got, want := tr.first[2]-tr.done[1], 10*time.Millisecond+96*time.Millisecond; got != want {
		t.Errorf("warm prompt: first token after %v, want %v (96 tokens computed)", got, want)
	}
	if got, want := tr.first[3]-start, 10*time.Millisecond+2096*time.Millisecond; got != want {
		t.Errorf("half-warm prompt: first token after %v, want %v (2,096 tokens computed)", got, want)
	}
	st := r.Engine().Stats()
	if st.PrefixQueries != 4000+4096+4096 || st.PrefixHits != 6000 || st.PrefillTokens != 4000+96+2096 {
		t.Errorf("stats %+v", st)
	}
}

// A prompt found whole still computes its last token (vLLM does so to
// have logits to sample from): a prompt of whole blocks misses its last.
func TestWholePromptRecomputesItsLastBlock(t *testing.T) {
	c, r, tr := harness(t, slow(), 1)
	p := tokens(0, 320) // 20 blocks
	add(t, c, r, request(1, p, 1))
	c.run(time.Hour)
	add(t, c, r, request(2, p, 1))
	c.run(time.Hour)
	if tr.cached[2] != 304 {
		t.Errorf("cached %d of 320, want 304: the last block is computed again", tr.cached[2])
	}
	add(t, c, r, request(3, p, 0)) // legacy completions' max_tokens 0: the prompt alone
	c.run(time.Hour)
	if d, ok := tr.done[3]; !ok || d != tr.first[3] || len(tr.tokens[3]) != 0 {
		t.Errorf("a request of no output: first %v, done %v, %d tokens", tr.first[3], d, len(tr.tokens[3]))
	}
}

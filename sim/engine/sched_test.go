package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// A full batch queues: with MaxRunning 2 the third request waits until
// one of the first two finishes, then joins at the next step.
func TestBatchCapQueues(t *testing.T) {
	cfg := slow()
	cfg.MaxRunning = 2
	c, r, tr := harness(t, cfg, 1)
	add(t, c, r, request(1, tokens(0, 100), 5))
	add(t, c, r, request(2, tokens(1000, 100), 50))
	add(t, c, r, request(3, tokens(2000, 100), 5))
	c.run(cfg.StepTime(0, 100)) // the first step had request 1 alone: the others came during it
	if l := r.Engine().Load(); l.Running != 2 || l.Waiting != 1 {
		t.Fatalf("load %+v, want 2 running and 1 waiting", l)
	}
	c.run(time.Hour)
	if tr.first[3] <= tr.done[1] {
		t.Errorf("the third request's first token at %v, before the first finished at %v", tr.first[3], tr.done[1])
	}
	// It joined at the step after request 1 left: 100 tokens of prefill
	// and request 2's decode.
	if got, want := tr.first[3]-tr.done[1], cfg.StepTime(1, 100); got != want {
		t.Errorf("joined %v after a slot freed, want one step, %v", got, want)
	}
	if l := r.Engine().Load(); l.Running != 0 || l.Waiting != 0 || l.KVUsage != 0 {
		t.Errorf("load at the end %+v", l)
	}
}

// A request also waits for blocks: admitted only once enough are free.
func TestQueueWaitsForBlocks(t *testing.T) {
	cfg := slow()
	cfg.KVBlocks = 20 // 320 tokens
	c, r, tr := harness(t, cfg, 1)
	add(t, c, r, request(1, tokens(0, 150), 50)) // 13 blocks
	add(t, c, r, request(2, tokens(1000, 150), 10))
	c.run(0)
	if l := r.Engine().Load(); l.Running != 1 || l.Waiting != 1 || l.KVUsage != 13.0/20 {
		t.Fatalf("load %+v, want one running on 13 of 20 blocks and one waiting", l)
	}
	c.run(time.Hour)
	if tr.first[2] <= tr.done[1] {
		t.Errorf("the second request started at %v, before the first freed its blocks at %v", tr.first[2], tr.done[1])
	}
	if err := r.Add(c.now, request(3, tokens(0, 400), 1)); !errors.Is(err, ErrTooLong) {
		t.Errorf("a request larger than the cache: %v, want ErrTooLong", err)
	}
}

// Under pressure the cache evicts the blocks freed longest ago, and no
// block a request holds: a prefix used recently still hits, one used
// long ago no longer does.
func TestEvictionIsLRUAndDropsHits(t *testing.T) {
	cfg := slow()
	cfg.KVBlocks = 30
	c, r, tr := harness(t, cfg, 1)
	// a and b hold 11 blocks each (10 of prompt, one for the output), d 19.
	a, b, d := tokens(0, 160), tokens(10000, 160), tokens(20000, 288)
	run := func(id uint64, p []int) {
		add(t, c, r, request(id, p, 1))
		c.run(time.Hour)
	}
	run(1, a)
	run(2, b)
	run(3, a) // a is now the more recently used
	if tr.cached[3] != 144 {
		t.Fatalf("a again: cached %d, want 144", tr.cached[3])
	}
	run(4, d) // needs 19 blocks: the 6 never used, the last two of a's first run (its third held copies), and b's 11, freed longest ago
	run(5, a)
	run(6, b)
	if tr.cached[5] != 144 {
		t.Errorf("a after the pressure: cached %d, want 144 (used recently, kept)", tr.cached[5])
	}
	if tr.cached[6] != 0 {
		t.Errorf("b after the pressure: cached %d, want 0 (freed longest ago, evicted)", tr.cached[6])
	}
	if r.Engine().Stats().Evictions == 0 {
		t.Error("no eviction counted")
	}
}

// Blocks a running request holds are never evicted: a request that
// would need them waits instead.
func TestHeldBlocksAreNotEvicted(t *testing.T) {
	cfg := slow()
	cfg.KVBlocks = 12
	c, r, tr := harness(t, cfg, 1)
	add(t, c, r, request(1, tokens(0, 160), 20)) // 12 blocks, held for 20 tokens
	c.run(0)
	add(t, c, r, request(2, tokens(0, 160), 1)) // same prompt: hits, but needs 2 more blocks
	c.run(time.Hour)
	if tr.first[2] <= tr.done[1] || tr.cached[2] != 144 {
		t.Errorf("second request first token at %v (first done at %v), cached %d", tr.first[2], tr.done[1], tr.cached[2])
	}
}

// Decoding slows as the batch grows: a step takes DecodeBase plus
// DecodePerSeq for each sequence decoding in it.
func TestDecodeSlowsWithBatch(t *testing.T) {
	itl := func(n int) time.Duration {
		c, r, tr := harness(t, slow(), 1)
		for i := range n {
			add(t, c, r, request(uint64(i+1), tokens(i*1000, 32), 20))
		}
		c.run(time.Hour)
		ts := tr.tokens[1]
		return (ts[len(ts)-1] - ts[1]) / time.Duration(len(ts)-2)
	}
	one, eight := itl(1), itl(8)
	if one != 11*time.Millisecond || eight != 18*time.Millisecond {
		t.Errorf("inter-token latency %v alone, %v among 8; want 11ms and 18ms", one, eight)
	}
}

// A cancelled request leaves at once and frees its blocks; what it had
// computed stays cached.
func TestCancelFreesBlocks(t *testing.T) {
	c, r, tr := harness(t, slow(), 1)
	p := tokens(0, 480)
	add(t, c, r, request(1, p, 100))
	c.run(time.Second) // prefill done, decoding
	if l := r.Engine().Load(); l.Running != 1 || l.KVUsage == 0 {
		t.Fatalf("load while running %+v", l)
	}
	if !r.Cancel(1) || r.Cancel(1) {
		t.Fatal("Cancel should find the request once")
	}
	if l := r.Engine().Load(); l.Running != 0 || l.KVUsage != 0 {
		t.Errorf("load after the cancel %+v, want nothing held", l)
	}
	c.run(time.Hour)
	if _, done := tr.done[1]; done {
		t.Error("the cancelled request finished")
	}
	add(t, c, r, request(2, p, 1))
	add(t, c, r, request(3, tokens(5000, 48), 1))
	c.run(0)
	if !r.Cancel(3) {
		t.Error("a waiting or just admitted request cannot be cancelled")
	}
	c.run(time.Hour)
	if tr.cached[2] != 464 {
		t.Errorf("after the cancel the prompt found %d tokens cached, want 464", tr.cached[2])
	}
	if st := r.Engine().Stats(); st.Cancelled != 2 || st.Finished != 1 {
		t.Errorf("stats %+v", st)
	}
}

// Stretches of many steps, cut short by arrivals, give the same events
// at the same times as stepping one step at a time.
func TestStretchesMatchSingleSteps(t *testing.T) {
	cfg := slow()
	cfg.MaxRunning, cfg.KVBlocks, cfg.MaxBatchedTokens = 8, 200, 512
	type arrival struct {
		at  time.Duration
		req Request
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var arrivals []arrival
	at := time.Duration(0)
	for i := range 300 {
		at += time.Duration(rng.ExpFloat64() * float64(80*time.Millisecond))
		prefix := rng.IntN(4) * 100000 // four shared prefixes
		p := append(tokens(prefix, 64+rng.IntN(400)), tokens(1000000+i*1000, 1+rng.IntN(200))...)
		arrivals = append(arrivals, arrival{at, request(uint64(i+1), p, 1+rng.IntN(120))})
	}
	runAll := func(maxSteps int) (*trace, Stats, int) {
		c, r, tr := harness(t, cfg, maxSteps)
		for _, a := range arrivals {
			c.at(a.at, func() { add(t, c, r, a.req) })
		}
		c.run(time.Hour)
		return tr, r.Engine().Stats(), c.seq - len(arrivals)
	}
	one, st1, events1 := runAll(1)
	many, stN, eventsN := runAll(1 << 20)
	if len(one.done) != len(arrivals) {
		t.Fatalf("%d of %d requests finished", len(one.done), len(arrivals))
	}
	t.Logf("events: %d stepping, %d in stretches", events1, eventsN)
	if eventsN*2 > events1 {
		t.Errorf("stretches scheduled %d events, stepping %d: they should save most", eventsN, events1)
	}
	if !reflect.DeepEqual(one.first, many.first) || !reflect.DeepEqual(one.done, many.done) || !reflect.DeepEqual(one.cached, many.cached) || st1 != stN {
		t.Errorf("stretches differ from single steps:\n%s", diff(one, many))
	}
}

func diff(a, b *trace) string {
	for id, t := range a.done {
		if b.done[id] != t || a.first[id] != b.first[id] || a.cached[id] != b.cached[id] {
			return fmt.Sprintf("request %d: first %v/%v done %v/%v cached %d/%d", id, a.first[id], b.first[id], t, b.done[id], a.cached[id], b.cached[id])
		}
	}
	return "the same requests' times, other counters"
}

func TestValidate(t *testing.T) {
	for _, name := range PresetNames() {
		p, _ := Preset(name)
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := []func(*Config){
		func(c *Config) { c.MaxRunning = 0 },
		func(c *Config) { c.MaxBatchedTokens = 10 },
		func(c *Config) { c.KVBlocks = 0 },
		func(c *Config) { c.BlockTokens = -1 },
		func(c *Config) { c.PrefillTokensPerSecond = 0 },
		func(c *Config) { c.DecodeBase = 0 },
		func(c *Config) { c.DecodePerSeq = -1 },
	}
	for i, f := range bad {
		c := Llama8BOnH100()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: %+v accepted", i, c)
		}
	}
	if _, ok := Preset("gpt-5"); ok {
		t.Error("an unknown preset was found")
	}
}

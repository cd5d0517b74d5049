package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors of Add.
var (
	// ErrTooLong refuses a request whose prompt and output need more
	// blocks than the KV cache has: it could never run (vLLM refuses a
	// prompt over max_model_len).
	ErrTooLong = errors.New("engine: the request needs more KV cache blocks than the engine has")
	// ErrDuplicate refuses a request whose ID is in progress already.
	ErrDuplicate = errors.New("engine: a request of that ID is in progress")
)

// Request is what one request asks of the engine.
type Request struct {
	ID     uint64 // unique among the requests in progress
	Prompt int    // prompt tokens, at least 1
	Output int    // tokens to generate, 0 or more
	// Blocks are the chained hashes (HashBlocks, BlockHash) of the full
	// blocks of the request's tokens, prompt then output, as far as the
	// caller knows them: the prompt's are looked up in the prefix cache,
	// and each is cached once its tokens are computed. Nil caches
	// nothing.
	Blocks []uint64
}

// Event is a request's progress at the end of a stretch of steps.
type Event struct {
	ID     uint64
	Tokens int  // generated so far
	Cached int  // prompt tokens found in the prefix cache when it was admitted
	First  bool // its prefill ended in this stretch, with its first token
	Done   bool // it has generated all its tokens and left the engine
}

// Load is what the engine's scheduler and cache hold now, what vLLM
// exports as gauges.
type Load struct {
	Running int     // sequences in the batch (vllm:num_requests_running)
	Waiting int     // requests queued (vllm:num_requests_waiting)
	KVUsage float64 // the fraction of blocks requests hold (vllm:kv_cache_usage_perc)
}

// Stats counts what the engine has done since New, in tokens unless
// said otherwise.
type Stats struct {
	PrefixQueries    int64 // prompt tokens of admitted requests looked up in the prefix cache (vllm:prefix_cache_queries)
	PrefixHits       int64 // of those, found cached (vllm:prefix_cache_hits)
	PrefillTokens    int64 // prompt tokens computed
	GenerationTokens int64 // tokens generated
	Evictions        int64 // cached blocks reused for something else (blocks)
	Finished         int64 // requests that generated all their tokens
	Cancelled        int64 // requests cancelled before that
	Steps            int64 // steps run
}

// Engine is one replica's scheduler and KV cache. It is not safe for
// concurrent use: its driver serialises the calls.
//
// A driver calls Begin, waits the step's duration (times the steps),
// and calls End, over and over while Busy. Add and Cancel may come at any
// time: an added request joins the batch at the next Begin (continuous
// batching); a cancelled one leaves at once and frees its blocks.
type Engine struct {
	cfg     Config
	kv      kvCache
	waiting []*seq // in arrival order
	running []*seq // in admission order
	byID    map[uint64]*seq
	batch   []*seq // the stretch under way, in the order its events come
	steps   int    // how many steps the stretch under way may run; 0: none under way
	stats   Stats
	scratch []int32
}

// seq is one request in the engine.
type seq struct {
	Request
	table      []int32 // its blocks, for its prompt and output
	cached     int     // prompt tokens found in the prefix cache
	computed   int     // prompt tokens in the KV cache, the cached ones included
	generated  int
	chunk      int  // prompt tokens the stretch under way computes; 0 when it decodes
	inStep     bool // in the stretch under way
	registered int  // leading blocks of table registered in the prefix cache
	gone       bool // finished or cancelled
}

// New returns an empty engine of cfg.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.normalized()
	return &Engine{cfg: cfg, kv: newKVCache(cfg.KVBlocks), byID: map[uint64]*seq{}}, nil
}

// Config is the engine's configuration, defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Add queues r; it is admitted at a later Begin, in arrival order.
func (e *Engine) Add(r Request) error {
	switch {
	case r.Prompt < 1 || r.Output < 0:
		return fmt.Errorf("engine: a request needs a prompt of at least 1 token and an output of 0 or more, got %d and %d", r.Prompt, r.Output)
	case e.blocksFor(&r) > e.cfg.KVBlocks:
		return ErrTooLong
	case e.byID[r.ID] != nil:
		return ErrDuplicate
	}
	s := &seq{Request: r}
	e.byID[r.ID] = s
	e.waiting = append(e.waiting, s)
	return nil
}

// blocksFor is the blocks r holds while it runs.
func (e *Engine) blocksFor(r *Request) int {
	b := e.cfg.BlockTokens
	return (r.Prompt + r.Output + b - 1) / b
}

// Cancel removes request id, waiting or running, and frees its blocks
// (those it computed stay cached until evicted). It reports whether the
// request was in progress.
func (e *Engine) Cancel(id uint64) bool {
	s := e.byID[id]
	if s == nil {
		return false
	}
	if s.table == nil {
		e.waiting = slices.DeleteFunc(e.waiting, func(w *seq) bool { return w == s })
	} else {
		e.running = slices.DeleteFunc(e.running, func(r *seq) bool { return r == s })
	}
	e.release(s)
	e.stats.Cancelled++
	return true
}

// release frees s's blocks, its last ones first so that a prompt's
// first blocks, which other requests share most, are evicted last.
func (e *Engine) release(s *seq) {
	for i := len(s.table) - 1; i >= 0; i-- {
		e.kv.release(s.table[i])
	}
	s.table, s.gone = nil, true
	delete(e.byID, s.ID)
}

// Busy reports whether a request is waiting or running.
func (e *Engine) Busy() bool { return len(e.running)+len(e.waiting) > 0 }

// Load is what the scheduler and the cache hold now.
func (e *Engine) Load() Load {
	return Load{Running: len(e.running), Waiting: len(e.waiting), KVUsage: e.kv.usage()}
}

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Evictions = e.kv.evictions
	return s
}

// Begin starts a stretch of steps and returns a step's duration and how
// many steps the stretch may run: one, or up to maxSteps when nothing
// would change from one step to the next but tokens (no prompt being
// computed, no request admitted or finishing before the last of them;
// a virtual-time driver saves events so). 0 steps means there was
// nothing to run. Each running sequence decodes a token; then prompts
// are computed in chunks, in admission order, within MaxBatchedTokens;
// then waiting requests are admitted in arrival order while a sequence
// slot, blocks for the whole request and tokens of the step remain, the
// first that cannot be stopping the others (first come, first served).
func (e *Engine) Begin(maxSteps int) (time.Duration, int) {
	if e.steps > 0 {
		panic("engine: Begin while a stretch is under way")
	}
	budget := e.cfg.MaxBatchedTokens
	decoding, prefill := 0, 0
	e.batch = e.batch[:0]
	for _, s := range e.running {
		if s.computed == s.Prompt {
			s.inStep, s.chunk = true, 0
			decoding++
			budget--
		}
	}
	for _, s := range e.running {
		if left := s.Prompt - s.computed; left > 0 && budget > 0 {
			s.inStep, s.chunk = true, min(left, budget)
			budget -= s.chunk
			prefill += s.chunk
		}
	}
	for _, s := range e.running {
		if s.inStep {
			e.batch = append(e.batch, s)
		}
	}
	admitted := e.admit(budget)
	for _, s := range admitted {
		prefill += s.chunk
	}
	if len(e.batch) == 0 {
		return 0, 0
	}
	e.steps = 1
	if prefill == 0 && len(admitted) == 0 {
		e.steps = max(1, maxSteps)
		for _, s := range e.batch {
			e.steps = min(e.steps, s.Output-s.generated)
		}
	}
	return e.cfg.StepTime(decoding, prefill), e.steps
}

// admit moves waiting requests into the batch while they fit, and
// returns them; each computes a first chunk of its prompt in the step.
func (e *Engine) admit(budget int) []*seq {
	from := len(e.batch)
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxRunning && budget > 0 {
		s := e.waiting[0]
		if !e.allocate(s) {
			break
		}
		e.waiting = slices.Delete(e.waiting, 0, 1)
		e.running = append(e.running, s)
		s.inStep, s.chunk = true, min(s.Prompt-s.computed, budget)
		budget -= s.chunk
		e.batch = append(e.batch, s)
	}
	return e.batch[from:]
}

// allocate gives s its blocks: the longest cached prefix of its prompt
// (short of its last token, which is always computed, as in vLLM) and
// new ones for the rest of its prompt and its output. It reports false,
// taking nothing, when there are not enough free blocks.
func (e *Engine) allocate(s *seq) bool {
	b := e.cfg.BlockTokens
	hits := e.kv.prefix(s.Blocks, (s.Prompt-1)/b, e.scratch[:0])
	e.scratch = hits[:0]
	need := e.blocksFor(&s.Request)
	if e.kv.available(hits) < need-len(hits) {
		return false
	}
	s.table = make([]int32, 0, need)
	for _, id := range hits {
		e.kv.hold(id)
		s.table = append(s.table, id)
	}
	for len(s.table) < need {
		s.table = append(s.table, e.kv.allocate())
	}
	s.cached = len(hits) * b
	s.computed, s.registered = s.cached, len(hits)
	e.stats.PrefixQueries += int64(s.Prompt)
	e.stats.PrefixHits += int64(s.cached)
	return true
}

// End ends the stretch under way after n of its steps (fewer than Begin
// allowed when something new must join the batch sooner), and gives fn
// each sequence's progress, in the batch's order. Finished requests
// leave the engine and free their blocks.
func (e *Engine) End(n int, fn func(Event)) {
	if n < 1 || n > e.steps {
		panic(fmt.Sprintf("engine: End(%d) of a stretch of %d steps", n, e.steps))
	}
	finished := false
	for _, s := range e.batch {
		if s.gone {
			continue // cancelled during the stretch
		}
		ev := e.advance(s, n)
		if ev.Done {
			e.release(s)
			e.stats.Finished++
			finished = true
		}
		if fn != nil {
			fn(ev)
		}
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(s *seq) bool { return s.gone })
	}
	e.stats.Steps += int64(n)
	e.steps = 0
	clear(e.batch)
	e.batch = e.batch[:0]
}

// advance moves s on by n steps and caches the blocks it completed.
func (e *Engine) advance(s *seq, n int) Event {
	first := false
	if s.chunk > 0 {
		s.computed += s.chunk
		e.stats.PrefillTokens += int64(s.chunk)
		if s.computed == s.Prompt {
			first = true
			s.generated = min(1, s.Output)
			e.stats.GenerationTokens += int64(s.generated)
		}
	} else {
		s.generated += n
		e.stats.GenerationTokens += int64(n)
	}
	s.inStep, s.chunk = false, 0
	// The last token generated is not in the KV cache yet.
	full := (s.computed + max(0, s.generated-1)) / e.cfg.BlockTokens
	for ; s.registered < min(full, len(s.Blocks)); s.registered++ {
		e.kv.register(s.table[s.registered], s.Blocks[s.registered])
	}
	done := s.computed == s.Prompt && s.generated >= s.Output
	return Event{ID: s.ID, Tokens: s.generated, Cached: s.cached, First: first, Done: done}
}

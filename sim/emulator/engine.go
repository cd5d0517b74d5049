package emulator

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmesh/llmesh/sim/engine"
)

// EngineConfig is an inference engine replica (see sim/engine, whose
// presets engine.Llama8BOnH100 and engine.Llama70BOn4H100 are realistic
// deployments).
type EngineConfig = engine.Config

// maxLag is how far the engine's steps may fall behind real time (a
// loaded machine, a stalled process) before the backlog is dropped and
// the engine stepped from now, as a GPU that stalled would.
const maxLag = 50 * time.Millisecond

// engineRunner drives one engine.Engine in real time. A goroutine steps
// it while requests are in it and ends when none is; requests wait for
// their tokens. The goroutine is the Emulator's: Shutdown waits for it.
type engineRunner struct {
	mu       sync.Mutex
	eng      *engine.Engine
	runs     map[uint64]*engineRun // in the engine
	last     uint64                // the last request id given
	stepping bool                  // the goroutine is running
	stopped  bool                  // Shutdown stopped it: no request enters
	killed   <-chan struct{}
	wg       *sync.WaitGroup
	onFirst  func(ttft time.Duration) // observes each request's time to first token
}

// engineRun is one request in the engine.
type engineRun struct {
	g       *engineRunner
	id      uint64
	arrived time.Time
	wake    chan struct{} // signalled when the fields below change
	// Guarded by g.mu.
	tokens int
	cached int
	done   bool
}

func newEngineRunner(cfg engine.Config, killed <-chan struct{}, wg *sync.WaitGroup, onFirst func(time.Duration)) (*engineRunner, error) {
	eng, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	return &engineRunner{eng: eng, runs: map[uint64]*engineRun{}, killed: killed, wg: wg, onFirst: onFirst}, nil
}

// submit puts a request of prompt tokens and output to generate into the
// engine, with the chained hashes of its full blocks.
func (g *engineRunner) submit(prompt, output int, blocks []uint64) (*engineRun, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return nil, errEngineStopped
	}
	g.last++
	r := &engineRun{g: g, id: g.last, arrived: time.Now(), wake: make(chan struct{}, 1)}
	if err := g.eng.Add(engine.Request{ID: r.id, Prompt: prompt, Output: output, Blocks: blocks}); err != nil {
		return nil, err
	}
	g.runs[r.id] = r
	if !g.stepping {
		g.stepping = true
		g.wg.Add(1)
		go g.step(r.arrived)
	}
	return r, nil
}

// step runs the engine's steps back to back from start, each lasting what
// the engine says, until it holds no request.
func (g *engineRunner) step(start time.Time) {
	defer g.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		g.mu.Lock()
		d, n := g.eng.Begin(1)
		if n == 0 {
			g.stepping = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		end := start.Add(d)
		if timer == nil {
			timer = time.NewTimer(time.Until(end))
		} else {
			timer.Reset(time.Until(end))
		}
		select {
		case <-timer.C:
		case <-g.killed:
			g.abandon()
			return
		}
		g.mu.Lock()
		g.eng.End(n, func(ev engine.Event) { g.progress(ev, end) })
		g.mu.Unlock()
		if start = end; time.Since(end) > maxLag {
			start = time.Now()
		}
	}
}

// progress records ev, which came at end, and wakes its request.
func (g *engineRunner) progress(ev engine.Event, end time.Time) {
	r := g.runs[ev.ID]
	if r == nil {
		return // released during the step
	}
	r.tokens = ev.Tokens
	if ev.First {
		r.cached = ev.Cached
		if g.onFirst != nil {
			g.onFirst(end.Sub(r.arrived))
		}
	}
	if ev.Done {
		r.done = true
		delete(g.runs, ev.ID)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// abandon ends the stretch under way and cancels every request when
// Shutdown has cut the requests: they are aborting, and nothing steps
// the engine any more.
func (g *engineRunner) abandon() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.eng.End(1, nil)
	for id, r := range g.runs {
		g.eng.Cancel(id)
		r.done = true
	}
	clear(g.runs)
	g.stepping = false
}

// errEngineStopped refuses a request that reaches an engine after
// Shutdown stopped it.
var errEngineStopped = errors.New("emulator: the engine has stopped")

// stop lets no request in any more; its goroutine, cut by Shutdown,
// ends at once.
func (g *engineRunner) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// block is the tokens of one of the engine's KV cache blocks.
func (g *engineRunner) block() int { return g.eng.Config().BlockTokens }

// load reads the engine for the metrics.
func (g *engineRunner) load() (engine.Load, engine.Stats) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.eng.Load(), g.eng.Stats()
}

// wait waits until the request has generated k tokens or finished; false
// once its client has gone. When Shutdown cuts requests it aborts the
// connection, as pacer.until does.
func (r *engineRun) wait(p *pacer, k int) bool {
	for {
		r.g.mu.Lock()
		ok := r.tokens >= k || r.done
		r.g.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-r.wake:
		case <-p.ctx.Done():
			return false
		case <-p.killed:
			panic(http.ErrAbortHandler)
		}
	}
}

// release takes the request out of the engine unless it has finished,
// freeing its batch slot and its blocks: its client has gone, or its
// answer failed.
func (r *engineRun) release() {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	if !r.done {
		r.g.eng.Cancel(r.id)
		delete(r.g.runs, r.id)
		r.done = true
	}
}

// cachedTokens is the prompt tokens found in the prefix cache.
func (r *engineRun) cachedTokens() int {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.cached
}

// startEngine puts the request into the emulator's engine, when it has
// one: prompt tokens, of which ids are known as blocks, and output tokens
// to generate, of which out are the ids. It reports false when the
// request has been answered with an error instead.
func (x *exchange) startEngine(prompt int, blocks promptBlocks, out []int, output int) bool {
	if x.eng == nil {
		return true
	}
	run, err := x.eng.submit(prompt, output, blocks.with(out))
	if errors.Is(err, engine.ErrTooLong) {
		limit := x.eng.eng.Config().KVBlocks * x.eng.block()
		x.fail(&apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "messages", code: "context_length_exceeded",
			message: "This model's maximum context length is " + strconv.Itoa(limit) + " tokens. However, you requested " + strconv.Itoa(prompt+output) +
				" tokens (" + strconv.Itoa(prompt) + " in the messages, " + strconv.Itoa(output) + " in the completion). Please reduce the length of the messages or completion."})
		return false
	}
	if err != nil {
		x.fail(&apiError{status: http.StatusInternalServerError, message: err.Error(), typ: "server_error"})
		return false
	}
	x.run = run
	return true
}

// await waits until token k (from 0) of the answer is due: generated by
// the engine, or without one at at. False once the client has gone.
func (x *exchange) await(k int, at time.Time) bool {
	if x.run == nil {
		return x.pace.until(at)
	}
	return x.run.wait(&x.pace, k+1)
}

// awaitAll waits until the whole answer is due: every token generated, or
// without an engine at.
func (x *exchange) awaitAll(at time.Time) bool {
	if x.run == nil {
		return x.pace.until(at)
	}
	return x.run.wait(&x.pace, math.MaxInt)
}

// awaitFirst waits for the engine's first token (its prefill done);
// without an engine it returns true at once.
func (x *exchange) awaitFirst() bool { return x.run == nil || x.run.wait(&x.pace, 1) }

// awaitDone waits until the engine has generated every token; without
// an engine it returns true at once: a stream's last events are due
// with its last token.
func (x *exchange) awaitDone() bool { return x.run == nil || x.run.wait(&x.pace, math.MaxInt) }

// cached is the prompt tokens the engine found in its prefix cache; 0
// without an engine.
func (x *exchange) cached() int {
	if x.run == nil {
		return 0
	}
	return x.run.cachedTokens()
}

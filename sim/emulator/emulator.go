package emulator

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/route"
)

// Emulator is one emulated provider. Its methods are safe for concurrent
// use.
type Emulator struct {
	cfg    atomic.Pointer[Config] // normalized; replaced whole by SetConfig
	mode   atomic.Int32
	tok    *route.Tokenizer // one per emulator, loaded on first use
	limit  bucket
	bodies bodyCache
	bufs   sync.Pool // *[]byte for building answers
	rec    recorder
	stored responseStore // the Responses API's stored responses
	// instance is random, drawn by New: response ids carry it, so that
	// two emulators of one configuration never hand out the same id (a
	// node routes a follow-up to the provider by its response's id).
	instance uint64
	// stopping is closed when Shutdown starts: hung requests are let go.
	// killed is closed when Shutdown gives up waiting: streams stop.
	stopping, killed chan struct{}
	stopOnce         sync.Once
	killOnce         sync.Once
	texts            textTokens // token ids of long texts, for the engine's prefix cache
	wordsOnce        sync.Once
	words            [len(vocabulary)]int // the vocabulary's token ids
	metrics          *metrics
	// cur is the engine new requests go to, nil without one; runners are
	// every engine the emulator has had, whose counters /metrics adds up
	// and which Shutdown stops; engines counts their stepping goroutines.
	cur     atomic.Pointer[engineRunner]
	engMu   sync.Mutex
	runners []*engineRunner
	engines sync.WaitGroup

	mu        sync.Mutex // serialises SetConfig and guards the listener's life below
	addr      string     // the address bound by Start, kept across ModeRefuse
	srv       *http.Server
	serveDone chan struct{} // closed when srv's Serve returns
	started   bool
	shut      bool
}

// New returns an emulator configured by cfg. It starts nothing: serve it
// with Handler or Start.
func New(cfg Config) (*Emulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Emulator{
		tok:      new(route.Tokenizer),
		stopping: make(chan struct{}),
		killed:   make(chan struct{}),
	}
	e.cfg.Store(cfg.normalized())
	e.limit.setRPM(cfg.RPM, time.Now())
	e.bodies.seed = maphash.MakeSeed()
	e.instance = maphash.Comparable(maphash.MakeSeed(), 0)
	e.rec.stats.ByStatus = map[int]int64{}
	e.rec.drained = make(chan struct{})
	e.metrics = newMetrics(e)
	if err := e.setEngine(cfg.Engine); err != nil {
		return nil, err
	}
	return e, nil
}

// setEngine makes c the engine of the requests to come: a new, empty
// one, or none when c is nil. Replaced engines finish their requests.
func (e *Emulator) setEngine(c *EngineConfig) error {
	var g *engineRunner
	if c != nil {
		var err error
		if g, err = newEngineRunner(*c, e.killed, &e.engines, e.observeTTFT); err != nil {
			return err
		}
	}
	e.engMu.Lock()
	defer e.engMu.Unlock()
	if g != nil {
		e.runners = append(e.runners, g)
	}
	e.cur.Store(g)
	return nil
}

// Handler serves the OpenAI, Azure OpenAI and Anthropic APIs, the
// /emulator/ control endpoints and GET /metrics. It may be mounted in
// any server, Start's included.
func (e *Emulator) Handler() http.Handler { return http.HandlerFunc(e.serveHTTP) }

// Start listens on addr (such as "127.0.0.1:0") and serves Handler from a
// goroutine that Shutdown stops and waits for. It may be called once.
func (e *Emulator) Start(addr string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.shut:
		return errors.New("emulator: Start after Shutdown")
	case e.started:
		return errors.New("emulator: already started")
	}
	e.addr = addr
	if err := e.listenLocked(); err != nil {
		return err
	}
	if e.Mode() == ModeRefuse {
		e.closeLocked() // the port is bound once, so that ModeUp finds it again
	}
	e.started = true
	return nil
}

// listenLocked binds e.addr and serves it; e.addr becomes the address bound,
// so that leaving ModeRefuse binds the same port again.
func (e *Emulator) listenLocked() error {
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		return fmt.Errorf("emulator: listen: %w", err)
	}
	e.addr = ln.Addr().String()
	e.srv = &http.Server{
		Handler:           e.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // the body; cleared once it is read
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	e.serveDone = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(ln) // ErrServerClosed, or the listener failed: either way it is over
	}(e.srv, e.serveDone)
	return nil
}

// closeLocked closes the listener and every connection, and waits for the
// serving goroutine. Requests in flight see their context cancelled.
func (e *Emulator) closeLocked() {
	if e.srv == nil {
		return
	}
	_ = e.srv.Close()
	<-e.serveDone
	e.srv = nil
}

// Addr is the address Start bound, such as "127.0.0.1:41234"; "" before
// Start. It stays the same through ModeRefuse.
func (e *Emulator) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started {
		return ""
	}
	return e.addr
}

// URL is "http://" and Addr, the base URL a client is given; "" before
// Start.
func (e *Emulator) URL() string {
	if a := e.Addr(); a != "" {
		return "http://" + a
	}
	return ""
}

// Mode returns the current mode.
func (e *Emulator) Mode() Mode { return Mode(e.mode.Load()) }

// SetMode changes how the emulator fails. Entering ModeRefuse closes the
// listener and every open connection; leaving it listens again on the same
// address, and fails (staying in ModeRefuse) if that address has been taken
// meanwhile.
func (e *Emulator) SetMode(m Mode) error {
	if !m.valid() {
		return fmt.Errorf("emulator: invalid mode %d", int(m))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shut {
		return errors.New("emulator: SetMode after Shutdown")
	}
	if e.started {
		if m == ModeRefuse {
			e.closeLocked()
		} else if e.srv == nil {
			if err := e.listenLocked(); err != nil {
				return err
			}
		}
	}
	e.mode.Store(int32(m))
	return nil
}

// SetConfig replaces the configuration. Requests already in progress keep
// the one they started with; the RPM bucket keeps what it holds, capped at
// the new limit; a changed Engine is a new engine, empty.
func (e *Emulator) SetConfig(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	e.mu.Lock() // the configuration, the bucket and the engine change together
	defer e.mu.Unlock()
	if old := e.cfg.Load().Engine; (old == nil) != (c.Engine == nil) || old != nil && *old != *c.Engine {
		if err := e.setEngine(c.Engine); err != nil {
			return err
		}
	}
	e.cfg.Store(c.normalized())
	e.limit.setRPM(c.RPM, time.Now())
	return nil
}

// Config returns the configuration in use.
func (e *Emulator) Config() Config {
	c := *e.cfg.Load()
	return *c.normalized() // the caller gets maps of its own
}

// Stats returns a snapshot of the counters.
func (e *Emulator) Stats() Stats { return e.rec.snapshot() }

// Received returns the last 16 API requests, oldest first, as copies.
func (e *Emulator) Received() []Received { return e.rec.received() }

// Shutdown stops the emulator: hung requests are let go at once and no new
// request is taken; the listener, if Start opened one, is closed; requests
// in progress may finish until ctx is done, after which streams are cut and
// connections closed. It waits for the serving goroutine and the requests
// in flight, and returns ctx.Err() if it had to cut them. Calling it again
// only waits again.
func (e *Emulator) Shutdown(ctx context.Context) error {
	e.stopOnce.Do(func() { close(e.stopping) })
	drained := e.rec.close()

	e.mu.Lock()
	e.shut = true
	srv, done := e.srv, e.serveDone
	e.srv = nil
	e.mu.Unlock()

	if srv != nil {
		if srv.Shutdown(ctx) != nil {
			e.kill()
			_ = srv.Close()
		}
		<-done
	}
	defer e.stopEngines()
	select {
	case <-drained:
		return ctx.Err()
	case <-ctx.Done():
	}
	e.kill()
	// Cut requests end at their next step. Wait for them, but not forever:
	// a handler mounted in a server that is not ours may be stuck writing.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
	}
	return ctx.Err()
}

// stopEngines stops the engines' stepping goroutines and waits for them.
// Once no request is in flight cutting them changes nothing; otherwise
// Shutdown has cut the requests already. A request still on its way
// (its server not ours) finds its engine stopped.
func (e *Emulator) stopEngines() {
	e.kill()
	e.engMu.Lock()
	runners := slices.Clone(e.runners)
	e.engMu.Unlock()
	for _, g := range runners {
		g.stop()
	}
	e.engines.Wait()
}

func (e *Emulator) kill() { e.killOnce.Do(func() { close(e.killed) }) }

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/route"
)

// Options are a node's dependencies that do not come from its
// configuration file.
type Options struct {
	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the node's metrics; nil means a fresh registry.
	Registry *prometheus.Registry
	// Getenv reads secrets named in the configuration; nil means os.Getenv.
	Getenv func(string) string
	// Clock is the node's time source; nil means time.Now.
	Clock func() time.Time
}

// Node is one llmesh node.
type Node struct {
	s       *settings
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	now     func() time.Time

	catalog *route.Catalog
	tracker *route.Tracker
	planner *route.Planner
	exec    *route.Executor
	tenants *tenantKeys

	srv       *http.Server
	ln        net.Listener
	serveDone chan struct{}
	ready     atomic.Bool

	shutdownOnce sync.Once
	shutdownErr  error
}

// New validates cfg and builds a node. It starts nothing and opens
// nothing; Start does.
func New(cfg *Config, opts Options) (*Node, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	s, err := cfg.resolve(opts.Getenv)
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	catalog, err := route.NewCatalog(s.providers)
	if err != nil {
		return nil, err
	}
	n := &Node{
		s:         s,
		log:       opts.Logger.With("node", s.name),
		reg:       opts.Registry,
		metrics:   newMetrics(opts.Registry),
		now:       opts.Clock,
		catalog:   catalog,
		tenants:   newTenantKeys(s.tenants),
		serveDone: make(chan struct{}),
	}
	n.tracker = route.NewTracker(s.health, func(p string) {
		n.metrics.ejections.WithLabelValues(p).Inc()
		n.log.Warn("provider ejected after consecutive failures", "provider", p)
	})
	limiter := route.NewLimiter(catalog.Providers())
	n.planner = &route.Planner{Region: s.region, Catalog: catalog, Health: n.tracker, Quota: limiter}
	n.exec = route.NewExecutor(s.executor, route.ExecutorDeps{
		Tracker:   n.tracker,
		Quota:     limiter,
		Tokenizer: &route.Tokenizer{},
		Observer:  n.metrics,
		Clock:     opts.Clock,
	})
	n.srv = &http.Server{
		Handler:           n.routes(),
		ReadHeaderTimeout: s.readHeader,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
		// No ReadTimeout or WriteTimeout: they would cut long streams.
		// Bodies get a read deadline and every write to a client its own
		// deadline instead (see chat and httpSink).
	}
	return n, nil
}

// Start listens on the configured HTTP address and serves until Shutdown.
func (n *Node) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", n.s.httpAddr)
	if err != nil {
		return fmt.Errorf("node.http: %w", err)
	}
	n.ln = ln
	go func() {
		defer close(n.serveDone)
		if err := n.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server stopped", "err", err)
		}
	}()
	n.ready.Store(true)
	n.log.Info("node started", "http", ln.Addr().String(), "region", n.s.region,
		"providers", len(n.catalog.Providers()), "models", len(n.catalog.Models()))
	if len(n.s.tenants) == 0 {
		n.log.Warn("no tenants are configured: every API request will be refused with 401")
	}
	return nil
}

// HTTPAddr returns the address the API listens on, once started.
func (n *Node) HTTPAddr() string {
	if n.ln == nil {
		return ""
	}
	return n.ln.Addr().String()
}

// Name returns the node's name.
func (n *Node) Name() string { return n.s.name }

// Shutdown stops taking traffic, lets requests in flight (streams
// included) finish until ctx ends, then closes them and releases upstream
// connections. It is idempotent: later calls return the first result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() {
		n.ready.Store(false)
		if n.ln != nil {
			if err := n.srv.Shutdown(ctx); err != nil {
				n.shutdownErr = fmt.Errorf("http shutdown: %w", err)
				_ = n.srv.Close()
			}
			<-n.serveDone
		}
		n.exec.Close()
		n.log.Info("node stopped")
	})
	return n.shutdownErr
}

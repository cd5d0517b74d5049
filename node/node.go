package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/audit"
	"github.com/llmesh/llmesh/node/cache"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/node/engine"
	"github.com/llmesh/llmesh/node/forward"
	"github.com/llmesh/llmesh/node/ledger"
	"github.com/llmesh/llmesh/node/metrics"
	"github.com/llmesh/llmesh/node/probe"
	"github.com/llmesh/llmesh/node/series"
	"github.com/llmesh/llmesh/node/tenant"
	"github.com/llmesh/llmesh/node/tracing"
	"github.com/llmesh/llmesh/route"
)

// Options are a node's dependencies that do not come from its
// configuration file.
type Options struct {
	// Logger receives the node's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the node's metrics; nil means a fresh registry.
	Registry *prometheus.Registry
	// Getenv and ReadFile read secrets named in the configuration; nil
	// means os.Getenv and os.ReadFile.
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	// Clock is the node's time source; nil means time.Now.
	Clock func() time.Time
	// Version is the build version the node announces to its peers.
	Version string
	// GossipTuning, if not nil, adjusts the gossip settings derived from
	// the configuration (tests use it for faster failure detection).
	GossipTuning func(*gossip.Config)
	// LedgerTuning, if not nil, adjusts a voter's Raft settings (agent
	// -dev keeps the ledger in memory; tests speed up elections).
	LedgerTuning LedgerTuning
	// LogPrompts logs each request's body, its prompt, with its request
	// id (llmesh agent -log-prompts): for debugging only, since the log
	// then holds users' data. Off, no prompt is ever logged.
	LogPrompts bool
}

// Node is one llmesh node.
type Node struct {
	s       *config.Runtime
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics.Metrics
	gov     *metrics.Governance // keys' and tenants' refusals
	now     func() time.Time
	version string
	started time.Time

	// The configuration as given, and how to read its secrets, for Reload.
	cfg      *Config
	getenv   func(string) string
	readFile func(string) ([]byte, error)
	reloadMu sync.Mutex

	// rt holds the catalog and the planner over it; a reload replaces both
	// at once.
	rt      atomic.Pointer[routing]
	tracker *route.Tracker
	// replicas tracks each replica of providers that have several.
	replicas *route.Tracker
	exec     *route.Executor
	quota    route.QuotaGate
	// tenants are the keys and tenants requests authenticate against:
	// the file's, and the ledger's once read (refreshTenants).
	tenants atomic.Pointer[tenant.Keys]

	mesh  *gossip.Mesh // nil when the node does not gossip
	grpc  *grpc.Server // nil without node.rpc
	rpcLn net.Listener
	// rpcListening is rpcLn's address once it listens: the ledger's
	// bootstrap reads it from its own goroutine, started first.
	rpcListening atomic.Pointer[string]
	forward      *forward.Forwarder
	ledger       *ledger.Ledger // nil when the node has no part in the ledger
	inFlight     atomic.Int64
	// admitted counts the requests that waited for admission, and how
	// long in all.
	// rateWaiting are those waiting now for a rate share.
	admitted   struct{ waited, waitedNs, rateWaiting atomic.Int64 }
	probes     *probe.Prober
	engines    *engine.Scraper // the self-hosted replicas' engine load
	decided    decisions.Ring  // the last routing decisions, for the dashboard
	traffic    *series.Ring    // the last minutes of traffic per second, for the dashboard
	tracer     *tracing.Tracer // nil unless tracing.otlp_endpoint is set
	audit      *audit.Log      // nil when audit.disabled
	perTenant  sync.Map        // tenant name → *atomic.Int64: its requests in flight here
	responses  responseStore   // the Responses answers this node relayed from providers, and copies of peers'
	copies     *responseCopier // sends each response recorded here to a peer; nil when the node does not gossip
	cache      *cache.Cache    // the exact-match response cache; nil unless cache.enabled
	logPrompts bool
	red        *route.Redactor // the node's secrets, out of its log and answers

	srv       *http.Server
	ln        net.Listener
	serveDone chan struct{}
	ready     atomic.Bool
	draining  atomic.Bool            // set when a drain begins; never cleared
	phase     atomic.Pointer[string] // the drain's phase; nil while serving
	stop      chan struct{}          // closed by Shutdown: stops the node's loops
	done      chan struct{}          // closed when the node has stopped
	loops     sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error

	// localKeyRates are keys' and tenants' limits on a node without the
	// ledger, whole; nil with the ledger, whose shares serve.
	localKeyRates *consensus.RateHolder
}

// New validates cfg and builds a node. It starts nothing and opens
// nothing; Start does.
func New(cfg *Config, opts Options) (*Node, error) {
	opts = opts.withDefaults()
	s, err := config.Resolve(cfg, config.Env{Getenv: opts.Getenv, ReadFile: opts.ReadFile, PrivateIP: config.PrivateIP})
	if err != nil {
		return nil, err
	}
	red := newRedactor(s)
	catalog, err := route.NewCatalog(s.Providers, s.Groups...)
	if err != nil {
		return nil, err
	}
	n := &Node{
		s:          s,
		log:        slog.New(red.Handler(opts.Logger.Handler())).With("node", s.Name),
		red:        red,
		reg:        opts.Registry,
		metrics:    metrics.New(opts.Registry),
		gov:        metrics.NewGovernance(opts.Registry),
		traffic:    series.New(),
		now:        opts.Clock,
		version:    opts.Version,
		cfg:        cfg,
		getenv:     opts.Getenv,
		readFile:   opts.ReadFile,
		logPrompts: opts.LogPrompts,
		serveDone:  make(chan struct{}),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	n.tenants.Store(tenant.NewKeys(s.Tenants, nil))
	n.cache = newResponseCache(s.Cache)
	n.warnUnknownModels(catalog)
	if n.logPrompts {
		n.log.Warn("prompts are logged (-log-prompts): the log now holds users' data; for debugging only")
	}
	if n.tracer, err = n.newTracer(s.Tracing); err != nil {
		return nil, err
	}
	n.tracker = n.newHealthTracker()
	n.engines = n.newEngines(opts.Registry) // before the mesh, whose load reports read it
	health, err := n.buildMesh(opts)
	if err != nil {
		return nil, err
	}
	quota, budget, err := n.buildLedger(catalog, opts)
	if err != nil {
		return nil, err
	}
	n.buildRequestPath(catalog, health, quota, budget)
	n.responses.maxBytes, n.responses.held = int(s.StoredResponsesBytes), n.metrics.StoredBytes
	if n.forward != nil {
		n.copies = newResponseCopier(copyQueueSize, n.sendCopy, n.metrics.StoredCopy)
	}
	n.probes = n.newProber()
	n.srv = n.newHTTPServer()
	return n, nil
}

// Start listens on the configured HTTP address, joins the mesh (in the
// background, retrying its seeds) and serves until Shutdown. On error,
// what it started is stopped again.
func (n *Node) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", n.s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("node.http: %w", err)
	}
	fail := func(err error) error {
		ln.Close()
		n.audit.Close()
		if n.grpc != nil {
			n.grpc.Stop()
		}
		if n.ledger != nil {
			n.ledger.Kill()
		}
		return err
	}
	if n.s.AuditDir != "" {
		if n.audit, err = audit.Open(n.s.AuditDir, n.s.AuditMaxBytes, n.log, n.reg); err != nil {
			return fail(err)
		}
	}
	if n.ledger != nil {
		if err := n.ledger.Listen(ctx); err != nil {
			return fail(err)
		}
	}
	if err := n.listenRPC(ctx); err != nil {
		return fail(err)
	}
	if n.mesh != nil {
		meta := n.mesh.Meta()
		meta.HTTP = n.advertised(ln.Addr())
		meta.RPC = n.advertisedHostPort(n.rpcAddr())
		if n.ledger != nil && n.ledger.Server() != nil {
			meta.Raft = n.advertisedHostPort(n.ledger.Server().Addr())
		}
		if err := n.mesh.SetMeta(meta); err != nil {
			return fail(fmt.Errorf("node: %w", err))
		}
		if err := n.mesh.Start(ctx); err != nil {
			return fail(fmt.Errorf("node.gossip: %w", err))
		}
	}
	if n.ledger != nil {
		n.ledger.Run()
	}
	n.ln = ln
	n.started = n.now()
	go func() {
		defer close(n.serveDone)
		if err := n.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("HTTP server stopped", "err", err)
		}
	}()
	if n.probes != nil {
		n.loops.Go(func() { n.probes.Run(n.stop) })
	}
	n.loops.Go(func() { n.engines.Run(n.stop) })
	n.copies.start() // stopped after the requests that record responses
	n.tracer.Start()
	n.ready.Store(true)
	n.log.Info("node started", "http", ln.Addr().String(), "region", n.s.Region,
		"providers", len(n.catalog().Providers()), "models", len(n.catalog().Models()))
	if len(n.s.Tenants) == 0 {
		n.log.Warn("no tenants are configured: every API request will be refused with 401")
	}
	return nil
}

// advertised returns the address peers should use for a, a bound
// address: node.advertise in place of its host when set.
func (n *Node) advertised(a net.Addr) string { return n.advertisedHostPort(a.String()) }

func (n *Node) advertisedHostPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || addr == "" {
		return addr
	}
	if n.s.Advertise != "" {
		host = n.s.Advertise
	}
	return net.JoinHostPort(host, port)
}

// Ready reports whether the node takes traffic: started, not draining,
// and joined to the mesh when it has seeds.
func (n *Node) Ready() bool {
	return n.ready.Load() && !n.draining.Load() && (n.mesh == nil || n.mesh.Joined()) && (n.ledger == nil || n.ledger.Ready())
}

// Snapshot takes a Raft snapshot of a voter's ledger now.
func (n *Node) Snapshot() error {
	if n.ledger == nil || n.ledger.Server() == nil {
		return errors.New("node: not a voter")
	}
	return n.ledger.Server().Snapshot()
}

// Mesh returns the node's gossip membership, or nil when it does not
// gossip.
func (n *Node) Mesh() *gossip.Mesh { return n.mesh }

// HTTPAddr returns the address the API listens on, once started.
func (n *Node) HTTPAddr() string {
	if n.ln == nil {
		return ""
	}
	return n.ln.Addr().String()
}

// Name returns the node's name.
func (n *Node) Name() string { return n.s.Name }

// Shutdown drains the node and stops it. In order:
//
//  1. it gossips that it drains and /readyz turns 503;
//  2. for node.drain.grace it still accepts requests and hands each to
//     the nearest healthy peer allowed to see it (clients still pointed
//     at it see no error), then stops accepting;
//  3. requests and streams in flight, and those peers forwarded here,
//     run to completion until ctx ends, when the rest are cut; the
//     copies of the responses they recorded are sent to peers;
//  4. spend is reported and budget escrow handed back (rate shares
//     lapse: what was sent still counts in the provider's window);
//  5. a voter that leads hands leadership to another voter;
//  6. it leaves gossip (peers record it as left, not failed), and a voter
//     waits, briefly, for the leader to remove it from Raft;
//  7. Raft, gossip and upstream connections close.
//
// It is idempotent: later calls return the first result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() {
		defer close(n.done)
		wasReady := n.ready.Load() // serving: clients may be pointed here
		n.draining.Store(true)
		close(n.stop)
		var errs []error
		if n.mesh != nil && n.ln != nil {
			if err := n.mesh.SetState(gossip.StateDraining); err != nil {
				n.log.Warn("could not announce draining", "err", err)
			}
		}
		n.setPhase(phaseGrace)
		n.grace(ctx, wasReady)
		n.setPhase(phaseFinish)
		if n.ln != nil {
			if err := n.srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("http shutdown: %w", err))
				_ = n.srv.Close()
			}
			<-n.serveDone
		}
		n.ready.Store(false)
		n.loops.Wait()
		n.stopRPC(ctx) // requests forwarded here finish and spend first
		n.finishCopies(ctx)
		if n.ledger != nil {
			n.setPhase(phaseSettle)
			n.ledger.Settle() // then report spend and give escrow back
		}
		n.setPhase(phaseLeaving)
		if n.ledger != nil {
			n.ledger.HandOverLeadership()
		}
		if n.mesh != nil {
			if n.ln != nil {
				if err := n.mesh.Leave(); err != nil {
					errs = append(errs, fmt.Errorf("leave the mesh: %w", err))
				}
				if n.ledger != nil {
					n.ledger.AwaitRemoval(ctx)
				}
			}
		}
		if n.ledger != nil {
			n.ledger.Close()
		}
		if n.mesh != nil {
			if err := n.mesh.Shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("gossip shutdown: %w", err))
			}
		}
		n.exec.Close()
		if n.forward != nil {
			n.forward.Close()
		}
		_ = n.tracer.Shutdown(context.Background()) // every request has ended: send their spans
		n.audit.Close()                             // and write their audit lines
		n.shutdownErr = errors.Join(errs...)
		n.setPhase(phaseStopped)
		n.log.Info("node stopped")
	})
	return n.shutdownErr
}

// Kill stops the node at once, as a crash would: no graceful leave, so
// peers find it failed. Tests of failure use it; Shutdown is for
// everything else.
func (n *Node) Kill() {
	n.shutdownOnce.Do(func() {
		defer close(n.done)
		n.ready.Store(false)
		close(n.stop)
		if n.mesh != nil {
			_ = n.mesh.Shutdown()
		}
		if n.grpc != nil {
			n.grpc.Stop()
		}
		if n.ledger != nil {
			n.ledger.Kill()
		}
		if n.ln != nil {
			_ = n.srv.Close()
			<-n.serveDone
		}
		n.loops.Wait()
		n.copies.kill()
		n.exec.Close()
		if n.forward != nil {
			n.forward.Close()
		}
		_ = n.tracer.Shutdown(context.Background())
		n.audit.Close()
	})
}

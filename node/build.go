package node

import (
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/forward"
	"github.com/llmesh/llmesh/node/ledger"
	"github.com/llmesh/llmesh/node/tenant"
	"github.com/llmesh/llmesh/route"
)

// The builders New composes a node from, in the order it calls them.

// withDefaults fills the options left unset.
func (o Options) withDefaults() Options {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.ReadFile == nil {
		o.ReadFile = os.ReadFile
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o
}

// newHealthTracker tracks the providers' health; an ejection is counted,
// logged and gossiped.
func (n *Node) newHealthTracker() *route.Tracker {
	return route.NewTracker(n.s.Health, route.TrackerHooks{
		OnEject: func(p string) {
			n.metrics.Ejected(p)
			n.log.Warn("provider ejected after consecutive failures", "provider", p)
		},
		OnChange: func(string) {
			if n.mesh != nil {
				n.mesh.Changed()
			}
		},
	})
}

// buildMesh builds the gossip membership from the resolved configuration
// when the node gossips, and returns the health view the planner uses:
// the mesh's, else the node's own.
func (n *Node) buildMesh(opts Options) (route.HealthView, error) {
	if n.s.Gossip == nil {
		return n.tracker, nil
	}
	gc := *n.s.Gossip
	gc.Meta.Build = opts.Version
	gc.Meta.LedgerVersion = consensus.LedgerVersion
	gc.Logger = n.log.With("component", "gossip")
	gc.Registerer = opts.Registry
	gc.KnownProvider = func(name string) bool { return n.catalog().Provider(name) != nil }
	gc.OnMembership = func() {
		if n.ledger != nil && n.ledger.Server() != nil {
			n.ledger.Server().Reconcile()
		}
	}
	if opts.GossipTuning != nil {
		opts.GossipTuning(&gc)
	}
	mesh, err := gossip.New(gc, n.tracker, n.loadReport)
	if err != nil {
		return nil, err
	}
	n.mesh = mesh
	return mesh.View(), nil
}

// LedgerTuning adjusts the Raft server configuration (tests and the demo
// use faster timings or in-memory stores).
type LedgerTuning func(*consensus.ServerConfig)

// buildLedger builds the node's part in the Raft ledger when it has one,
// and returns the gates the request path spends from: the node's share
// of the mesh-wide rates and the budgets' escrow; else the whole
// configured rate and no budget.
func (n *Node) buildLedger(catalog *route.Catalog, opts Options) (route.QuotaGate, route.BudgetGate, error) {
	if !n.s.Ledger {
		n.localKeyRates = consensus.NewRateHolder(n.s.Name, ledger.FileLimits(n.s.Tenants), nil, func() int { return 1 }, func() bool { return true })
		return route.NewLimiter(catalog.Providers()), nil, nil
	}
	s := n.s
	l, err := ledger.New(s, catalog, ledger.Deps{
		Log: n.log, Now: n.now, Catalog: n.catalog, Mesh: n.mesh, RPCAddr: n.rpcAddr, Tuning: opts.LedgerTuning,
		ObserveApply: n.metrics.RaftApplied,
		SetTenants:   func(ts []consensus.Tenant) { n.tenants.Store(tenant.NewKeys(s.Tenants, ts)) },
	})
	if err != nil {
		return nil, nil, err
	}
	n.ledger = l
	opts.Registry.MustRegister(l.Collector(func() int { return int(n.admitted.rateWaiting.Load()) }))
	return l.Rates(), l.Budgets(), nil
}

// buildRequestPath builds the replicas' tracker, the planner and the
// executor.
func (n *Node) buildRequestPath(catalog *route.Catalog, health route.HealthView, quota route.QuotaGate, budget route.BudgetGate) {
	s := n.s
	n.replicas = route.NewTracker(s.Health, route.TrackerHooks{
		OnEject: func(r string) {
			n.log.Warn("replica ejected after consecutive failures: its sessions move to the others", "replica", r)
		},
	})
	affinity := route.NewAffinity(1 << 18)
	n.quota = quota
	planner := &route.Planner{
		Self: s.Name, Region: s.Region, Catalog: catalog, Health: health, Replicas: n.replicas, Quota: quota,
		Regions: s.Regions, Affinity: affinity, Engines: n.engines,
	}
	var fwd route.Forwarder
	if n.mesh != nil {
		// Other regions' region-reach providers are served through a
		// node of their region.
		view := forward.NewView(n.mesh)
		planner.Mesh, planner.Spares, planner.Remote = view, view, view
		n.forward = newForwarder(n, view)
		fwd = n.forward
	}
	n.rt.Store(newRouting(catalog, planner, nil, n.now()))
	n.exec = route.NewExecutor(s.Executor, route.ExecutorDeps{
		Guard:     route.Guard{Region: s.Region, Regions: s.Regions},
		Tracker:   n.tracker,
		Replicas:  n.replicas,
		Affinity:  affinity,
		Forwarder: fwd,
		Quota:     quota,
		Budget:    budget,
		Tokenizer: &route.Tokenizer{},
		Observer:  n.metrics,
		Clock:     n.now,
		Redactor:  n.red,
		Charges:   n.chargeRecorder(),
	})
}

// newHTTPServer is the server of the API, the admin API and the UI.
func (n *Node) newHTTPServer() *http.Server {
	return &http.Server{
		Handler:           n.headerLimit(n.routes()),
		ReadHeaderTimeout: n.s.ReadHeader,
		MaxHeaderBytes:    serverHeaderBytes(n.s.MaxHeaderBytes),
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
		// No ReadTimeout or WriteTimeout: they would cut long streams.
		// Bodies get a read deadline and every write to a client its own
		// deadline instead (see chat and httpSink).
	}
}

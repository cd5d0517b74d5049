package node

import (
	"github.com/llmesh/llmesh/node/probe"
	"github.com/llmesh/llmesh/route"
)

// newProber returns the node's prober of idle providers, nil when probes
// are disabled.
func (n *Node) newProber() *probe.Prober {
	cfg := probe.Config{Self: n.s.Name, Region: n.s.Region, Idle: n.s.ProbeIdle, Timeout: n.s.Executor.FirstByteTimeout,
		Now: n.now, Tracker: n.tracker, Exec: n.exec, Log: n.log,
		Routing: func() (*route.Catalog, *route.Planner) { rt := n.rt.Load(); return rt.catalog, rt.planner },
		Probed:  n.metrics.Probed}
	if n.mesh != nil {
		cfg.Mesh = n.mesh
	}
	return probe.New(cfg)
}

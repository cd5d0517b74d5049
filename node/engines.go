package node

import (
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/node/engine"
	"github.com/llmesh/llmesh/route"
)

// newEngines returns the scraper of the self-hosted replicas' engine
// metrics this node can reach, its figures registered with reg.
func (n *Node) newEngines(reg prometheus.Registerer) *engine.Scraper {
	s := engine.New(engine.Config{Targets: n.engineTargets, Now: n.now, Log: n.log})
	reg.MustRegister(s)
	return s
}

// engineTargets are the metrics endpoints of every replica of every
// provider with a metrics path that this node calls itself: a global one,
// or one of its own region. A region's other providers are its nodes' to
// scrape.
func (n *Node) engineTargets() []engine.Target {
	rt := n.rt.Load()
	if rt == nil {
		return nil
	}
	var out []engine.Target
	for _, p := range rt.catalog.Providers() {
		if p.MetricsPath == "" || (p.Reach == route.ReachRegion && p.Region != n.s.Region) {
			continue
		}
		bases := p.Replicas
		if len(bases) == 0 {
			bases = []string{p.BaseURL}
		}
		for i, b := range bases {
			if u, ok := metricsURL(b, p.MetricsPath); ok {
				out = append(out, engine.Target{Provider: p.Name, Replica: i, URL: u})
			}
		}
	}
	return out
}

// metricsURL is the metrics endpoint of the replica at base: path below
// base's own path, without an OpenAI API's /v1 (vLLM serves /v1/chat/...
// and /metrics side by side).
func metricsURL(base, path string) (string, bool) {
	u, err := url.Parse(base)
	if err != nil {
		return "", false
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") + path
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), true
}

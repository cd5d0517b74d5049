package metrics

import "github.com/prometheus/client_golang/prometheus"

// Governance counts what keys' and tenants' own settings refused.
// Labels are bounded: tenants and keys come from the ledger and the
// file (a key by its name, else its id, never the key), reasons from a
// fixed set.
type Governance struct {
	refusals *prometheus.CounterVec
}

// NewGovernance creates the collectors on reg.
func NewGovernance(reg prometheus.Registerer) *Governance {
	g := &Governance{refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "llmesh_key_refusals_total",
		Help: "Client requests refused for their key's or tenant's own settings, by tenant, key (its name, else its id) and reason: model_not_allowed (403), key_rate_limited or tenant_rate_limited (429: the mesh-wide limit stayed reached for limits.admission_wait), key_budget_exceeded (402).",
	}, []string{"tenant", "key", "reason"})}
	reg.MustRegister(g.refusals)
	return g
}

// Refused counts a client's request of tenant's key refused for reason.
func (g *Governance) Refused(tenant, key, reason string) {
	g.refusals.WithLabelValues(tenant, key, reason).Inc()
}

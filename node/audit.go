package node

import (
	"github.com/llmesh/llmesh/node/audit"
	"github.com/llmesh/llmesh/node/decisions"
)

// auditDecision records a finished request whose data had to stay in a
// jurisdiction (the tenant's residency, or one a request narrowed to):
// the nodes it passed and the provider that saw its data.
func (n *Node) auditDecision(e *decisions.Decision) {
	if n.audit == nil || !e.Residency.Restricted() {
		return
	}
	rec := &audit.Record{Time: e.At.UTC(), RequestID: e.ID, Node: n.s.Name, Tenant: e.Tenant, Endpoint: e.API.String(), Residency: string(e.Residency.Jurisdiction),
		Strict: e.Strict, Status: e.Status, Outcome: e.Outcome()}
	if e.Origin != "" {
		rec.Nodes = append(rec.Nodes, e.Origin)
	}
	rec.Nodes = append(rec.Nodes, n.s.Name)
	if r := e.Result; r != nil && r.Target != nil {
		if r.Target.Via != "" {
			rec.Nodes = append(rec.Nodes, r.Target.Via)
		}
		rec.Provider = e.Provider
		if p := n.catalog().Provider(e.Provider); p != nil {
			rec.ProviderRegion, rec.ProviderJurisdictions = p.Region, p.Jurisdictions.String()
		}
	} else if r != nil && r.CacheHit {
		rec.Provider = e.Provider // no provider saw the data: the node's cache answered
	}
	if e.Err != nil {
		_, ae := classify(e.Err)
		rec.Error = ae.Code
	}
	n.audit.Record(rec)
}

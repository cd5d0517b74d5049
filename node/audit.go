package node

import "github.com/llmesh/llmesh/node/audit"

// auditDecision records a finished request whose data had to stay in a
// jurisdiction (the tenant's residency, or one a request narrowed to):
// the nodes it passed and the provider that saw its data.
func (n *Node) auditDecision(e *decision) {
	if n.audit == nil || !e.residency.Restricted() {
		return
	}
	rec := &audit.Record{Time: e.at.UTC(), RequestID: e.id, Node: n.s.Name, Tenant: e.tenant, Residency: string(e.residency.Jurisdiction),
		Strict: e.strict, Status: e.status, Outcome: outcome(e.status, e.res)}
	if e.origin != "" {
		rec.Nodes = append(rec.Nodes, e.origin)
	}
	rec.Nodes = append(rec.Nodes, n.s.Name)
	if r := e.res; r != nil && r.Target != nil {
		if r.Target.Via != "" {
			rec.Nodes = append(rec.Nodes, r.Target.Via)
		}
		rec.Provider = e.provider
		if p := n.catalog().Provider(e.provider); p != nil {
			rec.ProviderRegion, rec.ProviderJurisdictions = p.Region, p.Jurisdictions.String()
		}
	}
	if e.err != nil {
		_, ae := classify(e.err)
		rec.Error = ae.Code
	}
	n.audit.Record(rec)
}

package node

import (
	"net/http"

	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/node/views"
)

// decisionsHandler serves GET /v1/mesh/decisions?limit=N (default 50, at
// most 256): this node's last routing decisions, newest first.
func (n *Node) decisionsHandler(w http.ResponseWriter, r *http.Request) {
	limit, err := query(r, "limit", 50, decisions.Kept)
	if err != nil {
		n.writeError(w, err)
		return
	}
	out := []views.Decision{}
	for _, e := range n.decided.Last(limit) {
		out = append(out, e.View(n.refusal))
	}
	writeJSON(w, http.StatusOK, views.Decisions{Node: n.s.Name, Decisions: out})
}

// refusal explains the error a client was answered with, for an
// operator: its code and its message, redacted.
func (n *Node) refusal(err error) string {
	_, ae := classify(err)
	return ae.Code + ": " + n.red.Redact(ae.Message)
}

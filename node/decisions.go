package node

import (
	"net/http"
	"strconv"

	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/route"
)

// decisionsHandler serves GET /v1/mesh/decisions?limit=N (default 50, at
// most 256): this node's last routing decisions, newest first.
func (n *Node) decisionsHandler(w http.ResponseWriter, r *http.Request) {
	limit := 50
	if s := r.URL.Query().Get("limit"); s != "" {
		k, err := strconv.Atoi(s)
		if err != nil || k < 1 {
			n.writeError(w, &route.InvalidRequestError{Param: "limit", Msg: "must be a positive integer"})
			return
		}
		limit = min(k, decisions.Kept)
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

package node

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// decisionsKept is how many routing decisions a node remembers for the
// dashboard and GET /v1/mesh/decisions.
const decisionsKept = 256

// decisions is a node's last routing decisions, newest last. A request
// writes one entry in place under the mutex: nothing is allocated and
// nothing is rendered on the request path. The explanation (the route a
// result took, or the error a refusal got) is rendered when an operator
// reads the ring.
type decisions struct {
	mu    sync.Mutex
	ring  [decisionsKept]decision
	total uint64 // recorded since start; ring[total%decisionsKept] is next
}

type decision struct {
	at                                  time.Time
	id, tenant, model, provider, origin string
	status                              int
	stream                              bool
	took                                time.Duration
	res                                 *route.Result // nil when the request never got a plan
	err                                 error         // what the client was answered instead, if anything
	// The jurisdiction the request's data had to stay in, once known.
	residency region.Residency
	strict    bool
}

func (d *decisions) record(e decision) {
	d.mu.Lock()
	d.ring[d.total%decisionsKept] = e
	d.total++
	d.mu.Unlock()
}

// last returns up to limit decisions, newest first.
func (d *decisions) last(limit int) []decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := int(min(uint64(limit), d.total, decisionsKept))
	out := make([]decision, 0, k)
	for i := range k {
		out = append(out, d.ring[(d.total-1-uint64(i))%decisionsKept])
	}
	return out
}

func (e *decision) view(red *route.Redactor) views.Decision {
	v := views.Decision{Time: e.at, RequestID: e.id, Tenant: e.tenant, Model: e.model, Stream: e.stream, Provider: e.provider,
		ForwardedBy: e.origin, Status: e.status, Outcome: outcome(e.status, e.res), Millis: e.took.Milliseconds(),
		Attempts: []views.AttemptView{}}
	if e.res != nil {
		v.Replica = e.res.Replica
		if e.res.Target != nil {
			v.Via = e.res.Target.Via
			v.CostUSD = e.res.Cost
		}
		for _, a := range e.res.Attempts {
			v.Attempts = append(v.Attempts, views.AttemptView{Provider: a.Provider, Outcome: string(a.Outcome), Status: a.Status, Millis: a.Duration.Milliseconds()})
		}
		v.Why = e.res.Route()
	}
	if e.err != nil {
		_, ae := classify(e.err)
		v.Why = ae.Code + ": " + red.Redact(ae.Message)
	}
	return v
}

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
		limit = min(k, decisionsKept)
	}
	out := []views.Decision{}
	for _, e := range n.decided.last(limit) {
		out = append(out, e.view(n.red))
	}
	writeJSON(w, http.StatusOK, views.Decisions{Node: n.s.Name, Decisions: out})
}

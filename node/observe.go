package node

// What the dashboard draws: this node's series, and the mesh's
// observation gathered from every peer over the gRPC links.

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/node/series"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/route"
)

// gatherWithin bounds how long GET /v1/mesh/observe waits for its peers:
// one that has not answered by then is shown as not read.
const gatherWithin = 2 * time.Second

// recordTraffic counts a finished request in the node's series, at the
// node its client called: a request forwarded here was counted by its
// origin, which also counts the hop.
func (n *Node) recordTraffic(e *decisions.Decision) {
	if e.Origin != "" {
		return
	}
	o := series.Observation{Provider: e.Provider, Tenant: e.Tenant, Error: e.Status >= 400, Latency: e.Took}
	if res := e.Result; res != nil {
		o.TTFT, o.CostUSD = res.TTFT, res.Cost
		if res.Target != nil {
			o.Via = res.Target.Via
			if !res.UsageCounted {
				// The provider's own word on its cache: a count of the
				// node's knows nothing of it.
				o.PromptTokens, o.CachedTokens = res.Usage.PromptTokens, res.Usage.CachedTokens
			}
		}
	}
	n.traffic.Record(e.At.Add(e.Took), o)
}

// query reads a positive integer parameter of at most most, def when
// absent.
func query(r *http.Request, name string, def, most int) (int, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 1 {
		return 0, &route.InvalidRequestError{Param: name, Msg: "must be a positive integer"}
	}
	return min(k, most), nil
}

// seriesHandler serves GET /v1/mesh/series?seconds=N (default 300, at
// most 600): this node's per-second samples.
func (n *Node) seriesHandler(w http.ResponseWriter, r *http.Request) {
	seconds, err := query(r, "seconds", 300, series.Window)
	if err != nil {
		n.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n.traffic.Last(n.now(), seconds))
}

// observation is this node's observation: its last decisions, rate
// shares and seconds of series.
func (n *Node) observation(ctx context.Context, last, seconds int) views.Observation {
	o := views.Observation{Node: n.s.Name, Region: n.s.Region, Decisions: []views.Decision{}, RateShares: []views.RateShareInfo{},
		Series: n.traffic.Last(n.now(), seconds)}
	for _, e := range n.decided.Last(last) {
		o.Decisions = append(o.Decisions, e.View(n.refusal))
	}
	if n.ledger != nil {
		o.RateShares = append(o.RateShares, n.ledger.RateShares(n.now())...)
	}
	return o
}

// observeHandler serves GET /v1/mesh/observe?decisions=N&seconds=S: the
// observation of every node, this one's first and its peers' by name,
// gathered over the mesh's gRPC links within gatherWithin, and the
// mesh's series, their sum.
func (n *Node) observeHandler(w http.ResponseWriter, r *http.Request) {
	last, err := query(r, "decisions", 50, decisions.Kept)
	if err == nil {
		var seconds int
		if seconds, err = query(r, "seconds", 300, series.Window); err == nil {
			writeJSON(w, http.StatusOK, n.observeMesh(r.Context(), last, seconds))
			return
		}
	}
	n.writeError(w, err)
}

func (n *Node) observeMesh(ctx context.Context, last, seconds int) views.MeshObservation {
	self := n.observation(ctx, last, seconds)
	// The mesh's series is a sum of its own: merged into, it must not
	// share the nodes' maps.
	out := views.MeshObservation{Node: n.s.Name, Nodes: []views.Observation{self},
		Series: views.Series{End: self.Series.End, Seconds: self.Series.Seconds}}
	series.Merge(&out.Series, self.Series)
	if n.forward != nil {
		ctx, cancel := context.WithTimeout(ctx, gatherWithin)
		defer cancel()
		peers := n.forward.Gather(ctx, last, seconds)
		slices.SortFunc(peers, func(a, b views.Observation) int { return strings.Compare(a.Node, b.Node) })
		for _, o := range peers {
			if o.Error == "" {
				series.Merge(&out.Series, o.Series)
			}
			out.Nodes = append(out.Nodes, o)
		}
	}
	return out
}

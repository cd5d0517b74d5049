package route

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/llmesh/llmesh/region"
)

// Guard checks the data sovereignty invariant for one target, right before
// it is called: the planner filtered by the same rules, but the executor
// does not trust a plan, however it was made, to still hold. A target
// passes when
//   - the provider processes data only where the request's residency
//     allows;
//   - this node may call it itself (a global provider, or one of this
//     node's region), or it goes through a via node of the provider's
//     region, and a request forwarded here is never forwarded on;
//   - with strict transit, this node and the via node are both in the
//     residency's jurisdiction.
type Guard struct {
	// Region is this node's region; Regions maps regions to
	// jurisdictions.
	Region  string
	Regions *region.Map
}

// Check returns nil when t may be tried for req, else why not.
func (g *Guard) Check(req *Request, t *Target) error {
	p := t.Offer.Provider
	if !req.Residency.Allows(p.Jurisdictions) {
		return fmt.Errorf("%w: %s processes data in %s, outside residency %s", ErrNoCompliantProvider, p.Name, p.Jurisdictions, req.Residency)
	}
	strict := req.StrictTransit && req.Residency.Restricted()
	if strict && !g.inJurisdiction(g.Region, req.Residency.Jurisdiction) {
		return fmt.Errorf("%w: strict transit: this node's region %s is outside %s", ErrNoCompliantProvider, g.Region, req.Residency)
	}
	if t.Via == "" {
		if p.Reach == ReachRegion && p.Region != g.Region {
			return fmt.Errorf("%w: %s is reachable only from region %s", ErrNoProvider, p.Name, p.Region)
		}
		return nil
	}
	switch {
	case req.Forwarded:
		return fmt.Errorf("%w: a forwarded request is not forwarded again", ErrNoProvider)
	case t.ViaRegion == "" || (p.Reach == ReachRegion && t.ViaRegion != p.Region):
		return fmt.Errorf("%w: via node %s is not in %s's region %s", ErrNoProvider, t.Via, p.Name, p.Region)
	case strict && !g.inJurisdiction(t.ViaRegion, req.Residency.Jurisdiction):
		return fmt.Errorf("%w: strict transit: via node %s's region %s is outside %s", ErrNoCompliantProvider, t.Via, t.ViaRegion, req.Residency)
	}
	return nil
}

func (g *Guard) inJurisdiction(regionName string, j region.Jurisdiction) bool {
	if g.Regions == nil {
		return false
	}
	r, ok := g.Regions.Lookup(regionName)
	return ok && r.Jurisdiction == j
}

// Forwarder sends a request to another node, which executes it with its
// own providers, breakers and leases and streams the answer back. node/
// implements it over gRPC.
type Forwarder interface {
	// Forward asks t.Via to serve req, preferring t's provider, and relays
	// the answer to sink as it arrives, with X-LLMesh-Route set to route.
	// Nothing reaches sink unless the far node answered 200.
	Forward(ctx context.Context, req *Request, t *Target, route string, sink ResponseSink) Forwarded
}

// Forwarded is how one forward went.
type Forwarded struct {
	// Committed means the far node's answer started reaching sink.
	Committed bool
	// Err is a failure of the hop itself (no connection, the node went
	// away, the stream broke); Timeout says it was the first-byte or idle
	// timeout.
	Err     error
	Timeout bool
	// Gone means the via node is no longer one to forward to (gossip
	// learned it drains or left since the plan was made): nothing was
	// sent, and the target is passed over as one that cannot be tried.
	Gone bool
	// Status, Header, Body and Code are the far node's refusal when it
	// answered with an error before any answer: its status, headers
	// (Retry-After), OpenAI error body and error code.
	Status int
	Header http.Header
	Body   []byte
	Code   string
	// What the far node reports of the answer it served.
	Provider     string
	Usage        Usage
	UsageCounted bool
	Cost         float64
	TTFT         time.Duration
	Truncated    bool
	// ClientGone means the client (this side) went away mid-answer.
	ClientGone bool
}

// forward tries a target through its via node.
func (c *call) forward() *attemptResult {
	e, ctx, req, t, sink, res := c.e, c.ctx, c.req, c.t, c.sink, c.res
	a := &c.a
	a.Provider = t.Provider()
	start := e.now()
	f := e.forwarder.Forward(ctx, req, t, res.Route(), sink)
	if f.Gone {
		a.gone = true
		return a
	}
	a.Duration = e.now().Sub(start)
	a.Status = f.Status
	switch {
	case f.Committed:
		a.committed = true
		res.Provider, res.Usage, res.UsageCounted, res.Cost = f.Provider, f.Usage, f.UsageCounted, f.Cost
		res.TTFT, res.Truncated = f.TTFT, f.Truncated
		res.Replica = f.Header.Get("X-Llmesh-Replica")
		if req.Trailers && req.Chat.Stream && !f.ClientGone {
			// The far node's stream carried its cost comment; its
			// trailer carried the cost.
			SetCostTrailer(sink.Header(), f.Cost)
		}
		switch {
		case f.ClientGone:
			return c.fail(OutcomeCanceled, "client went away")
		case f.Truncated:
			return c.fail(OutcomeBroken, "via %s: the answer broke off: %v", t.Via, f.Err)
		}
		a.Outcome = OutcomeOK
		return a
	case ctx.Err() != nil:
		return c.fail(OutcomeCanceled, "client went away")
	case f.Err != nil && f.Timeout:
		return c.fail(OutcomeTimeout, "via %s: %v", t.Via, f.Err)
	case f.Err != nil:
		return c.fail(OutcomeConnect, "via %s: %v", t.Via, f.Err)
	}
	// The far node refused before answering. What is wrong with the
	// request or the tenant is wrong everywhere: the client sees it as
	// it is. What is wrong with the far node's providers may not be so
	// elsewhere: the next target is tried.
	switch f.Status {
	case http.StatusBadRequest, http.StatusPaymentRequired, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		reply := &UpstreamReply{Provider: t.Provider(), Status: f.Status, Header: f.Header, Body: f.Body}
		if c.fallsBack(reply) {
			// The far node relayed its provider's refusal as it was.
			return c.fail(OutcomeRefused, "via %s: %d %s: fell back", t.Via, f.Status, a.fallback)
		}
		a.final = reply
		return c.fail(OutcomeRefused, "via %s: %d %s", t.Via, f.Status, f.Code)
	case http.StatusTooManyRequests:
		a.retryAfter = retryAfter(f.Header, e.now())
		return c.fail(OutcomeRateLimited, "via %s: 429 %s", t.Via, f.Code)
	}
	if f.Code == "admission_timeout" {
		// The far node had no escrow or share to give it in time: the
		// mesh's slowness, not a limit. Not its answer either: the far
		// node may not have waited (a peer's request is not planned
		// again there), so this node waits and plans again within the
		// request's own admission_wait.
		a.retryAfter = retryAfter(f.Header, e.now())
		a.farLease = true
		c.leaseWait = true
		return c.fail(OutcomeRateLimited, "via %s: %d %s", t.Via, f.Status, f.Code)
	}
	switch f.Code {
	case "no_compliant_provider":
		a.unavailable = fmt.Errorf("%w: node %s has no provider it may send the request to", ErrNoCompliantProvider, t.Via)
	case "no_provider_available":
		a.unavailable = fmt.Errorf("%w: node %s has no provider available", ErrNoProvider, t.Via)
	}
	return c.fail(OutcomeHTTPError, "via %s: %d %s", t.Via, f.Status, f.Code)
}

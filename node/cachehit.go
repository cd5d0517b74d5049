package node

// The exact-match response cache on the request path. A client's request
// that its tenant or its model group opted into the cache (or that asks
// with X-LLMesh-Cache: on) and whose parameters make its answer reusable
// is looked up once admitted (its tenant authenticated, its place held,
// its residency narrowed) and before it is planned: a hit is replayed
// with no plan, no escrow and no provider call, and costs nothing; a
// miss is executed as any request, its answer copied on its way to the
// client and stored once complete. Peers' forwards and hand-offs are
// never cached here: the node the client called caches.
//
// Concurrent identical misses are not coalesced: each calls a provider,
// and the last to complete is stored. Making the second wait for the
// first would hold its first byte until the first's whole answer (or tee
// a live stream to several clients, each with its own pace, deadline and
// cancellation), for what is, with exact matching, a rare coincidence.

import (
	"context"
	"net/http"
	"strings"

	"github.com/llmesh/llmesh/node/cache"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/route"
)

// cacheHeader is the request's X-LLMesh-Cache (on, off) and the answer's
// (hit, miss).
const cacheHeader = "X-Llmesh-Cache"

// cacheProvider is the provider a hit is recorded under in metrics, the
// decision and the audit trail: no provider saw the request.
const cacheProvider = "cache"

// newResponseCache is the node's response cache, nil when cache.enabled
// is false.
func newResponseCache(s config.Cache) *cache.Cache {
	if !s.Enabled {
		return nil
	}
	return cache.New(cache.Config{TTL: s.TTL, MaxBytes: s.MaxBytes})
}

// executeCached is executeGoverned with the response cache in front of
// it, for the requests that may use it (cacheKey): a hit reaches no
// provider, so it takes none of its key's or tenant's rate shares.
func (n *Node) executeCached(ctx context.Context, in *inbound, req *route.Request, rt *routing, sink answerSink) (*route.Result, error) {
	key, use, err := n.cacheKey(in, req, rt)
	if err != nil || !use {
		if err != nil {
			return nil, err
		}
		return n.executeGoverned(ctx, in, req, rt, sink)
	}
	if e, ok := n.cache.Get(key, n.now()); ok {
		n.metrics.CacheLookup("hit", n.cache.Bytes())
		return n.replayHit(sink, req, e), nil
	}
	n.metrics.CacheLookup("miss", n.cache.Bytes())
	sink.Header()[cacheHeader] = []string{"miss"}
	rec := &recordingSink{Recorder: n.cache.Recorder(sink), inner: sink}
	defer rec.Release()
	res, err := n.executeGoverned(ctx, in, req, rt, rec)
	if err == nil && res != nil && res.Target != nil && !res.Truncated && !res.ClientGone {
		if e, ok := rec.Entry(res.Provider, n.now()); ok && n.cache.Put(key, e, n.now()) {
			n.metrics.CacheBytes(n.cache.Bytes())
		}
	}
	return res, err
}

// cacheKey returns the cache key of req and whether to look it up: the
// node has a cache, a client sent the request, and its tenant or group
// opted in or it asks (X-LLMesh-Cache: on), and not off; and it is
// reusable (cache.Inspect), or asked for and not stateful. A request
// opted in or asking that may not use the cache is counted a bypass. On
// a node with a cache, a header other than on or off is refused; without
// one the header does nothing.
func (n *Node) cacheKey(in *inbound, req *route.Request, rt *routing) (cache.Key, bool, error) {
	if n.cache == nil || in.origin != fromClient {
		return cache.Key{}, false, nil
	}
	ask := strings.ToLower(strings.TrimSpace(in.cache))
	if ask != "" && ask != "on" && ask != "off" {
		return cache.Key{}, false, &route.InvalidRequestError{Param: "X-LLMesh-Cache", Msg: "\"" + in.cache + "\" must be on or off"}
	}
	g := rt.catalog.Group(req.Chat.Model)
	optedIn := n.s.Cache.Tenants[req.Tenant] || g != nil && g.Cache
	if !optedIn && ask == "" {
		return cache.Key{}, false, nil
	}
	r, err := cache.Inspect(cache.Scope{Tenant: req.Tenant, Residency: string(req.Residency.Jurisdiction), Strict: req.StrictTransit,
		Endpoint: req.Chat.API.String(), Model: req.Chat.Model}, req.Chat.Body())
	if err != nil || ask == "off" || r.Stateful || !r.Reusable && ask != "on" || !rt.catalog.Serves(req.Chat.Model) {
		n.metrics.CacheLookup("bypass", n.cache.Bytes())
		return cache.Key{}, false, nil
	}
	return r.Key, true, nil
}

// replayHit answers from the stored entry e: its headers (the provider
// that made it among them), the node's own, then its body or events.
// X-LLMesh-Route says it was a hit; the Result costs nothing.
func (n *Node) replayHit(sink answerSink, req *route.Request, e *cache.Entry) *route.Result {
	res := &route.Result{CacheHit: true, Provider: e.Provider}
	var last []byte // a stream's cost, as every stream ends: nothing
	if e.Stream() {
		last = route.AppendCostComment(nil, 0)
	}
	err := e.Replay(sink, func(h http.Header) {
		h["X-Llmesh-Via"] = []string{n.s.Name}
		h["X-Llmesh-Route"] = []string{res.Route()}
		h[cacheHeader] = []string{"hit"}
		if n.draining.Load() {
			h["Connection"] = []string{"close"} // as execute tells every client of a draining node
		}
		// A hit costs nothing, told as every answer's cost is.
		if !e.Stream() {
			h[route.HeaderCost] = []string{route.FormatCost(0)}
		} else if req.Trailers {
			route.SetCostTrailer(h, 0)
		}
	}, last)
	res.ClientGone = err != nil
	return res
}

// recordingSink is an answer sink whose writes are also recorded for the
// cache.
type recordingSink struct {
	*cache.Recorder
	inner answerSink
}

func (s *recordingSink) written() int { return s.inner.written() }

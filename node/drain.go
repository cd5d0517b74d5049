package node

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/forward"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/route"
)

// Drain phases, as GET /v1/mesh/status reports them.
const (
	phaseServing = "serving"
	phaseGrace   = "grace"     // announced; still accepting, handing requests to peers
	phaseFinish  = "finishing" // no longer accepting; requests in flight finish
	phaseSettle  = "settling"  // spend reported, budget escrow handed back
	phaseLeaving = "leaving"   // leadership handed over, leaving Raft and gossip
	phaseStopped = "stopped"
)

const (
	// maxHandoffPeers is how many peers a draining node tries before it
	// serves a request itself.
	maxHandoffPeers = 3
)

// Drain starts a graceful stop in the background, bounded by the
// configured node.drain.timeout, and returns at once; Done is closed when
// it is over. It is what POST /v1/mesh/drain and /v1/mesh/leave do.
func (n *Node) Drain() {
	if !n.draining.CompareAndSwap(false, true) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.s.DrainTimeout)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			n.log.Warn("drain finished with errors", "err", err)
		}
	}()
}

// Done is closed once the node has stopped (drained, shut down or
// killed).
func (n *Node) Done() <-chan struct{} { return n.done }

// Draining reports whether the node has begun to drain.
func (n *Node) Draining() bool { return n.draining.Load() }

// DrainTimeout is the configured bound on a drain (node.drain.timeout).
func (n *Node) DrainTimeout() time.Duration { return n.s.DrainTimeout }

func (n *Node) setPhase(p string) {
	n.phase.Store(&p)
	n.log.Info("drain", "phase", p)
}

// Phase returns where the node is in its life: serving, or a drain phase.
func (n *Node) Phase() string {
	if p := n.phase.Load(); p != nil {
		return *p
	}
	return phaseServing
}

// grace keeps the node accepting, after it announced that it drains,
// until node.drain.grace has passed or ctx ends; a node no client could
// have found (not yet ready) skips it.
func (n *Node) grace(ctx context.Context, wasReady bool) {
	if !wasReady || n.ln == nil {
		return
	}
	t := time.NewTimer(n.s.DrainGrace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// handoff serves a request that reached this node while it drains: a
// healthy peer plans and executes it, and this node relays the answer.
// Peers are tried nearest first (with strict transit, only those of the
// request's jurisdiction); one that cannot serve it (503) makes way for
// the next. It returns false when no peer took the request and nothing
// was written: the node then serves it itself.
func (n *Node) handoff(ctx context.Context, req *route.Request, body []byte, sink route.ResponseSink) (*route.Result, bool) {
	if n.forward == nil {
		return nil, false
	}
	for _, peer := range n.handoffPeers(req) {
		in := &pb.ForwardRequest{
			Origin: n.s.Name, RequestId: req.ID, Tenant: req.Tenant, Key: req.Key, Residency: string(req.Residency.Jurisdiction),
			StrictTransit: req.StrictTransit, Session: req.Session, Body: body, Handoff: true, Api: req.Chat.API.String(), Tags: req.Tags,
		}
		note := fmt.Sprintf("handed off: %s drains", n.s.Name)
		fw := n.forward.Hop(ctx, forward.Hop{Addr: peer.Meta.RPC, Peer: peer.Name, In: in, Req: req, Note: note}, sink)
		res := &route.Result{Target: &route.Target{Via: peer.Name}, Provider: fw.Provider,
			Usage: fw.Usage, Cost: fw.Cost, TTFT: fw.TTFT, Truncated: fw.Truncated, ClientGone: fw.ClientGone}
		switch {
		case fw.Committed:
			n.metrics.HandedOff("ok")
			if req.Trailers && req.Chat.Stream && !fw.ClientGone {
				route.SetCostTrailer(sink.Header(), fw.Cost)
			}
			return res, true
		case fw.Err != nil || fw.Status == http.StatusServiceUnavailable:
			n.metrics.HandedOff("next")
			n.log.Debug("handoff refused", "peer", peer.Name, "err", fw.Err, "status", fw.Status)
			if ctx.Err() != nil {
				res.ClientGone = true
				return res, true
			}
			continue
		}
		// A final refusal (400, 402, 413, 422, 429): the client's answer.
		n.metrics.HandedOff("refused")
		h := sink.Header()
		for k, v := range fw.Header {
			h[k] = v
		}
		sink.WriteHeader(fw.Status)
		_, _ = sink.Write(fw.Body)
		_ = sink.Flush()
		res.Target, res.Provider = nil, ""
		return res, true
	}
	n.metrics.HandedOff("self")
	return nil, false
}

// peerInfo is a peer a request may be handed to.
type peerInfo struct {
	Name     string
	Meta     gossip.Meta
	RTT      time.Duration
	RTTKnown bool
	Load     int64
}

// handoffPeers are the peers a draining node may hand req to: alive, not
// draining, taking forwards of the request's endpoint, and (with strict
// transit) in the request's jurisdiction; nearest first, then least
// loaded.
func (n *Node) handoffPeers(req *route.Request) []peerInfo {
	var out []peerInfo
	for _, p := range n.forward.View().Peers() {
		m := p.Member
		if m.Self || m.State != "alive" || m.Meta.RPC == "" || !req.Chat.API.In(m.Meta.APIs) {
			continue
		}
		if req.StrictTransit && req.Residency.Restricted() && m.Meta.Jurisdiction != string(req.Residency.Jurisdiction) {
			continue
		}
		out = append(out, peerInfo{Name: m.Name, Meta: m.Meta, RTT: m.RTT, RTTKnown: m.RTTKnown, Load: p.Load})
	}
	slices.SortFunc(out, func(a, b peerInfo) int {
		if a.RTTKnown != b.RTTKnown {
			if a.RTTKnown {
				return -1
			}
			return 1
		}
		// RTTs in the same millisecond count as equal: then the less
		// loaded peer goes first.
		return cmp.Or(cmp.Compare(a.RTT/time.Millisecond, b.RTT/time.Millisecond),
			cmp.Compare(a.Load, b.Load), cmp.Compare(a.Name, b.Name))
	})
	return out[:min(len(out), maxHandoffPeers)]
}

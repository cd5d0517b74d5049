package node

// The forwarding hop's wiring: node/forward carries requests between
// nodes, and a peer's forward or hand-off enters this node's pipeline
// here, as one more transport.

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/forward"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/route"
)

// newForwarder is the sending side of this node's forwards, to the peers
// view knows, authenticated as this node's RPC calls are.
func newForwarder(n *Node, view *forward.View) *forward.Forwarder {
	auth := consensus.PeerAuth{Token: n.s.RPCToken}
	if n.s.TLS != nil {
		auth.TLS = n.s.TLS.Client
	}
	return forward.New(forward.Config{
		Name: n.s.Name, Dial: append(auth.DialOptions(), grpc.WithInitialWindowSize(rpcWindow), grpc.WithInitialConnWindowSize(rpcConnWindow)),
		Keepalive: keepalive.ClientParameters{Time: rpcKeepalive, Timeout: rpcKeepaliveTimeout, PermitWithoutStream: true},
		MaxSend:   int(n.s.MaxBodyBytes) + 64<<10, Executor: n.s.Executor, Sent: n.metrics.ForwardsSent(),
	}, view)
}

// serveForward is forward.ServeFunc: it serves a request another node
// sent as if a client had called this node, except that it never
// forwards it on. It trusts nothing of the sender's plan: the tenant must
// be one of this node's, the residency is this node's view of the tenant
// (narrowed, never widened, by what the sender established), and every
// target passes this node's own planner and guard (admit and serve).
func (n *Node) serveForward(ctx context.Context, in *pb.ForwardRequest, meta forward.Meta, sink *forward.Sink) forward.Answer {
	t, ok := n.tenants.Load().Named(in.Tenant)
	api, known := route.ParseAPI(in.Api)
	req := &inbound{origin: fromPeer, api: api, tenant: t, claimed: in.Tenant, key: in.Key, body: in.Body, session: in.Session,
		residency: in.Residency, strict: in.StrictTransit, sender: in.Origin, hint: in.Provider, spill: in.Spill, tags: in.Tags,
		traceparent: meta.TraceParent, tracestate: meta.TraceState, id: in.RequestId, start: n.now()}
	if in.Handoff {
		req.origin = fromHandoff
	}
	if !ok {
		req.authErr = fmt.Errorf("%w: tenant %q is not configured on node %s", errUnauthorized, in.Tenant, n.s.Name)
	}
	if !known {
		req.authErr = &route.InvalidRequestError{Msg: fmt.Sprintf("node %s does not serve the %q API (a newer node sent it)", n.s.Name, in.Api)}
	}
	a := n.serve(ctx, req, forwardSink{sink})
	switch {
	case a.status == statusClientClosed:
		return forward.Answer{Gone: true}
	case a.err != nil:
		_, e := classify(a.err)
		return forward.Answer{Refused: true, Code: e.Code}
	}
	return forward.Answer{Result: a.res}
}

// forwardSink is a forward's sink as serve writes to it.
type forwardSink struct{ *forward.Sink }

func (s forwardSink) written() int { return s.Status() }

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/consensus"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/route"
)

// forwarder is the sending side: route.Forwarder over gRPC to the via
// node, with one connection per peer.
type forwarder struct {
	name    string // this node's, the forwards' origin
	view    *meshView
	auth    consensus.PeerAuth
	maxSend int                  // bytes of one message: a body as large as the HTTP side admits
	exec    route.ExecutorConfig // the far node's timeouts are taken to be this node's
	sent    prometheus.Counter   // forwards sent

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by RPC address
}

var _ route.Forwarder = (*forwarder)(nil)

func newForwarder(n *Node, view *meshView) *forwarder {
	auth := consensus.PeerAuth{Token: n.s.RPCToken}
	if n.s.TLS != nil {
		auth.TLS = n.s.TLS.Client
	}
	return &forwarder{name: n.s.Name, view: view, auth: auth, maxSend: int(n.s.MaxBodyBytes) + 64<<10,
		exec: n.s.Executor, sent: n.metrics.ForwardsSent(), conns: map[string]*grpc.ClientConn{}}
}

func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cc := f.conns[addr]; cc != nil {
		return cc, nil
	}
	if len(f.conns) >= 64 { // peers come and go: drop those no longer known
		known := map[string]bool{}
		for _, m := range f.view.mesh.Members() {
			known[m.Meta.RPC] = true
		}
		for a, cc := range f.conns {
			if !known[a] {
				_ = cc.Close()
				delete(f.conns, a)
			}
		}
	}
	opts := append(f.auth.DialOptions(), grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: rpcKeepalive, Timeout: rpcKeepaliveTimeout, PermitWithoutStream: true,
	}), grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(f.maxSend)))
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = cc
	return cc, nil
}

func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a, cc := range f.conns {
		_ = cc.Close()
		delete(f.conns, a)
	}
}

// Forward implements route.Forwarder. The via node must still be an
// alive, non-draining member of the region the plan named: gossip may
// have learned otherwise since.
func (f *forwarder) Forward(ctx context.Context, req *route.Request, t *route.Target, routeNote string, sink route.ResponseSink) route.Forwarded {
	mem, ok := f.view.member(t.Via)
	switch {
	case !ok || mem.State != "alive":
		return route.Forwarded{Gone: true, Err: fmt.Errorf("node %s is not alive", t.Via)}
	case mem.Meta.Region != t.ViaRegion:
		return route.Forwarded{Gone: true, Err: fmt.Errorf("node %s is in region %s, not %s", t.Via, mem.Meta.Region, t.ViaRegion)}
	case mem.Meta.RPC == "":
		return route.Forwarded{Err: fmt.Errorf("node %s takes no forwards (no node.rpc)", t.Via)}
	}
	return f.hop(ctx, hop{addr: mem.Meta.RPC, peer: t.Via, req: req, note: routeNote, in: &pb.ForwardRequest{
		Origin: f.name, RequestId: req.ID, Tenant: req.Tenant, Residency: string(req.Residency.Jurisdiction),
		StrictTransit: req.StrictTransit, Session: req.Session, Provider: t.Provider(), Body: req.Chat.WithModel(t.Offer.Model.Name),
		Spill: t.Spill,
	}}, sink)
}

// hop is one call of a peer's Mesh.Forward: in, sent to peer at addr for
// req, whose answer's X-LLMesh-Route is prefixed with note.
type hop struct {
	addr, peer string
	in         *pb.ForwardRequest
	req        *route.Request
	note       string
}

// hopCall is a hop under way.
type hopCall struct {
	hop
	stream   bool // the client asked for a stream
	timer    *time.Timer
	timedOut atomic.Bool
}

// fail is the hop's own failure err, as the executor takes it.
func (c *hopCall) fail(err error) route.Forwarded {
	if s, ok := status.FromError(err); ok {
		err = errors.New(s.Message())
	}
	return route.Forwarded{Err: err, Timeout: c.timedOut.Load()}
}

// hop calls h's peer and relays the answer to sink: the head's headers
// (X-LLMesh-Route prefixed with h.note), then the data as it arrives.
// Before the head it gives up after the phase's timeout plus hopSlack;
// after it, after the idle timeout plus hopSlack. The request's
// traceparent and tracestate, if any, go to the peer as gRPC metadata.
func (f *forwarder) hop(ctx context.Context, h hop, sink route.ResponseSink) route.Forwarded {
	cc, err := f.conn(h.addr)
	if err != nil {
		return route.Forwarded{Err: err}
	}
	f.sent.Inc()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the call, and the far node's upstream call with it
	c := &hopCall{hop: h, stream: h.req.Chat.Stream}
	c.timer = time.AfterFunc(f.headWait(c)+hopSlack, func() { c.timedOut.Store(true); cancel() })
	defer c.timer.Stop()
	if tp := h.req.TraceParent; tp != "" {
		cctx = metadata.AppendToOutgoingContext(cctx, "traceparent", tp)
		if ts := h.req.TraceState; ts != "" {
			cctx = metadata.AppendToOutgoingContext(cctx, "tracestate", ts)
		}
	}
	st, err := pb.NewMeshClient(cc).Forward(cctx, h.in)
	if err != nil {
		return c.fail(err)
	}
	msg, err := st.Recv()
	if err != nil {
		return c.fail(err)
	}
	head := msg.GetHead()
	if head == nil {
		return route.Forwarded{Err: fmt.Errorf("node %s answered without a head", h.peer)}
	}
	if head.Status != http.StatusOK {
		return refusal(st, head)
	}
	hdr := sink.Header()
	for k, v := range head.Headers {
		if k != "X-Llmesh-Route" {
			hdr[k] = []string{v}
		}
	}
	hdr["X-Llmesh-Route"] = []string{h.note + "; at " + h.peer + ": " + head.Headers["X-Llmesh-Route"]}
	sink.WriteHeader(http.StatusOK)
	// From here the far node bounds the answer itself: its idle timeout
	// ends a silent stream with a trailer (an upstream's keep-alive
	// comments, which it does not relay, reset it), and gRPC keepalive
	// finds a far node that died. A non-streamed answer still has the
	// whole-response bound.
	if c.stream {
		c.timer.Stop()
	} else {
		c.timer.Reset(f.exec.ResponseTimeout + hopSlack)
	}
	return f.relay(ctx, c, st, sink, route.Forwarded{Committed: true, Header: hdr})
}

// headWait is how long c waits for the far node's head: the phase's
// timeout for each attempt the far node may fail over between, and for
// a hand-off another hop's slack, as the peer may forward it once more.
func (f *forwarder) headWait(c *hopCall) time.Duration {
	wait := f.exec.ResponseTimeout
	if c.stream {
		wait = f.exec.FirstByteTimeout
	}
	wait *= time.Duration(max(f.exec.MaxAttempts, 1))
	if c.in.Handoff {
		wait += hopSlack
	}
	return wait
}

// relay relays the far node's answer after its head to sink, until its
// trailer, and returns out with what the trailer reports.
func (f *forwarder) relay(ctx context.Context, c *hopCall, st grpc.ServerStreamingClient[pb.ForwardReply], sink route.ResponseSink, out route.Forwarded) route.Forwarded {
	for {
		msg, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil {
				out.ClientGone = true
				return out
			}
			// The hop broke mid-answer: the client learns it as a
			// provider's broken stream would tell it.
			out.Truncated, out.Err = true, c.fail(err).Err
			if errors.Is(err, io.EOF) {
				out.Err = fmt.Errorf("node %s ended the answer without its trailer", c.peer)
			}
			if c.stream {
				msg, _ := json.Marshal(fmt.Sprintf("the answer broke off: node %s stopped answering", c.peer))
				_, _ = sink.Write([]byte(`data: {"error":{"message":` + string(msg) + `,"type":"upstream_error","code":"upstream_error"}}` + "\n\n"))
				_ = sink.Flush()
			}
			return out
		}
		switch p := msg.Part.(type) {
		case *pb.ForwardReply_Data:
			if !c.stream {
				c.timer.Reset(f.exec.ResponseTimeout + hopSlack)
			}
			if _, err := sink.Write(p.Data); err != nil {
				out.ClientGone = true
				return out
			}
			if c.stream {
				if err := sink.Flush(); err != nil {
					out.ClientGone = true
					return out
				}
			}
		case *pb.ForwardReply_Trailer:
			tr := p.Trailer
			out.Provider, out.Cost, out.TTFT, out.Truncated = tr.Provider, tr.CostUsd, time.Duration(tr.TtftNs), tr.Truncated
			out.Usage = route.Usage{PromptTokens: int(tr.PromptTokens), CompletionTokens: int(tr.CompletionTokens)}
			out.UsageCounted = tr.UsageCounted
			if err := sink.Flush(); err != nil {
				out.ClientGone = true
			}
			return out
		}
	}
}

// refusal reads the rest of a far node's refusal: its error document (at
// most 64 KiB) and the trailer with the error's code.
func refusal(st grpc.ServerStreamingClient[pb.ForwardReply], head *pb.Head) route.Forwarded {
	out := route.Forwarded{Status: int(head.Status), Header: http.Header{}}
	for k, v := range head.Headers {
		out.Header[k] = []string{v}
	}
	for {
		msg, err := st.Recv()
		if err != nil {
			return out
		}
		switch p := msg.Part.(type) {
		case *pb.ForwardReply_Data:
			if len(out.Body)+len(p.Data) <= 64<<10 {
				out.Body = append(out.Body, p.Data...)
			}
		case *pb.ForwardReply_Trailer:
			out.Code = p.Trailer.ErrorCode
			return out
		}
	}
}

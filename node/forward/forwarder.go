// Package forward is the forwarding hop between nodes: the sending side
// (Forwarder, route.Forwarder over gRPC to a via node, with one
// connection per peer), the receiving side (Service, the Mesh service's
// transport, which hands each forward to a ServeFunc) and the gossip
// view both read (View, route.MeshView and route.SpareView), the
// dashboard's admin read over the same connections (Observe, Gather), and
// stored Responses API responses asked of peers and copied to one
// (FindStored, AskStored).
//
// It owns the framing only: a head with the answer's status and headers,
// the data as it flows, a trailer with what was served or the refusal's
// error code. Admission — the tenant, the limits, the residency narrowed
// at every hop — is the ServeFunc's (node's pipeline); this package must
// not repeat it. It imports route, gossip, region, proto and node/views,
// never node.
package forward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/route"
)

// hopSlack is what a forward adds to the far node's own timeouts before
// the origin gives up on it: the hop's round trip and the far node's
// planning.
const hopSlack = 5 * time.Second

// maxConns is how many peer connections the forwarder keeps before it
// drops those of peers gossip no longer knows.
const maxConns = 64

// Config is what the sending side works with.
type Config struct {
	// Name is this node's, the forwards' origin.
	Name string
	// Dial authenticates a connection to a peer: transport credentials
	// and the mesh's token (consensus.PeerAuth.DialOptions).
	Dial []grpc.DialOption
	// Keepalive finds a peer that vanished without closing its
	// connections.
	Keepalive keepalive.ClientParameters
	// MaxSend bounds one message sent, in bytes: a body as large as the
	// HTTP side admits.
	MaxSend int
	// Executor is this node's executor configuration: the far node's
	// timeouts are taken to be the same.
	Executor route.ExecutorConfig
	// Sent counts the forwards sent.
	Sent prometheus.Counter
}

// Forwarder is the sending side: route.Forwarder over gRPC to the via
// node, with one connection per peer. Close ends the connections.
type Forwarder struct {
	cfg  Config
	view *View

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by RPC address
}

var _ route.Forwarder = (*Forwarder)(nil)

// New returns a forwarder to the peers view knows. It dials nobody yet.
func New(cfg Config, view *View) *Forwarder {
	return &Forwarder{cfg: cfg, view: view, conns: map[string]*grpc.ClientConn{}}
}

// View is the gossip view the forwarder checks its via nodes against.
func (f *Forwarder) View() *View { return f.view }

func (f *Forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cc := f.conns[addr]; cc != nil {
		return cc, nil
	}
	if len(f.conns) >= maxConns { // peers come and go: drop those no longer known
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
	opts := append(append([]grpc.DialOption(nil), f.cfg.Dial...), grpc.WithKeepaliveParams(f.cfg.Keepalive),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(f.cfg.MaxSend)))
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = cc
	return cc, nil
}

// Close closes every peer connection. Forwards after it dial again.
func (f *Forwarder) Close() {
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
func (f *Forwarder) Forward(ctx context.Context, req *route.Request, t *route.Target, routeNote string, sink route.ResponseSink) route.Forwarded {
	mem, ok := f.view.Member(t.Via)
	switch {
	case !ok || mem.State != "alive":
		return route.Forwarded{Gone: true, Err: fmt.Errorf("node %s is not alive", t.Via)}
	case mem.Meta.Region != t.ViaRegion:
		return route.Forwarded{Gone: true, Err: fmt.Errorf("node %s is in region %s, not %s", t.Via, mem.Meta.Region, t.ViaRegion)}
	case mem.Meta.RPC == "":
		return route.Forwarded{Err: fmt.Errorf("node %s takes no forwards (no node.rpc)", t.Via)}
	}
	return f.Hop(ctx, Hop{Addr: mem.Meta.RPC, Peer: t.Via, Req: req, Note: routeNote, In: &pb.ForwardRequest{
		Origin: f.cfg.Name, RequestId: req.ID, Tenant: req.Tenant, Key: req.Key, Residency: string(req.Residency.Jurisdiction),
		StrictTransit: req.StrictTransit, Session: req.Session, Provider: t.Provider(), Body: req.Chat.WithModel(t.Offer.Model.Name),
		Spill: t.Spill, Api: req.Chat.API.String(), Tags: req.Tags,
	}}, sink)
}

// Hop is one call of a peer's Mesh.Forward: In, sent to Peer at Addr for
// Req, whose answer's X-LLMesh-Route is prefixed with Note.
type Hop struct {
	Addr, Peer string
	In         *pb.ForwardRequest
	Req        *route.Request
	Note       string
}

// hopCall is a hop under way.
type hopCall struct {
	Hop
	stream   bool // the client asked for a stream
	timer    *time.Timer
	timedOut atomic.Bool
	// delivered means the client has the whole answer (a stream's final
	// event, or a whole answer's Content-Length bytes): a client that
	// goes away after it does not cancel the trailer, which carries the
	// cost, for trailerGrace.
	delivered atomic.Bool
	length    int64 // a whole answer's Content-Length; 0 when not given
	written   int64
}

// trailerGrace is how long the far node's trailer is waited for after
// the client, holding the whole answer, went away.
const trailerGrace = time.Second

// note records that data is written to the client, and whether with it
// the whole answer is.
func (c *hopCall) note(data []byte) {
	c.written += int64(len(data))
	switch {
	case !c.stream:
		if c.length > 0 && c.written >= c.length {
			c.delivered.Store(true)
		}
	case bytes.Contains(data, []byte("data: [DONE]")), bytes.Contains(data, []byte("event: response.completed\n")),
		bytes.Contains(data, []byte("event: response.incomplete\n")):
		c.delivered.Store(true)
	}
}

// fail is the hop's own failure err, as the executor takes it.
func (c *hopCall) fail(err error) route.Forwarded {
	if s, ok := status.FromError(err); ok {
		err = errors.New(s.Message())
	}
	return route.Forwarded{Err: err, Timeout: c.timedOut.Load()}
}

// Hop calls h's peer and relays the answer to sink: the head's headers
// (X-LLMesh-Route prefixed with h.Note), then the data as it arrives.
// Before the head it gives up after the phase's timeout plus hopSlack;
// after it, after the idle timeout plus hopSlack. The request's
// traceparent and tracestate, if any, go to the peer as gRPC metadata.
// A refusal the peer answered with before any answer is returned in
// Status, Header, Body and Code, and nothing is written to sink.
func (f *Forwarder) Hop(ctx context.Context, h Hop, sink route.ResponseSink) route.Forwarded {
	cc, err := f.conn(h.Addr)
	if err != nil {
		return route.Forwarded{Err: err}
	}
	f.cfg.Sent.Inc()
	// The call ends with the client's context, unless the client already
	// has the whole answer: then the trailer still comes, for a while.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel() // ends the call, and the far node's upstream call with it
	c := &hopCall{Hop: h, stream: h.Req.Chat.Stream}
	defer context.AfterFunc(ctx, func() {
		if c.delivered.Load() {
			time.AfterFunc(trailerGrace, cancel)
			return
		}
		cancel()
	})()
	c.timer = time.AfterFunc(f.headWait(c)+hopSlack, func() { c.timedOut.Store(true); cancel() })
	defer c.timer.Stop()
	if tp := h.Req.TraceParent; tp != "" {
		cctx = metadata.AppendToOutgoingContext(cctx, "traceparent", tp)
		if ts := h.Req.TraceState; ts != "" {
			cctx = metadata.AppendToOutgoingContext(cctx, "tracestate", ts)
		}
	}
	h.In.Frames = true
	st, err := pb.NewMeshClient(cc).Forward(cctx, h.In)
	if err != nil {
		return c.fail(err)
	}
	msg, err := st.Recv()
	if err != nil {
		return c.fail(err)
	}
	head, data, tr := parts(msg)
	if head == nil {
		return route.Forwarded{Err: fmt.Errorf("node %s answered without a head", h.Peer)}
	}
	if head.Status != http.StatusOK {
		return refusal(st, head, data, tr)
	}
	c.length, _ = strconv.ParseInt(head.Headers["Content-Length"], 10, 64)
	hdr := sink.Header()
	for k, v := range head.Headers {
		if k != "X-Llmesh-Route" {
			hdr[k] = []string{v}
		}
	}
	hdr["X-Llmesh-Route"] = []string{h.Note + "; at " + h.Peer + ": " + head.Headers["X-Llmesh-Route"]}
	sink.WriteHeader(http.StatusOK)
	// From here the far node bounds the answer itself: its idle timeout
	// ends a silent stream with a trailer (an upstream's keep-alive
	// comments, which it does not relay, reset it), and gRPC keepalive
	// finds a far node that died. A non-streamed answer still has the
	// whole-response bound.
	if c.stream {
		c.timer.Stop()
	} else {
		c.timer.Reset(f.cfg.Executor.ResponseTimeout + hopSlack)
	}
	return f.relay(ctx, c, st, sink, route.Forwarded{Committed: true, Header: hdr}, data, tr)
}

// headWait is how long c waits for the far node's head: the phase's
// timeout for each attempt the far node may fail over between, and for
// a hand-off another hop's slack, as the peer may forward it once more.
func (f *Forwarder) headWait(c *hopCall) time.Duration {
	exec := f.cfg.Executor
	wait := exec.ResponseTimeout
	if c.stream {
		wait = exec.FirstByteTimeout
	}
	wait *= time.Duration(max(exec.MaxAttempts, 1))
	if c.In.Handoff {
		wait += hopSlack
	}
	return wait
}

// parts is what a reply carries: one part a message from a node older
// than frames, any of them in a Frame.
func parts(m *pb.ForwardReply) (head *pb.Head, data []byte, tr *pb.Trailer) {
	switch p := m.Part.(type) {
	case *pb.ForwardReply_Head:
		return p.Head, nil, nil
	case *pb.ForwardReply_Data:
		return nil, p.Data, nil
	case *pb.ForwardReply_Trailer:
		return nil, nil, p.Trailer
	case *pb.ForwardReply_Frame:
		return p.Frame.GetHead(), p.Frame.GetData(), p.Frame.GetTrailer()
	}
	return nil, nil, nil
}

// relay relays the far node's answer after its head to sink — data and
// tr, which came with the head, then what follows, until the trailer —
// and returns out with what the trailer reports.
func (f *Forwarder) relay(ctx context.Context, c *hopCall, st grpc.ServerStreamingClient[pb.ForwardReply], sink route.ResponseSink, out route.Forwarded, data []byte, tr *pb.Trailer) route.Forwarded {
	var msg pb.ForwardReply
	for {
		if len(data) > 0 {
			if !c.stream {
				c.timer.Reset(f.cfg.Executor.ResponseTimeout + hopSlack)
			}
			// Noted before the write: a client that leaves as soon as it
			// has the last of it must find the answer delivered. A write
			// that fails is a client gone, whatever was noted.
			c.note(data)
			if _, err := sink.Write(data); err != nil {
				out.ClientGone = true
				return out
			}
			if c.stream {
				if err := sink.Flush(); err != nil {
					out.ClientGone = true
					return out
				}
			}
		}
		if tr != nil {
			out.Provider, out.Cost, out.TTFT, out.Truncated = tr.Provider, tr.CostUsd, time.Duration(tr.TtftNs), tr.Truncated
			out.Usage = route.Usage{PromptTokens: int(tr.PromptTokens), CompletionTokens: int(tr.CompletionTokens), CachedTokens: int(tr.CachedTokens)}
			out.UsageCounted = tr.UsageCounted
			if err := sink.Flush(); err != nil && !c.delivered.Load() {
				out.ClientGone = true
			}
			return out
		}
		// One message for every part: its data is written before the next
		// is read into it.
		msg.Reset()
		if err := st.RecvMsg(&msg); err != nil {
			switch {
			case c.delivered.Load():
				return out // the client has it all; the cost is the far node's to count
			case ctx.Err() != nil:
				out.ClientGone = true
				return out
			}
			return broke(c, err, sink, out)
		}
		_, data, tr = parts(&msg)
	}
}

// broke ends out for a hop that broke mid-answer with err: the client
// learns it as a provider's broken stream would tell it.
func broke(c *hopCall, err error, sink route.ResponseSink, out route.Forwarded) route.Forwarded {
	out.Truncated, out.Err = true, c.fail(err).Err
	if errors.Is(err, io.EOF) {
		out.Err = fmt.Errorf("node %s ended the answer without its trailer", c.Peer)
	}
	if c.stream {
		msg, _ := json.Marshal(fmt.Sprintf("the answer broke off: node %s stopped answering", c.Peer))
		ev := `data: {"error":{"message":` + string(msg) + `,"type":"upstream_error","code":"upstream_error"}}` + "\n\n"
		if c.Req.Chat.API == route.APIResponses { // the Responses API's own error event
			ev = `event: error` + "\n" + `data: {"type":"error","code":"upstream_error","message":` + string(msg) + `,"param":null,"sequence_number":0}` + "\n\n"
		}
		_, _ = sink.Write([]byte(ev))
		_ = sink.Flush()
	}
	return out
}

// refusal reads a far node's refusal: its error document (at most 64
// KiB) and the trailer with the error's code, from data and tr, which
// came with head, and the messages after.
func refusal(st grpc.ServerStreamingClient[pb.ForwardReply], head *pb.Head, data []byte, tr *pb.Trailer) route.Forwarded {
	out := route.Forwarded{Status: int(head.Status), Header: http.Header{}}
	for k, v := range head.Headers {
		out.Header[k] = []string{v}
	}
	for {
		if len(out.Body)+len(data) <= 64<<10 {
			out.Body = append(out.Body, data...)
		}
		if tr != nil {
			out.Code = tr.ErrorCode
			return out
		}
		msg, err := st.Recv()
		if err != nil {
			return out
		}
		_, data, tr = parts(msg)
	}
}

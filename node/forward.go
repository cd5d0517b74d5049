package node

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/tenant"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
	"github.com/prometheus/client_golang/prometheus"
)

// forwardChunk bounds one Data message: a large non-streamed answer goes
// in pieces, far below gRPC's 4 MiB message limit.
const forwardChunk = 64 << 10

// incomingMetadata is the one value of a gRPC metadata key, or "".
func incomingMetadata(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) == 1 {
		return v[0]
	}
	return ""
}

// hopSlack is what a forward adds to the far node's own timeouts before
// the origin gives up on it: the hop's round trip and the far node's
// planning.
const hopSlack = 5 * time.Second

// meshService is the receiving side of a forward: it serves a request
// another node sent, as if a client had called this node, except that it
// never forwards it on. It trusts nothing of the sender's plan: the tenant
// must be one of this node's, the residency is this node's view of the
// tenant (narrowed, never widened, by what the sender established), and
// every target passes this node's own planner and guard.
type meshService struct {
	pb.UnimplementedMeshServer
	name    string
	tenants func() *tenant.Keys
	serve   func(context.Context, *inbound, answerSink) answer
	now     func() time.Time
	// received counts the forwards that reached this node.
	received prometheus.Counter
}

// Forward serves a peer's forward over the pipeline, and ends the answer
// with a trailer: what was served, or the refusal's error code.
func (s *meshService) Forward(in *pb.ForwardRequest, stream pb.Mesh_ForwardServer) error {
	s.received.Inc()
	ctx := stream.Context()
	sink := &streamSink{stream: stream, header: http.Header{}}
	t, ok := s.tenants().Named(in.Tenant)
	req := &inbound{origin: fromPeer, tenant: t, claimed: in.Tenant, body: in.Body, session: in.Session,
		residency: in.Residency, strict: in.StrictTransit, sender: in.Origin, hint: in.Provider, spill: in.Spill,
		traceparent: incomingMetadata(ctx, "traceparent"), tracestate: incomingMetadata(ctx, "tracestate"),
		id: in.RequestId, start: s.now()}
	if in.Handoff {
		req.origin = fromHandoff
	}
	if !ok {
		req.authErr = fmt.Errorf("%w: tenant %q is not configured on node %s", errUnauthorized, in.Tenant, s.name)
	}
	a := s.serve(ctx, req, sink)
	switch {
	case a.status == statusClientClosed:
		return nil
	case a.err != nil:
		_, e := classify(a.err)
		return sink.finish(&pb.Trailer{ErrorCode: e.Code})
	}
	res := a.res
	return sink.finish(&pb.Trailer{
		Provider: res.Provider, PromptTokens: int64(res.Usage.PromptTokens), CompletionTokens: int64(res.Usage.CompletionTokens),
		UsageCounted: res.UsageCounted, CostUsd: res.Cost, TtftNs: int64(res.TTFT), Truncated: res.Truncated,
	})
}

// streamSink is a route.ResponseSink (and an http.ResponseWriter, for
// refusals) over the forwarding stream: the head when the answer starts,
// what was written in Data messages at each flush, a Trailer at the end.
type streamSink struct {
	stream   pb.Mesh_ForwardServer
	header   http.Header
	status   int
	headSent bool
	buf      []byte
	err      error
}

func (s *streamSink) Header() http.Header { return s.header }

func (s *streamSink) written() int { return s.status }

func (s *streamSink) WriteHeader(code int) {
	if s.headSent {
		return
	}
	s.status, s.headSent = code, true
	h := make(map[string]string, len(s.header))
	for k, v := range s.header {
		if len(v) > 0 && k != "X-Llmesh-Node" {
			h[k] = v[0]
		}
	}
	s.send(&pb.ForwardReply{Part: &pb.ForwardReply_Head{Head: &pb.Head{Status: int32(code), Headers: h}}})
}

func (s *streamSink) Write(p []byte) (int, error) {
	if !s.headSent {
		s.WriteHeader(http.StatusOK)
	}
	if s.err != nil {
		return 0, s.err
	}
	s.buf = append(s.buf, p...)
	if len(s.buf) >= forwardChunk {
		_ = s.Flush()
	}
	return len(p), s.err
}

// Flush sends what was written since the last flush.
func (s *streamSink) Flush() error {
	for i := 0; i < len(s.buf) && s.err == nil; i += forwardChunk {
		// Send serializes the message before it returns, so the buffer
		// may be reused.
		s.send(&pb.ForwardReply{Part: &pb.ForwardReply_Data{Data: s.buf[i:min(i+forwardChunk, len(s.buf))]}})
	}
	s.buf = s.buf[:0]
	return s.err
}

func (s *streamSink) send(m *pb.ForwardReply) {
	if s.err == nil {
		s.err = s.stream.Send(m)
	}
}

// finish flushes the answer and closes it with tr.
func (s *streamSink) finish(tr *pb.Trailer) error {
	if !s.headSent {
		return nil
	}
	_ = s.Flush()
	s.send(&pb.ForwardReply{Part: &pb.ForwardReply_Trailer{Trailer: tr}})
	return s.err
}

// meshView is route.MeshView over gossip: the via node for a region is
// chosen among its alive, non-draining members that take forwards, by RTT
// and load (region.Nearest). What gossip knows is gathered at most every
// viaRefresh, not per request.
type meshView struct {
	mesh meshSource
	mu   sync.Mutex
	at   time.Time
	snap atomic.Pointer[meshSnapshot]
}

type meshSnapshot struct {
	byRegion map[string][]region.Candidate
	byName   map[string]gossip.Member
	load     map[string]int64 // requests in flight, by node
	// spares are the peers with rate share left, by provider, nearest
	// first.
	spares map[string][]spareNode
}

const viaRefresh = 250 * time.Millisecond

// meshSource is what meshView reads of gossip (a *gossip.Mesh).
type meshSource interface {
	Members() []gossip.Member
	Loads() map[string]gossip.Load
}

var _ route.MeshView = (*meshView)(nil)

// Via implements route.MeshView.
func (v *meshView) Via(regionName string) (string, time.Duration, bool) {
	cs := v.snapshot().byRegion[regionName]
	i := region.Nearest(cs)
	if i < 0 {
		return "", 0, false
	}
	return cs[i].Name, cs[i].RTT, true
}

// member returns the member called name as gossip knew it lately.
func (v *meshView) member(name string) (gossip.Member, bool) {
	m, ok := v.snapshot().byName[name]
	return m, ok
}

func (v *meshView) snapshot() *meshSnapshot {
	now := time.Now()
	if m := v.snap.Load(); m != nil {
		if !v.mu.TryLock() {
			return m // another request is refreshing it
		}
		defer v.mu.Unlock()
		if now.Sub(v.at) < viaRefresh {
			return m
		}
	} else {
		v.mu.Lock()
		defer v.mu.Unlock()
	}
	v.at = now
	loads := v.mesh.Loads()
	out := &meshSnapshot{byRegion: map[string][]region.Candidate{}, byName: map[string]gossip.Member{}, load: map[string]int64{},
		spares: map[string][]spareNode{}}
	for _, mem := range v.mesh.Members() {
		out.byName[mem.Name] = mem
		out.load[mem.Name] = int64(loads[mem.Name].InFlight)
		if mem.Self || mem.State != "alive" || mem.Meta.RPC == "" {
			continue
		}
		for _, s := range loads[mem.Name].Spare {
			out.spares[s.Provider] = append(out.spares[s.Provider], spareNode{name: mem.Name, region: mem.Meta.Region,
				jurisdiction: region.Jurisdiction(mem.Meta.Jurisdiction), rtt: mem.RTT, requests: s.Requests})
		}
		out.byRegion[mem.Meta.Region] = append(out.byRegion[mem.Meta.Region], region.Candidate{
			Name: mem.Name, RTT: mem.RTT, RTTKnown: mem.RTTKnown, Load: int64(loads[mem.Name].InFlight),
		})
	}
	for _, cs := range out.spares {
		slices.SortStableFunc(cs, func(a, b spareNode) int { return cmp.Compare(a.rtt, b.rtt) })
	}
	v.snap.Store(out)
	return out
}

package forward

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/route"
)

// chunk bounds one Data message: a large non-streamed answer goes in
// pieces, far below gRPC's 4 MiB message limit.
const chunk = 64 << 10

// Meta is what a forward carried besides its request, as gRPC metadata.
type Meta struct {
	// TraceParent and TraceState are the sender's trace context, "" when
	// it sent none.
	TraceParent, TraceState string
}

// Answer is how a ServeFunc ended a forwarded request.
type Answer struct {
	// Gone means the sender went away: the answer ends without a
	// trailer.
	Gone bool
	// Refused means the request was answered with an error (written to
	// the sink in OpenAI's shape); Code is the error's code.
	Refused bool
	Code    string
	// Result is what was served, when neither Gone nor Refused.
	Result *route.Result
}

// ServeFunc serves a peer's forward: it admits in as this node's own
// pipeline admits any request (the tenant must be this node's, the
// residency this node's view narrowed by in's, never widened), and
// writes the answer or the refusal to sink.
type ServeFunc func(ctx context.Context, in *pb.ForwardRequest, meta Meta, sink *Sink) Answer

// Service is the receiving side of a forward, the Mesh gRPC service: it
// hands each forward to its ServeFunc and ends the answer with a
// trailer, what was served or the refusal's error code.
type Service struct {
	pb.UnimplementedMeshServer
	serve   ServeFunc
	observe ObserveFunc
	stored  StoredFunc
	// received counts the forwards that reached this node.
	received prometheus.Counter
}

// NewService returns the Mesh service serving forwards with serve
// (received counts them), observations with observe and stored
// responses with stored.
func NewService(serve ServeFunc, observe ObserveFunc, stored StoredFunc, received prometheus.Counter) *Service {
	return &Service{serve: serve, observe: observe, stored: stored, received: received}
}

// Forward implements pb.MeshServer.
func (s *Service) Forward(in *pb.ForwardRequest, stream pb.Mesh_ForwardServer) error {
	s.received.Inc()
	ctx := stream.Context()
	sink := &Sink{stream: stream, header: http.Header{}}
	meta := Meta{TraceParent: incomingMetadata(ctx, "traceparent"), TraceState: incomingMetadata(ctx, "tracestate")}
	a := s.serve(ctx, in, meta, sink)
	switch {
	case a.Gone:
		return nil
	case a.Refused:
		return sink.finish(&pb.Trailer{ErrorCode: a.Code})
	}
	res := a.Result
	return sink.finish(&pb.Trailer{
		Provider: res.Provider, PromptTokens: int64(res.Usage.PromptTokens), CompletionTokens: int64(res.Usage.CompletionTokens),
		CachedTokens: int64(res.Usage.CachedTokens), UsageCounted: res.UsageCounted, CostUsd: res.Cost, TtftNs: int64(res.TTFT), Truncated: res.Truncated,
	})
}

// incomingMetadata is the one value of a gRPC metadata key, or "".
func incomingMetadata(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) == 1 {
		return v[0]
	}
	return ""
}

// Sink is a route.ResponseSink (and an http.ResponseWriter, for
// refusals) over the forwarding stream: the head when the answer starts,
// what was written in Data messages at each flush, a Trailer at the end.
// The X-LLMesh-Node header stays on this node: the sender sets its own.
type Sink struct {
	stream   pb.Mesh_ForwardServer
	header   http.Header
	status   int
	headSent bool
	buf      []byte
	err      error
	// data and reply carry every Data message, reused: Send serializes
	// a message before it returns, so a stream's flushes allocate none.
	data  pb.ForwardReply_Data
	reply pb.ForwardReply
}

// Header is the answer's header, sent with the head.
func (s *Sink) Header() http.Header { return s.header }

// Status is the status written so far, 0 before any.
func (s *Sink) Status() int { return s.status }

// WriteHeader sends the head; only the first call counts.
func (s *Sink) WriteHeader(code int) {
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

// Write buffers p until the next Flush (sending the head first if it was
// not), and flushes once a chunk is buffered.
func (s *Sink) Write(p []byte) (int, error) {
	if !s.headSent {
		s.WriteHeader(http.StatusOK)
	}
	if s.err != nil {
		return 0, s.err
	}
	s.buf = append(s.buf, p...)
	if len(s.buf) >= chunk {
		_ = s.Flush()
	}
	return len(p), s.err
}

// Flush sends what was written since the last flush.
func (s *Sink) Flush() error {
	for i := 0; i < len(s.buf) && s.err == nil; i += chunk {
		// Send serializes the message before it returns, so the buffer
		// may be reused.
		s.data.Data = s.buf[i:min(i+chunk, len(s.buf))]
		s.reply.Part = &s.data
		s.send(&s.reply)
	}
	s.data.Data = nil
	s.buf = s.buf[:0]
	return s.err
}

func (s *Sink) send(m *pb.ForwardReply) {
	if s.err == nil {
		s.err = s.stream.Send(m)
	}
}

// finish flushes the answer and closes it with tr; an answer that never
// started gets no trailer.
func (s *Sink) finish(tr *pb.Trailer) error {
	if !s.headSent {
		return nil
	}
	_ = s.Flush()
	s.send(&pb.ForwardReply{Part: &pb.ForwardReply_Trailer{Trailer: tr}})
	return s.err
}

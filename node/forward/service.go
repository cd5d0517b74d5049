package forward

import (
	"context"
	"net/http"
	"strings"

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
	// oneMessagePerPart answers as a node older than frames does, for
	// tests.
	oneMessagePerPart bool
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
	sink := &Sink{stream: stream, header: http.Header{}, frames: in.Frames && !s.oneMessagePerPart}
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
// To an origin that asked for frames it sends the same in Frames
// instead: the head with the first data, and a JSON document with its
// trailer, in one message while it fits a chunk.
// The X-LLMesh-Node header stays on this node: the sender sets its own.
type Sink struct {
	stream  pb.Mesh_ForwardServer
	header  http.Header
	frames  bool
	status  int
	started bool
	// head waits for the first data, in frames.
	head *pb.Head
	// document is a JSON answer in frames: it waits for its trailer.
	document bool
	buf      []byte
	err      error
	// The messages, reused: Send serializes a message before it
	// returns, so a stream's flushes allocate none.
	data  pb.ForwardReply_Data
	frame pb.ForwardReply_Frame
	fr    pb.Frame
	reply pb.ForwardReply
}

// Header is the answer's header, sent with the head.
func (s *Sink) Header() http.Header { return s.header }

// Status is the status written so far, 0 before any.
func (s *Sink) Status() int { return s.status }

// WriteHeader starts the answer; only the first call counts. The head is
// sent at once, or in frames with the first data.
func (s *Sink) WriteHeader(code int) {
	if s.started {
		return
	}
	s.status, s.started = code, true
	h := make(map[string]string, len(s.header))
	for k, v := range s.header {
		if len(v) > 0 && k != "X-Llmesh-Node" {
			h[k] = v[0]
		}
	}
	s.head = &pb.Head{Status: int32(code), Headers: h}
	s.document = s.frames && strings.HasPrefix(h["Content-Type"], "application/json")
	if !s.frames {
		s.send(&pb.ForwardReply{Part: &pb.ForwardReply_Head{Head: s.head}})
		s.head = nil
	}
}

// Write buffers p until the next Flush (starting the answer with 200 if
// it was not); whole chunks go at once.
func (s *Sink) Write(p []byte) (int, error) {
	if !s.started {
		s.WriteHeader(http.StatusOK)
	}
	if s.err != nil {
		return 0, s.err
	}
	s.buf = append(s.buf, p...)
	if n := len(s.buf) / chunk * chunk; n > 0 {
		all := s.buf
		s.buf = all[:n]
		_ = s.flush(nil)
		s.buf = append(all[:0], all[n:]...)
	}
	return len(p), s.err
}

// Flush sends what was written since the last flush. In frames, a JSON
// document — a whole answer or an error — waits for its trailer
// instead, or for a chunk: its origin relays nothing of it before the
// end either way. Anything else, an event stream above all, goes at
// once.
func (s *Sink) Flush() error {
	if s.document {
		return s.err
	}
	return s.flush(nil)
}

// flush sends what is buffered, in chunks, and then tr if not nil.
func (s *Sink) flush(tr *pb.Trailer) error {
	if !s.frames {
		for i := 0; i < len(s.buf) && s.err == nil; i += chunk {
			s.data.Data = s.buf[i:min(i+chunk, len(s.buf))]
			s.reply.Part = &s.data
			s.send(&s.reply)
		}
		s.data.Data = nil
		if tr != nil {
			s.send(&pb.ForwardReply{Part: &pb.ForwardReply_Trailer{Trailer: tr}})
		}
	} else {
		for i, last := 0, false; !last && s.err == nil; i += chunk {
			end := min(i+chunk, len(s.buf))
			last = end == len(s.buf)
			s.fr.Head, s.fr.Data, s.fr.Trailer = s.head, s.buf[i:end], nil
			if last {
				s.fr.Trailer = tr
			}
			if s.fr.Head != nil || len(s.fr.Data) > 0 || s.fr.Trailer != nil {
				s.head = nil
				s.frame.Frame = &s.fr
				s.reply.Part = &s.frame
				s.send(&s.reply)
			}
		}
		s.fr.Head, s.fr.Data, s.fr.Trailer = nil, nil, nil
	}
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
	if !s.started {
		return nil
	}
	return s.flush(tr)
}

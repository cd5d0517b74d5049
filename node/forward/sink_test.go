package forward

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/llmesh/llmesh/proto"
)

// sentStream is the server side of a forwarding stream, recording what
// was sent; after failAfter messages (when set) Send fails.
type sentStream struct {
	grpc.ServerStream
	sent      []*pb.ForwardReply
	failAfter int
}

func (s *sentStream) Context() context.Context { return context.Background() }

func (s *sentStream) Send(m *pb.ForwardReply) error {
	if s.failAfter > 0 && len(s.sent) >= s.failAfter {
		return errors.New("the sender went away")
	}
	// A copy, as gRPC serializes the message before Send returns: the
	// sink reuses its messages.
	s.sent = append(s.sent, proto.CloneOf(m))
	return nil
}

// A head goes once, without X-LLMesh-Node (the sender sets its own);
// data goes in chunks at each flush; the trailer ends it.
func TestSinkFraming(t *testing.T) {
	st := &sentStream{}
	s := &Sink{stream: st, header: http.Header{}}
	s.Header()["X-Llmesh-Node"] = []string{"far"}
	s.Header()["X-Request-Id"] = []string{"req-1"}
	s.WriteHeader(http.StatusTooManyRequests)
	s.WriteHeader(http.StatusOK)
	if s.Status() != http.StatusTooManyRequests {
		t.Fatalf("status %d", s.Status())
	}
	body := bytes.Repeat([]byte("y"), 2*chunk+5)
	if n, err := s.Write(body[:10]); n != 10 || err != nil {
		t.Fatal(n, err)
	}
	if len(st.sent) != 1 {
		t.Fatal("a small write was sent before the flush")
	}
	_, _ = s.Write(body[10:]) // past a chunk: flushed at once
	if err := s.finish(&pb.Trailer{ErrorCode: "rate_limited"}); err != nil {
		t.Fatal(err)
	}
	head := st.sent[0].GetHead()
	if head == nil || head.Status != http.StatusTooManyRequests || head.Headers["X-Request-Id"] != "req-1" || head.Headers["X-Llmesh-Node"] != "" {
		t.Fatalf("head %+v", st.sent[0])
	}
	var got []byte
	for _, m := range st.sent[1 : len(st.sent)-1] {
		d := m.GetData()
		if len(d) == 0 || len(d) > chunk {
			t.Fatalf("a data message of %d bytes", len(d))
		}
		got = append(got, d...)
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("%d bytes arrived of %d", len(got), len(body))
	}
	if tr := st.sent[len(st.sent)-1].GetTrailer(); tr == nil || tr.ErrorCode != "rate_limited" {
		t.Fatalf("trailer %+v", st.sent[len(st.sent)-1])
	}
}

// An answer that never started gets no trailer; a write starts it with
// 200; a stream that failed fails every write after.
func TestSinkEdges(t *testing.T) {
	st := &sentStream{}
	s := &Sink{stream: st, header: http.Header{}}
	if err := s.finish(&pb.Trailer{}); err != nil || len(st.sent) != 0 {
		t.Fatalf("an unstarted answer sent %v, %v", st.sent, err)
	}
	st = &sentStream{failAfter: 1}
	s = &Sink{stream: st, header: http.Header{}}
	if _, err := s.Write([]byte("a")); err != nil || s.Status() != http.StatusOK || st.sent[0].GetHead().GetStatus() != http.StatusOK {
		t.Fatalf("the first write: %v, status %d", err, s.Status())
	}
	if err := s.Flush(); err == nil {
		t.Fatal("a flush to a gone sender succeeded")
	}
	if _, err := s.Write([]byte("b")); err == nil {
		t.Fatal("a write after a failed send succeeded")
	}
}

// In frames, a JSON answer is one message with its head and trailer
// while it fits a chunk, and in chunks when it does not, the head with
// the first and the trailer with the last; a stream's head goes with its
// first event, and each flush goes at once.
func TestSinkFrames(t *testing.T) {
	frames := func(st *sentStream) (heads, trailers int, data []byte) {
		t.Helper()
		for i, m := range st.sent {
			f := m.GetFrame()
			if f == nil {
				t.Fatalf("message %d is not a frame: %v", i, m)
			}
			if f.Head != nil {
				heads++
				if i != 0 {
					t.Fatalf("a head in message %d", i)
				}
			}
			if f.Trailer != nil {
				trailers++
				if i != len(st.sent)-1 {
					t.Fatalf("a trailer in message %d of %d", i, len(st.sent))
				}
			}
			if len(f.Data) > chunk {
				t.Fatalf("%d bytes in one frame", len(f.Data))
			}
			data = append(data, f.Data...)
		}
		return heads, trailers, data
	}
	for _, size := range []int{0, 50, chunk, 2*chunk + 5} {
		st := &sentStream{}
		s := &Sink{stream: st, header: http.Header{"Content-Type": {"application/json"}}, frames: true}
		s.WriteHeader(http.StatusOK)
		body := bytes.Repeat([]byte("j"), size)
		_, _ = s.Write(body)
		_ = s.Flush()
		if size < chunk && len(st.sent) != 0 {
			t.Fatalf("%d bytes: a JSON answer was sent before its trailer", size)
		}
		if err := s.finish(&pb.Trailer{Provider: "p"}); err != nil {
			t.Fatal(err)
		}
		heads, trailers, got := frames(st)
		if want := max(1, (size+chunk-1)/chunk); len(st.sent) != want && !(size == chunk && len(st.sent) == 2) {
			t.Errorf("%d bytes: %d messages, want %d", size, len(st.sent), want)
		}
		if heads != 1 || trailers != 1 || !bytes.Equal(got, body) {
			t.Errorf("%d bytes: %d heads, %d trailers, %d bytes arrived", size, heads, trailers, len(got))
		}
	}

	st := &sentStream{}
	s := &Sink{stream: st, header: http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, frames: true}
	s.WriteHeader(http.StatusOK)
	if len(st.sent) != 0 {
		t.Fatal("the head went before the first event")
	}
	for i, ev := range []string{"data: {\"a\":1}\n\n", "data: [DONE]\n\n"} {
		_, _ = s.Write([]byte(ev))
		_ = s.Flush()
		if len(st.sent) != i+1 || string(st.sent[i].GetFrame().GetData()) != ev || (st.sent[i].GetFrame().GetHead() != nil) != (i == 0) {
			t.Fatalf("event %d: sent %v", i, st.sent)
		}
	}
	_ = s.finish(&pb.Trailer{Provider: "p"})
	if heads, trailers, got := frames(st); heads != 1 || trailers != 1 || len(st.sent) != 3 || string(got) != "data: {\"a\":1}\n\ndata: [DONE]\n\n" {
		t.Fatalf("the stream sent %v", st.sent)
	}
}

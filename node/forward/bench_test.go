package forward

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"

	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/route"
)

// BenchmarkHop measures the hop's own cost over loopback gRPC, without
// either node's pipeline: a 1 KB JSON answer, and a stream of 20 events
// each flushed, in frames and one part a message (as from a node older
// than frames). Run with -benchmem; allocations are both sides'.
func BenchmarkHop(b *testing.B) {
	doc := append(append([]byte(`{"id":"x","choices":[{"message":{"content":"`), bytes.Repeat([]byte("w"), 1000)...), `"}}]}`...)
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"word\"}}]}\n\n")
	for _, c := range []struct {
		name   string
		stream bool
	}{{"unary", false}, {"stream", true}} {
		for _, old := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/oneMessagePerPart=%v", c.name, old), func(b *testing.B) {
				p := startPeerFraming(b, func(_ context.Context, _ *pb.ForwardRequest, _ Meta, sink *Sink) Answer {
					if !c.stream {
						sink.Header()["Content-Type"] = []string{"application/json"}
						sink.WriteHeader(http.StatusOK)
						_, _ = sink.Write(doc)
						_ = sink.Flush()
					} else {
						sink.Header()["Content-Type"] = []string{"text/event-stream; charset=utf-8"}
						sink.WriteHeader(http.StatusOK)
						for range 20 {
							_, _ = sink.Write(event)
							_ = sink.Flush()
						}
					}
					return Answer{Result: &route.Result{Provider: "gpu-eu"}}
				}, old)
				f, _ := newTestForwarder(b, &fakeMesh{})
				req := chatRequest(b, c.stream)
				b.ReportAllocs()
				for b.Loop() {
					sink := newRecSink()
					fw := f.Hop(context.Background(), Hop{Addr: p.addr, Peer: "far", Req: req, In: &pb.ForwardRequest{}}, sink)
					if fw.Err != nil || fw.Provider != "gpu-eu" {
						b.Fatalf("forwarded %+v", fw)
					}
				}
			})
		}
	}
}

package forward

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/gossip"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// peer is a far node's Mesh service on loopback, serving with serve.
type peer struct {
	addr     string
	received prometheus.Counter
	mu       sync.Mutex
	got      []*pb.ForwardRequest
	meta     []Meta
}

func startPeer(t testing.TB, serve ServeFunc) *peer {
	t.Helper()
	return startPeerFraming(t, serve, false)
}

// startPeerFraming starts a peer that answers one part a message, as a
// node older than frames does, when oneMessagePerPart.
func startPeerFraming(t testing.TB, serve ServeFunc, oneMessagePerPart bool) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{addr: ln.Addr().String(), received: prometheus.NewCounter(prometheus.CounterOpts{Name: "received"})}
	srv := grpc.NewServer()
	svc := NewService(func(ctx context.Context, in *pb.ForwardRequest, meta Meta, sink *Sink) Answer {
		p.mu.Lock()
		p.got, p.meta = append(p.got, in), append(p.meta, meta)
		p.mu.Unlock()
		return serve(ctx, in, meta, sink)
	}, nil, nil, p.received)
	svc.oneMessagePerPart = oneMessagePerPart
	pb.RegisterMeshServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return p
}

// last is the last forward the peer received and its metadata.
func (p *peer) last(t *testing.T) (*pb.ForwardRequest, Meta) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.got) == 0 {
		t.Fatal("the peer received no forward")
	}
	return p.got[len(p.got)-1], p.meta[len(p.meta)-1]
}

var testExec = route.ExecutorConfig{MaxAttempts: 2, FirstByteTimeout: 10 * time.Second, ResponseTimeout: 20 * time.Second}

func newTestForwarder(t testing.TB, src Source) (*Forwarder, prometheus.Counter) {
	sent := prometheus.NewCounter(prometheus.CounterOpts{Name: "sent"})
	f := New(Config{
		Name: "origin", Dial: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		Keepalive: keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 10 * time.Second},
		MaxSend:   1 << 20, Executor: testExec, Sent: sent,
	}, NewView(src))
	t.Cleanup(f.Close)
	return f, sent
}

// count is a counter's value.
func count(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	r := prometheus.NewRegistry()
	r.MustRegister(c)
	mfs, err := r.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatal(mfs, err)
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

// recSink is the origin's client, as the executor hands it to a hop.
type recSink struct {
	header  http.Header
	status  int
	body    bytes.Buffer
	flushes int
	onWrite func()
}

func newRecSink() *recSink { return &recSink{header: http.Header{"X-Llmesh-Node": {"origin"}}} }

func (s *recSink) Header() http.Header  { return s.header }
func (s *recSink) WriteHeader(code int) { s.status = code }
func (s *recSink) Flush() error         { s.flushes++; return nil }
func (s *recSink) Write(p []byte) (int, error) {
	if s.onWrite != nil {
		s.onWrite()
	}
	return s.body.Write(p)
}

func chatRequest(t testing.TB, stream bool) *route.Request {
	t.Helper()
	body := `{"model":"gpt","messages":[{"role":"user","content":"hi"}]`
	if stream {
		body += `,"stream":true`
	}
	chat, err := route.ParseChatRequest([]byte(body + "}"))
	if err != nil {
		t.Fatal(err)
	}
	return &route.Request{Chat: chat, ID: "req-1", Tenant: "acme", Key: "0123456789ab", Session: "s-1",
		Residency: region.Residency{Jurisdiction: "eu"}, StrictTransit: true,
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", TraceState: "vendor=1"}
}

// fakeMesh is a gossip view the tests set.
type fakeMesh struct {
	members []gossip.Member
	loads   map[string]gossip.Load
}

func (m *fakeMesh) Members() []gossip.Member      { return m.members }
func (m *fakeMesh) Loads() map[string]gossip.Load { return m.loads }

func alive(name, reg, rpc string) gossip.Member {
	return gossip.Member{Name: name, State: "alive", Meta: gossip.Meta{Region: reg, Jurisdiction: "eu", RPC: rpc}}
}

// A forward reaches the via node with what the origin established; its
// answer reaches the client with X-LLMesh-Route prefixed by the origin's
// note, the far node's X-LLMesh-Node kept there, and what the trailer
// reported in the result.
// The answer arrives whole, with the far node's headers and trailer,
// from a far node that answers in frames and from an older one.
func TestForwardRelaysAnswer(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("oneMessagePerPart=%v", old), func(t *testing.T) { testForwardRelaysAnswer(t, old) })
	}
}

func testForwardRelaysAnswer(t *testing.T, oneMessagePerPart bool) {
	big := bytes.Repeat([]byte("x"), 3*chunk+17) // more than one Data message
	p := startPeerFraming(t, func(_ context.Context, in *pb.ForwardRequest, _ Meta, sink *Sink) Answer {
		sink.Header()["Content-Type"] = []string{"application/json"}
		sink.Header()["X-Llmesh-Route"] = []string{"direct: gpu-eu"}
		sink.Header()["X-Llmesh-Node"] = []string{"far"}
		sink.Header()["X-Llmesh-Via"] = []string{"far"}
		sink.WriteHeader(http.StatusOK)
		_, _ = sink.Write(big)
		return Answer{Result: &route.Result{Provider: "gpu-eu", Usage: route.Usage{PromptTokens: 7, CompletionTokens: 11, CachedTokens: 5},
			UsageCounted: true, Cost: 0.25, TTFT: 40 * time.Millisecond, Truncated: true}}
	}, oneMessagePerPart)
	f, sent := newTestForwarder(t, &fakeMesh{members: []gossip.Member{alive("far", "eu", p.addr)}})
	req := chatRequest(t, false)
	tgt := &route.Target{Via: "far", ViaRegion: "eu", Spill: true,
		Offer: &route.Offer{Provider: &route.Provider{Name: "gpu-eu"}, Model: &route.Model{Name: "llama"}}}
	sink := newRecSink()
	fw := f.Forward(context.Background(), req, tgt, "via far", sink)

	if fw.Err != nil || !fw.Committed {
		t.Fatalf("forwarded %+v", fw)
	}
	if fw.Provider != "gpu-eu" || fw.Usage != (route.Usage{PromptTokens: 7, CompletionTokens: 11, CachedTokens: 5}) || !fw.UsageCounted ||
		fw.Cost != 0.25 || fw.TTFT != 40*time.Millisecond || !fw.Truncated {
		t.Fatalf("the trailer's report: %+v", fw)
	}
	if sink.status != http.StatusOK || !bytes.Equal(sink.body.Bytes(), big) {
		t.Fatalf("status %d, %d bytes of %d", sink.status, sink.body.Len(), len(big))
	}
	if got := sink.header.Get("X-Llmesh-Route"); got != "via far; at far: direct: gpu-eu" {
		t.Fatalf("X-LLMesh-Route %q", got)
	}
	if sink.header.Get("X-Llmesh-Node") != "origin" || sink.header.Get("X-Llmesh-Via") != "far" {
		t.Fatalf("headers %v", sink.header)
	}
	in, meta := p.last(t)
	if in.Origin != "origin" || in.RequestId != "req-1" || in.Tenant != "acme" || in.Key != "0123456789ab" || in.Residency != "eu" || !in.StrictTransit ||
		in.Session != "s-1" || in.Provider != "gpu-eu" || !in.Spill || in.Handoff || !strings.Contains(string(in.Body), `"llama"`) || !in.Frames {
		t.Fatalf("the forward sent %+v", in)
	}
	if meta.TraceParent != req.TraceParent || meta.TraceState != "vendor=1" {
		t.Fatalf("trace context %+v", meta)
	}
	if count(t, sent) != 1 || count(t, p.received) != 1 {
		t.Fatal("the forward was not counted on both sides")
	}
}

// A via node gossip no longer shows alive in the plan's region is gone:
// nothing is sent and the executor passes the target over. One without
// node.rpc is a failed attempt.
func TestForwardChecksTheViaNode(t *testing.T) {
	dead := alive("dead", "eu", "127.0.0.1:1")
	dead.State = "draining"
	mesh := &fakeMesh{members: []gossip.Member{dead, alive("moved", "us", "127.0.0.1:1"), alive("norpc", "eu", "")}}
	f, sent := newTestForwarder(t, mesh)
	for _, c := range []struct {
		via  string
		gone bool
		err  string
	}{
		{"unknown", true, "node unknown is not alive"},
		{"dead", true, "node dead is not alive"},
		{"moved", true, "node moved is in region us, not eu"},
		{"norpc", false, "node norpc takes no forwards (no node.rpc)"},
	} {
		tgt := &route.Target{Via: c.via, ViaRegion: "eu", Offer: &route.Offer{Provider: &route.Provider{Name: "p"}, Model: &route.Model{Name: "m"}}}
		sink := newRecSink()
		fw := f.Forward(context.Background(), chatRequest(t, false), tgt, "", sink)
		if fw.Gone != c.gone || fw.Err == nil || fw.Err.Error() != c.err || fw.Committed || sink.status != 0 {
			t.Errorf("%s: %+v", c.via, fw)
		}
	}
	if count(t, sent) != 0 {
		t.Fatal("a forward was sent")
	}
}

// A refusal the far node answered with before any answer comes back
// whole (status, headers, error document, code) for the executor to
// decide on; nothing reaches the client.
func TestHopReturnsRefusal(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("oneMessagePerPart=%v", old), func(t *testing.T) { testHopReturnsRefusal(t, old) })
	}
}

func testHopReturnsRefusal(t *testing.T, oneMessagePerPart bool) {
	doc := `{"error":{"message":"over budget","type":"insufficient_quota","code":"budget_exceeded"}}`
	p := startPeerFraming(t, func(_ context.Context, _ *pb.ForwardRequest, _ Meta, sink *Sink) Answer {
		sink.Header()["Content-Type"] = []string{"application/json"}
		sink.Header()["Retry-After"] = []string{"3"}
		sink.WriteHeader(http.StatusPaymentRequired)
		_, _ = sink.Write([]byte(doc))
		return Answer{Refused: true, Code: "budget_exceeded"}
	}, oneMessagePerPart)
	f, _ := newTestForwarder(t, &fakeMesh{})
	sink := newRecSink()
	fw := f.Hop(context.Background(), Hop{Addr: p.addr, Peer: "far", Req: chatRequest(t, true), In: &pb.ForwardRequest{Handoff: true}}, sink)
	if fw.Committed || fw.Err != nil || fw.Status != http.StatusPaymentRequired || fw.Code != "budget_exceeded" ||
		string(fw.Body) != doc || fw.Header.Get("Retry-After") != "3" {
		t.Fatalf("refusal %+v", fw)
	}
	if sink.status != 0 || sink.body.Len() != 0 {
		t.Fatal("the refusal reached the client")
	}
	if in, _ := p.last(t); !in.Handoff {
		t.Fatal("the hand-off flag was lost")
	}
}

// A far node that ends a stream without its trailer truncates the
// answer: the client gets an error event, as from a provider's broken
// stream. One that sends no head at all is a failed attempt.
func TestHopBrokenAnswer(t *testing.T) {
	p := startPeer(t, func(_ context.Context, in *pb.ForwardRequest, _ Meta, sink *Sink) Answer {
		if in.RequestId == "no-head" {
			return Answer{Gone: true}
		}
		sink.WriteHeader(http.StatusOK)
		_, _ = sink.Write([]byte("data: {}\n\n"))
		_ = sink.Flush()
		return Answer{Gone: true} // no trailer
	})
	f, _ := newTestForwarder(t, &fakeMesh{})
	sink := newRecSink()
	fw := f.Hop(context.Background(), Hop{Addr: p.addr, Peer: "far", Req: chatRequest(t, true), In: &pb.ForwardRequest{}}, sink)
	if !fw.Committed || !fw.Truncated || fw.Err == nil || fw.Err.Error() != "node far ended the answer without its trailer" {
		t.Fatalf("forwarded %+v", fw)
	}
	want := "data: {}\n\n" + `data: {"error":{"message":"the answer broke off: node far stopped answering","type":"upstream_error","code":"upstream_error"}}` + "\n\n"
	if sink.body.String() != want {
		t.Fatalf("the client got %q", sink.body.String())
	}

	sink = newRecSink()
	fw = f.Hop(context.Background(), Hop{Addr: p.addr, Peer: "far", Req: chatRequest(t, true), In: &pb.ForwardRequest{RequestId: "no-head"}}, sink)
	if fw.Committed || fw.Err == nil || fw.Gone || sink.status != 0 {
		t.Fatalf("without a head: %+v", fw)
	}
}

// A client that goes away mid-answer ends the hop, and the far node's
// call with it.
func TestHopClientGoneCancelsFarNode(t *testing.T) {
	farDone := make(chan struct{})
	p := startPeer(t, func(ctx context.Context, _ *pb.ForwardRequest, _ Meta, sink *Sink) Answer {
		sink.WriteHeader(http.StatusOK)
		_, _ = sink.Write([]byte("data: {}\n\n"))
		_ = sink.Flush()
		<-ctx.Done()
		close(farDone)
		return Answer{Gone: true}
	})
	f, _ := newTestForwarder(t, &fakeMesh{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := newRecSink()
	sink.onWrite = cancel
	fw := f.Hop(ctx, Hop{Addr: p.addr, Peer: "far", Req: chatRequest(t, true), In: &pb.ForwardRequest{}}, sink)
	if !fw.Committed || !fw.ClientGone {
		t.Fatalf("forwarded %+v", fw)
	}
	select {
	case <-farDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the far node's call was not cancelled")
	}
}

// A client that goes away once it has the whole answer (a stream's
// [DONE], a whole answer's Content-Length bytes: SDKs close then) has
// been served: the far node's trailer, which comes just after, is still
// read, with the cost it reports.
func TestHopClientGoneAfterTheWholeAnswer(t *testing.T) {
	for _, stream := range []bool{true, false} {
		body := `{"id":"x","choices":[{}]}`
		if stream {
			body = "data: {}\n\ndata: [DONE]\n\n"
		}
		gone := make(chan struct{})
		p := startPeer(t, func(ctx context.Context, _ *pb.ForwardRequest, _ Meta, sink *Sink) Answer {
			sink.Header()["Content-Length"] = []string{strconv.Itoa(len(body))}
			sink.WriteHeader(http.StatusOK)
			_, _ = sink.Write([]byte(body))
			_ = sink.Flush()
			<-gone // the client has gone before the trailer is sent
			return Answer{Result: &route.Result{Provider: "gpu-eu", Cost: 0.25}}
		})
		f, _ := newTestForwarder(t, &fakeMesh{})
		ctx, cancel := context.WithCancel(context.Background())
		sink := newRecSink()
		sink.onWrite = func() {
			cancel()
			close(gone)
		}
		fw := f.Hop(ctx, Hop{Addr: p.addr, Peer: "far", Req: chatRequest(t, stream), In: &pb.ForwardRequest{}}, sink)
		if !fw.Committed || fw.ClientGone || fw.Cost != 0.25 || sink.body.String() != body {
			t.Fatalf("stream %v: forwarded %+v, the client got %q", stream, fw, sink.body.String())
		}
	}
}

// A far node nobody listens at is a failed attempt, reported as gRPC
// tells it, without the status prefix.
func TestHopUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	f, _ := newTestForwarder(t, &fakeMesh{})
	fw := f.Hop(context.Background(), Hop{Addr: addr, Peer: "far", Req: chatRequest(t, false), In: &pb.ForwardRequest{}}, newRecSink())
	if fw.Err == nil || fw.Committed || fw.Timeout || strings.Contains(fw.Err.Error(), "rpc error") {
		t.Fatalf("forwarded %+v", fw)
	}
	if _, ok := status.FromError(fw.Err); ok {
		t.Fatal("the error is still a gRPC status")
	}
}

// The wait for the far node's head covers every attempt it may make, and
// a hand-off one more hop.
func TestHeadWait(t *testing.T) {
	f := New(Config{Executor: route.ExecutorConfig{MaxAttempts: 3, FirstByteTimeout: time.Second, ResponseTimeout: 4 * time.Second}}, nil)
	for _, c := range []struct {
		stream, handoff bool
		want            time.Duration
	}{
		{false, false, 12 * time.Second},
		{true, false, 3 * time.Second},
		{true, true, 3*time.Second + hopSlack},
	} {
		hc := &hopCall{Hop: Hop{In: &pb.ForwardRequest{Handoff: c.handoff}}, stream: c.stream}
		if got := f.headWait(hc); got != c.want {
			t.Errorf("stream %v handoff %v: %v, want %v", c.stream, c.handoff, got, c.want)
		}
	}
	f.cfg.Executor.MaxAttempts = 0
	if got := f.headWait(&hopCall{Hop: Hop{In: &pb.ForwardRequest{}}}); got != 4*time.Second {
		t.Errorf("no attempts configured: %v", got)
	}
}

package forward

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/gossip"
	pb "github.com/llmesh/llmesh/proto"
)

// storedPeer is a far node's Mesh service answering Stored with stored
// (nil: a node that keeps no responses), and the calls that reached it.
type storedPeer struct {
	addr string
	mu   sync.Mutex
	got  []*pb.StoredRequest
}

func startStoredPeer(t *testing.T, stored StoredFunc) *storedPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &storedPeer{addr: ln.Addr().String()}
	var fn StoredFunc
	if stored != nil {
		fn = func(ctx context.Context, in *pb.StoredRequest) *pb.StoredReply {
			p.mu.Lock()
			p.got = append(p.got, in)
			p.mu.Unlock()
			return stored(ctx, in)
		}
	}
	srv := grpc.NewServer()
	pb.RegisterMeshServer(srv, NewService(nil, nil, fn, prometheus.NewCounter(prometheus.CounterOpts{Name: "received"})))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return p
}

func (p *storedPeer) calls() []*pb.StoredRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*pb.StoredRequest(nil), p.got...)
}

// A keep reaches the peer's StoredFunc with its record, residency and
// origin; a keep without a record and an op the service does not know
// are refused before it, as InvalidArgument (what a node older than keep
// answers it); a node that keeps no responses answers Unimplemented.
func TestStoredOps(t *testing.T) {
	p := startStoredPeer(t, func(_ context.Context, in *pb.StoredRequest) *pb.StoredReply {
		return &pb.StoredReply{Found: in.Op == "keep" || in.Op == "forget"}
	})
	none := startStoredPeer(t, nil)
	f, _ := newTestForwarder(t, &fakeMesh{})
	ctx := context.Background()
	keep := &pb.StoredRequest{Tenant: "acme", Id: "resp_1", Op: "keep", Record: []byte(`{"ID":"resp_1"}`), Residency: "eu", Origin: "eu-1"}
	if reply, err := f.AskStored(ctx, p.addr, keep); err != nil || !reply.Found {
		t.Fatalf("keep: %v %v", reply, err)
	}
	got := p.calls()
	if len(got) != 1 || string(got[0].Record) != `{"ID":"resp_1"}` || got[0].Residency != "eu" || got[0].Origin != "eu-1" {
		t.Fatalf("the peer got %v", got)
	}
	for _, in := range []*pb.StoredRequest{
		{Tenant: "acme", Id: "resp_1", Op: "keep"},
		{Tenant: "acme", Id: "resp_1", Op: "replicate"},
		{Id: "resp_1", Op: "forget"},
	} {
		if _, err := f.AskStored(ctx, p.addr, in); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", in, err)
		}
	}
	if n := len(p.calls()); n != 1 {
		t.Fatalf("%d calls reached the StoredFunc", n)
	}
	if _, err := f.AskStored(ctx, none.addr, keep); status.Code(err) != codes.Unimplemented {
		t.Fatalf("a node that keeps no responses: %v", err)
	}
}

// FindStored asks the peers that are not gone, and returns the reply and
// name of the one holding the response; a peer that cannot be reached
// counts as not holding it, and with no holder the answer is an error.
func TestFindStoredFindsTheHolder(t *testing.T) {
	holder := startStoredPeer(t, func(_ context.Context, in *pb.StoredRequest) *pb.StoredReply {
		return &pb.StoredReply{Found: true, Record: []byte(in.Id)}
	})
	other := startStoredPeer(t, func(context.Context, *pb.StoredRequest) *pb.StoredReply { return &pb.StoredReply{} })
	gone := startStoredPeer(t, func(context.Context, *pb.StoredRequest) *pb.StoredReply {
		t.Error("a failed member was asked")
		return &pb.StoredReply{}
	})
	dead := gossip.Member{Name: "dead", State: "failed", Meta: gossip.Meta{RPC: gone.addr}}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()
	mesh := &fakeMesh{members: []gossip.Member{alive("other", "eu", other.addr), dead, alive("killed", "eu", refused), alive("holder", "eu", holder.addr)}}
	f, _ := newTestForwarder(t, mesh)
	reply, from, err := f.FindStored(context.Background(), "acme", "resp_1", "lookup", "killed", "holder")
	if err != nil || from != "holder" || string(reply.Record) != "resp_1" {
		t.Fatalf("%v from %q: %v", reply, from, err)
	}
	mesh.members = mesh.members[:3]
	if _, _, err := f.FindStored(context.Background(), "acme", "resp_1", "lookup"); err == nil {
		t.Fatal("found without a holder")
	}
}

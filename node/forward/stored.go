package forward

// Stored responses between nodes: the node that relayed a Responses API
// answer keeps what a follow-up or a retrieve needs, and sends one peer a
// copy of it; a node that does not hold a response a client names asks
// its peers for it.

import (
	"context"
	"errors"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/llmesh/llmesh/proto"
)

// StoredFunc answers a peer's Stored call: found false when this node
// holds no response in.Id of in.Tenant (or, for keep, will not hold it).
type StoredFunc func(ctx context.Context, in *pb.StoredRequest) *pb.StoredReply

// Stored implements pb.MeshServer.
func (s *Service) Stored(ctx context.Context, in *pb.StoredRequest) (*pb.StoredReply, error) {
	if s.stored == nil {
		return nil, status.Error(codes.Unimplemented, "this node keeps no responses")
	}
	switch in.Op {
	case "lookup", "get", "delete", "cancel", "forget":
	case "keep":
		if len(in.Record) == 0 {
			return nil, status.Error(codes.InvalidArgument, "keep carries no record")
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "op %q is not lookup, get, delete, cancel, keep or forget", in.Op)
	}
	if in.Tenant == "" || in.Id == "" {
		return nil, status.Error(codes.InvalidArgument, "tenant and id are required")
	}
	return s.stored(ctx, in), nil
}

// errNotStored is FindStored's answer when no peer holds the response.
var errNotStored = errors.New("no peer holds it")

// FindStored asks every peer gossip knows (but failed or departed ones
// and this node), at most gatherAtOnce at a time, for response id of
// tenant with op, until one holds it or ctx ends; it returns that peer's
// reply and name. The peers named in first are asked before the others,
// in their order (those likeliest to hold it). A peer that cannot be
// asked counts as not holding it.
func (f *Forwarder) FindStored(ctx context.Context, tenant, id, op string, first ...string) (*pb.StoredReply, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		found *pb.StoredReply
		from  string
		wg    sync.WaitGroup
	)
	var peers []string // RPC addresses, by name below
	names := map[string]string{}
	for _, m := range f.view.mesh.Members() {
		if m.Self || m.State == "failed" || m.State == "left" || m.Meta.RPC == "" {
			continue
		}
		peers = append(peers, m.Name)
		names[m.Name] = m.Meta.RPC
	}
	rank := func(name string) int {
		if i := slices.Index(first, name); i >= 0 {
			return i
		}
		return len(first)
	}
	slices.SortStableFunc(peers, func(a, b string) int { return rank(a) - rank(b) })
	slots := make(chan struct{}, gatherAtOnce)
ask:
	for _, name := range peers {
		select { // a slot first, so that peers are asked in order
		case slots <- struct{}{}:
		case <-ctx.Done():
			break ask
		}
		wg.Go(func() {
			defer func() { <-slots }()
			reply, err := f.AskStored(ctx, names[name], &pb.StoredRequest{Tenant: tenant, Id: id, Op: op})
			if err != nil || !reply.Found {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if found == nil {
				found, from = reply, name
				cancel() // the others need not answer
			}
		})
	}
	wg.Wait()
	if found == nil {
		return nil, "", errNotStored
	}
	return found, from, nil
}

// AskStored calls the Stored op in of the peer at addr: a lookup, get,
// delete or cancel of a response it holds, or the keep or forget of a
// copy. An error is the call's failure as gRPC reports it (the peer
// gone, or older than the op: it refuses an op it does not know with
// InvalidArgument).
func (f *Forwarder) AskStored(ctx context.Context, addr string, in *pb.StoredRequest) (*pb.StoredReply, error) {
	cc, err := f.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewMeshClient(cc).Stored(ctx, in, grpc.MaxCallRecvMsgSize(maxObservation))
}

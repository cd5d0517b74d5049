package forward

// Stored responses between nodes: the node that relayed a Responses API
// answer keeps what a follow-up or a retrieve needs; a node that does not
// hold a response a client names asks its peers for it.

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/llmesh/llmesh/proto"
)

// StoredFunc answers a peer's Stored call: found false when this node
// holds no response id of tenant.
type StoredFunc func(ctx context.Context, tenant, id, op string) *pb.StoredReply

// Stored implements pb.MeshServer.
func (s *Service) Stored(ctx context.Context, in *pb.StoredRequest) (*pb.StoredReply, error) {
	if s.stored == nil {
		return nil, status.Error(codes.Unimplemented, "this node keeps no responses")
	}
	switch in.Op {
	case "lookup", "get", "delete", "cancel":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "op %q is not lookup, get, delete or cancel", in.Op)
	}
	if in.Tenant == "" || in.Id == "" {
		return nil, status.Error(codes.InvalidArgument, "tenant and id are required")
	}
	return s.stored(ctx, in.Tenant, in.Id, in.Op), nil
}

// errNotStored is FindStored's answer when no peer holds the response.
var errNotStored = errors.New("no peer holds it")

// FindStored asks every peer gossip knows (but failed or departed ones
// and this node), at most gatherAtOnce at a time, for response id of
// tenant with op, until one holds it or ctx ends; it returns that peer's
// reply and name. A peer that cannot be asked counts as not holding it.
func (f *Forwarder) FindStored(ctx context.Context, tenant, id, op string) (*pb.StoredReply, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		found *pb.StoredReply
		from  string
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, gatherAtOnce)
	for _, m := range f.view.mesh.Members() {
		if m.Self || m.State == "failed" || m.State == "left" || m.Meta.RPC == "" {
			continue
		}
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-slots }()
			cc, err := f.conn(m.Meta.RPC)
			if err != nil {
				return
			}
			reply, err := pb.NewMeshClient(cc).Stored(ctx, &pb.StoredRequest{Tenant: tenant, Id: id, Op: op},
				grpc.MaxCallRecvMsgSize(maxObservation))
			if err != nil || !reply.Found {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if found == nil {
				found, from = reply, m.Name
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

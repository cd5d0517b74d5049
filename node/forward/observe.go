package forward

// The dashboard's admin read between nodes: a node serving the
// dashboard asks every peer for its observation (its decisions, rate
// shares and series) over the same gRPC connections forwards use.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/node/views"
	pb "github.com/llmesh/llmesh/proto"
)

// The bounds of one observation: as many decisions as a node keeps, as
// many seconds as its series does.
const (
	maxObservedDecisions = 256
	maxObservedSeconds   = 600
	// gatherAtOnce bounds the peers asked at the same time.
	gatherAtOnce = 16
	// maxObservation bounds one observation received: a busy peer's
	// series (MaxKeys rings of ten minutes) and decisions are larger than
	// gRPC's default 4 MiB.
	maxObservation = 64 << 20
)

// ObserveFunc returns this node's observation: its last decisions and
// seconds of its series.
type ObserveFunc func(ctx context.Context, decisions, seconds int) views.Observation

// Observe implements pb.MeshServer.
func (s *Service) Observe(ctx context.Context, in *pb.ObserveRequest) (*pb.ObserveReply, error) {
	if s.observe == nil {
		return nil, status.Error(codes.Unimplemented, "this node serves no observations")
	}
	o := s.observe(ctx, clamp(int(in.Decisions), maxObservedDecisions), clamp(int(in.Seconds), maxObservedSeconds))
	b, err := json.Marshal(o)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.ObserveReply{Observation: b}, nil
}

func clamp(v, most int) int { return max(1, min(v, most)) }

// Observe asks the peer at addr for its observation.
func (f *Forwarder) Observe(ctx context.Context, addr string, decisions, seconds int) (views.Observation, error) {
	var o views.Observation
	cc, err := f.conn(addr)
	if err != nil {
		return o, err
	}
	reply, err := pb.NewMeshClient(cc).Observe(ctx, &pb.ObserveRequest{Decisions: int32(decisions), Seconds: int32(seconds)},
		grpc.MaxCallRecvMsgSize(maxObservation))
	if err != nil {
		return o, fmt.Errorf("%s", status.Convert(err).Message())
	}
	if err := json.Unmarshal(reply.Observation, &o); err != nil {
		return o, fmt.Errorf("its observation does not parse: %w", err)
	}
	return o, nil
}

// Gather asks every peer gossip knows, but failed or departed ones and
// this node, for its observation, at most gatherAtOnce at a time, until
// ctx ends. A peer that could not be read is in the result with its
// name, region and the reason in Error.
func (f *Forwarder) Gather(ctx context.Context, decisions, seconds int) []views.Observation {
	var peers []int
	members := f.view.mesh.Members()
	for i, m := range members {
		if !m.Self && m.State != "failed" && m.State != "left" {
			peers = append(peers, i)
		}
	}
	out := make([]views.Observation, len(peers))
	var wg sync.WaitGroup
	slots := make(chan struct{}, gatherAtOnce)
	for k, i := range peers {
		m := members[i]
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			o := views.Observation{Node: m.Name, Region: m.Meta.Region}
			var err error
			if m.Meta.RPC == "" {
				err = fmt.Errorf("it has no node.rpc")
			} else {
				o, err = f.Observe(ctx, m.Meta.RPC, decisions, seconds)
			}
			if err != nil {
				o = views.Observation{Node: m.Name, Region: m.Meta.Region, Error: "not read: " + err.Error()}
			}
			o.Node = m.Name // the name gossip knows it by
			out[k] = o
		})
	}
	wg.Wait()
	return out
}

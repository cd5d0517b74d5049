package node

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/forward"
	pb "github.com/llmesh/llmesh/proto"
)

// Keepalives between nodes: a peer that vanishes without closing its
// connections (a cut network, a frozen host) is found within about
// rpcKeepalive + rpcKeepaliveTimeout, and the streams it held end.
const (
	rpcKeepalive        = 15 * time.Second
	rpcKeepaliveTimeout = 10 * time.Second
)

// listenRPC opens the gRPC server peers reach this node on: the ledger
// service when the node has a part in the ledger, and the mesh service
// (forwarding) always. Calls must carry the mesh's token when it has one,
// and a certificate of the mesh's CA when node.tls is set.
func (n *Node) listenRPC(ctx context.Context) error {
	addr := n.s.RPCAddr
	if addr == "" {
		return nil
	}
	if host, _, _ := net.SplitHostPort(addr); n.s.RPCToken == "" && n.s.TLS == nil && !isLoopback(host) {
		n.log.Warn("node.rpc is reachable beyond this host and unauthenticated: set node.tls, or node.gossip_key_env or node.gossip_key_file (peers then authenticate with a token derived from it)")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("node.rpc: %w", err)
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(consensus.Authenticate(n.s.RPCToken)),
		grpc.ChainStreamInterceptor(consensus.AuthenticateStream(n.s.RPCToken)),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: rpcKeepalive, Timeout: rpcKeepaliveTimeout}),
		// A forward carries the client's body whole: as large as the HTTP
		// side admits.
		grpc.MaxRecvMsgSize(int(n.s.MaxBodyBytes) + 64<<10),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: rpcKeepalive / 2, PermitWithoutStream: true}),
	}
	if n.s.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.s.TLS.Server)))
	}
	n.rpcLn = ln
	addr = ln.Addr().String()
	n.rpcListening.Store(&addr)
	n.grpc = grpc.NewServer(opts...)
	if n.ledger != nil {
		pb.RegisterLedgerServer(n.grpc, consensus.NewService(n.ledger.Client()))
	}
	pb.RegisterMeshServer(n.grpc, forward.NewService(n.serveForward, n.observation, n.answerStored, n.metrics.ForwardsReceived()))
	go func() { _ = n.grpc.Serve(ln) }()
	return nil
}

// rpcAddr returns the gRPC listener's address, or "".
func (n *Node) rpcAddr() string {
	if a := n.rpcListening.Load(); a != nil {
		return *a
	}
	return ""
}

// stopRPC lets forwarded requests in flight finish until ctx ends, then
// cuts the rest.
func (n *Node) stopRPC(ctx context.Context) {
	if n.grpc == nil {
		return
	}
	stopped := make(chan struct{})
	go func() { n.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		n.grpc.Stop()
		<-stopped
	}
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

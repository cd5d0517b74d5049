package node

import (
	"context"
	"fmt"
	"net"
	"runtime"
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

// Flow-control windows between nodes, fixed rather than gRPC's default
// of a 64 KiB window grown by BDP estimation: the estimator pings the
// sender on received data, and those pings and their acks were a fifth of
// what a forward hop added (BenchmarkForwardHop: 112 µs at p50 with them,
// 90 without). A window is credit, not a buffer: a stream whose client
// reads slowly holds at most rpcWindow at the origin, as it could hold
// 16 MiB once BDP had grown the window.
const (
	rpcWindow     = 1 << 20
	rpcConnWindow = 4 << 20
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
		grpc.InitialWindowSize(rpcWindow), grpc.InitialConnWindowSize(rpcConnWindow),
		// Streams are served by goroutines kept for the next one, whose
		// stacks have grown already, instead of a new goroutine each
		// (more take a new one when all are busy): a hop's p50 fell by
		// another 10–20 µs.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
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

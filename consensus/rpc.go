package consensus

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/llmesh/llmesh/proto"
)

// maxHops bounds forwarding: a non-voter to a voter to the leader.
const maxHops = 2

// Client reaches the ledger from any node: through the local voter when it
// leads, else over gRPC to the leader (a voter knows it) or to any voter
// (a non-voter does not; that voter forwards).
type Client struct {
	node       string
	boot       int64   // this process, for the rate shares it renews
	server     *Server // this node's voter; nil on a non-voter
	membership Membership
	auth       PeerAuth

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewClient returns a client for node. server is nil on a non-voter.
func NewClient(node string, server *Server, membership Membership, auth PeerAuth) *Client {
	return &Client{node: node, boot: time.Now().UnixNano(), server: server, membership: membership, auth: auth, conns: map[string]*grpc.ClientConn{}}
}

// Boot is the boot the client renews rate shares under.
func (c *Client) Boot() int64 { return c.boot }

// SetBoot has the client renew rate shares under the boot of an earlier
// process of this node, whose spend journal said what it sent: the
// ledger then takes this process for that holder, not a new one beside
// its ghost. Call it before the first renewal.
func (c *Client) SetBoot(boot int64) { c.boot = boot }

// PeerAuth is how a node proves itself to its peers' gRPC servers: a
// shared token, mutual TLS, or both.
type PeerAuth struct {
	// Token is sent as a bearer token with every call; "" for none.
	Token string
	// TLS, if set, is the client side of mutual TLS.
	TLS *tls.Config
}

// DialOptions returns the gRPC options that carry auth.
func (a PeerAuth) DialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if a.TLS != nil {
		creds = credentials.NewTLS(a.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if a.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerCreds(a.Token)))
	}
	return opts
}

// target returns the RPC address to send a leader-only call to.
func (c *Client) target() (string, error) {
	voters := c.membership.Voters()
	if c.server != nil {
		id, ok := c.server.Leader()
		if !ok {
			return "", ErrNoLeader
		}
		for _, v := range voters {
			if v.ID == id && v.RPCAddr != "" {
				return v.RPCAddr, nil
			}
		}
		return "", fmt.Errorf("%w: no RPC address for leader %s", ErrNoLeader, id)
	}
	var alive []VoterInfo
	for _, v := range voters {
		if (v.State == "alive" || v.State == "draining") && v.RPCAddr != "" {
			alive = append(alive, v)
		}
	}
	if len(alive) == 0 {
		return "", fmt.Errorf("%w: no voter is reachable", ErrNoLeader)
	}
	slices.SortFunc(alive, func(a, b VoterInfo) int { return strings.Compare(a.ID, b.ID) })
	return alive[int(time.Now().UnixNano()/int64(time.Second))%len(alive)].RPCAddr, nil
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	voters := map[string]bool{addr: true}
	for _, v := range c.membership.Voters() {
		voters[v.RPCAddr] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.conns { // voters that moved or went: close
		if !voters[a] {
			_ = cc.Close()
			delete(c.conns, a)
		}
	}
	if cc := c.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, c.auth.DialOptions()...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// Close releases the client's connections.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.conns {
		_ = cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
}

func (c *Client) remote(hops uint32) (pb.LedgerClient, error) {
	if hops >= maxHops {
		return nil, fmt.Errorf("%w: forwarded too often", ErrNoLeader)
	}
	addr, err := c.target()
	if err != nil {
		return nil, err
	}
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewLedgerClient(cc), nil
}

// Apply sends cmd to the leader and returns its result.
func (c *Client) Apply(ctx context.Context, cmd Command) (Result, error) { return c.apply(ctx, cmd, 0) }

func (c *Client) apply(ctx context.Context, cmd Command, hops uint32) (Result, error) {
	if c.server != nil && c.server.IsLeader() {
		return c.server.Apply(ctx, cmd)
	}
	if err := c.checkLeader(cmd); err != nil {
		return Result{}, err
	}
	lc, err := c.remote(hops)
	if err != nil {
		return Result{}, err
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return Result{}, err
	}
	reply, err := lc.Apply(ctx, &pb.ApplyRequest{Command: b, Hops: hops + 1})
	if err != nil {
		return Result{}, fromStatus(err)
	}
	var r Result
	if err := json.Unmarshal(reply.GetResult(), &r); err != nil {
		return Result{}, fmt.Errorf("consensus: undecodable result: %w", err)
	}
	return r, nil
}

// Rates renews this node's rate shares with the leader.
func (c *Client) Rates(ctx context.Context, demands []Demand) ([]Grant, time.Duration, time.Duration, error) {
	return c.rates(ctx, c.node, c.boot, demands, 0)
}

func (c *Client) rates(ctx context.Context, node string, boot int64, demands []Demand, hops uint32) ([]Grant, time.Duration, time.Duration, error) {
	if c.server != nil && c.server.IsLeader() {
		return c.server.applyRates(ctx, node, boot, demands)
	}
	lc, err := c.remote(hops)
	if err != nil {
		return nil, 0, 0, err
	}
	req := &pb.RatesRequest{Node: node, Boot: boot, Hops: hops + 1}
	for _, d := range demands {
		req.Demands = append(req.Demands, &pb.RateDemand{Provider: d.Provider, WantRpm: d.WantRPM, WantTpm: d.WantTPM,
			HeldRpm: d.HeldRPM, HeldTpm: d.HeldTPM, Saw_429: d.Saw429, Nodes: int32(min(d.Nodes, 1<<20)),
			Reports: d.Reports, SentRpm: d.SentRPM, SentTpm: d.SentTPM, Seq: d.Seq})
	}
	reply, err := lc.Rates(ctx, req)
	if err != nil {
		return nil, 0, 0, fromStatus(err)
	}
	var out []Grant
	for _, g := range reply.GetGrants() {
		out = append(out, Grant{Provider: g.GetProvider(), RPM: g.GetRpm(), TPM: g.GetTpm(), Unlimited: g.GetUnlimited()})
	}
	return out, time.Duration(reply.GetLeaseMs()) * time.Millisecond, time.Duration(reply.GetRefreshMs()) * time.Millisecond, nil
}

// Read returns a JSON view of the ledger: "books", "tenants", "rates",
// "recalls", "escrow" (EscrowView), "peers", "version" (the agreed ledger version, a number) or
// a SpendQuery's (SpendQuery.Encode). Linearizable reads are served by
// the leader after a barrier; stale ones by this node's replica, or any
// voter's for a non-voter. It reports which it was.
func (c *Client) Read(ctx context.Context, what string, linearizable bool) ([]byte, bool, error) {
	return c.read(ctx, what, linearizable, 0)
}

func (c *Client) read(ctx context.Context, what string, linearizable bool, hops uint32) ([]byte, bool, error) {
	if c.server != nil && (!linearizable || c.server.IsLeader()) {
		b, err := c.server.view(what, linearizable)
		return b, linearizable, err
	}
	lc, err := c.remote(hops)
	if err != nil {
		return nil, false, err
	}
	reply, err := lc.Read(ctx, &pb.ReadRequest{What: what, Linearizable: linearizable, Hops: hops + 1})
	if err != nil {
		return nil, false, fromStatus(err)
	}
	return reply.GetData(), reply.GetLinearizable(), nil
}

// view renders a read on this voter.
func (s *Server) view(what string, linearizable bool) ([]byte, error) {
	var v any
	read := func(fn func(*Ledger)) error {
		if linearizable {
			return s.ReadLinearizable(fn)
		}
		s.fsm.Read(fn)
		return nil
	}
	var err error
	switch what {
	case "books":
		err = read(func(l *Ledger) { v = l.Books() })
	case "tenants":
		err = read(func(l *Ledger) { v = l.Tenants() })
	case "rates":
		err = read(func(l *Ledger) { v = l.Rates() })
	case "shares":
		err = read(func(l *Ledger) { v = l.Shares() })
	case "recalls":
		err = read(func(l *Ledger) { v = l.Recalls() })
	case "escrow":
		err = read(func(l *Ledger) { v = l.Escrow() })
	case "peers":
		v, err = s.Peers()
	case "version":
		err = read(func(l *Ledger) { v = l.Version() })
	case "spend":
		err = fmt.Errorf("%w: the spend view takes a query (SpendQuery.Encode)", ErrInvalid)
	default:
		if q, ok := strings.CutPrefix(what, "spend?"); ok {
			sq, perr := ParseSpendQuery(q)
			if perr != nil {
				return nil, perr
			}
			err = read(func(l *Ledger) { v = l.Spend(sq) })
			break
		}
		return nil, fmt.Errorf("%w: unknown view %q", ErrInvalid, what)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// Service answers the ledger RPCs of one node: on the leader it applies,
// elsewhere it forwards through its Client.
type Service struct {
	pb.UnimplementedLedgerServer
	client *Client
}

// NewService returns the RPC service backed by client.
func NewService(client *Client) *Service { return &Service{client: client} }

// Apply implements pb.LedgerServer.
func (s *Service) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyReply, error) {
	var cmd Command
	if err := json.Unmarshal(req.GetCommand(), &cmd); err != nil {
		return nil, status.Error(codes.InvalidArgument, "undecodable command")
	}
	r, err := s.client.apply(ctx, cmd, req.GetHops())
	if err != nil {
		return nil, toStatus(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.ApplyReply{Result: b}, nil
}

// Rates implements pb.LedgerServer.
func (s *Service) Rates(ctx context.Context, req *pb.RatesRequest) (*pb.RatesReply, error) {
	var ds []Demand
	for _, d := range req.GetDemands() {
		ds = append(ds, Demand{Provider: d.GetProvider(), WantRPM: d.GetWantRpm(), WantTPM: d.GetWantTpm(),
			HeldRPM: d.GetHeldRpm(), HeldTPM: d.GetHeldTpm(), Saw429: d.GetSaw_429(), Nodes: int(d.GetNodes()),
			Reports: d.GetReports(), SentRPM: d.GetSentRpm(), SentTPM: d.GetSentTpm(), Seq: d.GetSeq()})
	}
	grants, lease, refresh, err := s.client.rates(ctx, req.GetNode(), req.GetBoot(), ds, req.GetHops())
	if err != nil {
		return nil, toStatus(err)
	}
	reply := &pb.RatesReply{LeaseMs: lease.Milliseconds(), RefreshMs: refresh.Milliseconds()}
	for _, g := range grants {
		reply.Grants = append(reply.Grants, &pb.RateGrant{Provider: g.Provider, Rpm: g.RPM, Tpm: g.TPM, Unlimited: g.Unlimited})
	}
	return reply, nil
}

// Read implements pb.LedgerServer.
func (s *Service) Read(ctx context.Context, req *pb.ReadRequest) (*pb.ReadReply, error) {
	b, lin, err := s.client.read(ctx, req.GetWhat(), req.GetLinearizable(), req.GetHops())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReadReply{Data: b, Linearizable: lin, ServedBy: s.client.node}, nil
}

// The gRPC error boundary: sentinel errors to status codes and back.
func toStatus(err error) error {
	switch {
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrLedgerVersion):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", ErrNoLeader, st.Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", ErrInvalid, st.Message())
	case codes.FailedPrecondition:
		return fmt.Errorf("%w: %s", ErrLedgerVersion, strings.TrimPrefix(st.Message(), ErrLedgerVersion.Error()+": "))
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %s", context.DeadlineExceeded, st.Message())
	case codes.Unauthenticated:
		return fmt.Errorf("consensus: refused by a peer: %s", st.Message())
	}
	return errors.New(st.Message())
}

// bearerCreds authenticates this node to its peers.
type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerCreds) RequireTransportSecurity() bool { return false }

// Authenticate returns a server interceptor that admits only peers that
// hold token (compared in constant time); "" admits everyone.
func Authenticate(token string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkToken(ctx, token); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// AuthenticateStream is Authenticate for streaming calls.
func AuthenticateStream(token string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkToken(ss.Context(), token); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func checkToken(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	got := ""
	if v := md.Get("authorization"); len(v) > 0 {
		got = v[0]
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+token)) != 1 {
		return status.Error(codes.Unauthenticated, "this mesh requires the peers' token")
	}
	return nil
}

package node

// The second copy of a stored response. A node that records a Responses
// answer (responses.go) queues it, and a goroutine of its own sends it to
// one peer with Mesh.Stored op keep: so a follow-up, retrieve, delete or
// cancel still finds the response when the node that relayed it is
// drained, restarted or lost. The peer is the first of a rendezvous ring
// of the response's id over the live peers the tenant's residency allows,
// so that every node ranks the same peers first and a lookup asks them
// first. The copy is off the request path: the queue is bounded and a
// full one drops the copy, counted.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/gossip"
	"github.com/llmesh/llmesh/node/forward"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

const (
	// copyQueueSize bounds the copies waiting to be sent.
	copyQueueSize = 1024
	// copyWithin bounds one peer's keep or forget.
	copyWithin = 2 * time.Second
	// copyTries is how many peers of the ring a copy is offered to, in
	// order, before it is given up.
	copyTries = 2
	// copyFlushWithin bounds sending the copies still queued when the
	// node drains, so that peers that do not answer leave the rest of
	// the drain its time.
	copyFlushWithin = 5 * time.Second
)

// copyJob is a response to copy: its key in the store, and the residency
// its request was admitted with (the tenant's, maybe narrowed).
type copyJob struct {
	tenant, id string
	residency  region.Residency
}

// responseCopier sends the copies queued to it, one at a time, with send,
// and counts what became of each with counted (metrics.CopyOutcomes).
// start runs its goroutine; finish or kill stops it and waits for it.
type responseCopier struct {
	queue   chan copyJob
	send    func(ctx context.Context, j copyJob) string
	counted func(outcome string)

	started  atomic.Bool
	stopped  atomic.Bool
	stop     chan struct{} // closed by finish and kill: send what is queued, then return
	cut      chan struct{} // closed by kill, or finish's deadline: return at once
	done     chan struct{} // closed when run returns
	stopOnce sync.Once
	cutOnce  sync.Once
}

func newResponseCopier(size int, send func(context.Context, copyJob) string, counted func(string)) *responseCopier {
	return &responseCopier{queue: make(chan copyJob, size), send: send, counted: counted,
		stop: make(chan struct{}), cut: make(chan struct{}), done: make(chan struct{})}
}

// enqueue queues j and never blocks: with the queue full, or the copier
// stopped, the copy is dropped and counted. A nil copier (a node that
// does not gossip) copies nothing.
func (c *responseCopier) enqueue(j copyJob) {
	if c == nil {
		return
	}
	if c.stopped.Load() {
		c.counted("dropped")
		return
	}
	select {
	case c.queue <- j:
	default:
		c.counted("dropped")
	}
}

// start runs the copier's goroutine; it returns at once.
func (c *responseCopier) start() {
	if c != nil && c.started.CompareAndSwap(false, true) {
		go c.run()
	}
}

// run sends queued copies until stop, then what is still queued until
// cut, which also ends a send under way; what cut leaves queued is
// dropped, and counted.
func (c *responseCopier) run() {
	defer close(c.done)
	ctx, cancel := context.WithCancel(context.Background())
	var watch sync.WaitGroup
	defer watch.Wait()
	defer cancel()
	watch.Go(func() {
		select {
		case <-c.cut:
			cancel()
		case <-ctx.Done():
		}
	})
	for {
		select {
		case <-c.cut:
			c.dropQueued()
			return
		default:
		}
		select {
		case j := <-c.queue:
			c.counted(c.send(ctx, j))
		case <-c.stop:
			select {
			case j := <-c.queue:
				c.counted(c.send(ctx, j))
			default:
				return // stopped, and nothing is queued
			}
		case <-c.cut:
		}
	}
}

// dropQueued empties the queue, counting what it held as dropped.
func (c *responseCopier) dropQueued() {
	for {
		select {
		case <-c.queue:
			c.counted("dropped")
		default:
			return
		}
	}
}

// finish stops the copier once the copies queued are sent, or ctx ends
// (the rest are then not sent), and waits for it.
func (c *responseCopier) finish(ctx context.Context) {
	if c == nil {
		return
	}
	c.stopOnce.Do(func() { c.stopped.Store(true); close(c.stop) })
	if !c.started.Load() {
		return
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		c.cutOnce.Do(func() { close(c.cut) })
		<-c.done
	}
}

// kill stops the copier at once, a copy under way abandoned, and waits
// for it.
func (c *responseCopier) kill() {
	if c == nil {
		return
	}
	c.stopOnce.Do(func() { c.stopped.Store(true); close(c.stop) })
	c.cutOnce.Do(func() { close(c.cut) })
	if c.started.Load() {
		<-c.done
	}
}

// finishCopies sends the copies still queued, once no request can
// record a response any more, within copyFlushWithin and ctx: the
// responses a draining node recorded last reach a peer before it leaves.
func (n *Node) finishCopies(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, copyFlushWithin)
	defer cancel()
	n.copies.finish(ctx)
}

// holderScore is node's rendezvous score for response id: of the nodes
// that may hold a copy, the one with the highest holds it.
func holderScore(id, node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	x := h.Sum64() // spread by splitmix64's finalizer: FNV's high bits vary little with the last bytes
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// rankHolders orders peers for response id, the highest score first
// (names break a tie): whatever order peers come in, the same ranking.
// A peer that joins or leaves moves only the responses it ranks first.
func rankHolders(id string, peers []forward.Peer) {
	scores := make(map[string]uint64, len(peers))
	for _, p := range peers {
		scores[p.Name] = holderScore(id, p.Name)
	}
	slices.SortFunc(peers, func(a, b forward.Peer) int {
		return cmp.Or(cmp.Compare(scores[b.Name], scores[a.Name]), cmp.Compare(a.Name, b.Name))
	})
}

// mayHold reports whether member m may hold a copy of a response of
// residency res: alive and not draining, taking gRPC calls and Responses
// requests, in a region of res's jurisdiction (a copy is data at rest:
// strict transit's rule, whatever the tenant's setting). A pass-through
// response's provider pv (nil for a bridged one) must be one m may call:
// the copy's holder calls it for a retrieve, delete or cancel.
func (n *Node) mayHold(m gossip.Member, res region.Residency, pv *route.Provider) bool {
	if m.State != "alive" || m.Meta.RPC == "" || !route.APIResponses.In(m.Meta.APIs) {
		return false
	}
	if res.Restricted() {
		if reg, ok := n.s.Regions.Lookup(m.Meta.Region); !ok || reg.Jurisdiction != res.Jurisdiction {
			return false
		}
	}
	return pv == nil || pv.Reach != route.ReachRegion || pv.Region == m.Meta.Region
}

// copyHolders are the peers that may hold the copy of r, admitted with
// residency res, in the ring's order.
func (n *Node) copyHolders(r *storedResponse, res region.Residency) []forward.Peer {
	var pv *route.Provider
	if !r.Bridged {
		if pv = n.catalog().Provider(r.Provider); pv == nil {
			return nil
		}
	}
	var out []forward.Peer
	for _, p := range n.forward.View().Peers() {
		if !p.Self && n.mayHold(p.Member, res, pv) {
			out = append(out, p)
		}
	}
	rankHolders(r.ID, out)
	return out
}

// likelyHolders names the peers to ask first for tenant's response id:
// the ring's first two of the nodes the tenant's residency allows, this
// one included (the copy went to the first that is not the node that
// relayed the response), but for this one. It knows neither the
// provider nor a narrowed residency, so it may miss: the other peers are
// asked next.
func (n *Node) likelyHolders(tenantName, id string) []string {
	t, ok := n.tenants.Load().Named(tenantName)
	if !ok || n.forward == nil {
		return nil
	}
	res, _ := n.policyOf(t)
	var ring []forward.Peer
	for _, p := range n.forward.View().Peers() {
		if n.mayHold(p.Member, res, nil) {
			ring = append(ring, p)
		}
	}
	rankHolders(id, ring)
	var out []string
	for _, p := range ring[:min(len(ring), 2)] {
		if !p.Self {
			out = append(out, p.Name)
		}
	}
	return out
}

// sendCopy offers the response j names to the ring's first peers until
// one keeps it, and returns what became of it (metrics.CopyOutcomes).
func (n *Node) sendCopy(ctx context.Context, j copyJob) string {
	r := n.responses.peek(j.tenant, j.id)
	if r == nil {
		return "gone"
	}
	record, err := json.Marshal(r.StoredResponse)
	if err != nil || int64(len(record)) > n.s.MaxBodyBytes { // what a peer's gRPC server takes
		return "too_large"
	}
	peers := n.copyHolders(r, j.residency)
	if len(peers) == 0 {
		n.log.Debug("stored response not copied: no live peer the residency allows", "response", r.ID, "residency", j.residency)
		return "no_peer"
	}
	in := &pb.StoredRequest{Tenant: j.tenant, Id: j.id, Op: "keep", Record: record,
		Residency: string(j.residency.Jurisdiction), Origin: n.s.Name}
	outcome := "failed"
	for _, p := range peers[:min(len(peers), copyTries)] {
		cctx, cancel := context.WithTimeout(ctx, copyWithin)
		reply, err := n.forward.AskStored(cctx, p.Meta.RPC, in)
		cancel()
		switch {
		case err != nil:
			if c := status.Code(err); c == codes.InvalidArgument || c == codes.Unimplemented {
				outcome = "refused" // a node older than copies
			}
			n.log.Debug("stored response not copied", "response", r.ID, "peer", p.Name, "err", err)
		case !reply.Found:
			outcome = "refused"
			n.log.Debug("stored response not copied", "response", r.ID, "peer", p.Name, "status", reply.Status, "refusal", string(reply.Body))
		default:
			if !n.responses.setPeer(j.tenant, j.id, p.Name) {
				// Deleted while the copy was on its way: the copy goes too.
				n.forget(ctx, p.Name, j.tenant, j.id)
			}
			return "kept"
		}
	}
	return outcome
}

// keepCopy answers a peer's keep: the copy is held only if this node
// would hold the response itself. The tenant must be one of its own and
// its residency (this node's view, narrowed by the sender's, never
// widened) must allow this node's region and the response's provider; a
// draining node keeps nothing, as it is about to leave.
func (n *Node) keepCopy(in *pb.StoredRequest) *pb.StoredReply {
	refuse := func(err error) *pb.StoredReply {
		status, body := n.errorBody(err)
		return &pb.StoredReply{Status: int32(status), Body: body}
	}
	if n.draining.Load() {
		return refuse(fmt.Errorf("%w: node %s drains", route.ErrNoProvider, n.s.Name))
	}
	t, ok := n.tenants.Load().Named(in.Tenant)
	if !ok {
		return refuse(fmt.Errorf("%w: tenant %q is not configured on node %s", errUnauthorized, in.Tenant, n.s.Name))
	}
	res, _ := n.policyOf(t)
	if in.Residency != "" {
		narrowed, err := res.Narrow(region.Jurisdiction(in.Residency))
		if err != nil {
			return refuse(&route.InvalidRequestError{Msg: err.Error()})
		}
		res = narrowed
	}
	if res.Restricted() && region.Jurisdiction(n.s.Jurisdiction) != res.Jurisdiction {
		return refuse(fmt.Errorf("%w: node %s is in region %s, outside residency %s: it holds no copy of the tenant's responses",
			route.ErrNoCompliantProvider, n.s.Name, n.s.Region, res))
	}
	r := &storedResponse{Tenant: in.Tenant, At: n.now(), Peer: in.Origin, Copy: true}
	if err := json.Unmarshal(in.Record, &r.StoredResponse); err != nil || r.ID != in.Id {
		return refuse(&route.InvalidRequestError{Msg: "the record does not parse, or is not of the response named"})
	}
	pv := n.catalog().Provider(r.Provider)
	switch {
	case pv == nil:
		return refuse(fmt.Errorf("%w: node %s knows no provider %s", route.ErrNoProvider, n.s.Name, r.Provider))
	case !res.Allows(pv.Jurisdictions):
		return refuse(fmt.Errorf("%w: response %s is held by %s, outside residency %s", route.ErrNoCompliantProvider, r.ID, r.Provider, res))
	case !r.Bridged && pv.Reach == route.ReachRegion && pv.Region != n.s.Region:
		return refuse(fmt.Errorf("%w: node %s cannot reach %s, a provider of region %s", route.ErrNoProvider, n.s.Name, r.Provider, pv.Region))
	}
	if !n.responses.put(r) {
		return refuse(&route.InvalidRequestError{Msg: fmt.Sprintf("the record is larger than node %s keeps", n.s.Name)})
	}
	return &pb.StoredReply{Found: true, Status: 200}
}

// forgetOtherCopy tells the node holding r's other copy, if any, that it
// was deleted; best effort, within copyWithin, even if the client that
// deleted it goes away meanwhile.
func (n *Node) forgetOtherCopy(ctx context.Context, r *storedResponse) {
	if r.Peer != "" {
		n.forget(context.WithoutCancel(ctx), r.Peer, r.Tenant, r.ID)
	}
}

// forget has peer drop its copy of tenant's response id; best effort,
// within copyWithin.
func (n *Node) forget(ctx context.Context, peer, tenantName, id string) {
	ctx, cancel := context.WithTimeout(ctx, copyWithin)
	defer cancel()
	if _, err := n.askHolder(ctx, peer, &pb.StoredRequest{Tenant: tenantName, Id: id, Op: "forget", Origin: n.s.Name}); err != nil {
		n.log.Debug("a stored response's other copy was not dropped", "response", id, "peer", peer, "err", err)
	}
}

// askHolder calls the Stored op in of the peer called name.
func (n *Node) askHolder(ctx context.Context, name string, in *pb.StoredRequest) (*pb.StoredReply, error) {
	if n.forward == nil {
		return nil, fmt.Errorf("node %s does not gossip", n.s.Name)
	}
	m, ok := n.forward.View().Member(name)
	if !ok || m.Meta.RPC == "" {
		return nil, fmt.Errorf("node %s is not a member with node.rpc", name)
	}
	return n.forward.AskStored(ctx, m.Meta.RPC, in)
}

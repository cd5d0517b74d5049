package node

// The request pipeline: every way a request reaches this node — a client
// over HTTP, a peer's forward or hand-off over gRPC, an explain — is
// turned into one inbound value and admitted by admit, so that every entry
// refuses the same request for the same reason with the same answer.
// serve (serve.go) runs an admitted request to its end; the transports
// (chat, serveForward, explain) only read their own framing and
// write their own error shape.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/node/tenant"
	"github.com/llmesh/llmesh/node/tracing"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// origin is who sent a request to this node.
type origin uint8

const (
	// fromClient is a client calling this node's API.
	fromClient origin = iota
	// fromPeer is a peer forwarding a request for this node's providers:
	// it is planned with them only and never forwarded on.
	fromPeer
	// fromHandoff is a draining peer handing over a client's request:
	// this node plans it as its own.
	fromHandoff
)

// inbound is one request as a transport received it, before admission.
type inbound struct {
	origin origin
	// req is the request admitted, kept here to save an allocation.
	req route.Request
	// api is the endpoint the request was sent to.
	api route.API
	// tenant is the authentication's result. When it failed, tenant is
	// nil and authErr is what the request is refused with; both nil is an
	// unrestricted explain (the admin's, naming no tenant).
	tenant  *tenant.Tenant
	authErr error
	// claimed is the tenant the decision records when authentication
	// failed: the name a peer sent, or "" for a client.
	claimed string
	// key is the API key's id a peer sent with its tenant's name (a
	// client's is its authenticated tenant's Key).
	key string
	// body is the request body. A client's is read only once the tenant
	// holds its place (pending until then), within the size limit and
	// the body read timeout: admit reads it then from client, or through
	// read when that is set (a body to translate). Refused before,
	// refuseUnreadBody lets the transport answer without waiting for it.
	body    []byte
	pending bool
	client  clientBody
	read    func() ([]byte, error)
	// session is the affinity key as sent (X-LLMesh-Session, or the
	// forward's); the body's user field stands in when it is "".
	session string
	// residency narrows the tenant's: X-LLMesh-Residency, or what the
	// sending node established. strict is the sender's strict transit.
	residency string
	strict    bool
	// sender is the node that forwarded or handed off the request; hint
	// the provider it planned for and spill whether it spilled its rate
	// share here.
	sender string
	hint   string
	spill  bool
	// traceparent and tracestate are the caller's; serve replaces
	// traceparent by the one this node sends on.
	traceparent, tracestate string
	id                      string
	start                   time.Time
	// planOnly is an explain: admission holds nothing (no place of the
	// tenant's) and logs nothing, and the request is never executed.
	planOnly bool
	// cache is the client's X-LLMesh-Cache header: on, off or "".
	cache string
	// tags are the request's tags as sent (X-LLMesh-Tags, or the
	// forward's set), checked with the body's metadata.tags on admission;
	// trailers that the client takes HTTP trailers (TE: trailers).
	tags     string
	trailers bool
}

// admit turns in into a route.Request, or refuses it: the node takes
// peers' requests, the tenant is authenticated and under its concurrency
// limit, the body is within the limits and parses, and the residency is
// the tenant's narrowed by the request, never widened, to a jurisdiction
// of a known region. It is the one place these checks are made.
//
// An admitted request that is not planOnly holds a place of its
// tenant's: the caller releases it with tenantLeave. A refusal holds
// nothing; it returns the request as far as it was built (nil before the
// body parsed), for the decision record.
func (n *Node) admit(in *inbound) (*route.Request, error) {
	if in.origin != fromClient && (!n.ready.Load() || (in.origin == fromHandoff && n.draining.Load())) {
		// The sender tries another node.
		return nil, fmt.Errorf("%w: node %s is draining", route.ErrNoProvider, n.s.Name)
	}
	if in.authErr != nil {
		return nil, in.authErr
	}
	t := in.tenant
	if t == nil || in.planOnly {
		return n.admitBody(in)
	}
	if !n.tenantEnter(t.Name) {
		return nil, &route.RetryAfterError{After: time.Second, Msg: fmt.Sprintf("tenant %s has %d requests in flight on node %s, its most (limits.max_concurrent_per_tenant)",
			t.Name, n.s.MaxInFlight, n.s.Name)}
	}
	req, err := n.admitBody(in)
	if err != nil {
		n.tenantLeave(t.Name)
	}
	return req, err
}

// renameSlack is how far a peer's body may exceed limits.max_body_bytes:
// a forward carries the client's body with the model renamed to the one
// the target serves (a group's member, say), which may be longer.
const renameSlack = 1 << 10

// clientBody is a client's request, whose body is read once its tenant
// holds a place: the request and its response, with the controller that
// sets their deadlines.
type clientBody struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	r  *http.Request
}

// readClientBody reads in's pending body, once.
func (n *Node) readClientBody(in *inbound) ([]byte, error) {
	in.pending = false
	if read := in.read; read != nil {
		in.read = nil
		return read()
	}
	c := &in.client
	return n.readBody(c.w, c.rc, c.r)
}

// refuseUnreadBody lets the transport answer a request refused before
// its body was read without waiting for the body.
func (n *Node) refuseUnreadBody(in *inbound) {
	if c := &in.client; in.pending && c.r != nil {
		n.refuseUnread(c.w, c.rc, c.r)
	}
}

// admitBody is admit from the body on.
func (n *Node) admitBody(in *inbound) (*route.Request, error) {
	if in.pending {
		b, err := n.readClientBody(in)
		if err != nil {
			return nil, err
		}
		in.body = b
	}
	limit := n.s.MaxBodyBytes
	if in.origin != fromClient {
		limit += renameSlack
	}
	switch {
	case int64(len(in.body)) > limit:
		return nil, n.errTooLarge()
	case len(in.body) == 0:
		return nil, &route.InvalidRequestError{Msg: "the request body is empty"}
	}
	t := in.tenant
	if !in.planOnly {
		n.logPrompt(in.id, t.Name, in.body)
	}
	chat, err := n.parseChat(in.api, in.body)
	if err != nil {
		return nil, err
	}
	req := &in.req
	*req = route.Request{Chat: chat, Session: in.session, ID: in.id, Forwarded: in.origin == fromPeer,
		Hint: in.hint, Spilled: in.spill, AdmitBy: in.start.Add(n.s.AdmissionWait),
		TraceParent: in.traceparent, TraceState: tracing.State(in.traceparent, in.tracestate)}
	if req.Session == "" {
		req.Session = chat.User
	}
	req.Session = sessionKey(req.Session)
	if in.origin != fromClient && n.draining.Load() {
		req.AdmitBy = in.start // a draining node does not hold a peer's request in its queue
	}
	req.Trailers = in.trailers
	if req.Tags, err = route.ParseTags(in.tags, chat); err != nil {
		return req, err
	}
	if t != nil {
		req.Tenant, req.Key, req.Priority, req.MaxTTFT = t.Name, t.Key, t.Priority, t.MaxTTFT
		if req.Key == "" {
			req.Key = in.key
		}
		// A peer's forward is not checked again: its sender did, and it
		// may carry a group's member in place of the group asked for.
		if in.origin != fromPeer {
			if err := n.allowModel(t, chat.Model, !in.planOnly); err != nil {
				return req, err
			}
		}
		req.Residency, req.StrictTransit = n.policyOf(t)
		if err := n.pinToPrior(t.Name, chat); err != nil {
			return req, err
		}
	}
	return req, n.narrow(req, in)
}

// narrow narrows req's residency, the tenant's, to in's, and refuses a
// residency that would widen it or that names no region's jurisdiction.
// A peer's request with strict transit must come from a node in its
// jurisdiction.
func (n *Node) narrow(req *route.Request, in *inbound) error {
	if h := in.residency; h != "" {
		r, err := req.Residency.Narrow(region.Jurisdiction(strings.TrimSpace(h)))
		if err != nil {
			if in.origin == fromClient && !in.planOnly {
				n.metrics.RefusedHeader()
			}
			return &route.InvalidRequestError{Param: "X-LLMesh-Residency", Msg: err.Error()}
		}
		if !slices.Contains(n.s.Regions.Jurisdictions(), r.Jurisdiction) {
			return &route.InvalidRequestError{Param: "X-LLMesh-Residency", Msg: fmt.Sprintf("%q is not the jurisdiction of any region", h)}
		}
		req.Residency = r
	}
	req.StrictTransit = req.StrictTransit || in.strict
	if in.origin != fromClient && req.StrictTransit && req.Residency.Restricted() && !n.memberIn(in.sender, req.Residency.Jurisdiction) {
		// The data already passed through a node outside its
		// jurisdiction, or one this node cannot place: not through here.
		return fmt.Errorf("%w: node %s: strict transit: the sending node %s is not in jurisdiction %s",
			route.ErrNoCompliantProvider, n.s.Name, in.sender, req.Residency.Jurisdiction)
	}
	return nil
}

// memberIn reports whether gossip places the node called name in a
// region of jurisdiction j.
func (n *Node) memberIn(name string, j region.Jurisdiction) bool {
	if n.forward == nil {
		return false
	}
	m, ok := n.forward.View().Member(name)
	if !ok {
		return false
	}
	reg, ok := n.s.Regions.Lookup(m.Meta.Region)
	return ok && reg.Jurisdiction == j
}

// policyOf returns where a tenant's data may go: the ledger's view once
// read (its residency when it sets one; strict transit if either says so),
// else the configuration's.
func (n *Node) policyOf(t *tenant.Tenant) (region.Residency, bool) {
	res, strict := t.Residency, t.StrictTransit
	if n.ledger != nil {
		if p, ok := n.ledger.Policy(t.Name); ok {
			if p.Residency.Restricted() {
				res = p.Residency
			}
			strict = strict || p.Strict
		}
	}
	return res, strict
}

// parseChat decodes a request of api within the node's limits.
func (n *Node) parseChat(api route.API, body []byte) (*route.ChatRequest, error) {
	chat, err := api.Parse(body)
	if err != nil {
		return nil, err
	}
	if len(chat.Messages) > n.s.MaxMessages {
		return nil, &route.InvalidRequestError{Param: "messages", Msg: fmt.Sprintf("%d messages; this node takes at most %d (limits.max_messages)", len(chat.Messages), n.s.MaxMessages)}
	}
	return chat, nil
}

// tenantEnter counts a request of tenant in flight on this node, unless
// the tenant already has limits.max_concurrent_per_tenant; tenantLeave
// uncounts it.
func (n *Node) tenantEnter(tenant string) bool {
	c, ok := n.perTenant.Load(tenant)
	if !ok {
		c, _ = n.perTenant.LoadOrStore(tenant, new(atomic.Int64))
	}
	if c.(*atomic.Int64).Add(1) > int64(n.s.MaxInFlight) {
		c.(*atomic.Int64).Add(-1)
		return false
	}
	return true
}

func (n *Node) tenantLeave(tenant string) {
	if c, ok := n.perTenant.Load(tenant); ok {
		c.(*atomic.Int64).Add(-1)
	}
}

// maxPromptLog bounds a body as -log-prompts logs it.
const maxPromptLog = 64 << 10

// logPrompt logs a request's body when the node was started with
// -log-prompts, and does nothing otherwise.
func (n *Node) logPrompt(id, tenant string, body []byte) {
	if !n.logPrompts {
		return
	}
	b, cut := body, false
	if len(b) > maxPromptLog {
		b, cut = b[:maxPromptLog], true
	}
	n.log.Info("prompt", "request_id", id, "tenant", tenant, "body", string(b), "cut", cut)
}

// maxSessionKey bounds a session key as the node keeps it: longer ones
// (a session header or user field may be kilobytes) are kept as their
// SHA-256, which maps them just as well.
const maxSessionKey = 128

func sessionKey(s string) string {
	if len(s) <= maxSessionKey {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

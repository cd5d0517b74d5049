package node

// The Responses API's stored responses. POST /v1/responses is served by
// the one pipeline like every endpoint; what it adds is state: a response
// lives at the provider that made it (or, bridged, at the node that
// called the provider), so the node that relayed it keeps a record, and
// one peer the tenant's residency allows keeps a copy (responsecopy.go);
// a follow-up (previous_response_id), retrieve, delete or cancel entering
// at any node is sent to what holds it — after its residency is checked
// again, as any request's is.

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/node/tenant"
	pb "github.com/llmesh/llmesh/proto"
	"github.com/llmesh/llmesh/route"
)

// The bounds of the responses a node keeps: how many, and (beside the
// bytes limits.stored_responses_bytes allows) how large one may be. The
// oldest used go first; a follow-up of one gone is refused as OpenAI
// refuses an unknown previous_response_id.
const (
	maxStoredResponses = 100_000
	// maxStoredRecord bounds one bridged record kept; a quarter of the
	// store's bytes bounds it too.
	maxStoredRecord = 16 << 20
	// findStoredWithin bounds asking the peers for a response.
	findStoredWithin = 2 * time.Second
)

// storedResponse is one response a node relayed, or holds a copy of,
// and whose it is.
type storedResponse struct {
	route.StoredResponse
	Tenant string
	At     time.Time
	// Peer is the node holding the other copy, "" while none is known:
	// the peer this node's copy went to, or the node that sent this
	// copy.
	Peer string
	// Copy means another node relayed the response and sent this copy:
	// it is not copied on.
	Copy bool
}

func (s *storedResponse) size() int { return len(s.Conversation) + len(s.Response) + 256 }

// responseStore keeps the responses this node relayed from providers and
// the copies it holds for peers, least recently used first out, within
// maxStoredResponses and maxBytes together. A record is never changed
// once stored (a change stores a changed copy), so that what get returns
// may be read without the lock.
type responseStore struct {
	mu    sync.Mutex
	byKey map[string]*list.Element // tenant NUL id → *storedResponse
	lru   list.List
	bytes int
	// maxBytes bounds bytes (limits.stored_responses_bytes).
	maxBytes int
	// held, if set, hears of bytes after every change (a gauge).
	held func(bytes int)
}

func storedKey(tenant, id string) string { return tenant + "\x00" + id }

// maxRecord is the largest record the store takes.
func (s *responseStore) maxRecord() int { return min(maxStoredRecord, s.maxBytes/4) }

// put stores r, in place of any record of the same id, and reports
// whether it did: a record over maxRecord is not kept.
func (s *responseStore) put(r *storedResponse) bool {
	if r.size() > s.maxRecord() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = map[string]*list.Element{}
	}
	key := storedKey(r.Tenant, r.ID)
	if el, ok := s.byKey[key]; ok {
		s.drop(el)
	}
	s.byKey[key] = s.lru.PushFront(r)
	s.bytes += r.size()
	for s.lru.Len() > maxStoredResponses || s.bytes > s.maxBytes {
		s.drop(s.lru.Back())
	}
	s.changed()
	return true
}

func (s *responseStore) drop(el *list.Element) {
	r := s.lru.Remove(el).(*storedResponse)
	delete(s.byKey, storedKey(r.Tenant, r.ID))
	s.bytes -= r.size()
}

func (s *responseStore) changed() {
	if s.held != nil {
		s.held(s.bytes)
	}
}

// get returns tenant's response id, or nil.
func (s *responseStore) get(tenant, id string) *storedResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[storedKey(tenant, id)]
	if !ok {
		return nil
	}
	s.lru.MoveToFront(el)
	return el.Value.(*storedResponse)
}

// peek is get without counting as a use.
func (s *responseStore) peek(tenant, id string) *storedResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[storedKey(tenant, id)]; ok {
		return el.Value.(*storedResponse)
	}
	return nil
}

// setPeer records that peer holds the other copy of tenant's response
// id, and reports whether this node still holds it.
func (s *responseStore) setPeer(tenant, id, peer string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[storedKey(tenant, id)]
	if !ok {
		return false
	}
	r := *el.Value.(*storedResponse)
	r.Peer = peer
	el.Value = &r
	return true
}

// remove forgets tenant's response id, and reports whether it was held.
func (s *responseStore) remove(tenant, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[storedKey(tenant, id)]
	if ok {
		s.drop(el)
		s.changed()
	}
	return ok
}

// keepStored records the Responses answer res relayed for req, and
// queues its copy to a peer.
func (n *Node) keepStored(req *route.Request, res *route.Result) {
	if res == nil || res.Stored == nil || req.Tenant == "" {
		return
	}
	if n.responses.put(&storedResponse{StoredResponse: *res.Stored, Tenant: req.Tenant, At: n.now()}) {
		n.copies.enqueue(copyJob{tenant: req.Tenant, id: res.Stored.ID, residency: req.Residency})
	}
}

// errPreviousNotFound refuses a follow-up of a response no node holds,
// as OpenAI refuses one it does not know.
func errPreviousNotFound(id string) error {
	return &notFoundError{param: "previous_response_id", code: "previous_response_not_found",
		msg: fmt.Sprintf("Previous response with id '%s' not found.", id)}
}

// findStored returns tenant's response id as this node or a peer
// holds it, and the peer's name ("" for this node): nil when none holds
// it. The peers the copy ring names are asked first.
func (n *Node) findStored(ctx context.Context, tenantName, id string) (*storedResponse, string) {
	if r := n.responses.get(tenantName, id); r != nil {
		return r, ""
	}
	if n.forward == nil {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(ctx, findStoredWithin)
	defer cancel()
	reply, from, err := n.forward.FindStored(ctx, tenantName, id, "lookup", n.likelyHolders(tenantName, id)...)
	if err != nil {
		return nil, ""
	}
	r := &storedResponse{Tenant: tenantName}
	if json.Unmarshal(reply.Record, &r.StoredResponse) != nil || r.ID != id {
		return nil, ""
	}
	return r, from
}

// pinToPrior makes a Responses follow-up continue the response it names:
// planned for that response's provider only, with its context in the
// bound and, bridged, its conversation. No node holding it is a 400.
func (n *Node) pinToPrior(tenantName string, chat *route.ChatRequest) error {
	id := chat.PreviousResponseID
	if chat.API != route.APIResponses || id == "" || tenantName == "" {
		return nil
	}
	r, _ := n.findStored(context.Background(), tenantName, id)
	if r == nil {
		return errPreviousNotFound(id)
	}
	chat.Prior = &route.Prior{ID: r.ID, Provider: r.Provider, Tokens: r.Tokens, Conversation: r.Conversation}
	return nil
}

// storedOp is what a peer's Stored call or a client's retrieve, delete
// or cancel does with a response this node holds, its own or a copy: a
// bridged one is answered from the record, any other by calling its
// provider, as the node that relayed it would. A delete also drops the
// other copy.
func (n *Node) storedOp(ctx context.Context, r *storedResponse, op string) (int, []byte) {
	switch {
	case op == "lookup":
		b, _ := json.Marshal(r.StoredResponse)
		return http.StatusOK, b
	case r.Bridged && op == "get":
		return http.StatusOK, r.Response
	case r.Bridged && op == "delete":
		n.responses.remove(r.Tenant, r.ID)
		n.forgetOtherCopy(ctx, r)
		return http.StatusOK, deletedResponse(r.ID)
	case r.Bridged: // cancel
		return n.errorBody(&route.InvalidRequestError{Msg: "Only responses created with background set to true can be cancelled."})
	}
	method, suffix := http.MethodGet, ""
	switch op {
	case "delete":
		method = http.MethodDelete
	case "cancel":
		method, suffix = http.MethodPost, "/cancel"
	}
	reply, err := n.exec.StoredOp(ctx, n.rt.Load().catalog, r.Provider, method, r.ID, suffix)
	if err != nil {
		return n.errorBody(err)
	}
	if op == "delete" && (reply.Status == http.StatusOK || reply.Status == http.StatusNotFound) {
		n.responses.remove(r.Tenant, r.ID)
		n.forgetOtherCopy(ctx, r)
	}
	return reply.Status, reply.Body
}

func deletedResponse(id string) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "object": "response.deleted", "deleted": true})
	return b
}

// errorBody is err's status and document in OpenAI's shape, for a
// transport that carries them as bytes (a peer's Stored reply).
func (n *Node) errorBody(err error) (int, []byte) {
	status, e := n.classify(err)
	b, _ := json.Marshal(errorDoc{e})
	return status, b
}

// answerStored answers a peer's Stored call: keep and forget a copy,
// or act on a response this node holds.
func (n *Node) answerStored(ctx context.Context, in *pb.StoredRequest) *pb.StoredReply {
	switch in.Op {
	case "keep":
		return n.keepCopy(in)
	case "forget":
		return &pb.StoredReply{Found: n.responses.remove(in.Tenant, in.Id)}
	}
	r := n.responses.get(in.Tenant, in.Id)
	if r == nil {
		return &pb.StoredReply{}
	}
	status, body := n.storedOp(ctx, r, in.Op)
	if in.Op == "lookup" {
		return &pb.StoredReply{Found: true, Record: body, Status: int32(status)}
	}
	return &pb.StoredReply{Found: true, Status: int32(status), Body: body}
}

// storedHandler serves GET and DELETE /v1/responses/{id} and POST
// /v1/responses/{id}/cancel: the response's holder answers, this node if
// it holds it, else a peer that does (the one that relayed it or the one
// holding its copy); every other node answers 404.
// The provider holding it must still be one the tenant's residency (as
// X-LLMesh-Residency narrows it) allows.
func (n *Node) storedHandler(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start, id := n.now(), r.PathValue("id")
		sp, _ := n.tracer.Begin(r.Header.Get("Traceparent"), start)
		e := decisions.Decision{At: start, ID: requestID(r), API: route.APIResponses, Model: "unknown"}
		w.Header()["X-Llmesh-Node"] = []string{n.s.Name}
		w.Header()["X-Request-Id"] = []string{e.ID}
		defer func() { n.account(e, sp) }()
		t, ok := n.tenants.Load().Authenticate(r)
		if !ok {
			e.Err = errUnauthorized
			e.Status = n.writeError(w, errUnauthorized)
			return
		}
		e.Tenant = t.Name
		e.Status, e.Err = n.serveStored(r.Context(), w, t, r.Header.Get("X-Llmesh-Residency"), id, op, &e)
	}
}

// serveStored finds tenant t's response id and does op with it.
func (n *Node) serveStored(ctx context.Context, w http.ResponseWriter, t *tenant.Tenant, narrowTo, id, op string, e *decisions.Decision) (int, error) {
	rec, holder := n.findStored(ctx, t.Name, id)
	if rec == nil {
		err := &notFoundError{param: "response_id", code: "not_found", msg: fmt.Sprintf("Response with id '%s' not found.", id)}
		return n.writeError(w, err), err
	}
	e.Provider, e.Model = rec.Provider, rec.Model
	req := &route.Request{Chat: &route.ChatRequest{API: route.APIResponses, Model: rec.Model}, Tenant: t.Name}
	req.Residency, req.StrictTransit = n.policyOf(t)
	if err := n.narrow(req, &inbound{origin: fromClient, residency: narrowTo}); err != nil {
		return n.writeError(w, err), err
	}
	e.Residency, e.Strict = req.Residency, req.StrictTransit
	if p := n.rt.Load().catalog.Provider(rec.Provider); p == nil || !req.Residency.Allows(p.Jurisdictions) {
		err := fmt.Errorf("%w: response %s is held by %s, outside residency %s", route.ErrNoCompliantProvider, id, rec.Provider, req.Residency)
		return n.writeError(w, err), err
	}
	status, body := 0, []byte(nil)
	if holder == "" {
		status, body = n.storedOp(ctx, rec, op)
	} else {
		// The peer that answered the lookup, alone: asking every holder
		// would delete or cancel at the provider twice.
		reply, err := n.askHolder(ctx, holder, &pb.StoredRequest{Tenant: t.Name, Id: id, Op: op})
		if err != nil || !reply.Found {
			err = fmt.Errorf("%w: the node holding response %s did not answer", route.ErrNoProvider, id)
			return n.writeError(w, err), err
		}
		status, body = int(reply.Status), reply.Body
	}
	w.Header()["Content-Type"] = []string{"application/json"}
	w.Header()["X-Llmesh-Provider"] = []string{rec.Provider}
	w.WriteHeader(status)
	_, _ = w.Write(body)
	if status >= 400 {
		return status, errors.New(string(body))
	}
	return status, nil
}

// storedMethods serves /v1/responses/{id}: GET retrieves, DELETE
// deletes.
func (n *Node) storedMethods(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		n.only(http.MethodGet, n.storedHandler("get"))(w, r)
	case http.MethodDelete:
		n.only(http.MethodDelete, n.storedHandler("delete"))(w, r)
	default:
		w.Header()["Allow"] = []string{"GET, DELETE"}
		n.writeError(w, errMethod)
	}
}

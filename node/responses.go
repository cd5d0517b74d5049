package node

// The Responses API's stored responses. POST /v1/responses is served by
// the one pipeline like every endpoint; what it adds is state: a response
// lives at the provider that made it (or, bridged, at the node that
// called the provider), so the node that relayed it keeps a record, and a
// follow-up (previous_response_id), retrieve, delete or cancel entering
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

// The bounds of the responses a node keeps: how many, and the bytes of
// bridged conversations and Response objects among them. The oldest
// used go first; a follow-up of one gone is refused as OpenAI refuses an
// unknown previous_response_id.
const (
	maxStoredResponses     = 100_000
	maxStoredResponseBytes = 256 << 20
	// maxStoredRecord bounds one bridged record kept.
	maxStoredRecord = 16 << 20
	// findStoredWithin bounds asking the peers for a response.
	findStoredWithin = 2 * time.Second
)

// storedResponse is one response a node relayed, and whose it is.
type storedResponse struct {
	route.StoredResponse
	Tenant string
	At     time.Time
}

func (s *storedResponse) size() int { return len(s.Conversation) + len(s.Response) + 256 }

// responseStore keeps the responses this node relayed from providers,
// least recently used first out, within maxStoredResponses and
// maxStoredResponseBytes.
type responseStore struct {
	mu    sync.Mutex
	byKey map[string]*list.Element // tenant NUL id → *storedResponse
	lru   list.List
	bytes int
}

func storedKey(tenant, id string) string { return tenant + "\x00" + id }

func (s *responseStore) put(r *storedResponse) {
	if r.size() > maxStoredRecord {
		return
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
	for s.lru.Len() > maxStoredResponses || s.bytes > maxStoredResponseBytes {
		s.drop(s.lru.Back())
	}
}

func (s *responseStore) drop(el *list.Element) {
	r := s.lru.Remove(el).(*storedResponse)
	delete(s.byKey, storedKey(r.Tenant, r.ID))
	s.bytes -= r.size()
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

// remove forgets tenant's response id.
func (s *responseStore) remove(tenant, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[storedKey(tenant, id)]; ok {
		s.drop(el)
	}
}

// keepStored records the Responses answer res relayed for req.
func (n *Node) keepStored(req *route.Request, res *route.Result) {
	if res == nil || res.Stored == nil || req.Tenant == "" {
		return
	}
	n.responses.put(&storedResponse{StoredResponse: *res.Stored, Tenant: req.Tenant, At: n.now()})
}

// errPreviousNotFound refuses a follow-up of a response no node holds,
// as OpenAI refuses one it does not know.
func errPreviousNotFound(id string) error {
	return &notFoundError{param: "previous_response_id", code: "previous_response_not_found",
		msg: fmt.Sprintf("Previous response with id '%s' not found.", id)}
}

// findStored returns tenant's response id as this node or a peer
// recorded it: nil when none holds it.
func (n *Node) findStored(ctx context.Context, tenantName, id string) *storedResponse {
	if r := n.responses.get(tenantName, id); r != nil {
		return r
	}
	if n.forward == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, findStoredWithin)
	defer cancel()
	reply, _, err := n.forward.FindStored(ctx, tenantName, id, "lookup")
	if err != nil {
		return nil
	}
	r := &storedResponse{Tenant: tenantName}
	if json.Unmarshal(reply.Record, &r.StoredResponse) != nil || r.ID != id {
		return nil
	}
	return r
}

// pinToPrior makes a Responses follow-up continue the response it names:
// planned for that response's provider only, with its context in the
// bound and, bridged, its conversation. No node holding it is a 400.
func (n *Node) pinToPrior(tenantName string, chat *route.ChatRequest) error {
	id := chat.PreviousResponseID
	if chat.API != route.APIResponses || id == "" || tenantName == "" {
		return nil
	}
	r := n.findStored(context.Background(), tenantName, id)
	if r == nil {
		return errPreviousNotFound(id)
	}
	chat.Prior = &route.Prior{ID: r.ID, Provider: r.Provider, Tokens: r.Tokens, Conversation: r.Conversation}
	return nil
}

// storedOp is what a peer's Stored call or a client's retrieve, delete
// or cancel does with a response this node holds.
func (n *Node) storedOp(ctx context.Context, r *storedResponse, op string) (int, []byte) {
	switch {
	case op == "lookup":
		b, _ := json.Marshal(r.StoredResponse)
		return http.StatusOK, b
	case r.Bridged && op == "get":
		return http.StatusOK, r.Response
	case r.Bridged && op == "delete":
		n.responses.remove(r.Tenant, r.ID)
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

// answerStored answers a peer's Stored call.
func (n *Node) answerStored(ctx context.Context, tenantName, id, op string) *pb.StoredReply {
	r := n.responses.get(tenantName, id)
	if r == nil {
		return &pb.StoredReply{}
	}
	status, body := n.storedOp(ctx, r, op)
	if op == "lookup" {
		return &pb.StoredReply{Found: true, Record: body, Status: int32(status)}
	}
	return &pb.StoredReply{Found: true, Status: int32(status), Body: body}
}

// storedHandler serves GET and DELETE /v1/responses/{id} and POST
// /v1/responses/{id}/cancel: the response's holder answers, this node if
// it relayed it, else the peer that did; every other node answers 404.
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
	rec := n.findStored(ctx, t.Name, id)
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
	if local := n.responses.get(t.Name, id); local != nil {
		status, body = n.storedOp(ctx, local, op)
	} else {
		reply, _, err := n.forward.FindStored(ctx, t.Name, id, op)
		if err != nil {
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

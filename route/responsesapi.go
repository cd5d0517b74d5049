package route

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/route/anthropic"
	"github.com/llmesh/llmesh/route/responses"
)

// StoredResponse is what the node that called the provider keeps of a
// Responses answer, so that a follow-up (previous_response_id) or a
// retrieve, entering at any node, reaches what holds it.
type StoredResponse struct {
	ID       string
	Provider string
	Model    string // the mesh's name for the model that answered
	// Tokens bounds the context a follow-up continues (Prior.Tokens).
	Tokens int
	// Bridged: the provider has no Responses API and stores nothing; the
	// node keeps the conversation a follow-up continues and the Response
	// object a retrieve answers.
	Bridged      bool
	Conversation []byte
	Response     []byte
}

// bridge is one bridged Responses attempt: the chat request sent in its
// place, and what the answer's translation left for the record.
type bridge struct {
	id        string
	createdAt int64
	chatReq   []byte
	stream    *responses.Stream // a streamed answer's translator
	assistant []byte            // a whole answer's assistant messages
	response  []byte            // the Response object as the client got it
}

// responsesBody is the body and URL a Responses request is sent with:
// the client's body to a provider serving the API, else its translation
// to a chat completion (and on, for a Messages provider, to Messages).
func (c *call) responsesBody() (body []byte, url string, err error) {
	t, req := c.t, c.req
	model := t.Offer.UpstreamModel()
	if t.Offer.Provider.Kind.ServesResponses() {
		if t.Offer.Provider.Kind == KindAzure {
			model = t.Offer.Model.Deployment
		}
		return req.Chat.WithModel(model), responsesURL(t, ""), nil
	}
	var prior []byte
	if req.Chat.Prior != nil {
		prior = req.Chat.Prior.Conversation
	}
	chat, err := responses.ToChatRequest(req.Chat.raw, prior, model)
	if err != nil {
		if be := (*responses.Error)(nil); errors.As(err, &be) {
			return nil, "", &InvalidRequestError{Param: be.Param, Msg: be.Msg}
		}
		return nil, "", err
	}
	c.bridge = &bridge{id: responses.NewID(), createdAt: c.e.now().Unix(), chatReq: chat}
	if t.Offer.Provider.Kind == KindAnthropic {
		b, err := anthropic.FromChatRequest(chat, t.Offer.Model.MaxOutputTokens)
		return b, t.Endpoint(), err
	}
	return chat, t.Endpoint(), nil
}

// responsesURL is the target's Responses endpoint, with suffix ("/ID",
// "/ID/cancel") after it: below {base}/v1 as chat's is, and for Azure
// its v1 API, /openai/v1/responses, which names the deployment in model.
func responsesURL(t *Target, suffix string) string {
	ep := t.Endpoint()
	if t.Offer.Provider.Kind == KindAzure {
		if i := strings.Index(ep, "/openai/deployments/"); i >= 0 {
			return ep[:i] + "/openai/v1/responses" + suffix
		}
	}
	base, _, _ := strings.Cut(ep, "?")
	return strings.TrimSuffix(base, APIChat.path()) + APIResponses.path() + suffix
}

// fromChat makes a bridged attempt's chat answer read as the Responses
// API's: a stream's chunks as typed events, a whole completion as a
// Response object. Errors keep OpenAI's shape, which both APIs share.
func (c *call) fromChat(resp *http.Response) {
	b := c.bridge
	if resp.StatusCode != http.StatusOK {
		return
	}
	if c.req.Chat.Stream {
		b.stream = responses.StreamReader(resp.Body, c.req.Chat.raw, b.id, b.createdAt, c.e.cfg.MaxEventBytes)
		resp.Body = b.stream
		resp.Header.Set("Content-Type", "text/event-stream")
		return
	}
	chat, err := io.ReadAll(io.LimitReader(resp.Body, c.e.cfg.MaxResponseBytes+1))
	resp.Body.Close() // its connection goes back to the pool
	var out []byte
	if err == nil && int64(len(chat)) <= c.e.cfg.MaxResponseBytes {
		out, b.assistant, err = responses.FromChatAnswer(chat, c.req.Chat.raw, b.id, b.createdAt)
	}
	if err != nil {
		out = nil // not a completion: whole() says so
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.Header.Set("Content-Type", "application/json")
}

// stored is what the node keeps of the Responses answer just relayed;
// nil when the request said store: false or the answer had no id.
func (c *call) stored(id string, u Usage) *StoredResponse {
	if !c.req.Chat.Store {
		return nil
	}
	s := &StoredResponse{ID: id, Provider: c.t.Provider(), Model: c.t.answerModel(), Tokens: u.PromptTokens + u.CompletionTokens}
	if b := c.bridge; b != nil {
		assistant := b.assistant
		if b.stream != nil {
			assistant = b.stream.Assistant()
		}
		conv, err := responses.Conversation(c.req.Chat.raw, b.chatReq, assistant)
		if err != nil || b.response == nil {
			return nil
		}
		s.ID, s.Bridged, s.Conversation, s.Response = b.id, true, conv, b.response
		// A follow-up's provider reads the conversation again: its bytes
		// bound its tokens.
		s.Tokens = max(s.Tokens, len(conv))
	}
	if s.ID == "" {
		return nil
	}
	return s
}

// Terminal events of a Responses stream: after one, nothing follows.
const (
	evCompleted  = "response.completed"
	evIncomplete = "response.incomplete"
	evFailed     = "response.failed"
	evError      = "error"
)

// eventType is a Responses stream event's type member, as the bytes of
// data between its quotes (no copy: an event's type is read per event);
// nil when it has none, or one with escapes, which no event type has.
func eventType(data []byte) []byte {
	v, ok := topValue(data, `"type"`)
	if !ok || data[v] != '"' {
		return nil
	}
	end := valueEnd(data, v)
	if end < v+2 || bytes.IndexByte(data[v+1:end-1], '\\') >= 0 {
		return nil
	}
	return data[v+1 : end-1]
}

// responseMember locates the "response" object of a Responses stream
// event (response.created, .completed ...): data[start:end]; ok false
// when it has none.
func responseMember(data []byte) (start, end int, ok bool) { return objectMember(data, `"response"`) }

// withResponseModel renames the model of the Response object an event
// carries, as withModel renames a whole answer's.
func withResponseModel(dst, data []byte, name string) ([]byte, bool) {
	start, end, ok := responseMember(data)
	if !ok {
		return dst, false
	}
	inner, ok := withModel(nil, data[start:end], name)
	if !ok {
		return dst, false
	}
	dst = append(append(append(dst[:0], data[:start]...), inner...), data[end:]...)
	return dst, true
}

// relayResponseEvent relays one event of a Responses stream: its type
// named on an event line as OpenAI sends it, the id and usage noted from
// the Response it carries, and the stream over after a terminal event.
func (c *call) relayResponseEvent(st *relayState, data []byte) bool {
	typ := eventType(data)
	terminal := string(typ) == evCompleted || string(typ) == evIncomplete
	if start, end, ok := responseMember(data); ok {
		r := data[start:end]
		if v, ok := topValue(r, `"id"`); ok && st.respID == "" && r[v] == '"' {
			if end := valueEnd(r, v); end > v {
				_ = decodeString(r[v:end], &st.respID)
			}
		}
		if terminal || string(typ) == evFailed {
			if u, ok := chunkUsage(r); ok {
				c.a.usage, st.sawUsage = u, true
			}
		}
	}
	if !st.sawUsage {
		st.keep(data)
	}
	out := data
	if b, ok := withResponseModel(st.named, data, c.t.answerModel()); ok {
		st.named, out = b, b
	}
	if terminal {
		if start, end, ok := responseMember(out); ok && c.bridge != nil {
			c.bridge.response = bytes.Clone(out[start:end])
		}
	}
	st.seq++
	st.out = st.out[:0]
	if len(typ) > 0 {
		st.out = append(append(append(st.out, "event: "...), typ...), '\n')
	}
	st.out = appendEvent(st.out, out)
	if !c.write(st.out) {
		return false
	}
	switch string(typ) {
	case evError, evFailed:
		st.sawErrEvent = true
		st.streamErr = c.fail(OutcomeBroken, "%s event mid-stream: %.256s", typ, data)
		return false
	case evCompleted, evIncomplete:
		st.sawDone = true
		return false
	}
	if !st.rd.eventBuffered() {
		if err := c.sink.Flush(); err != nil {
			c.fail(OutcomeCanceled, "client flush: %v", err)
			return false
		}
	}
	return true
}

// responsesStreamError is the error event that tells a Responses client
// its stream broke off.
func (st *relayState) responsesStreamError(detail string) []byte {
	msg, _ := json.Marshal("the provider's stream broke off: " + detail)
	b := append(st.out[:0], "event: error\ndata: {\"type\":\"error\",\"code\":\"upstream_error\",\"message\":"...)
	b = append(b, msg...)
	b = append(b, `,"param":null,"sequence_number":`...)
	b = strconv.AppendInt(b, int64(st.seq), 10)
	return append(b, "}\n\n"...)
}

// StoredOp sends a retrieve (GET), delete (DELETE) or cancel (POST,
// suffix "/cancel") of the stored response id to provider's Responses
// API, and returns its answer, read whole.
func (e *Executor) StoredOp(ctx context.Context, cat *Catalog, provider, method, id, suffix string) (*UpstreamReply, error) {
	var t *Target
	if p := cat.Provider(provider); p != nil {
		for _, m := range p.Models {
			for _, o := range cat.Offers(m.Name) {
				if o.Provider == p && t == nil {
					t = &Target{Offer: o}
				}
			}
		}
	}
	if t == nil || !t.Offer.Provider.Kind.ServesResponses() {
		return nil, fmt.Errorf("%w: provider %s serves no Responses API here", ErrNoProvider, provider)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ResponseTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, method, responsesURL(t, "/"+url.PathEscape(id)+suffix), nil)
	if err != nil {
		return nil, err
	}
	hreq.Header["Accept"] = []string{"application/json"}
	hreq.Header["User-Agent"] = []string{e.cfg.UserAgent}
	setAuth(hreq.Header, t.Offer.Provider)
	resp, err := e.client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrUpstream, provider, e.redactor.Redact(cleanErr(err).Error()))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, e.cfg.MaxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrUpstream, provider, e.redactor.Redact(cleanErr(err).Error()))
	}
	return &UpstreamReply{Provider: provider, Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

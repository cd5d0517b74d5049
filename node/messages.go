package node

// Anthropic's Messages API at the edge: POST /v1/messages is translated
// into a chat completion (route/anthropic) and served by the one pipeline;
// its answer, whole or streamed, and every refusal are translated back
// into Anthropic's shapes by messagesSink.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/llmesh/llmesh/node/tenant"
	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/route/anthropic"
)

// messagesHandler serves POST /v1/messages. The key comes in x-api-key
// (or as a bearer token); anthropic-version must be given, as Anthropic's
// API requires.
func (n *Node) messagesHandler(w http.ResponseWriter, r *http.Request) {
	sink := &messagesSink{httpSink: httpSink{w: w, rc: *http.NewResponseController(w), timeout: n.s.ClientWrite}}
	in := n.clientInbound(route.APIMessages, w, &sink.rc, r, func() ([]byte, error) {
		body, err := n.readBody(w, &sink.rc, r)
		if err != nil {
			return nil, err
		}
		req, err := translate(body, false)
		if err != nil {
			return nil, err
		}
		sink.model, sink.stream = req.Model, anthropic.NewStream(req.Model)
		if !req.Stream {
			sink.stream = nil
		}
		return req.Chat, nil
	})
	if r.Header.Get("Anthropic-Version") == "" {
		n.identify(w.Header(), in.id)
		n.refuseUnreadBody(in)
		sink.refuse(http.StatusBadRequest, errNoVersion.Error())
		return
	}
	n.serve(r.Context(), in, sink)
	sink.close()
}

// errNoVersion refuses a Messages request without anthropic-version, as
// Anthropic's API does.
var errNoVersion = errors.New("anthropic-version: header is required")

// translate reads a Messages or count_tokens body as every endpoint
// reads its own (one JSON object in UTF-8, no member given twice) and
// translates it into a chat completion. Its refusals are
// route.InvalidRequestErrors, answered as every endpoint's are.
func translate(body []byte, counting bool) (*anthropic.Request, error) {
	if err := route.CheckObject(body); err != nil {
		return nil, err
	}
	req, err := anthropic.ToChat(body, counting)
	if me := (*anthropic.Error)(nil); errors.As(err, &me) {
		return nil, &route.InvalidRequestError{Msg: me.Msg}
	}
	return req, err
}

// countTokens serves POST /v1/messages/count_tokens: the prompt's tokens
// as this node counts them (o200k, the count its escrow and usage
// fallback use), without calling a provider. It refuses what
// /v1/messages refuses, with the same answers.
func (n *Node) countTokens(w http.ResponseWriter, r *http.Request) {
	sink := &messagesSink{httpSink: httpSink{w: w, rc: *http.NewResponseController(w), timeout: n.s.ClientWrite}}
	n.identify(w.Header(), requestID(r))
	refuse := func(err error) {
		status, e := n.classify(err)
		sink.refuse(status, e.Message)
	}
	if r.Header.Get("Anthropic-Version") == "" {
		n.refuseUnread(w, &sink.rc, r)
		refuse(&route.InvalidRequestError{Msg: errNoVersion.Error()})
		return
	}
	t, ok := n.tenants.Load().Authenticate(r)
	if !ok {
		n.refuseUnread(w, &sink.rc, r)
		refuse(errUnauthorized)
		return
	}
	body, err := n.readBody(w, &sink.rc, r)
	var req *anthropic.Request
	if err == nil {
		req, err = translate(body, true)
	}
	var chat *route.ChatRequest
	if err == nil {
		chat, err = route.ParseChatRequest(req.Chat)
	}
	if err == nil {
		err = n.allowModel(t, chat.Model, true)
	}
	if err == nil && !n.servesFor(t, chat.Model) {
		err = fmt.Errorf("%w: %q is not served here for this tenant; GET /v1/models lists the models", route.ErrModelNotFound, chat.Model)
	}
	if err != nil {
		refuse(err)
		return
	}
	var tok route.Tokenizer
	var doc struct {
		Tools json.RawMessage `json:"tools"` // read by the model too
	}
	_ = json.Unmarshal(req.Chat, &doc)
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": tok.CountPrompt(chat) + tok.Count(string(doc.Tools))})
}

// servesFor reports whether model is one tenant t may use.
func (n *Node) servesFor(t *tenant.Tenant, model string) bool {
	return slices.ContainsFunc(n.modelsFor(t), func(m modelInfo) bool { return m.ID == model })
}

// messagesSink translates what the pipeline writes in the chat API's
// shapes into the Messages API's: a whole completion into a Message, a
// stream's chunks into Anthropic's events (as they come), an error
// document into Anthropic's error shape.
type messagesSink struct {
	httpSink
	model  string
	stream *anthropic.Stream // nil for a whole answer
	code   int               // the status written by the pipeline, not yet sent
	buf    []byte            // a whole answer or error as written so far; a stream's partial event
	cost   []byte            // a stream's cost comment, written once the stream ends
	out    []byte
}

func (s *messagesSink) WriteHeader(status int) {
	if s.code != 0 {
		return
	}
	s.code = status
	if status == http.StatusOK && s.stream != nil {
		h := s.Header()
		delete(h, "Content-Length")
		h["Content-Type"] = []string{"text/event-stream"}
		s.httpSink.WriteHeader(status)
	}
}

func (s *messagesSink) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.WriteHeader(http.StatusOK)
	}
	if s.code == http.StatusOK && s.stream != nil {
		return len(p), s.events(p)
	}
	s.buf = append(s.buf, p...)
	if !json.Valid(bytes.TrimSpace(s.buf)) {
		return len(p), nil // the rest of the document is to come
	}
	var out []byte
	if s.code == http.StatusOK {
		b, err := anthropic.FromChat(s.buf, s.model)
		if err != nil {
			s.code, out = http.StatusBadGateway, anthropic.ErrorBody(http.StatusBadGateway, err.Error())
		} else {
			out = b
		}
	} else {
		out = anthropic.FromOpenAIError(s.code, s.buf)
	}
	s.buf = s.buf[:0]
	h := s.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(out))}
	s.httpSink.WriteHeader(s.code)
	_, err := s.httpSink.Write(out)
	return len(p), err
}

// events translates the server-sent events in p (and any left of the
// last write) into Anthropic's and writes them.
func (s *messagesSink) events(p []byte) error {
	s.buf = append(s.buf, p...)
	s.out = s.out[:0]
	for {
		i := bytes.Index(s.buf, []byte("\n\n"))
		if i < 0 {
			break
		}
		// An event's data lines are one payload, joined by newlines.
		var data []byte
		for line := range bytes.SplitSeq(s.buf[:i], []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, bytes.TrimPrefix(d, []byte(" "))...)
			}
		}
		switch {
		case data != nil:
			s.out = s.stream.Chunk(s.out, bytes.TrimSpace(data))
		case route.IsCostComment(s.buf[:i]):
			// The stream's cost, a comment in any SSE dialect: it follows
			// message_stop, which [DONE] (next) makes.
			s.cost = append(append(s.cost[:0], s.buf[:i]...), "\n\n"...)
		}
		s.buf = s.buf[:copy(s.buf, s.buf[i+2:])]
	}
	if len(s.cost) > 0 && s.stream.Ended() {
		s.out, s.cost = append(s.out, s.cost...), nil
	}
	if len(s.out) == 0 {
		return nil
	}
	_, err := s.httpSink.Write(s.out)
	return err
}

// refuse answers status with an Anthropic error, before the pipeline.
func (s *messagesSink) refuse(status int, msg string) {
	b := anthropic.ErrorBody(status, msg)
	s.Header()["Content-Type"] = []string{"application/json"}
	s.httpSink.WriteHeader(status)
	_, _ = s.httpSink.Write(b)
}

// close ends a stream the pipeline left open (the provider ended it
// without [DONE]) with its stop events.
func (s *messagesSink) close() {
	if s.stream != nil && s.code == http.StatusOK && !s.stream.Ended() {
		_ = s.events([]byte("data: [DONE]\n\n"))
		_ = s.httpSink.Flush()
	}
}

func (s *messagesSink) written() int {
	if s.code != 0 {
		return s.code
	}
	return s.status
}

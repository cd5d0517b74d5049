package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Stream reads a chat completions stream as the Responses stream of the
// same answer, translating each chunk as it arrives. See StreamReader.
type Stream struct {
	in        *eventReader
	body      io.Closer
	out       bytes.Buffer
	echo      *echo
	id        string
	createdAt int64
	seq       int
	started   bool
	a         answer
	msg       int         // the open message item's index, -1 for none
	calls     map[int]int // a chat tool call's index → its item's
	open      []int       // the call items still open, in order
	end       error       // what Read returns once out is drained
	done      bool        // the terminal event is written
}

// StreamReader reads chat, a chat completions stream (data: {chunk}
// events, then data: [DONE]), as the Responses stream of the same answer
// to req with id: `event: TYPE` / `data: {...}` events numbered from 0 —
// response.created and response.in_progress, then per output item
// response.output_item.added, for a message response.content_part.added,
// response.output_text.delta (response.refusal.delta for a refusal) …,
// the text's done event and response.content_part.done, for a function
// call response.function_call_arguments.delta … and .done, and
// response.output_item.done; last response.completed, or
// response.incomplete when the answer was cut at its length bound or
// filtered, with usage from the stream's usage chunk.
//
// A chat error event becomes an error event, which ends the stream. A
// chat stream that ends before its finish_reason (or [DONE]), breaks, or
// sends an event that is not a chunk or is larger than maxEvent bytes
// (DefaultMaxEvent when 0) writes no terminal event: Read returns what it
// translated, then the error (io.ErrUnexpectedEOF for an early end,
// ErrEventTooLarge). Memory holds one chat event and the answer so far.
// Close closes chat.
func StreamReader(chat io.ReadCloser, req []byte, id string, createdAt int64, maxEvent int) *Stream {
	return &Stream{in: newEventReader(chat, maxEvent), body: chat, echo: readEcho(req), id: id, createdAt: createdAt,
		msg: -1, calls: map[int]int{}}
}

// Read reads the translated stream.
func (s *Stream) Read(p []byte) (int, error) {
	for s.out.Len() == 0 {
		if s.end != nil {
			return 0, s.end
		}
		s.step()
	}
	return s.out.Read(p)
}

// Close closes the chat stream.
func (s *Stream) Close() error { return s.body.Close() }

// Assistant is the answer as chat messages for Conversation, as
// FromChatAnswer returns it; nil until the terminal event is read.
func (s *Stream) Assistant() []byte {
	if !s.done {
		return nil
	}
	return s.a.assistant()
}

// step reads and translates one chat event.
func (s *Stream) step() {
	data, err := s.in.next()
	switch {
	case err == io.EOF && s.a.finish != "":
		s.finish() // finished, but [DONE] went missing: as complete as the relay counts it
	case err == io.EOF:
		s.end = fmt.Errorf("responses: the provider's stream ended before it finished: %w", io.ErrUnexpectedEOF)
	case err != nil:
		s.end = err
	case string(bytes.TrimSpace(data)) == "[DONE]":
		s.finish()
	default:
		s.chunk(data)
	}
}

type chatChunk struct {
	Model       string `json:"model"`
	ServiceTier string `json:"service_tier"`
	Choices     []struct {
		Index        int     `json:"index"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content   *string `json:"content"`
			Refusal   *string `json:"refusal"`
			ToolCalls []struct {
				Index    int              `json:"index"`
				ID       string           `json:"id"`
				Function chatFunctionCall `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		Logprobs *struct {
			Content []json.RawMessage `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// chunk translates one chat chunk.
func (s *Stream) chunk(data []byte) {
	var c chatChunk
	if err := json.Unmarshal(data, &c); err != nil {
		s.end = fmt.Errorf("%w: %v", errNotChat{"stream event"}, err)
		return
	}
	if given(c.Error) {
		s.fail(c.Error)
		return
	}
	if s.a.model == "" {
		s.a.model = c.Model
	}
	if c.ServiceTier != "" {
		s.a.serviceTier = c.ServiceTier
	}
	s.start()
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // a Response has one answer
		}
		if t := ch.Delta.Content; t != nil && *t != "" {
			var lp []json.RawMessage
			if ch.Logprobs != nil {
				lp = ch.Logprobs.Content
			}
			s.delta(false, *t, lp)
		}
		if t := ch.Delta.Refusal; t != nil && *t != "" {
			s.delta(true, *t, nil)
		}
		for _, tc := range ch.Delta.ToolCalls {
			if !s.toolCall(tc.Index, tc.ID, tc.Function) {
				return
			}
		}
		if f := ch.FinishReason; f != nil && *f != "" {
			s.a.finish = *f
		}
	}
	if c.Usage != nil {
		s.a.usage = c.Usage
	}
}

// start writes response.created and response.in_progress, once.
func (s *Stream) start() {
	if s.started {
		return
	}
	s.started = true
	r := s.echo.response(s.id, s.createdAt, &s.a, false)
	s.event("response.created", map[string]any{"response": r})
	s.event("response.in_progress", map[string]any{"response": r})
}

// delta adds text (or a refusal's) to the message, opening the message
// and the part as needed.
func (s *Stream) delta(refusal bool, text string, logprobs []json.RawMessage) {
	if s.msg < 0 {
		s.openMessage()
	}
	m := &s.a.items[s.msg]
	if n := len(m.parts); n == 0 || m.parts[n-1].refusal != refusal {
		s.openPart(refusal)
	}
	ci := len(m.parts) - 1
	p := &m.parts[ci]
	p.text = append(p.text, text...)
	ev := map[string]any{"item_id": m.id, "output_index": s.msg, "content_index": ci, "delta": text}
	if refusal {
		s.event("response.refusal.delta", ev)
		return
	}
	p.logprobs = append(p.logprobs, logprobs...)
	ev["logprobs"] = eventLogprobs(logprobs)
	s.event("response.output_text.delta", ev)
}

// openMessage opens a message item, after the calls before it.
func (s *Stream) openMessage() {
	s.closeCalls()
	s.a.items = append(s.a.items, item{id: newID("msg_")})
	s.msg = len(s.a.items) - 1
	s.event("response.output_item.added", map[string]any{"output_index": s.msg, "item": s.a.items[s.msg].added()})
}

// openPart opens a content part of the open message, closing the one
// before it.
func (s *Stream) openPart(refusal bool) {
	m := &s.a.items[s.msg]
	if len(m.parts) > 0 {
		s.closePart()
	}
	m.parts = append(m.parts, part{refusal: refusal})
	s.event("response.content_part.added", map[string]any{"item_id": m.id, "output_index": s.msg,
		"content_index": len(m.parts) - 1, "part": emptyPart(refusal)})
}

// closePart writes the done events of the open message's last part.
func (s *Stream) closePart() {
	m := &s.a.items[s.msg]
	ci := len(m.parts) - 1
	p := &m.parts[ci]
	if p.refusal {
		s.event("response.refusal.done", map[string]any{"item_id": m.id, "output_index": s.msg, "content_index": ci,
			"refusal": string(p.text)})
	} else {
		s.event("response.output_text.done", map[string]any{"item_id": m.id, "output_index": s.msg, "content_index": ci,
			"text": string(p.text), "logprobs": eventLogprobs(p.logprobs)})
	}
	s.event("response.content_part.done", map[string]any{"item_id": m.id, "output_index": s.msg, "content_index": ci,
		"part": p.json()})
}

// closeMessage closes the open message, if any.
func (s *Stream) closeMessage() {
	if s.msg < 0 {
		return
	}
	if len(s.a.items[s.msg].parts) > 0 {
		s.closePart()
	}
	s.event("response.output_item.done", map[string]any{"output_index": s.msg, "item": s.a.items[s.msg].json(s.a.itemStatus(s.msg))})
	s.msg = -1
}

// toolCall adds a chat tool call's delta: a call not seen before opens a
// function_call item (closing the message before it); its arguments are
// streamed as they come. Calls stay open together until the answer ends
// or text follows them, so interleaved calls are carried; a delta to a
// call already closed cannot be, and breaks the stream (false).
func (s *Stream) toolCall(index int, id string, f chatFunctionCall) bool {
	k, seen := s.calls[index]
	switch {
	case !seen:
		s.closeMessage()
		s.a.items = append(s.a.items, item{id: newID("fc_"), call: true, callID: id, name: f.Name})
		k = len(s.a.items) - 1
		s.calls[index], s.open = k, append(s.open, k)
		s.event("response.output_item.added", map[string]any{"output_index": k, "item": s.a.items[k].added()})
	case !slices.Contains(s.open, k):
		s.end = fmt.Errorf("responses: the provider's stream continued tool call %d after text that followed it", index)
		return false
	default: // chat gives a call's id and name once; some providers repeat them
		it := &s.a.items[k]
		if it.callID == "" {
			it.callID = id
		}
		if it.name == "" {
			it.name = f.Name
		}
	}
	if f.Arguments != "" {
		it := &s.a.items[k]
		it.args = append(it.args, f.Arguments...)
		s.event("response.function_call_arguments.delta", map[string]any{"item_id": it.id, "output_index": k, "delta": f.Arguments})
	}
	return true
}

// closeCalls writes the done events of the open calls.
func (s *Stream) closeCalls() {
	for _, k := range s.open {
		it := &s.a.items[k]
		s.event("response.function_call_arguments.done", map[string]any{"item_id": it.id, "output_index": k,
			"name": it.name, "arguments": string(it.args)})
		s.event("response.output_item.done", map[string]any{"output_index": k, "item": it.json(s.a.itemStatus(k))})
	}
	s.open = s.open[:0]
}

// finish ends the answer: the open items, then response.completed or
// response.incomplete. An answer of nothing is an empty message, as
// FromChatAnswer has it.
func (s *Stream) finish() {
	s.start()
	if len(s.a.items) == 0 {
		s.openMessage()
		s.openPart(false)
	}
	s.closeMessage()
	s.closeCalls()
	r := s.echo.response(s.id, s.createdAt, &s.a, true)
	typ := "response.completed"
	if r.Status == "incomplete" {
		typ = "response.incomplete"
	}
	s.event(typ, map[string]any{"response": r})
	s.done, s.end = true, io.EOF
}

// fail writes the error event a chat error event becomes, which ends the
// stream.
func (s *Stream) fail(raw json.RawMessage) {
	var e struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
		Param   *string         `json:"param"`
	}
	_ = json.Unmarshal(raw, &e)
	var code any
	var str string
	switch {
	case json.Unmarshal(e.Code, &str) == nil && str != "":
		code = str
	case given(e.Code) && e.Code[0] != '"':
		code = string(e.Code) // a number
	case e.Type != "":
		code = e.Type
	}
	if e.Message == "" {
		e.Message = "the provider's stream failed"
	}
	s.event("error", map[string]any{"code": code, "message": e.Message, "param": e.Param})
	s.end = io.EOF
}

// event writes one event: its type, then data with the type and
// sequence number first and fields' members after them.
func (s *Stream) event(typ string, fields map[string]any) {
	b := mustMarshal(fields)
	s.out.WriteString("event: ")
	s.out.WriteString(typ)
	s.out.WriteString("\ndata: {\"type\":\"")
	s.out.WriteString(typ)
	s.out.WriteString(`","sequence_number":`)
	s.out.WriteString(strconv.Itoa(s.seq))
	s.seq++
	if len(b) > 2 {
		s.out.WriteByte(',')
	}
	s.out.Write(b[1:])
	s.out.WriteString("\n\n")
}

// eventLogprob is a ResponseLogProb, a stream event's logprob: chat's
// without the bytes.
type eventLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	} `json:"top_logprobs,omitempty"`
}

func eventLogprobs(raw []json.RawMessage) []eventLogprob {
	out := make([]eventLogprob, 0, len(raw))
	for _, r := range raw {
		var lp eventLogprob
		_ = json.Unmarshal(r, &lp)
		out = append(out, lp)
	}
	return out
}

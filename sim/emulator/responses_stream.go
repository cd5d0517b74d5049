package emulator

import (
	"net/http"
	"strconv"
)

// respStream writes the typed events of a Responses stream, numbering
// them from 0.
type respStream struct {
	s   *sse
	bp  *[]byte
	seq int
}

// event sends one event: its type, then data with the type and sequence
// number put first and body's members after them.
func (rs *respStream) event(typ string, body []byte) bool {
	b := append((*rs.bp)[:0], "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = strconv.AppendInt(b, int64(rs.seq), 10)
	rs.seq++
	if len(body) > 0 {
		b = append(b, ',')
		b = append(b, body...)
	}
	*rs.bp = append(b, "}\n\n"...)
	return rs.s.send(*rs.bp)
}

// streamResponse sends the response as the Responses API's events:
// response.created, response.in_progress, response.output_item.added,
// then for a message response.content_part.added, a
// response.output_text.delta per token, response.output_text.done and
// response.content_part.done, or for a call the
// response.function_call_arguments delta and done events;
// response.output_item.done and response.completed (response.incomplete
// when max_output_tokens cut it) last.
func (x *exchange) streamResponse(a *respAnswer) {
	delivered := 0
	defer func() { x.e.rec.charge(a.prompt, delivered, x.cfg.cost(a.model, a.prompt, delivered)) }()
	s, ok := x.startSSE()
	if !ok {
		return
	}
	bp := x.e.buffer()
	defer x.e.release(bp)
	rs := &respStream{s: s, bp: bp}
	progress := a.appendResponse([]byte(`"response":`), false)
	if !rs.event("response.created", progress) || !rs.event("response.in_progress", progress) ||
		!rs.event("response.output_item.added", a.appendItem([]byte(`"output_index":0,"item":`), false)) {
		return
	}
	ids := appendString([]byte(`"item_id":`), a.itemID)
	ids = append(ids, `,"output_index":0`...)
	textIDs := append(append([]byte(nil), ids...), `,"content_index":0`...)
	var deltas []string
	if a.call != nil {
		deltas = fragments(a.call.args, a.callOut)
	} else {
		deltas = a.text.pieces
		if !rs.event("response.content_part.added", a.appendPart(append(append([]byte(nil), textIDs...), `,"part":`...), "")) {
			return
		}
	}
	cutAfter := x.cutAfter(len(deltas))
	for i, d := range deltas {
		if !s.token(i) {
			return
		}
		var ok bool
		if a.call != nil {
			ok = rs.event("response.function_call_arguments.delta", appendString(append(append([]byte(nil), ids...), `,"delta":`...), d))
		} else {
			b := appendString(append(append([]byte(nil), textIDs...), `,"delta":`...), d)
			ok = rs.event("response.output_text.delta", append(b, `,"logprobs":[]`...))
		}
		if !ok {
			return
		}
		delivered++
		if i+1 == cutAfter {
			panic(http.ErrAbortHandler) // no done events, no response.completed
		}
	}
	if !x.awaitDone() {
		return
	}
	a.cached = x.cached()
	if !x.finishResponse(rs, a, ids, textIDs) {
		return
	}
	delivered = a.outputTokens()
	x.e.rec.streamCompleted()
}

// finishResponse sends the done events and the finished response, and
// stores it.
func (x *exchange) finishResponse(rs *respStream, a *respAnswer, ids, textIDs []byte) bool {
	if a.call != nil {
		b := append(append([]byte(nil), ids...), `,"name":`...)
		b = appendString(b, a.call.name)
		b = appendString(append(b, `,"arguments":`...), a.call.args)
		if !rs.event("response.function_call_arguments.done", b) {
			return false
		}
	} else {
		text := a.text.text()
		b := appendString(append(append([]byte(nil), textIDs...), `,"text":`...), text)
		if !rs.event("response.output_text.done", append(b, `,"logprobs":[]`...)) ||
			!rs.event("response.content_part.done", a.appendPart(append(append([]byte(nil), textIDs...), `,"part":`...), text)) {
			return false
		}
	}
	if !rs.event("response.output_item.done", a.appendItem([]byte(`"output_index":0,"item":`), true)) {
		return false
	}
	body := a.appendResponse(nil, true)
	x.keep(a, body)
	final := "response.completed"
	if a.incomplete {
		final = "response.incomplete"
	}
	return rs.event(final, append([]byte(`"response":`), body...))
}

package emulator

import (
	"net/http"
	"strconv"
)

// streamMessage sends the Message as Anthropic's events: message_start,
// content_block_start, ping, a content_block_delta per token (text_delta,
// or input_json_delta fragments of a tool call), content_block_stop,
// message_delta with the stop reason and usage, and message_stop.
func (x *exchange) streamMessage(a *msgAnswer) {
	delivered := 0
	defer func() { x.e.rec.charge(a.prompt, delivered, x.cfg.cost(a.model, a.prompt, delivered)) }()
	s, ok := x.startSSE()
	if !ok {
		return
	}
	if !x.awaitFirst() { // with an engine, the Message starts once it is computing
		return
	}
	a.cached = x.cached()
	bp := x.e.buffer()
	defer x.e.release(bp)
	ev := func(name string, data ...[]byte) bool {
		b := append((*bp)[:0], "event: "...)
		b = append(b, name...)
		b = append(b, "\ndata: "...)
		for _, d := range data {
			b = append(b, d...)
		}
		*bp = append(b, "\n\n"...)
		return s.send(*bp)
	}
	head := a.appendHead([]byte(`{"type":"message_start","message":`))
	head = append(head, `],"stop_reason":null,"stop_sequence":null,"usage":`...)
	head = append(a.appendUsage(head, 1), "}}"...)
	var block []byte
	var deltas []string
	if a.call != nil {
		block = a.appendToolUse([]byte(`{"type":"content_block_start","index":0,"content_block":`), "{}")
		deltas = fragments(a.call.args, a.callOut)
	} else {
		block = []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}`)
		deltas = a.text.pieces
	}
	if !ev("message_start", head) || !ev("content_block_start", block, []byte("}")) || !ev("ping", []byte(`{"type":"ping"}`)) {
		return
	}
	cutAfter := x.cutAfter(len(deltas))
	for i, d := range deltas {
		if !s.token(i) {
			return
		}
		var b []byte
		if a.call != nil {
			b = appendString([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`), d)
		} else {
			b = appendString([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`), d)
		}
		if !ev("content_block_delta", b, []byte("}}")) {
			return
		}
		delivered++
		if i+1 == cutAfter {
			panic(http.ErrAbortHandler) // no message_delta, no message_stop
		}
	}
	if !x.awaitDone() {
		return
	}
	out := a.outputTokens()
	delta := a.appendStop([]byte(`{"type":"message_delta","delta":{`))
	delta = append(delta, `},"usage":{"input_tokens":`...)
	delta = strconv.AppendInt(delta, int64(a.prompt-a.cached), 10)
	delta = append(delta, `,"output_tokens":`...)
	delta = strconv.AppendInt(delta, int64(out), 10)
	if !ev("content_block_stop", []byte(`{"type":"content_block_stop","index":0}`)) || !ev("message_delta", delta, []byte("}}")) {
		return
	}
	delivered = out
	if ev("message_stop", []byte(`{"type":"message_stop"}`)) {
		x.e.rec.streamCompleted()
	}
}

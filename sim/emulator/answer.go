package emulator

import (
	"net/http"
	"strconv"
	"time"
)

// respond sends a whole chat.completion once every token is due.
func (x *exchange) respond(c *completion) {
	e := x.e
	delivered := 0
	defer func() { e.rec.charge(c.prompt, delivered, x.cfg.cost(c.model, c.prompt, delivered)) }()
	if !x.awaitAll(x.arrived.Add(x.cfg.Latency + x.cfg.TTFT + tokenTime(x.cfg, c.tokens-1))) {
		return
	}
	c.cached = x.cached()
	bp := e.buffer()
	defer e.release(bp)
	*bp = c.appendResponse((*bp)[:0])
	x.answerOK(*bp)
	delivered = c.tokens * c.n
}

// stream sends the completion as server-sent events, one flushed event per
// chunk, paced from the moment the headers went out.
func (x *exchange) stream(c *completion) {
	e := x.e
	delivered := 0
	defer func() { e.rec.charge(c.prompt, delivered, x.cfg.cost(c.model, c.prompt, delivered)) }()
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	e.rec.streamStarted()
	rc := http.NewResponseController(x.w)
	if rc.Flush() != nil {
		return
	}
	t0 := time.Now()
	bp := e.buffer()
	defer e.release(bp)
	send := func(b []byte) bool {
		*bp = b // keep what the buffer grew to
		if _, err := x.w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	cutAfter := -1 // chunks sent before ModeCut aborts
	if e.Mode() == ModeCut {
		cutAfter = (c.steps()*c.n + 1) / 2
	}
	prefix := c.appendChunkPrefix(nil)
	sent := 0
	for step := range c.steps() {
		if !x.await(c.token(step), t0.Add(c.offset(x.cfg, step))) {
			return
		}
		if step == 0 && c.azure && !send(appendAzurePromptChunk((*bp)[:0], c.includeUsage)) {
			return
		}
		for ch := range c.n {
			if !send(c.appendStepChunk((*bp)[:0], prefix, ch, step)) {
				return
			}
			delivered += c.stepTokens(step)
			if sent++; sent == cutAfter {
				panic(http.ErrAbortHandler) // no finish chunk, no [DONE]
			}
		}
	}
	if !x.awaitDone() {
		return
	}
	for ch := range c.n {
		b := c.appendChunkHead((*bp)[:0], prefix, ch)
		if !send(c.appendChunkTail(append(b, "{}"...), c.finish)) {
			return
		}
	}
	if c.includeUsage {
		b := append((*bp)[:0], "data: "...)
		b = append(b, prefix...)
		b = append(b, `],"usage":`...)
		b = appendUsage(b, c.prompt, c.tokens*c.n, x.cached())
		if !send(append(b, "}\n\n"...)) {
			return
		}
	}
	if !send(append((*bp)[:0], "data: [DONE]\n\n"...)) {
		return
	}
	e.rec.streamCompleted()
}

// appendResponse appends the chat.completion object.
func (c *completion) appendResponse(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, c.id)
	b = append(b, `,"object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, c.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, c.model)
	b = append(b, `,"choices":[`...)
	for ch := range c.n {
		if ch > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(ch), 10)
		b = append(b, `,"message":{"role":"assistant","content":`...)
		if c.call != nil {
			b = append(b, `null,"tool_calls":[{"id":"`...)
			b = appendID(b, "call_", c.callKey+uint64(ch), 24)
			b = append(b, `","type":"function","function":{"name":`...)
			b = appendString(b, c.call.name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, c.call.args)
			b = append(b, `}}]`...)
		} else {
			b = append(b, '"')
			b = appendWords(b, c.textKey, ch, c.tokens)
			b = append(b, '"')
		}
		b = append(b, `,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"`...)
		b = append(b, c.finish...)
		b = append(b, '"')
		if c.azure {
			b = append(b, `,"content_filter_results":`...)
			b = append(b, contentFilterResults...)
		}
		b = append(b, '}')
	}
	b = append(b, `],"usage":`...)
	b = appendUsage(b, c.prompt, c.tokens*c.n, c.cached)
	b = append(b, `,"service_tier":"default","system_fingerprint":"`+systemFingerprint+`"`...)
	if c.azure {
		b = append(b, ',')
		b = append(b, promptFilterResults...)
	}
	return append(b, '}')
}

// appendChunkPrefix appends what every chunk of the stream starts with, up
// to and including the opening of choices.
func (c *completion) appendChunkPrefix(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, c.id)
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, c.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, c.model)
	return append(b, `,"service_tier":"default","system_fingerprint":"`+systemFingerprint+`","choices":[`...)
}

// appendChunkHead starts the event of a chunk for choice ch, up to its delta.
func (c *completion) appendChunkHead(b, prefix []byte, ch int) []byte {
	b = append(b, "data: "...)
	b = append(b, prefix...)
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(ch), 10)
	return append(b, `,"delta":`...)
}

// appendChunkTail ends the event after the delta; finish "" is null.
func (c *completion) appendChunkTail(b []byte, finish string) []byte {
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = appendNullableString(b, finish)
	if c.azure {
		b = append(b, `,"content_filter_results":`...)
		b = append(b, contentFilterResults...)
	}
	b = append(b, "}]"...)
	if c.includeUsage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, "}\n\n"...)
}

// appendStepChunk appends the event of chunk step of choice ch: the role
// and the first token (or the call's id and name), then a token (or an
// argument fragment) each.
func (c *completion) appendStepChunk(b, prefix []byte, ch, step int) []byte {
	b = c.appendChunkHead(b, prefix, ch)
	switch {
	case c.call == nil && step == 0:
		b = append(b, `{"role":"assistant","content":"`...)
		b = append(b, word(c.textKey, ch, 0)...)
		b = append(b, `","refusal":null}`...)
	case c.call == nil:
		b = append(b, `{"content":"`...)
		b = append(b, word(c.textKey, ch, step)...)
		b = append(b, `"}`...)
	case step == 0:
		b = append(b, `{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"`...)
		b = appendID(b, "call_", c.callKey+uint64(ch), 24)
		b = append(b, `","type":"function","function":{"name":`...)
		b = appendString(b, c.call.name)
		b = append(b, `,"arguments":""}}],"refusal":null}`...)
	default:
		b = append(b, `{"tool_calls":[{"index":0,"function":{"arguments":`...)
		b = appendString(b, c.frags[step-1])
		b = append(b, `}}]}`...)
	}
	return c.appendChunkTail(b, "")
}

// appendAzurePromptChunk appends the chunk Azure OpenAI starts a stream
// with: no choices, empty id, object and model, and the prompt's content
// filter results.
func appendAzurePromptChunk(b []byte, includeUsage bool) []byte {
	b = append(b, `data: {"choices":[],"created":0,"id":"","model":"","object":"",`+promptFilterResults...)
	if includeUsage {
		b = append(b, `,"usage":null`...)
	}
	return append(b, "}\n\n"...)
}

// buffer returns a pooled buffer for building an answer.
func (e *Emulator) buffer() *[]byte {
	if bp, ok := e.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, 4096)
	return &b
}

// release returns a buffer to the pool unless it grew large.
func (e *Emulator) release(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		*bp = (*bp)[:0]
		e.bufs.Put(bp)
	}
}

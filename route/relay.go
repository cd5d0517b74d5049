package route

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

var (
	doneEvent       = []byte("data: [DONE]\n\n")
	errorEventStart = []byte(`{"error"`)
)

// maxCountedStream bounds what a stream keeps to count its tokens when the
// provider reports no usage (most do, at the end): every open stream holds
// up to this much until then (and the first event, however large). The
// events beyond it are counted at the rate, in tokens a byte, of those
// kept.
const maxCountedStream = 16 << 10

// relayState is reused across streams: it holds the event reader and its
// buffer, the write buffer and the copy of a stream's events kept for
// counting. A fresh read buffer per stream was a third of all the bytes a
// stream allocated. The rest is one stream's progress.
type relayState struct {
	rd    sseReader
	out   []byte
	kept  []byte
	named []byte // an event with its model renamed (withModel)

	finished    int // choices that reported a finish_reason
	sawUsage    bool
	sawDone     bool
	sawErrEvent bool   // the provider's own error event was relayed
	seq         int    // a Responses stream's events relayed
	respID      string // the id of the Response a Responses stream carries
	beyond      int    // bytes of the events past what is kept for counting
	streamErr   *attemptResult
}

var relayStates = sync.Pool{New: func() any {
	// out and named hold one event each (a few hundred bytes) and grow
	// past that only for a larger one: every open stream holds a state.
	return &relayState{rd: sseReader{br: bufio.NewReaderSize(nil, sseBufferSize)}, out: make([]byte, 0, 1<<10)}
}}

// put returns st to the pool, emptied.
func (st *relayState) put() {
	st.rd.reset(nil, 0)
	if cap(st.out) > 64<<10 { // after an unusually large event
		st.out = make([]byte, 0, 1<<10)
	}
	if cap(st.named) > 64<<10 {
		st.named = nil
	}
	*st = relayState{rd: st.rd, out: st.out[:0], kept: st.kept[:0], named: st.named[:0]}
	relayStates.Put(st)
}

// relay copies a stream's events to sink as they arrive. The first data
// event commits the response; before it, every failure is the caller's to
// retry. Events that arrived together are written before one flush, and a
// flush never waits for input that has not arrived.
func (c *call) relay(resp *http.Response) *attemptResult {
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return c.fail(OutcomeBadResponse, "stream answered with Content-Type %q", ct)
	}
	st := relayStates.Get().(*relayState)
	defer st.put()
	st.rd.reset(resp.Body, c.e.cfg.MaxEventBytes)
	if a := c.pump(st); a != nil {
		return a
	}
	// Whatever happened, a committed stream is accounted: what the
	// provider reported, else what the node counts of what it relayed.
	a := &c.a
	if a.committed {
		a.known = true
		if !st.sawUsage {
			a.usage, a.counted = c.e.countStream(c.req, st.kept, st.beyond), true
		}
	}
	if a.Outcome == OutcomeCanceled {
		return a
	}
	return c.endStream(st, resp)
}

// pump relays events until the stream ends, breaks or the client goes.
// It returns an attempt only for an error event before the first token;
// otherwise how the stream ended is in st and c.a.
func (c *call) pump(st *relayState) *attemptResult {
	e, a := c.e, &c.a
	var cutAt time.Time // when the stream has run for MaxStreamDuration
	if e.cfg.MaxStreamDuration > 0 {
		cutAt = c.start.Add(e.cfg.MaxStreamDuration)
	}
	for {
		ev, err := st.rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				st.streamErr = c.readErr(err, "read stream")
			}
			return nil
		}
		if a.committed && !cutAt.IsZero() && !e.now().Before(cutAt) {
			st.streamErr = c.fail(OutcomeBroken, "the stream ran longer than %s (limits.max_stream_duration)", e.cfg.MaxStreamDuration)
			return nil
		}
		if ev.Comment {
			// A keep-alive keeps a flowing stream alive, but is not the
			// first byte: before it, the first-byte timeout still runs.
			if a.committed {
				c.timer.Reset(e.cfg.StreamIdleTimeout)
			}
			continue
		}
		c.timer.Reset(e.cfg.StreamIdleTimeout)
		if bytes.Equal(bytes.TrimSpace(ev.Data), []byte("[DONE]")) {
			st.sawDone = true
			return nil
		}
		responsesAPI := c.req.Chat.API == APIResponses
		isError := !responsesAPI && bytes.HasPrefix(bytes.TrimLeft(ev.Data, " \t\r\n"), errorEventStart) ||
			responsesAPI && !a.committed && string(eventType(ev.Data)) == evError
		if isError && !a.committed {
			return c.fail(OutcomeHTTPError, "error event before the first token: %.256s", ev.Data)
		}
		if !a.committed {
			c.commitStream()
		}
		if responsesAPI {
			if !c.relayResponseEvent(st, ev.Data) {
				return nil
			}
			continue
		}
		if !c.relayEvent(st, ev.Data, isError) {
			return nil
		}
	}
}

// commitStream writes the stream's headers: the first byte.
func (c *call) commitStream() {
	c.a.ttft = c.e.now().Sub(c.start)
	c.res.TTFT = c.a.ttft
	h := c.sink.Header()
	vals := make(headerValues, 5)
	setRouteHeaders(h, &vals, c.t, c.e.cfg.NodeName, c.res.Route())
	h["Content-Type"] = streamContent
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = noBuffering
	c.sink.WriteHeader(http.StatusOK)
	c.a.committed = true
}

// relayEvent accounts one data event and writes it to the client; false
// means the stream ends here.
func (c *call) relayEvent(st *relayState, data []byte, isError bool) bool {
	skip, usage := false, false
	model, noChoices := chunkMembers(data)
	if u, ok := chunkUsage(data); ok {
		c.a.usage, st.sawUsage, usage = u, true, true
		// Asked for by the node, not the client: keep it back.
		skip = !c.req.Chat.IncludeUsage && isUsageOnly(data)
	} else if !isError && noChoices {
		// No choices and no usage, as Azure's first chunk (its
		// prompt_filter_results, with "object":"" and "id":""): no chunk
		// of OpenAI's API, whose clients may refuse it. Keep it back.
		skip = true
	}
	st.finished += countFinishes(data)
	if !st.sawUsage {
		st.keep(data)
	}
	if !skip {
		out, b, ok := data, st.named, false
		if usage { // the usage the client asked for says what it costs
			cost := c.toldCost(Report{Answered: true, Known: true, Usage: c.a.usage})
			b, ok = withModelCost(st.named, data, c.t.answerModel(), cost, true)
		} else if model != nil {
			// The model found above, not looked for again.
			b, ok = withModelCostIn(st.named, data, &answerDoc{model: model}, c.t.answerModel(), 0, false)
		}
		if ok {
			st.named, out = b, b
		}
		st.out = appendEvent(st.out[:0], out)
		if !c.write(st.out) {
			return false
		}
	}
	if isError {
		st.sawErrEvent = true
		st.streamErr = c.fail(OutcomeBroken, "error event mid-stream: %.256s", data)
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

// keep keeps an event for counting a stream's tokens: the first ones
// (the first always, however large), so that the rest continue them.
func (st *relayState) keep(data []byte) {
	if st.beyond == 0 && (len(st.kept) == 0 || len(st.kept)+len(data) < maxCountedStream) {
		// NUL ends an event: valid JSON holds it nowhere, while an event
		// of several data lines holds newlines.
		st.kept = append(append(st.kept, data...), 0)
	} else {
		st.beyond += len(data) + 1
	}
}

// write writes b to the client; false means the client is gone.
func (c *call) write(b []byte) bool {
	if _, err := c.sink.Write(b); err != nil {
		c.fail(OutcomeCanceled, "client write: %v", err)
		return false
	}
	return true
}

// endStream ends a stream the client is still reading: [DONE] after a
// complete one, an error event after a broken one.
func (c *call) endStream(st *relayState, resp *http.Response) *attemptResult {
	a := &c.a
	complete := st.sawDone || (st.streamErr == nil && st.finished >= c.req.Chat.N)
	switch {
	case !a.committed && st.streamErr != nil:
		return st.streamErr
	case !a.committed:
		return c.fail(OutcomeBadResponse, "stream ended before its first event")
	case complete && c.req.Chat.API == APIResponses:
		// The terminal event, relayed, ends a Responses stream; the cost
		// follows it.
		a.Outcome = OutcomeOK
		a.stored = c.stored(st.respID, a.usage)
		if c.write(c.streamCost(st.out[:0])) {
			if err := c.sink.Flush(); err != nil {
				c.fail(OutcomeCanceled, "client flush: %v", err)
			}
		}
		drainAfterDone(resp, c.timer, st.out[:cap(st.out)])
		return a
	case complete:
		a.Outcome = OutcomeOK
		st.out = append(c.streamCost(st.out[:0]), doneEvent...)
		if c.write(st.out) {
			if err := c.sink.Flush(); err != nil {
				c.fail(OutcomeCanceled, "client flush: %v", err)
			}
		}
		if st.sawDone {
			drainAfterDone(resp, c.timer, st.out[:cap(st.out)])
		}
		return a
	}
	// The stream broke after its first byte: never re-sent; the client is
	// told with an error event in OpenAI's shape.
	c.res.Truncated = true
	streamErr := st.streamErr
	if streamErr == nil {
		streamErr = c.fail(OutcomeBroken, "stream ended without finishing")
	}
	if streamErr.Outcome == OutcomeTimeout {
		streamErr.Outcome = OutcomeBroken
	}
	if st.sawErrEvent {
		_ = c.write(c.streamCost(st.out[:0]))
		_ = c.sink.Flush()
		return streamErr
	}
	msg, _ := json.Marshal("the provider's stream broke off: " + streamErr.Detail)
	st.out = append(append(append(st.out[:0], `data: {"error":{"message":`...), msg...), `,"type":"upstream_error","code":"upstream_error"}}`+"\n\n"...)
	if c.req.Chat.API == APIResponses {
		st.out = st.responsesStreamError(streamErr.Detail)
	}
	st.out = append(c.streamCost(nil), st.out...)
	if c.write(st.out) {
		_ = c.sink.Flush()
	}
	return streamErr
}

// streamCost appends the comment that tells a stream's client what it
// cost (what the request settles) to b and, when the client sent TE:
// trailers, sets the cost trailer too.
func (c *call) streamCost(b []byte) []byte {
	cost := c.toldCost(c.a.report())
	if c.req.Trailers {
		SetCostTrailer(c.sink.Header(), cost)
	}
	return AppendCostComment(b, cost)
}

// appendEvent appends data as one server-sent event: every line of it
// prefixed with "data: ", as a multi-line event must be.
func appendEvent(b, data []byte) []byte {
	b = append(b, "data: "...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		b = append(append(b, data[:i+1]...), "data: "...)
		data = data[i+1:]
	}
	return append(append(b, data...), "\n\n"...)
}

// drainAfterDone reads what follows [DONE] — normally just the end of the
// chunked body, already on its way — so the connection can be reused. An
// upstream that keeps the body open gets a tenth of a second, then loses
// its connection; the client already has [DONE].
func drainAfterDone(resp *http.Response, timer *time.Timer, buf []byte) {
	timer.Reset(100 * time.Millisecond)
	for range 8 {
		if _, err := resp.Body.Read(buf); err != nil {
			return
		}
	}
}

// chunkUsage returns the usage a chunk carries, if it carries one (not
// null). Ordinary chunks — with no usage, or the "usage":null that every
// chunk carries when usage was asked for — cost a search or two for the
// key; the usage chunk decodes only its usage object.
func chunkUsage(data []byte) (Usage, bool) {
	if !bytes.Contains(data, []byte(`"usage"`)) ||
		bytes.Contains(data, []byte(`"usage":null`)) && !bytes.Contains(data, []byte(`"usage":{`)) {
		return Usage{}, false
	}
	v, end, ok := usageMember(data)
	if !ok {
		return Usage{}, false
	}
	u, err := decodeUsage(data[v:end])
	return u, err == nil
}

// isUsageOnly reports whether a chunk is the final usage chunk: no choices.
func isUsageOnly(data []byte) bool {
	if !validJSON(data) { // once a stream: a broken chunk is relayed
		return false
	}
	v, ok := topValue(data, `"choices"`)
	if !ok || data[v] == 'n' {
		return true
	}
	return data[v] == '[' && skipSpace(data, v+1) < len(data) && data[skipSpace(data, v+1)] == ']'
}

// topValue returns the index of the value of the top-level member key
// (quoted) of the object in data. It walks the members without decoding
// them, and upstream input is not trusted to be valid: anything malformed
// is not found.
func topValue(data []byte, key string) (v int, ok bool) {
	walkTop(data, func(name []byte, at int) bool {
		if string(name) == key {
			v, ok = at, true
		}
		return ok
	})
	return v, ok
}

// walkTop calls fn with the name (quoted) and the index of the value of
// each top-level member of the object in data, in order, until fn says
// stop or a member is malformed (walked as topValue walks).
func walkTop(data []byte, fn func(name []byte, v int) (stop bool)) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return
	}
	for i = skipSpace(data, i+1); i < len(data) && data[i] == '"'; {
		kend := valueEnd(data, i)
		if kend < 0 {
			return
		}
		name := data[i:kend]
		if i = skipSpace(data, kend); i >= len(data) || data[i] != ':' {
			return
		}
		v := skipSpace(data, i+1)
		if v >= len(data) || fn(name, v) {
			return
		}
		end := valueEnd(data, v)
		if end < 0 {
			return
		}
		if i = skipSpace(data, end); i >= len(data) || data[i] != ',' {
			return
		}
		i = skipSpace(data, i+1)
	}
}

// chunkMembers finds, in one walk, what relayEvent reads of a chunk: its
// model's value (a slice of data, nil when absent or not ending within
// it), and whether its choices are an empty array; the first of each
// name, as topValue finds them.
func chunkMembers(data []byte) (model []byte, noChoices bool) {
	var seenModel, seenChoices bool
	walkTop(data, func(name []byte, v int) bool {
		switch {
		case !seenModel && string(name) == `"model"`:
			seenModel = true
			if end := valueEnd(data, v); end > v {
				model = data[v:end]
			}
		case !seenChoices && string(name) == `"choices"`:
			seenChoices = true
			i := skipSpace(data, v+1)
			noChoices = data[v] == '[' && i < len(data) && data[i] == ']'
		}
		return seenModel && seenChoices
	})
	return model, noChoices
}

// valueEnd returns the index just past the value starting at data[i], or
// -1 when it does not end within data.
func valueEnd(data []byte, i int) int {
	depth := 0
	for j := i; j < len(data); j++ {
		switch c := data[j]; c {
		case '"':
			for j++; j < len(data) && data[j] != '"'; j++ {
				if data[j] == '\\' {
					j++
				}
			}
			if j >= len(data) {
				return -1
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return j + 1
			} else if depth < 0 {
				return j // a scalar ended by its container
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j
			}
		}
	}
	if depth == 0 && len(data) > i {
		return len(data) // a scalar at the very end
	}
	return -1
}

// countFinishes counts the non-null finish_reason values in a chunk.
func countFinishes(data []byte) int {
	n := 0
	key := []byte(`"finish_reason"`)
	for {
		i := bytes.Index(data, key)
		if i < 0 {
			return n
		}
		data = data[i+len(key):]
		if v := skipColon(data, 0); v < len(data) && data[v] == '"' {
			n++
		}
	}
}

// skipColon returns the index of the value after a key ending at i.
func skipColon(b []byte, i int) int {
	i = skipSpace(b, i)
	if i < len(b) && b[i] == ':' {
		i++
	}
	return skipSpace(b, i)
}

// countStream counts the usage of a stream that reported none, from the
// events it kept; the beyond bytes of events past those are taken to hold
// as many tokens a byte as the kept ones did (an estimate, close for a
// steady stream).
func (e *Executor) countStream(req *Request, kept []byte, beyond int) Usage {
	u := Usage{PromptTokens: e.tokens.CountPrompt(req.Chat)}
	var text strings.Builder
	for line := range bytes.SplitSeq(kept, []byte{0}) {
		var c struct {
			Delta   string `json:"delta"` // a Responses event's text or arguments
			Choices []struct {
				Text  string `json:"text"` // a legacy completion's
				Delta struct {
					Content   string     `json:"content"`
					ToolCalls []ToolCall `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(line, &c) != nil {
			continue
		}
		text.WriteString(c.Delta)
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
			text.WriteString(ch.Delta.Content)
			for _, tc := range ch.Delta.ToolCalls {
				text.WriteString(tc.Function.Name)
				text.WriteString(tc.Function.Arguments)
			}
		}
	}
	u.CompletionTokens = e.tokens.Count(text.String())
	if beyond > 0 && len(kept) > 0 {
		u.CompletionTokens += (u.CompletionTokens*beyond + len(kept) - 1) / len(kept)
	}
	return u
}

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
// stream allocated.
type relayState struct {
	rd   sseReader
	out  []byte
	kept []byte
}

var relayStates = sync.Pool{New: func() any {
	return &relayState{rd: sseReader{br: bufio.NewReaderSize(nil, sseBufferSize)}, out: make([]byte, 0, 4<<10)}
}}

// relay copies a stream's events to sink as they arrive. The first data
// event commits the response; before it, every failure is the caller's to
// retry. Events that arrived together are written before one flush, and a
// flush never waits for input that has not arrived.
func (e *Executor) relay(req *Request, t *Target, resp *http.Response, sink ResponseSink, res *Result, a *attemptResult, start time.Time, timer *time.Timer, readErr func(error, string) *attemptResult) *attemptResult {
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return e.fail(a, OutcomeBadResponse, "stream answered with Content-Type %q", ct)
	}
	st := relayStates.Get().(*relayState)
	defer func() {
		st.rd.reset(nil, 0)
		if cap(st.out) > 64<<10 { // after an unusually large event
			st.out = make([]byte, 0, 4<<10)
		}
		st.out, st.kept = st.out[:0], st.kept[:0]
		relayStates.Put(st)
	}()
	rd := &st.rd
	rd.reset(resp.Body, e.cfg.MaxEventBytes)
	var (
		finished    int // choices that reported a finish_reason
		sawUsage    bool
		sawDone     bool
		sawErrEvent bool // the provider's own error event was relayed
		beyond      int  // bytes of the events past what is kept for counting
		streamErr   *attemptResult
	)
	write := func(b []byte) bool {
		if _, err := sink.Write(b); err != nil {
			e.fail(a, OutcomeCanceled, "client write: %v", err)
			return false
		}
		return true
	}
	var cutAt time.Time // when the stream has run for MaxStreamDuration
	if e.cfg.MaxStreamDuration > 0 {
		cutAt = start.Add(e.cfg.MaxStreamDuration)
	}
	for {
		ev, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				streamErr = readErr(err, "read stream")
			}
			break
		}
		if a.committed && !cutAt.IsZero() && !e.now().Before(cutAt) {
			streamErr = e.fail(a, OutcomeBroken, "the stream ran longer than %s (limits.max_stream_duration)", e.cfg.MaxStreamDuration)
			break
		}
		if ev.Comment {
			// A keep-alive keeps a flowing stream alive, but is not the
			// first byte: before it, the first-byte timeout still runs.
			if a.committed {
				timer.Reset(e.cfg.StreamIdleTimeout)
			}
			continue
		}
		timer.Reset(e.cfg.StreamIdleTimeout)
		if bytes.Equal(bytes.TrimSpace(ev.Data), []byte("[DONE]")) {
			sawDone = true
			break
		}
		isError := bytes.HasPrefix(bytes.TrimLeft(ev.Data, " \t\r\n"), errorEventStart)
		if isError && !a.committed {
			return e.fail(a, OutcomeHTTPError, "error event before the first token: %.256s", ev.Data)
		}
		if !a.committed {
			a.ttft = e.now().Sub(start)
			res.TTFT = a.ttft
			h := sink.Header()
			setRouteHeaders(h, t, e.cfg.NodeName, res.Route())
			h["Content-Type"] = []string{"text/event-stream; charset=utf-8"}
			h["Cache-Control"] = []string{"no-cache"}
			h["X-Accel-Buffering"] = []string{"no"}
			sink.WriteHeader(http.StatusOK)
			a.committed = true
		}
		skip := false
		if u, ok := chunkUsage(ev.Data); ok {
			a.usage, sawUsage = u, true
			// Asked for by the node, not the client: keep it back.
			skip = !req.Chat.IncludeUsage && isUsageOnly(ev.Data)
		}
		finished += countFinishes(ev.Data)
		if !sawUsage {
			// The kept events are the first ones (the first always, however
			// large), so that the rest continue them.
			if beyond == 0 && (len(st.kept) == 0 || len(st.kept)+len(ev.Data) < maxCountedStream) {
				// NUL ends an event: valid JSON holds it nowhere, while an
				// event of several data lines holds newlines.
				st.kept = append(append(st.kept, ev.Data...), 0)
			} else {
				beyond += len(ev.Data) + 1
			}
		}
		if !skip {
			st.out = appendEvent(st.out[:0], ev.Data)
			if !write(st.out) {
				break
			}
		}
		if isError {
			sawErrEvent = true
			streamErr = e.fail(a, OutcomeBroken, "error event mid-stream: %.256s", ev.Data)
			break
		}
		if !rd.eventBuffered() {
			if err := sink.Flush(); err != nil {
				e.fail(a, OutcomeCanceled, "client flush: %v", err)
				break
			}
		}
	}
	// Whatever happened, a committed stream is accounted: what the
	// provider reported, else what the node counts of what it relayed.
	if a.committed {
		a.known = true
		if !sawUsage {
			a.usage, a.counted = e.countStream(req, st.kept, beyond), true
		}
	}
	if a.Outcome == OutcomeCanceled {
		return a
	}
	complete := sawDone || (streamErr == nil && finished >= req.Chat.N)
	switch {
	case !a.committed && streamErr != nil:
		return streamErr
	case !a.committed:
		return e.fail(a, OutcomeBadResponse, "stream ended before its first event")
	case complete:
		a.Outcome = OutcomeOK
		if write(doneEvent) {
			if err := sink.Flush(); err != nil {
				e.fail(a, OutcomeCanceled, "client flush: %v", err)
			}
		}
		if sawDone {
			drainAfterDone(resp, timer, st.out[:cap(st.out)])
		}
		return a
	}
	// The stream broke after its first byte: never re-sent; the client is
	// told with an error event in OpenAI's shape.
	res.Truncated = true
	if streamErr == nil {
		streamErr = e.fail(a, OutcomeBroken, "stream ended without finishing")
	}
	if streamErr.Outcome == OutcomeTimeout {
		streamErr.Outcome = OutcomeBroken
	}
	if sawErrEvent {
		_ = sink.Flush()
		return streamErr
	}
	msg, _ := json.Marshal("the provider's stream broke off: " + streamErr.Detail)
	st.out = append(append(append(st.out[:0], `data: {"error":{"message":`...), msg...), `,"type":"upstream_error","code":"upstream_error"}}`+"\n\n"...)
	if write(st.out) {
		_ = sink.Flush()
	}
	return streamErr
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
	v, ok := topValue(data, `"usage"`)
	if !ok || data[v] != '{' {
		return Usage{}, false
	}
	end := valueEnd(data, v)
	if end < 0 {
		return Usage{}, false
	}
	var u Usage
	if json.Unmarshal(data[v:end], &u) != nil {
		return Usage{}, false
	}
	return u, true
}

// isUsageOnly reports whether a chunk is the final usage chunk: no choices.
func isUsageOnly(data []byte) bool {
	if !json.Valid(data) { // once a stream: a broken chunk is relayed
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
func topValue(data []byte, key string) (int, bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	for i = skipSpace(data, i+1); i < len(data) && data[i] == '"'; {
		kend := valueEnd(data, i)
		if kend < 0 {
			return 0, false
		}
		name := data[i:kend]
		if i = skipSpace(data, kend); i >= len(data) || data[i] != ':' {
			return 0, false
		}
		v := skipSpace(data, i+1)
		if v >= len(data) {
			return 0, false
		}
		if string(name) == key {
			return v, true
		}
		end := valueEnd(data, v)
		if end < 0 {
			return 0, false
		}
		if i = skipSpace(data, end); i >= len(data) || data[i] != ',' {
			return 0, false
		}
		i = skipSpace(data, i+1)
	}
	return 0, false
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
	u := Usage{PromptTokens: e.tokens.CountMessages(req.Chat.Messages)}
	var text strings.Builder
	for line := range bytes.SplitSeq(kept, []byte{0}) {
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string     `json:"content"`
					ToolCalls []ToolCall `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(line, &c) != nil {
			continue
		}
		for _, ch := range c.Choices {
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

package route

import (
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
// provider reports no usage; beyond it, the count is an estimate.
const maxCountedStream = 1 << 20

// relayState is reused across streams: it holds the write buffer and the
// copy of a stream's events kept for counting.
type relayState struct {
	out  []byte
	kept []byte
}

var relayStates = sync.Pool{New: func() any { return &relayState{out: make([]byte, 0, 4<<10)} }}

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
		st.out, st.kept = st.out[:0], st.kept[:0]
		relayStates.Put(st)
	}()
	rd := newSSEReader(resp.Body, e.cfg.MaxEventBytes)
	var (
		finished    int // choices that reported a finish_reason
		sawUsage    bool
		sawDone     bool
		sawErrEvent bool // the provider's own error event was relayed
		streamErr   *attemptResult
	)
	write := func(b []byte) bool {
		if _, err := sink.Write(b); err != nil {
			e.fail(a, OutcomeCanceled, "client write: %v", err)
			return false
		}
		return true
	}
	for {
		ev, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				streamErr = readErr(err, "read stream")
			}
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
		if !sawUsage && len(st.kept)+len(ev.Data) < maxCountedStream {
			st.kept = append(append(st.kept, ev.Data...), '\n')
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
			a.usage, a.counted = e.countStream(req, st.kept), true
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
			drainAfterDone(resp, timer)
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
func drainAfterDone(resp *http.Response, timer *time.Timer) {
	timer.Reset(100 * time.Millisecond)
	var b [512]byte
	for range 8 {
		if _, err := resp.Body.Read(b[:]); err != nil {
			return
		}
	}
}

// chunkUsage returns the usage a chunk carries, if it carries one (not
// null). It looks for the key first so that ordinary chunks cost no
// decoding.
func chunkUsage(data []byte) (Usage, bool) {
	i := bytes.Index(data, []byte(`"usage"`))
	if i < 0 {
		return Usage{}, false
	}
	if v := skipColon(data, i+len(`"usage"`)); v >= len(data) || data[v] != '{' {
		return Usage{}, false
	}
	var c struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil || c.Usage == nil {
		return Usage{}, false
	}
	return *c.Usage, true
}

// isUsageOnly reports whether a chunk is the final usage chunk: no choices.
func isUsageOnly(data []byte) bool {
	var c struct {
		Choices []json.RawMessage `json:"choices"`
	}
	return json.Unmarshal(data, &c) == nil && len(c.Choices) == 0
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
// events it kept.
func (e *Executor) countStream(req *Request, kept []byte) Usage {
	u := Usage{PromptTokens: e.tokens.CountMessages(req.Chat.Messages)}
	var text strings.Builder
	for line := range bytes.SplitSeq(kept, []byte("\n")) {
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
	return u
}

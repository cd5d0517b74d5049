package route

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmesh/llmesh/route/anthropic"
)

// attempt calls the target and, if it answers, relays the answer.
func (c *call) attempt() *attemptResult {
	e, t, req := c.e, c.t, c.req
	a := &c.a
	a.Provider = t.Provider()
	c.start = e.now()
	defer func() { a.Duration = e.now().Sub(c.start) }()

	// One timer enforces each phase: the first byte (or, unstreamed, the
	// whole answer), then the gap between events.
	actx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	phase := e.cfg.ResponseTimeout
	if req.Chat.Stream {
		phase = e.cfg.FirstByteTimeout
	}
	c.timer = time.AfterFunc(phase, func() { c.timedOut.Store(true); cancel() })
	defer c.timer.Stop()
	hreq, err := c.upstreamRequest(actx)
	if err != nil {
		if ie := (*InvalidRequestError)(nil); errors.As(err, &ie) {
			// The bridge cannot carry the request (a hosted tool to a
			// vLLM): the client's to change, as a provider's 400 would be.
			a.final = err
			return c.fail(OutcomeRefused, "%v", err)
		}
		return c.fail(OutcomeConnect, "build request: %v", err)
	}
	resp, err := e.rt.RoundTrip(hreq)
	if err != nil {
		return c.readErr(err, "request")
	}
	defer func() { resp.Body.Close() }() // a bridge wraps it
	if t.Offer.Provider.Kind == KindAnthropic {
		c.fromMessages(resp)
	}
	if c.bridge != nil {
		c.fromChat(resp)
	}
	a.Status = resp.StatusCode
	e.noteRateWindow(t.Provider(), resp.Header)
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		a.answered = true
	case code == http.StatusTooManyRequests:
		a.retryAfter = retryAfter(resp.Header, e.now())
		return c.fail(OutcomeRateLimited, "429: %s", snippet(resp.Body, 256))
	case code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge || code == http.StatusUnprocessableEntity,
		// A provider without the endpoint (OpenAI's chat models serve no
		// legacy completions) refuses the request, and stays healthy.
		code == http.StatusNotFound && req.Chat.API != APIChat && req.Chat.API != APIMessages:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxClassifiedBody))
		reply := &UpstreamReply{Provider: t.Provider(), Status: code, Header: resp.Header, Body: b}
		if c.fallsBack(reply) {
			return c.fail(OutcomeRefused, "%d %s: fell back", code, a.fallback)
		}
		a.final = reply
		return c.fail(OutcomeRefused, "%d", code)
	default:
		return c.fail(OutcomeHTTPError, "%d: %s", code, snippet(resp.Body, 256))
	}
	if req.Chat.Stream {
		return c.relay(resp)
	}
	return c.whole(resp)
}

var anthropicVersion = []string{anthropic.Version}

// upstreamRequest is the request to the target's endpoint.
func (c *call) upstreamRequest(ctx context.Context) (*http.Request, error) {
	t, req := c.t, c.req
	body := req.Chat.UpstreamBody(t.Offer.UpstreamModel())
	url := urlFor(t.Endpoint(), req.Chat.API)
	anthropicKind := t.Offer.Provider.Kind == KindAnthropic
	c.bridge = nil
	if req.Chat.API == APIResponses {
		var err error
		if body, url, err = c.responsesBody(); err != nil {
			return nil, err
		}
		anthropicKind = anthropicKind && c.bridge != nil
	} else if anthropicKind {
		b, err := anthropic.FromChatRequest(body, t.Offer.Model.MaxOutputTokens)
		if err != nil {
			return nil, err
		}
		body, url = b, t.Endpoint()
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if anthropicKind {
		hreq.Header["Anthropic-Version"] = anthropicVersion
	}
	hreq.Header["Content-Type"] = jsonContent
	hreq.Header["User-Agent"] = c.e.userAgent
	if req.Chat.Stream {
		hreq.Header["Accept"] = acceptStream
	} else {
		hreq.Header["Accept"] = jsonContent
	}
	if req.TraceParent != "" {
		hreq.Header["Traceparent"] = []string{req.TraceParent}
		if req.TraceState != "" {
			hreq.Header["Tracestate"] = []string{req.TraceState}
		}
	}
	setAuth(hreq.Header, t.Offer.Provider)
	return hreq, nil
}

// fromMessages makes a Messages provider's answer read as chat's: a
// stream's events as chunks, a whole Message as a completion, an error in
// OpenAI's shape.
func (c *call) fromMessages(resp *http.Response) {
	switch {
	case resp.StatusCode == http.StatusOK && c.req.Chat.Stream:
		resp.Body = anthropic.StreamReader(resp.Body)
		return
	case resp.StatusCode == http.StatusOK:
		b, err := io.ReadAll(io.LimitReader(resp.Body, c.e.cfg.MaxResponseBytes))
		resp.Body.Close() // its connection goes back to the pool
		if err == nil {
			b, err = anthropic.ToChatAnswer(b)
		}
		if err != nil {
			b = nil // not a completion: whole() says so
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(anthropic.ToOpenAIError(b)))
	}
	resp.Header.Set("Content-Type", "application/json")
}

// readErr classifies a failed read of the answer: the client went away,
// the phase timed out, or the connection failed.
func (c *call) readErr(err error, what string) *attemptResult {
	switch {
	case c.ctx.Err() != nil:
		return c.fail(OutcomeCanceled, "client went away")
	case c.timedOut.Load():
		return c.fail(OutcomeTimeout, "%s: timed out", what)
	}
	return c.fail(OutcomeConnect, "%s: %v", what, cleanErr(err))
}

// noteRateWindow records the provider's own count of what is left of its
// rate window, when it sends one.
func (e *Executor) noteRateWindow(provider string, h http.Header) {
	req, rok := headerInt(h, "X-Ratelimit-Remaining-Requests")
	tok, tok2 := headerInt(h, "X-Ratelimit-Remaining-Tokens")
	if rok || tok2 {
		e.tracker.RateWindow(provider, req, tok)
	}
}

func headerInt(h http.Header, key string) (int64, bool) {
	v := h[key]
	if len(v) == 0 {
		return -1, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
	if err != nil || n < 0 {
		return -1, false
	}
	return n, true
}

// respBuffers recycles the buffers that hold non-streamed answers.
var respBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// whole reads a non-streamed answer, checks it, and writes it to sink.
func (c *call) whole(resp *http.Response) *attemptResult {
	e, t, req, sink, a := c.e, c.t, c.req, c.sink, &c.a
	buf := respBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer respBuffers.Put(buf)
	if err := readUpTo(buf, resp.Body, e.cfg.MaxResponseBytes+1); err != nil {
		return c.readErr(err, "read answer")
	}
	if int64(buf.Len()) > e.cfg.MaxResponseBytes {
		// The request asked for more than the node relays (n × max_tokens,
		// say); another provider would answer the same.
		a.final = fmt.Errorf("%w: %s answered with more than the node's limit of %d bytes; ask for fewer or shorter choices",
			ErrUpstream, t.Provider(), e.cfg.MaxResponseBytes)
		return c.fail(OutcomeTooLarge, "answer larger than %d bytes", e.cfg.MaxResponseBytes)
	}
	doc, valid := scanAnswer(buf.Bytes())
	var usage Usage
	var err error
	if valid && doc.usage != nil {
		usage, err = decodeUsage(doc.usage)
		valid = err == nil
	}
	switch api := req.Chat.API; {
	case api == APIEmbeddings && (!valid || !doc.data):
		return c.fail(OutcomeBadResponse, "answer is not a list of embeddings")
	case api == APIResponses && (!valid || string(doc.object) != `"response"`):
		return c.fail(OutcomeBadResponse, "answer is not a Response")
	case api != APIEmbeddings && api != APIResponses && (!valid || !doc.choices):
		return c.fail(OutcomeBadResponse, "answer is not a completion")
	}
	if doc.usage != nil {
		a.usage = usage
	} else {
		a.usage, a.counted = e.countWhole(req, buf.Bytes()), true
	}
	a.known = true
	a.total = e.now().Sub(c.start)
	// The head goes out after the whole answer is known: it carries the
	// cost the request settles, and so does the usage the answer reports.
	cost := c.toldCost(a.report())
	answer := buf.Bytes()
	named := respBuffers.Get().(*bytes.Buffer)
	defer respBuffers.Put(named)
	named.Reset()
	named.Grow(len(answer) + len(t.answerModel()) + 48)
	if b, ok := withModelCostIn(named.AvailableBuffer(), answer, &doc, t.answerModel(), cost, doc.usage != nil); ok {
		answer = b
	}
	if req.Chat.API == APIResponses {
		if c.bridge != nil {
			c.bridge.response = bytes.Clone(answer)
		}
		var id string
		if doc.id != nil {
			_ = decodeString(doc.id, &id)
		}
		a.stored = c.stored(id, a.usage)
	}
	h := sink.Header()
	vals := make(headerValues, 7)
	setRouteHeaders(h, &vals, t, e.cfg.NodeName, c.res.Route())
	h["Content-Type"] = jsonContent
	vals.set(h, "Content-Length", strconv.Itoa(len(answer)))
	vals.set(h, HeaderCost, FormatCost(cost))
	sink.WriteHeader(http.StatusOK)
	a.committed = true
	a.Outcome = OutcomeOK
	if _, err := sink.Write(answer); err != nil {
		return c.fail(OutcomeCanceled, "write answer: %v", err)
	}
	return a
}

// readUpTo reads r into buf until its end or limit bytes, as
// buf.ReadFrom(io.LimitReader(r, limit)) does without the reader's
// allocation.
func readUpTo(buf *bytes.Buffer, r io.Reader, limit int64) error {
	for int64(buf.Len()) < limit {
		buf.Grow(512)
		room := buf.AvailableBuffer()
		room = room[:min(int64(cap(room)), limit-int64(buf.Len()))]
		n, err := r.Read(room)
		buf.Write(room[:n])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// countWhole counts the usage of an answer that reported none.
func (e *Executor) countWhole(req *Request, answer []byte) Usage {
	var doc struct {
		Choices []struct {
			Text    string `json:"text"` // a legacy completion's
			Message struct {
				Content   string     `json:"content"`
				ToolCalls []ToolCall `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(answer, &doc)
	u := Usage{PromptTokens: e.tokens.CountPrompt(req.Chat)}
	for _, c := range doc.Choices {
		u.CompletionTokens += e.tokens.Count(c.Text) + e.tokens.Count(c.Message.Content)
		for _, tc := range c.Message.ToolCalls {
			u.CompletionTokens += e.tokens.Count(tc.Function.Name) + e.tokens.Count(tc.Function.Arguments)
		}
	}
	return u
}

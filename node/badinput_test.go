package node_test

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
)

// role is the part a top-level member plays in a request, whatever the
// endpoint calls it.
type role uint8

const (
	whole     role = iota // no member: the body as a whole is at fault
	model                 // the model asked for
	input                 // what the model reads: messages, input or prompt
	stream                // whether the answer streams
	maxTokens             // the bound on the completion
)

// endpoint is one API a node serves, as the bad-input table sends to it.
// Another endpoint is one more entry of badInputEndpoints.
type endpoint struct {
	name, path string
	// header is what every request of the endpoint carries besides its
	// key (name, value, ...): headers its API requires.
	header []string
	// key is the header a client sends its API key in, and its prefix.
	key, keyPrefix string
	// members are a valid body's top-level members in order: a name and
	// its raw JSON value.
	members [][2]string
	// names are the members playing each role. A role missing here is
	// one the endpoint does not have: rows about it do not apply.
	names map[role]string
	// text is the raw value of the endpoint's input holding one text,
	// itself a raw JSON string.
	text func(s string) string
	// refused checks that an answer refuses the request as want says, in
	// the endpoint's own error shape.
	refused func(t *testing.T, e *endpoint, status int, h http.Header, body []byte, want refusal)
}

// refusal is what a row expects every endpoint to answer.
type refusal struct {
	status int
	// code is OpenAI's error code; an Anthropic endpoint's error type
	// follows from the status.
	code string
	// param is the member at fault: OpenAI's param names it, Anthropic's
	// message does.
	param role
}

func chatMessages(s string) string { return `[{"role":"user","content":` + s + `}]` }

// badInputEndpoints are the endpoints a node serves, each with a valid
// body and the shape of its errors.
func badInputEndpoints() []*endpoint {
	return []*endpoint{
		{name: "chat", path: "/v1/chat/completions", key: "Authorization", keyPrefix: "Bearer ",
			members: [][2]string{{"model", `"gpt-4o-mini"`}, {"max_tokens", "8"}, {"stream", "false"}, {"messages", chatMessages(`"hi"`)}},
			names:   map[role]string{model: "model", input: "messages", stream: "stream", maxTokens: "max_tokens"},
			text:    chatMessages, refused: openAIRefused},
		{name: "embeddings", path: "/v1/embeddings", key: "Authorization", keyPrefix: "Bearer ",
			members: [][2]string{{"model", `"emb"`}, {"input", `"hi"`}},
			// stream is not a parameter of embeddings: it is refused
			// whatever its value.
			names: map[role]string{model: "model", input: "input", stream: "stream"},
			text:  func(s string) string { return s }, refused: openAIRefused},
		{name: "completions", path: "/v1/completions", key: "Authorization", keyPrefix: "Bearer ",
			members: [][2]string{{"model", `"gpt-4o-mini"`}, {"prompt", `"hi"`}, {"max_tokens", "8"}},
			names:   map[role]string{model: "model", input: "prompt", stream: "stream", maxTokens: "max_tokens"},
			text:    func(s string) string { return s }, refused: openAIRefused},
		{name: "responses", path: "/v1/responses", key: "Authorization", keyPrefix: "Bearer ",
			members: [][2]string{{"model", `"gpt-4o-mini"`}, {"max_output_tokens", "16"}, {"stream", "false"}, {"input", `"hi"`}},
			names:   map[role]string{model: "model", input: "input", stream: "stream", maxTokens: "max_output_tokens"},
			text:    func(s string) string { return s }, refused: openAIRefused},
		{name: "messages", path: "/v1/messages", header: []string{"Anthropic-Version", "2023-06-01"}, key: "X-Api-Key",
			members: [][2]string{{"model", `"gpt-4o-mini"`}, {"max_tokens", "8"}, {"messages", chatMessages(`"hi"`)}},
			names:   map[role]string{model: "model", input: "messages", stream: "stream", maxTokens: "max_tokens"},
			text:    chatMessages, refused: anthropicRefused},
		{name: "count_tokens", path: "/v1/messages/count_tokens", header: []string{"Anthropic-Version", "2023-06-01"}, key: "X-Api-Key",
			members: [][2]string{{"model", `"gpt-4o-mini"`}, {"messages", chatMessages(`"hi"`)}},
			names:   map[role]string{model: "model", input: "messages"},
			text:    chatMessages, refused: anthropicRefused},
	}
}

// body is the valid body with edit applied to a copy of its members.
func (e *endpoint) body(edit func(ms [][2]string) [][2]string) string {
	ms := slices.Clone(e.members)
	if edit != nil {
		ms = edit(ms)
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(m[0]) + ":" + m[1])
	}
	return b.String() + "}"
}

func (e *endpoint) valid() string { return e.body(nil) }

// with is the valid body with r's member set to raw (added when the
// valid body has none).
func (e *endpoint) with(r role, raw string) string {
	return e.body(func(ms [][2]string) [][2]string {
		for i := range ms {
			if ms[i][0] == e.names[r] {
				ms[i][1] = raw
				return ms
			}
		}
		return append(ms, [2]string{e.names[r], raw})
	})
}

func (e *endpoint) without(r role) string {
	return e.body(func(ms [][2]string) [][2]string {
		return slices.DeleteFunc(ms, func(m [2]string) bool { return m[0] == e.names[r] })
	})
}

// twice is the valid body with r's member given again, the same value
// both times.
func (e *endpoint) twice(r role) string {
	return e.body(func(ms [][2]string) [][2]string {
		for _, m := range ms {
			if m[0] == e.names[r] {
				return append(ms, m)
			}
		}
		return ms
	})
}

// padded is the valid body grown past n bytes by a member no endpoint
// reads.
func (e *endpoint) padded(n int) string {
	return e.body(func(ms [][2]string) [][2]string {
		return append(ms, [2]string{"pad", `"` + strings.Repeat("x", n) + `"`})
	})
}

// openAIRefused checks an error in OpenAI's shape: {"error":{"message",
// "type","param","code"}}, every bad input an invalid_request_error, and
// param naming the member at fault (null when the body as a whole is).
func openAIRefused(t *testing.T, e *endpoint, status int, h http.Header, body []byte, want refusal) {
	t.Helper()
	var doc map[string]json.RawMessage
	var inner map[string]json.RawMessage
	var er struct {
		Message, Type string
		Param, Code   *string
	}
	switch {
	case status != want.status:
		t.Fatalf("status %d, want %d: %s", status, want.status, body)
	case !strings.HasPrefix(h.Get("Content-Type"), "application/json"):
		t.Fatalf("Content-Type %q: %s", h.Get("Content-Type"), body)
	case json.Unmarshal(body, &doc) != nil || len(doc) != 1 || doc["error"] == nil:
		t.Fatalf("not OpenAI's error shape: %s", body)
	case json.Unmarshal(doc["error"], &inner) != nil || len(inner) != 4 || inner["message"] == nil || inner["type"] == nil ||
		inner["param"] == nil || inner["code"] == nil:
		t.Fatalf("the error object is not message, type, param and code: %s", body)
	case json.Unmarshal(doc["error"], &er) != nil:
		t.Fatalf("the error's members are not strings: %s", body)
	}
	if er.Message == "" || er.Type != "invalid_request_error" || er.Code == nil || *er.Code != want.code {
		t.Fatalf("error %s; want an invalid_request_error with code %q and a message", doc["error"], want.code)
	}
	readable(t, er.Message)
	switch name := e.names[want.param]; {
	case want.param == whole && er.Param != nil:
		t.Fatalf("param %q; want null, the body as a whole is at fault: %s", *er.Param, body)
	case want.param != whole && (er.Param == nil || *er.Param != name):
		t.Fatalf("param %s; want %q: %s", inner["param"], name, body)
	}
}

// anthropicErrorTypes are Anthropic's error types of the statuses the
// table expects.
var anthropicErrorTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 413: "request_too_large",
}

// anthropicRefused checks an error in Anthropic's shape:
// {"type":"error","error":{"type","message"}}, the message naming the
// member at fault as Anthropic's do.
func anthropicRefused(t *testing.T, e *endpoint, status int, h http.Header, body []byte, want refusal) {
	t.Helper()
	var doc struct {
		Type  string
		Error map[string]json.RawMessage
	}
	var er struct{ Type, Message string }
	switch {
	case status != want.status:
		t.Fatalf("status %d, want %d: %s", status, want.status, body)
	case !strings.HasPrefix(h.Get("Content-Type"), "application/json"):
		t.Fatalf("Content-Type %q: %s", h.Get("Content-Type"), body)
	case json.Unmarshal(body, &doc) != nil || doc.Type != "error" || len(doc.Error) != 2:
		t.Fatalf("not Anthropic's error shape: %s", body)
	case json.Unmarshal(body, &struct {
		Error *struct{ Type, Message string }
	}{&er}) != nil:
		t.Fatalf("the error's members are not strings: %s", body)
	}
	if er.Type != anthropicErrorTypes[want.status] || er.Message == "" {
		t.Fatalf("error type %q, message %q; want %s with a message", er.Type, er.Message, anthropicErrorTypes[want.status])
	}
	readable(t, er.Message)
	if name := e.names[want.param]; want.param != whole && !strings.Contains(er.Message, name) {
		t.Fatalf("the message does not name %s: %q", name, er.Message)
	}
}

// readable fails a message that speaks of the node's Go internals
// (encoding/json's "json: cannot unmarshal ... Go struct field ...")
// rather than of the API's members and types.
func readable(t *testing.T, msg string) {
	t.Helper()
	for _, internal := range []string{"json:", "Go ", "struct", "[]"} {
		if strings.Contains(msg, internal) {
			t.Fatalf("the message speaks of Go, not of the API (%q): %q", internal, msg)
		}
	}
}

// transport sends a request whose head (request line and headers, up to
// the framing) is given, with body, in a way an ordinary client does
// not, and returns the answer. It fails the test when the answer takes
// longer than rawAnswerBound: the node must not wait for the rest of a
// body it has refused.
type transport func(t *testing.T, addr, head, body string) (int, http.Header, []byte)

// rawAnswerBound is how long a refusal may take over a raw connection:
// far less than the body read timeout (30 s), so an answer that waited
// for it fails.
const rawAnswerBound = 5 * time.Second

// raw dials addr, writes what send writes, and reads the answer.
func raw(t *testing.T, addr string, send func(c *net.TCPConn)) (int, http.Header, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send(conn.(*net.TCPConn))
	_ = conn.SetReadDeadline(time.Now().Add(rawAnswerBound))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", rawAnswerBound, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the answer's body within %s: %v", rawAnswerBound, err)
	}
	return resp.StatusCode, resp.Header, b
}

// withheld declares a body of declared bytes and sends none of it.
func withheld(declared int) transport {
	return func(t *testing.T, addr, head, _ string) (int, http.Header, []byte) {
		return raw(t, addr, func(c *net.TCPConn) { fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n", head, declared) })
	}
}

// chunkedWithheld sends the body as one chunk and never ends it.
func chunkedWithheld(t *testing.T, addr, head, body string) (int, http.Header, []byte) {
	return raw(t, addr, func(c *net.TCPConn) {
		fmt.Fprintf(c, "%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", head, len(body), body)
	})
}

// cutShort declares more than the body and closes the sending side
// after it.
func cutShort(t *testing.T, addr, head, body string) (int, http.Header, []byte) {
	return raw(t, addr, func(c *net.TCPConn) {
		fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", head, len(body)+64, body)
		_ = c.CloseWrite()
	})
}

// badInputLimit is the body limit of the table's node.
const badInputLimit = 4096

const wrongKey = "sk-wrong-0123456789abcdef"

// The same bad input, sent to every endpoint, is refused by each with
// the status chat's is, in that endpoint's own error shape (OpenAI's,
// param naming the member at fault, or Anthropic's, its message naming
// it), with the headers every answer carries (X-Request-Id,
// X-LLMesh-Node), and without the node waiting for the rest of a body it
// refused. The rows are kinds of bad input, the columns endpoints; a row
// about a member an endpoint does not have does not apply to it.
func TestBadInputOnEveryEndpoint(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai", embeddings: []string{"emb"}}}, func(c *node.Config) {
		c.Limits.MaxBodyBytes = badInputLimit
	})
	addr := strings.TrimPrefix(f.url, "http://")
	invalid := func(p role) refusal { return refusal{status: 400, code: "invalid_request", param: p} }
	tooLarge := refusal{status: 413, code: "request_too_large"}
	unauthorized := refusal{status: 401, code: "invalid_api_key"}
	servesValid(t, addr, "before the table")
	for _, row := range []struct {
		name string
		// needs are the roles the row is about; it applies to the
		// endpoints that have them.
		needs []role
		body  func(e *endpoint) string
		// key is sent as the endpoint's clients send theirs: testKey
		// unless given, none when "-".
		key string
		// bare leaves out the headers the endpoint requires; it
		// applies to the endpoints that require some.
		bare bool
		send transport // nil: an ordinary client's request
		want refusal
	}{
		{name: "malformed JSON", body: func(e *endpoint) string { return strings.TrimSuffix(e.valid(), "}") + ",}" }, want: invalid(whole)},
		{name: "truncated body", body: func(e *endpoint) string { v := e.valid(); return v[:len(v)*2/3] }, want: invalid(whole)},
		{name: "trailing data", body: func(e *endpoint) string { return e.valid() + ` {"model":"gpt-9"}` }, want: invalid(whole)},
		{name: "empty body", body: func(e *endpoint) string { return "" }, want: invalid(whole)},
		{name: "an array", body: func(e *endpoint) string { return "[" + e.valid() + "]" }, want: invalid(whole)},
		{name: "a string", body: func(e *endpoint) string { return `"hello"` }, want: invalid(whole)},
		{name: "null", body: func(e *endpoint) string { return "null" }, want: invalid(whole)},
		{name: "invalid UTF-8", needs: []role{input}, body: func(e *endpoint) string { return e.with(input, e.text("\"caf\xe9 \xff\"")) }, want: invalid(whole)},
		{name: "model not a string", needs: []role{model}, body: func(e *endpoint) string { return e.with(model, "42") }, want: invalid(model)},
		{name: "model missing", needs: []role{model}, body: func(e *endpoint) string { return e.without(model) }, want: invalid(model)},
		{name: "model empty", needs: []role{model}, body: func(e *endpoint) string { return e.with(model, `""`) }, want: invalid(model)},
		{name: "model twice", needs: []role{model}, body: func(e *endpoint) string { return e.twice(model) }, want: invalid(model)},
		{name: "model unknown", needs: []role{model}, body: func(e *endpoint) string { return e.with(model, `"gpt-9"`) },
			want: refusal{status: 404, code: "model_not_found", param: model}},
		{name: "input of the wrong type", needs: []role{input}, body: func(e *endpoint) string { return e.with(input, "42") }, want: invalid(input)},
		{name: "input missing", needs: []role{input}, body: func(e *endpoint) string { return e.without(input) }, want: invalid(input)},
		{name: "stream not a boolean", needs: []role{stream}, body: func(e *endpoint) string { return e.with(stream, `"yes"`) }, want: invalid(stream)},
		{name: "max tokens a string", needs: []role{maxTokens}, body: func(e *endpoint) string { return e.with(maxTokens, `"8"`) }, want: invalid(maxTokens)},
		{name: "max tokens negative", needs: []role{maxTokens}, body: func(e *endpoint) string { return e.with(maxTokens, "-1") }, want: invalid(maxTokens)},
		{name: "oversize", body: func(e *endpoint) string { return e.padded(badInputLimit) },
			want: tooLarge},
		{name: "oversize, declared and withheld", body: func(e *endpoint) string { return "" }, send: withheld(2 * badInputLimit),
			want: tooLarge},
		{name: "oversize, chunked and never ended", body: func(e *endpoint) string { return e.padded(badInputLimit) }, send: chunkedWithheld,
			want: tooLarge},
		{name: "cut short in transit", body: func(e *endpoint) string { return e.valid() }, send: cutShort, want: invalid(whole)},
		{name: "wrong key", body: (*endpoint).valid, key: wrongKey, want: unauthorized},
		{name: "no key", body: (*endpoint).valid, key: "-", want: unauthorized},
		{name: "no key, the body withheld", body: func(e *endpoint) string { return "" }, key: "-", send: withheld(1000),
			want: unauthorized},
		{name: "a required header missing", body: (*endpoint).valid, bare: true, want: invalid(whole)},
	} {
		t.Run(row.name, func(t *testing.T) {
			for _, e := range badInputEndpoints() {
				t.Run(e.name, func(t *testing.T) {
					for _, r := range row.needs {
						if _, ok := e.names[r]; !ok {
							t.Skipf("%s has no such member", e.name)
						}
					}
					if row.bare && len(e.header) == 0 {
						t.Skipf("%s requires no header", e.name)
					}
					key := cmp.Or(row.key, testKey)
					if key == "-" {
						key = ""
					}
					status, h, body := sendTo(t, addr, e, row.body(e), key, row.bare, row.send)
					requestHeaders(t, h)
					e.refused(t, e, status, h, body, row.want)
				})
			}
		})
	}
	servesValid(t, addr, "after the table")
}

// servesValid checks that every endpoint serves its valid body: the
// table's refusals are the bad input's, and leave the node serving.
func servesValid(t *testing.T, addr, when string) {
	t.Helper()
	for _, e := range badInputEndpoints() {
		status, h, body := sendTo(t, addr, e, e.valid(), testKey, false, nil)
		requestHeaders(t, h)
		if status != 200 {
			t.Fatalf("%s, %s: a valid request: %d %s", e.name, when, status, body)
		}
	}
}

// sendTo sends body to e with key (none when ""), the endpoint's
// required headers unless bare, by send (nil for an ordinary client).
func sendTo(t *testing.T, addr string, e *endpoint, body, key string, bare bool, send transport) (int, http.Header, []byte) {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if key != "" {
		h.Set(e.key, e.keyPrefix+key)
	}
	for i := 0; !bare && i+1 < len(e.header); i += 2 {
		h.Set(e.header[i], e.header[i+1])
	}
	if send != nil {
		var head strings.Builder
		fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\n", e.path, addr)
		for _, k := range slices.Sorted(maps.Keys(h)) {
			fmt.Fprintf(&head, "%s: %s\r\n", k, h.Get(k))
		}
		return send(t, addr, head.String(), body)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+e.path, bytes.NewReader([]byte(body)))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// requestHeaders checks the headers chat's answers, refusals included,
// carry: the request's id and the node that answered.
func requestHeaders(t *testing.T, h http.Header) {
	t.Helper()
	if h.Get("X-Request-Id") == "" || h.Get("X-LLMesh-Node") != "test-1" {
		t.Errorf("X-Request-Id %q, X-LLMesh-Node %q; every answer names its request and node", h.Get("X-Request-Id"), h.Get("X-LLMesh-Node"))
	}
}

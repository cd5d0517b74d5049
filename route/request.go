package route

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// ChatRequest is a decoded, validated request of one of the APIs a node
// serves: a chat completion, or (API) an embeddings request, which has
// input in place of messages and no completion. The node interprets only
// the fields below; every other field of the body (tools, tool_choice,
// response_format, seed, logprobs, encoding_format, vendor extensions,
// ...) is relayed to the provider byte for byte.
type ChatRequest struct {
	// API is the endpoint the request was sent to.
	API      API
	Model    string
	Messages []Message
	Stream   bool
	// IncludeUsage is stream_options.include_usage: the client wants a
	// final chunk carrying usage.
	IncludeUsage bool
	// MaxTokens is max_completion_tokens, else max_tokens; 0 when neither
	// is given.
	MaxTokens int
	// N is the number of choices asked for (1 when absent).
	N int
	// User is the body's user field, the session key when no
	// X-LLMesh-Session header is given.
	User string
	// PreviousResponseID is a Responses request's previous_response_id
	// ("" when none), and Store its store (true unless false was given).
	// Prior is what the node recorded of that response, set before the
	// request is planned: a follow-up is pinned to its provider.
	PreviousResponseID string
	Store              bool
	Prior              *Prior
	// CacheKey is prompt_cache_key (chat and Responses): the client's name
	// for requests that share a prompt prefix. It is relayed untouched;
	// replica choice keeps requests with one key together.
	CacheKey string

	textBytes int // bytes of text in messages (content, names, tool calls) or inputs
	images    int // image parts, each priced at tokensPerImage at most
	// inputs are an embeddings request's texts, inputTokens its token
	// ids given as numbers.
	inputs      []string
	inputTokens int
	bestOf      int // a legacy completion's best_of; 0 when absent
	prompts     int // a legacy completion's prompts, each answered n times
	// defaultMax: a legacy completion gave no max_tokens, and the bound
	// priced (MaxTokens) is written into the body sent on, so that no
	// provider's own default (llama.cpp's is unbounded) can exceed it.
	defaultMax bool
	raw        []byte
	rawLen     int // a synthetic request's body length (it has no body)
	members    []member
	memberRoom [8]member // members' room in the request's own allocation
}

// Message is one entry of messages, decoded only as far as routing and
// accounting need.
type Message struct {
	Role       string     `json:"role"`
	Name       string     `json:"name"`
	Content    Content    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolCallID string     `json:"tool_call_id"`

	images int
}

// ToolCall is an assistant message's call of a tool.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Content is a message's content: a string, an array of typed parts, or
// null.
type Content struct {
	Text  string
	Parts []ContentPart
	Set   bool // present and not null
}

// ContentPart is one element of an array content.
type ContentPart struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// UnmarshalJSON accepts a string, an array of parts or null.
func (c *Content) UnmarshalJSON(b []byte) error { return c.decode(b, false) }

// decode sets c from b; inBody means b is part of a request body its
// parse keeps, which a plain string's text may share (alias) instead of
// copying: a prompt's text is most of the body.
func (c *Content) decode(b []byte, inBody bool) error {
	switch b[0] {
	case 'n':
		*c = Content{}
		return nil
	case '"':
		c.Set = true
		if inBody && bytes.IndexByte(b, '\\') < 0 && utf8.Valid(b) {
			c.Text = alias(b[1 : len(b)-1])
			return nil
		}
		return decodeString(b, &c.Text)
	case '[':
		c.Set = true
		if err := json.Unmarshal(b, &c.Parts); err != nil {
			return &InvalidRequestError{Param: "content", Msg: "must be an array of content parts, each an object with a string type"}
		}
		return nil
	}
	return &InvalidRequestError{Param: "content", Msg: "must be a string, an array of content parts or null"}
}

// texts returns the text of m's content parts, name and tool calls excluded.
func (m *Message) texts() []string {
	if m.Content.Parts == nil {
		return []string{m.Content.Text}
	}
	out := make([]string, 0, len(m.Content.Parts))
	for _, p := range m.Content.Parts {
		out = append(out, p.Text, p.Refusal)
	}
	return out
}

var validRoles = map[string]bool{
	"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true,
}

// SyntheticChat is a request with no body, as the simulator plans them:
// promptTokens of prompt (at four bytes a token, the estimate's own
// assumption, in one user message) and a completion of maxTokens.
func SyntheticChat(model string, promptTokens, maxTokens int, stream bool, user string) *ChatRequest {
	text := 4 * max(promptTokens, 1)
	return &ChatRequest{Model: model, Messages: []Message{{Role: "user"}}, Stream: stream, MaxTokens: maxTokens, N: 1, User: user,
		textBytes: text, rawLen: text + 64}
}

// ParseChatRequest decodes and validates body. The returned request keeps
// body, and its messages' text shares body's bytes (alias): body must not
// be modified afterwards. Errors are InvalidRequestError
// naming the offending parameter.
//
// Beyond what encoding/json checks, it refuses duplicate top-level fields:
// a body whose "model" appears twice could be routed on one value and
// executed by a provider that reads the other.
func ParseChatRequest(body []byte) (*ChatRequest, error) {
	r := &ChatRequest{raw: body, N: 1}
	members, err := topMembersInto(r.memberRoom[:0], body)
	if err != nil {
		return nil, err
	}
	r.members = members
	var haveModel, haveMessages bool
	var maxTokens, maxCompletion int
	for _, m := range members {
		v := body[m.vstart:m.vend]
		switch m.key {
		case "model":
			haveModel = true
			if err := decodeText(m.key, v, &r.Model); err != nil {
				return nil, err
			}
		case "messages":
			haveMessages = true
			if err := r.decodeMessages(v); err != nil {
				return nil, err
			}
		case "stream":
			if err := decodeBool(m.key, v, &r.Stream); err != nil {
				return nil, err
			}
		case "stream_options":
			if err := r.decodeStreamOptions(v); err != nil {
				return nil, err
			}
		case "max_tokens":
			if err := decodeCount(m.key, v, &maxTokens, 1, 1<<30); err != nil {
				return nil, err
			}
		case "max_completion_tokens":
			if err := decodeCount(m.key, v, &maxCompletion, 1, 1<<30); err != nil {
				return nil, err
			}
		case "n":
			if err := decodeCount(m.key, v, &r.N, 1, 128); err != nil {
				return nil, err
			}
		case "user":
			if err := decodeField(m.key, v, &r.User); err != nil {
				return nil, err
			}
		case "prompt_cache_key":
			if err := decodeNullableString(m.key, v, &r.CacheKey); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case !haveModel || r.Model == "":
		return nil, invalid("model", "is required")
	case !haveMessages:
		return nil, invalid("messages", "is required")
	case len(r.Messages) == 0:
		return nil, invalid("messages", "must contain at least one message")
	}
	if r.N == 0 {
		r.N = 1 // "n": null
	}
	r.MaxTokens = maxTokens
	if maxCompletion > 0 {
		r.MaxTokens = maxCompletion
	}
	if !r.Stream {
		r.IncludeUsage = false
	}
	return r, nil
}

// topMembers checks that body is valid JSON in UTF-8 and returns its
// top-level members, refusing one given twice: the start of every
// endpoint's parse. encoding/json accepts invalid UTF-8 in strings (and
// mends it when decoding), but JSON exchanged is UTF-8 (RFC 8259 §8.1):
// a body that is not would be read one way here and another by each
// provider it is relayed to byte for byte.
func topMembers(body []byte) ([]member, error) { return topMembersInto(make([]member, 0, 8), body) }

// topMembersInto is topMembers appending to out.
func topMembersInto(out []member, body []byte) ([]member, error) {
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return nil, invalid("", "the request body is empty")
	case !validJSON(body):
		return nil, invalid("", "the request body is not valid JSON")
	case !utf8.Valid(body):
		return nil, invalid("", "the request body is not valid UTF-8")
	}
	return scanObject(out, body)
}

// CheckObject refuses, as every endpoint's parse does, a body that is not
// one JSON object in UTF-8 or gives a top-level member twice. The
// Messages API, whose body is translated (route/anthropic) rather than
// parsed here, is checked by it first, so that it refuses what the
// OpenAI endpoints refuse.
func CheckObject(body []byte) error {
	_, err := topMembers(body)
	return err
}

func (r *ChatRequest) decodeMessages(v []byte) error {
	if v[0] != '[' {
		return invalid("messages", "must be an array of messages")
	}
	var room [8][]byte // most conversations' messages, on the stack
	raws := scanArrayInto(room[:0], v)
	r.Messages = make([]Message, len(raws))
	for i, raw := range raws {
		m := &r.Messages[i]
		// The parameter an error names, built only for an error.
		param := func(sub string) string { return "messages[" + strconv.Itoa(i) + "]" + sub }
		if raw[0] != '{' {
			return invalid(param(""), "must be an object")
		}
		if err := m.decode(raw); err != nil {
			return fieldError(param(""), err)
		}
		if !validRoles[m.Role] {
			return invalid(param(".role"), "must be one of system, developer, user, assistant, tool, function; got %q", m.Role)
		}
		if !m.Content.Set && m.Role != "assistant" {
			return invalid(param(".content"), "is required for a %s message", m.Role)
		}
		if m.Role == "tool" && m.ToolCallID == "" {
			return invalid(param(".tool_call_id"), "is required for a tool message")
		}
		for j, p := range m.Content.Parts {
			if p.Type == "" {
				return invalid(param(".content["+strconv.Itoa(j)+"].type"), "is required")
			}
			if p.Type == "image_url" || p.Type == "input_image" {
				m.images++
			}
		}
		r.images += m.images
		r.textBytes += len(m.Role) + len(m.Name)
		for _, t := range m.texts() {
			r.textBytes += len(t)
		}
		for _, tc := range m.ToolCalls {
			r.textBytes += len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	return nil
}

// decodeText decodes a top-level string (or null, which leaves dst as
// it is), as decodeField would, without encoding/json for a plain one.
func decodeText(param string, v []byte, dst *string) error {
	if v[0] != '"' && v[0] != 'n' {
		return decodeField(param, v, dst) // its type error
	}
	if err := decodeString(v, dst); err != nil {
		return fieldError(param, err)
	}
	return nil
}

// decodeBool decodes a top-level boolean (or null, which leaves dst as
// it is), as decodeField would, without encoding/json.
func decodeBool(param string, v []byte, dst *bool) error {
	switch string(v) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	case "null":
	default:
		return decodeField(param, v, dst) // its type error
	}
	return nil
}

// decodeField decodes one top-level value into dst with an error naming the
// parameter.
func decodeField(param string, v []byte, dst any) error {
	if err := json.Unmarshal(v, dst); err != nil {
		return fieldError(param, err)
	}
	return nil
}

// decodeNullableString decodes a string, or null (left as it is).
func decodeNullableString(param string, v []byte, dst *string) error {
	var s *string
	if err := decodeField(param, v, &s); err != nil {
		return err
	}
	if s != nil {
		*dst = *s
	}
	return nil
}

// decodeCount decodes an integer (or null) that must lie in [lo, hi].
func decodeCount(param string, v []byte, dst *int, lo, hi int) error {
	if v[0] == 'n' {
		return nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return invalid(param, "must be an integer")
	}
	if n < int64(lo) || n > int64(hi) {
		return invalid(param, "must be between %d and %d; got %d", lo, hi, n)
	}
	*dst = int(n)
	return nil
}

func fieldError(param string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			param += "." + te.Field
		}
		return invalid(param, "must be of type %s, not %s", jsonType(te.Type.Kind().String()), te.Value)
	}
	var ie *InvalidRequestError
	if errors.As(err, &ie) {
		return invalid(param+"."+ie.Param, "%s", ie.Msg)
	}
	return invalid(param, "%s", err.Error())
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map":
		return "object"
	case "float32", "float64":
		return "number"
	}
	return "integer"
}

// Body returns the request body as the client sent it.
func (r *ChatRequest) Body() []byte { return r.raw }

// UpstreamBody returns the body to send upstream: the client's body with
// model set to the provider's name for it and, for streams, usage asked for
// so that every stream can be accounted. Every other byte is the client's.
// When nothing needs to change, the client's body itself is returned.
func (r *ChatRequest) UpstreamBody(model string) []byte {
	return r.rewrite(model, r.Stream && !r.IncludeUsage && r.API != APIResponses)
}

// WithModel returns the client's body with model set to model (the body
// itself when it names it already): what a node forwards, so the node it
// forwards to serves exactly the model planned, not a group's choice.
func (r *ChatRequest) WithModel(model string) []byte { return r.rewrite(model, false) }

func (r *ChatRequest) rewrite(model string, wantUsage bool) []byte {
	if model == r.Model && !wantUsage && !r.defaultMax {
		return r.raw
	}
	out := make([]byte, 0, len(r.raw)+64)
	out = append(out, '{')
	sawOptions, sawMax := false, false
	for i, m := range r.members {
		if i > 0 {
			out = append(out, ',')
		}
		switch {
		case m.key == "model":
			out = append(out, `"model":`...)
			out = strconv.AppendQuote(out, model)
		case m.key == "stream_options" && wantUsage:
			sawOptions = true
			out = append(out, `"stream_options":`...)
			out = append(out, withIncludeUsage(r.raw[m.vstart:m.vend])...)
		case m.key == "max_tokens" && r.defaultMax: // null
			sawMax = true
			out = append(out, `"max_tokens":`...)
			out = strconv.AppendInt(out, int64(r.MaxTokens), 10)
		default:
			out = append(out, r.raw[m.start:m.end]...)
		}
	}
	if wantUsage && !sawOptions {
		if len(r.members) > 0 {
			out = append(out, ',')
		}
		out = append(out, `"stream_options":{"include_usage":true}`...)
	}
	if r.defaultMax && !sawMax {
		out = append(out, `,"max_tokens":`...)
		out = strconv.AppendInt(out, int64(r.MaxTokens), 10)
	}
	return append(out, '}')
}

// withIncludeUsage returns the stream_options object v with include_usage
// set, keeping any other option the client gave.
func withIncludeUsage(v []byte) []byte {
	opts := map[string]json.RawMessage{}
	if v[0] == '{' {
		if err := json.Unmarshal(v, &opts); err != nil {
			return []byte(`{"include_usage":true}`)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	b, err := json.Marshal(opts)
	if err != nil {
		return []byte(`{"include_usage":true}`)
	}
	return b
}

// decode sets m from raw, a JSON object that json.Valid accepted, as
// json.Unmarshal would but for member names, which match exactly (as
// providers read them), and without decoding or re-validating a string
// content that needs no unescaping: a prompt of 8,000 tokens is 30 KiB or
// more, and passing over it once more costs more than everything else the
// node does with the request.
func (m *Message) decode(raw []byte) error {
	return eachMember(raw, func(key string, v []byte) error {
		var err error
		switch key {
		case "role":
			err = decodeString(v, &m.Role)
		case "name":
			err = decodeString(v, &m.Name)
		case "tool_call_id":
			err = decodeString(v, &m.ToolCallID)
		case "content":
			err = m.Content.decode(v, true)
		case "tool_calls":
			m.ToolCalls = nil
			err = json.Unmarshal(v, &m.ToolCalls)
		}
		if err == nil {
			return nil
		}
		if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
			if te.Field == "" {
				te.Field = key
			} else {
				te.Field = key + "." + te.Field
			}
		}
		return err
	})
}

// decodeString decodes a JSON string (or null, which leaves dst as it is)
// that json.Valid accepted; one without escapes (and valid UTF-8, which
// encoding/json would mend) is copied, not decoded.
func decodeString(v []byte, dst *string) error {
	if v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
		*dst = intern(v[1 : len(v)-1])
		return nil
	}
	return json.Unmarshal(v, dst)
}

// Package anthropic translates between Anthropic's Messages API and the
// chat completions the mesh plans, forwards, budgets and relays, both
// ways:
//
//   - in, at a node's edge (POST /v1/messages): a Messages request into a
//     chat completion (ToChat), and the chat answer, whole or streamed,
//     back into a Message and Anthropic's stream events (FromChat,
//     Stream); refusals take Anthropic's error shape;
//   - out, to a provider of route's anthropic kind: a chat request into a
//     Messages request (FromChatRequest), and its Message, stream and
//     errors back into chat's (ToChatAnswer, StreamReader, ToOpenAIError).
//
// The translation keeps text, system prompts, images, tools and tool
// results, stop sequences, stop reasons and usage; what the other side
// cannot carry (documents, thinking, server tools, more than four stop
// sequences, several choices) is refused with a clear error rather than
// dropped. top_k, a sampling hint chat has no field for, is not sent on;
// a stop at a stop sequence reads as end_turn (chat does not say which).
//
// The package imports no project package.
package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Request is what the node needs of a translated request.
type Request struct {
	// Chat is the chat completion request's body.
	Chat []byte
	// Model is the model asked for, the answer's model.
	Model  string
	Stream bool
}

// Error is a request the translation refuses: invalid_request_error,
// status 400, naming what is wrong.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func bad(format string, args ...any) *Error { return &Error{Msg: fmt.Sprintf(format, args...)} }

type inMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

type inRequest struct {
	Model         *string         `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []inMessage     `json:"messages"`
	Stream        bool            `json:"stream"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	Tools         []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
		Type        string          `json:"type"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
	Metadata *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

// chat message and part shapes, as the chat API reads them.
type chatPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// ToChat translates a Messages request body into a chat completion
// request body. counting is a count_tokens request's, which has no
// max_tokens.
func ToChat(body []byte, counting bool) (*Request, error) {
	var in inRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, decodeError(err)
	}
	switch {
	case in.Model == nil || *in.Model == "":
		return nil, bad("model: Field required")
	case in.MaxTokens == nil && counting:
		in.MaxTokens = new(int)
		*in.MaxTokens = 1
	case in.MaxTokens == nil:
		return nil, bad("max_tokens: Field required")
	case *in.MaxTokens < 1:
		return nil, bad("max_tokens: must be at least 1")
	case len(in.Messages) == 0:
		return nil, bad("messages: at least one message is required")
	case in.Thinking != nil && in.Thinking.Type == "enabled":
		return nil, bad("thinking: extended thinking is not supported by this gateway")
	case len(in.StopSequences) > 4:
		return nil, bad("stop_sequences: at most 4 are supported by this gateway (chat providers take 4); got %d", len(in.StopSequences))
	}
	var msgs []chatMessage
	if len(in.System) > 0 && string(in.System) != "null" {
		text, err := systemText(in.System)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, chatMessage{Role: "system", Content: text})
	}
	for i, m := range in.Messages {
		out, err := translateMessage(i, m)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, out...)
	}
	chat := map[string]any{"model": *in.Model, "messages": msgs, "max_tokens": *in.MaxTokens}
	if in.Stream {
		chat["stream"] = true
		chat["stream_options"] = map[string]bool{"include_usage": true}
	}
	if len(in.StopSequences) > 0 {
		chat["stop"] = in.StopSequences
	}
	if in.Temperature != nil {
		chat["temperature"] = *in.Temperature
	}
	if in.TopP != nil {
		chat["top_p"] = *in.TopP
	}
	if in.Metadata != nil && in.Metadata.UserID != "" {
		chat["user"] = in.Metadata.UserID
	}
	if err := translateTools(&in, chat); err != nil {
		return nil, err
	}
	b, err := json.Marshal(chat)
	if err != nil {
		return nil, bad("%v", err)
	}
	return &Request{Chat: b, Model: *in.Model, Stream: in.Stream}, nil
}

// decodeError is the refusal of a body encoding/json could not decode:
// a member of the wrong type is named, as Anthropic's API names it
// ("max_tokens: ..."), and described in JSON's types, not Go's.
func decodeError(err error) *Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return bad("%s: must be of type %s, not %s", te.Field, jsonType(te.Type.Kind()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return bad("the request body is not valid JSON: %v", err)
	}
	return bad("the request body is not a valid Messages request: it must be a JSON object")
}

// jsonType names the JSON type a Go kind decodes from.
func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return "integer"
}

func systemText(raw json.RawMessage) (string, error) {
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", bad("system: must be a string or an array of text blocks")
	}
	var parts []string
	for i, b := range blocks {
		if b.Type != "text" {
			return "", bad("system[%d].type: must be text; got %q", i, b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

// translateMessage turns one Messages message into chat messages: tool
// results become tool messages (ahead of the rest of the user's turn),
// tool uses the assistant's tool calls.
func translateMessage(i int, m inMessage) ([]chatMessage, error) {
	if m.Role != "user" && m.Role != "assistant" {
		return nil, bad("messages[%d].role: must be user or assistant; got %q", i, m.Role)
	}
	if len(m.Content) == 0 {
		return nil, bad("messages[%d].content: Field required", i)
	}
	if m.Content[0] == '"' {
		var s string
		_ = json.Unmarshal(m.Content, &s)
		return []chatMessage{{Role: m.Role, Content: s}}, nil
	}
	var blocks []block
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, bad("messages[%d].content: must be a string or an array of content blocks", i)
	}
	var out []chatMessage
	var parts []chatPart
	var calls []chatToolCall
	for j, b := range blocks {
		where := fmt.Sprintf("messages[%d].content[%d]", i, j)
		switch b.Type {
		case "text":
			parts = append(parts, chatPart{Type: "text", Text: b.Text})
		case "image":
			if m.Role != "user" || b.Source == nil {
				return nil, bad("%s: an image needs a source, in a user message", where)
			}
			url := b.Source.URL
			if b.Source.Type == "base64" {
				url = "data:" + b.Source.MediaType + ";base64," + b.Source.Data
			}
			parts = append(parts, chatPart{Type: "image_url", ImageURL: &imageURL{URL: url}})
		case "tool_use":
			if m.Role != "assistant" {
				return nil, bad("%s: tool_use blocks belong in assistant messages", where)
			}
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			c := chatToolCall{ID: b.ID, Type: "function"}
			c.Function.Name, c.Function.Arguments = b.Name, args
			calls = append(calls, c)
		case "tool_result":
			if m.Role != "user" || b.ToolUseID == "" {
				return nil, bad("%s: a tool_result needs a tool_use_id, in a user message", where)
			}
			text, err := resultText(b.Content, where)
			if err != nil {
				return nil, err
			}
			if b.IsError {
				text = "Error: " + text
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: text})
		default:
			return nil, bad("%s.type: %q is not supported by this gateway (text, image, tool_use and tool_result are)", where, b.Type)
		}
	}
	if len(parts) > 0 || len(calls) > 0 {
		msg := chatMessage{Role: m.Role, ToolCalls: calls}
		switch {
		case len(parts) == 0:
			msg.Content = nil
		case m.Role == "assistant":
			msg.Content = joinText(parts) // an assistant's content is text
		default:
			msg.Content = parts
		}
		out = append(out, msg)
	}
	return out, nil
}

func joinText(parts []chatPart) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// resultText is a tool result's content as text: a string, or its text
// blocks joined.
func resultText(raw json.RawMessage, where string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", bad("%s.content: must be a string or an array of text blocks", where)
	}
	var parts []string
	for _, b := range blocks {
		if b.Type != "text" {
			return "", bad("%s.content: only text blocks are supported in a tool result; got %q", where, b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n"), nil
}

func translateTools(in *inRequest, chat map[string]any) error {
	if len(in.Tools) > 0 {
		var tools []any
		for i, t := range in.Tools {
			if t.Type != "" && t.Type != "custom" {
				return bad("tools[%d].type: %q is a server tool this gateway does not run", i, t.Type)
			}
			if t.Name == "" {
				return bad("tools[%d].name: Field required", i)
			}
			schema := t.InputSchema
			if len(schema) == 0 {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			tools = append(tools, map[string]any{"type": "function",
				"function": map[string]any{"name": t.Name, "description": t.Description, "parameters": schema}})
		}
		chat["tools"] = tools
	}
	if tc := in.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			chat["tool_choice"] = "auto"
		case "any":
			chat["tool_choice"] = "required"
		case "none":
			chat["tool_choice"] = "none"
		case "tool":
			chat["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		default:
			return bad("tool_choice.type: must be auto, any, tool or none; got %q", tc.Type)
		}
	}
	return nil
}

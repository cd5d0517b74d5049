// Package responses bridges OpenAI's Responses API (POST /v1/responses)
// to the chat completions a provider without a Responses endpoint serves
// (vLLM, SGLang, TGI, Anthropic through route's chat translation):
//
//   - a Responses create body becomes a chat completions body
//     (ToChatRequest), after the conversation a previous_response_id
//     continues;
//   - the chat answer, whole or streamed, becomes a Response object or
//     the Responses stream's events (FromChatAnswer, StreamReader), so
//     that a Responses client cannot tell;
//   - the turn becomes the conversation a later previous_response_id
//     continues (Conversation), a JSON array of chat messages.
//
// The bridge carries text, images by URL, system and developer messages,
// function tools, their calls and outputs, tool choice, structured output
// (text.format), sampling, the output bound, reasoning effort, verbosity,
// logprobs, finish reasons and usage. What chat cannot carry (hosted
// tools, files, item references, background runs, conversations, stored
// prompts, moderation, context management) is refused with an *Error
// naming the field, never dropped. Reasoning items in the input are
// dropped (chat has no place for them), as are hints that do not change
// the answer (store, metadata, include other than logprobs, truncation,
// prompt_cache_key, safety_identifier, service_tier, max_tool_calls,
// reasoning.summary); the Response echoes what it is given of them, as
// OpenAI's does. A developer message is sent as a system message, which
// is what chat providers other than OpenAI know. The reasoning_content
// some providers add to chat's answer, outside its spec, is not shown.
//
// The package holds no state: storing a conversation is the caller's. It
// imports no project package, so that route can import it.
package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
)

// Error is a request the bridge cannot translate: Param names the field
// ("input[2].type", "tools[0].type"), Msg says why. The caller answers it
// with a 400 invalid_request_error naming Param.
type Error struct{ Param, Msg string }

func (e *Error) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

func bad(param, format string, args ...any) *Error {
	return &Error{Param: param, Msg: fmt.Sprintf(format, args...)}
}

// unsupported is the refusal of something only OpenAI's own Responses
// endpoint serves.
func unsupported(param, what string) *Error {
	return bad(param, "%s is not supported by this provider: it serves Chat Completions only", what)
}

// createRequest is a CreateResponse body as far as the bridge reads it.
type createRequest struct {
	Input             json.RawMessage   `json:"input"`
	Instructions      *string           `json:"instructions"`
	Tools             []json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	MaxOutputTokens   *int              `json:"max_output_tokens"`
	Temperature       *float64          `json:"temperature"`
	TopP              *float64          `json:"top_p"`
	User              *string           `json:"user"`
	Stream            *bool             `json:"stream"`
	Text              *struct {
		Format    json.RawMessage `json:"format"`
		Verbosity *string         `json:"verbosity"`
	} `json:"text"`
	Reasoning *struct {
		Effort *string `json:"effort"`
	} `json:"reasoning"`
	Include     []string `json:"include"`
	TopLogprobs *int     `json:"top_logprobs"`
	Background  *bool    `json:"background"`
	// Refused when given: chat has nothing like them.
	Conversation      json.RawMessage `json:"conversation"`
	Prompt            json.RawMessage `json:"prompt"`
	Moderation        json.RawMessage `json:"moderation"`
	ContextManagement json.RawMessage `json:"context_management"`
}

// chatRequest is the chat completions body the bridge writes.
type chatRequest struct {
	Model             string            `json:"model"`
	Messages          []json.RawMessage `json:"messages"`
	Stream            bool              `json:"stream,omitempty"`
	StreamOptions     *streamOptions    `json:"stream_options,omitempty"`
	MaxTokens         *int              `json:"max_tokens,omitempty"`
	Temperature       *float64          `json:"temperature,omitempty"`
	TopP              *float64          `json:"top_p,omitempty"`
	User              string            `json:"user,omitempty"`
	Tools             []chatTool        `json:"tools,omitempty"`
	ToolChoice        any               `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    any               `json:"response_format,omitempty"`
	ReasoningEffort   string            `json:"reasoning_effort,omitempty"`
	Verbosity         string            `json:"verbosity,omitempty"`
	Logprobs          bool              `json:"logprobs,omitempty"`
	TopLogprobs       *int              `json:"top_logprobs,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// logprobsInclude is the include value that asks for output logprobs.
const logprobsInclude = "message.output_text.logprobs"

// ToChatRequest translates a Responses create body into a chat
// completions body for model, the upstream model name it puts in "model".
// prior is the conversation previous_response_id continues (a JSON array
// of chat messages, as Conversation returns it), nil when there is none.
// The messages are the instructions as a system message, then prior, then
// the input. A request the bridge cannot carry is refused with an *Error;
// a prior that is not a JSON array is the caller's fault, a plain error.
func ToChatRequest(body, prior []byte, model string) ([]byte, error) {
	var in createRequest
	if err := decodeRequest(body, &in); err != nil {
		return nil, err
	}
	if err := refuseUnsupported(&in); err != nil {
		return nil, err
	}
	out := chatRequest{Model: model, MaxTokens: in.MaxOutputTokens, Temperature: in.Temperature, TopP: in.TopP}
	if in.Instructions != nil && *in.Instructions != "" {
		out.Messages = append(out.Messages, mustMarshal(chatMessage{Role: "system", Content: *in.Instructions}))
	}
	if len(prior) > 0 {
		var msgs []json.RawMessage
		if err := json.Unmarshal(prior, &msgs); err != nil {
			return nil, fmt.Errorf("responses: the stored conversation is not a JSON array of messages: %w", err)
		}
		out.Messages = append(out.Messages, msgs...)
	}
	input, err := inputMessages(in.Input)
	if err != nil {
		return nil, err
	}
	for _, m := range input {
		out.Messages = append(out.Messages, mustMarshal(m))
	}
	if len(out.Messages) == 0 {
		return nil, bad("input", "Missing required parameter: 'input'.")
	}
	if in.Stream != nil && *in.Stream {
		out.Stream, out.StreamOptions = true, &streamOptions{IncludeUsage: true}
	}
	if in.User != nil {
		out.User = *in.User
	}
	if err := translateTools(&in, &out); err != nil {
		return nil, err
	}
	if err := translateText(&in, &out); err != nil {
		return nil, err
	}
	if in.Reasoning != nil && in.Reasoning.Effort != nil {
		out.ReasoningEffort = *in.Reasoning.Effort
	}
	if slices.Contains(in.Include, logprobsInclude) {
		out.Logprobs, out.TopLogprobs = true, in.TopLogprobs
	}
	return json.Marshal(out)
}

// decodeRequest decodes body into in, naming the field a value of the
// wrong type is in.
func decodeRequest(body []byte, in *createRequest) error {
	if !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
		return bad("", "The request body must be a JSON object.")
	}
	if err := json.Unmarshal(body, in); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return bad(te.Field, "Invalid type for '%s': expected %s, got %s.", te.Field, jsonType(te.Type.Kind()), te.Value)
		}
		return bad("", "The request body is not a valid Responses request: %v", err)
	}
	return nil
}

// jsonType names the JSON type a Go kind decodes from.
func jsonType(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a number"
}

// refuseUnsupported refuses the request's fields that only OpenAI's own
// Responses endpoint can serve.
func refuseUnsupported(in *createRequest) error {
	switch {
	case in.Background != nil && *in.Background:
		return unsupported("background", "A background response")
	case given(in.Conversation):
		return unsupported("conversation", "A conversation")
	case given(in.Prompt):
		return unsupported("prompt", "A stored prompt")
	case given(in.Moderation):
		return unsupported("moderation", "Moderation")
	case given(in.ContextManagement):
		return unsupported("context_management", "Context management")
	}
	return nil
}

// given reports whether a raw member is present and not null.
func given(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only the package's own types, which always marshal
	}
	return b
}

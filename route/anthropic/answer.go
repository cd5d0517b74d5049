package anthropic

import (
	"encoding/json"
	"strings"
)

type chatAnswer struct {
	ID      string `json:"id"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// chatUsage is a chat completion's usage, as the node relays it.
type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// messages is u in a Message's terms: Anthropic's input_tokens leaves
// out the tokens read from the cache, which cache_read_input_tokens
// counts. What chat's usage cannot tell apart (tokens written to the
// cache) stays in input_tokens.
func (u *chatUsage) messages() usage {
	cached := 0
	if d := u.PromptTokensDetails; d != nil {
		cached = min(max(d.CachedTokens, 0), max(u.PromptTokens, 0))
	}
	return usage{InputTokens: u.PromptTokens - cached, OutputTokens: u.CompletionTokens, CacheReadInputTokens: cached}
}

type outBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// usage is a Message's usage. InputTokens excludes the prompt tokens
// read from the cache (CacheReadInputTokens) and those written to it
// (CacheCreationInputTokens): the prompt is the three together.
type usage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

type message struct {
	ID           string     `json:"id"`
	Type         string     `json:"type"`
	Role         string     `json:"role"`
	Model        string     `json:"model"`
	Content      []outBlock `json:"content"`
	StopReason   *string    `json:"stop_reason"`
	StopSequence *string    `json:"stop_sequence"`
	Usage        usage      `json:"usage"`
}

// stopReason maps a chat finish_reason to a Messages stop_reason.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// messageID is the Message id of a chat completion's.
func messageID(chatID string) string {
	return "msg_" + strings.TrimPrefix(strings.TrimPrefix(chatID, "chatcmpl-"), "chatcmpl_")
}

// FromChat translates a whole chat completion into a Message naming
// model.
func FromChat(answer []byte, model string) ([]byte, error) {
	var a chatAnswer
	if err := json.Unmarshal(answer, &a); err != nil || len(a.Choices) == 0 {
		return nil, &Error{Msg: "the provider's answer is not a chat completion"}
	}
	c := a.Choices[0]
	m := message{ID: messageID(a.ID), Type: "message", Role: "assistant", Model: model, Content: []outBlock{}}
	text := ""
	if c.Message.Content != nil {
		text = *c.Message.Content
	} else if c.Message.Refusal != nil {
		text = *c.Message.Refusal
	}
	if text != "" || len(c.Message.ToolCalls) == 0 {
		m.Content = append(m.Content, outBlock{Type: "text", Text: &text})
	}
	for _, tc := range c.Message.ToolCalls {
		m.Content = append(m.Content, outBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
	}
	sr := stopReason(c.FinishReason)
	m.StopReason = &sr
	if a.Usage != nil {
		m.Usage = a.Usage.messages()
	}
	return json.Marshal(m)
}

// toolInput is a tool call's arguments as an input object; arguments that
// are not a JSON object are kept as {"arguments": "..."}.
func toolInput(args string) json.RawMessage {
	if json.Valid([]byte(args)) && strings.HasPrefix(strings.TrimSpace(args), "{") {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(map[string]string{"arguments": args})
	return b
}

package anthropic

// The other direction: a chat completion request sent to a provider that
// speaks Messages (route's anthropic kind), and its answer, whole or
// streamed, and its errors read back as chat's.

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Version is the anthropic-version a node sends.
const Version = "2023-06-01"

type chatIn struct {
	Model               string          `json:"model"`
	Messages            []chatInMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	Stop                json.RawMessage `json:"stop"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	N                   *int            `json:"n"`
	User                string          `json:"user"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

type chatInMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type outMessage struct {
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

// FromChatRequest translates a chat completion request body into a
// Messages request; maxTokens is the completion's bound when the request
// gives none (Messages requires one).
func FromChatRequest(body []byte, maxTokens int) ([]byte, error) {
	var in chatIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, bad("the chat request cannot be read: %v", err)
	}
	if in.N != nil && *in.N > 1 {
		return nil, bad("n: a Messages provider answers one choice")
	}
	out := map[string]any{"model": in.Model, "max_tokens": maxTokens}
	switch {
	case in.MaxCompletionTokens != nil:
		out["max_tokens"] = *in.MaxCompletionTokens
	case in.MaxTokens != nil:
		out["max_tokens"] = *in.MaxTokens
	}
	var system []string
	var msgs []outMessage
	for i, m := range in.Messages {
		switch m.Role {
		case "system", "developer":
			system = append(system, chatText(m.Content))
		case "tool":
			block := map[string]any{"type": "tool_result", "tool_use_id": m.ToolCallID, "content": chatText(m.Content)}
			if n := len(msgs); n > 0 && msgs[n-1].Role == "user" && isToolResults(msgs[n-1]) {
				msgs[n-1].Content = append(msgs[n-1].Content, block) // results of one turn, together
			} else {
				msgs = append(msgs, outMessage{Role: "user", Content: []any{block}})
			}
		case "user", "assistant":
			blocks, err := chatBlocks(m)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %w", i, err)
			}
			if len(blocks) > 0 {
				msgs = append(msgs, outMessage{Role: m.Role, Content: blocks})
			}
		default:
			return nil, bad("messages[%d].role: %q has no Messages equivalent", i, m.Role)
		}
	}
	out["messages"] = msgs
	if len(system) > 0 {
		out["system"] = strings.Join(system, "\n")
	}
	if in.Stream {
		out["stream"] = true
	}
	if stops := stopList(in.Stop); len(stops) > 0 {
		out["stop_sequences"] = stops
	}
	if in.Temperature != nil {
		out["temperature"] = min(*in.Temperature, 1) // Messages' range is [0, 1]
	}
	if in.TopP != nil {
		out["top_p"] = *in.TopP
	}
	if in.User != "" {
		out["metadata"] = map[string]string{"user_id": in.User}
	}
	if len(in.Tools) > 0 {
		var tools []any
		for _, t := range in.Tools {
			schema := t.Function.Parameters
			if len(schema) == 0 || string(schema) == "null" {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			tools = append(tools, map[string]any{"name": t.Function.Name, "description": t.Function.Description, "input_schema": schema})
		}
		out["tools"] = tools
	}
	if tc := toolChoice(in.ToolChoice); tc != nil {
		out["tool_choice"] = tc
	}
	return json.Marshal(out)
}

func isToolResults(m outMessage) bool {
	for _, b := range m.Content {
		if bm, ok := b.(map[string]any); !ok || bm["type"] != "tool_result" {
			return false
		}
	}
	return true
}

// chatText is a chat content's text: a string, or its text parts joined.
func chatText(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] == 'n' {
		return ""
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	var parts []chatPart
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// chatBlocks are a user's or assistant's chat message as content blocks.
func chatBlocks(m chatInMessage) ([]any, error) {
	var blocks []any
	if len(m.Content) > 0 && m.Content[0] == '[' {
		var parts []chatPart
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return nil, bad("content: %v", err)
		}
		for _, p := range parts {
			switch p.Type {
			case "text":
				blocks = append(blocks, map[string]any{"type": "text", "text": p.Text})
			case "image_url":
				blocks = append(blocks, imageBlock(p.ImageURL))
			default:
				return nil, bad("content part %q has no Messages equivalent", p.Type)
			}
		}
	} else if text := chatText(m.Content); text != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": text})
	}
	for _, tc := range m.ToolCalls {
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": toolInput(tc.Function.Arguments)})
	}
	return blocks, nil
}

func imageBlock(u *imageURL) map[string]any {
	if u == nil {
		return map[string]any{"type": "text", "text": ""}
	}
	if rest, ok := strings.CutPrefix(u.URL, "data:"); ok {
		if media, data, ok := strings.Cut(rest, ";base64,"); ok {
			return map[string]any{"type": "image", "source": map[string]string{"type": "base64", "media_type": media, "data": data}}
		}
	}
	return map[string]any{"type": "image", "source": map[string]string{"type": "url", "url": u.URL}}
}

func stopList(raw json.RawMessage) []string {
	if len(raw) == 0 || raw[0] == 'n' {
		return nil
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return []string{s}
	}
	var list []string
	_ = json.Unmarshal(raw, &list)
	return list
}

func toolChoice(raw json.RawMessage) map[string]any {
	if len(raw) == 0 || raw[0] == 'n' {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "required":
			return map[string]any{"type": "any"}
		case "none":
			return map[string]any{"type": "none"}
		}
		return map[string]any{"type": "auto"}
	}
	var f struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	_ = json.Unmarshal(raw, &f)
	return map[string]any{"type": "tool", "name": f.Function.Name}
}

package responses

import (
	"encoding/json"
	"fmt"
	"strings"
)

// inputItem is one item of a Responses input: a message (type "message"
// or none), a function_call, a function_call_output or a reasoning item.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"` // a string or content parts
	CallID    *string         `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"` // a string or content parts
}

// inputPart is a content part of a message or a function call's output.
type inputPart struct {
	Type     string  `json:"type"`
	Text     string  `json:"text"`
	Refusal  string  `json:"refusal"`
	ImageURL *string `json:"image_url"`
	FileID   *string `json:"file_id"`
	Detail   string  `json:"detail"`
}

// chat message and part shapes, as chat completions reads them.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"` // a string, []chatPart or nil
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatPart struct {
	Type     string    `json:"type"`
	Text     *string   `json:"text,omitempty"` // set for a text part, even empty
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

type chatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function chatFunctionCall `json:"function"`
}

type chatFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// inputMessages translates input, a string (one user message) or an
// array of items, into chat messages. Consecutive function calls, and the
// assistant message they follow, become one assistant message with tool
// calls, as chat has them.
func inputMessages(raw json.RawMessage) ([]chatMessage, error) {
	if !given(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chatMessage{{Role: "user", Content: s}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, bad("input", "Invalid 'input': expected a string or an array of input items.")
	}
	var out []chatMessage
	for i, it := range items {
		at := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			m, err := itemMessage(at, it)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		case "function_call":
			if it.CallID == nil || *it.CallID == "" || it.Name == "" {
				return nil, bad(at, "A function_call item needs a call_id and a name.")
			}
			call := chatToolCall{ID: *it.CallID, Type: "function", Function: chatFunctionCall{Name: it.Name, Arguments: it.Arguments}}
			if n := len(out); n > 0 && out[n-1].Role == "assistant" {
				out[n-1].ToolCalls = append(out[n-1].ToolCalls, call)
			} else {
				out = append(out, chatMessage{Role: "assistant", ToolCalls: []chatToolCall{call}})
			}
		case "function_call_output":
			m, err := itemOutput(at, it)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		case "reasoning":
			// Chat has no place for the model's reasoning: dropped.
		default:
			return nil, unsupported(at+".type", fmt.Sprintf("Input item type %q", it.Type))
		}
	}
	return out, nil
}

// itemMessage translates a message item. developer becomes system: chat
// providers other than OpenAI's know system, and the two mean the same
// to them.
func itemMessage(at string, it inputItem) (chatMessage, error) {
	role := it.Role
	switch role {
	case "user", "system", "assistant":
	case "developer":
		role = "system"
	default:
		return chatMessage{}, bad(at+".role", "Invalid value: '%s'. Supported values are: 'user', 'assistant', 'system', and 'developer'.", it.Role)
	}
	if !given(it.Content) {
		return chatMessage{}, bad(at+".content", "Missing required parameter: '%s.content'.", at)
	}
	var s string
	if json.Unmarshal(it.Content, &s) == nil {
		return chatMessage{Role: role, Content: s}, nil
	}
	var parts []inputPart
	if err := json.Unmarshal(it.Content, &parts); err != nil {
		return chatMessage{}, bad(at+".content", "Invalid type for '%s.content': expected a string or an array of content parts.", at)
	}
	chat, err := chatParts(at+".content", parts, role == "assistant")
	if err != nil {
		return chatMessage{}, err
	}
	if role == "assistant" { // an assistant's chat content is its text
		return chatMessage{Role: role, Content: joinText(chat)}, nil
	}
	return chatMessage{Role: role, Content: chat}, nil
}

// chatParts translates content parts: text (input_text, output_text and
// an assistant's refusal, which is what it said) and, but for an
// assistant, images by URL. Files are refused.
func chatParts(at string, parts []inputPart, assistant bool) ([]chatPart, error) {
	out := make([]chatPart, 0, len(parts))
	for j, p := range parts {
		where := fmt.Sprintf("%s[%d]", at, j)
		switch p.Type {
		case "input_text", "output_text":
			out = append(out, chatPart{Type: "text", Text: &p.Text})
		case "refusal":
			out = append(out, chatPart{Type: "text", Text: &p.Refusal})
		case "input_image":
			switch {
			case assistant:
				return nil, bad(where+".type", "An assistant message cannot hold an image.")
			case p.ImageURL == nil || *p.ImageURL == "":
				return nil, unsupported(where+".file_id", "An image given by file_id")
			}
			u := &imageURL{URL: *p.ImageURL}
			switch p.Detail {
			case "auto", "low", "high":
				u.Detail = p.Detail
			}
			out = append(out, chatPart{Type: "image_url", ImageURL: u})
		case "input_file":
			return nil, unsupported(where+".type", "A file input")
		default:
			return nil, unsupported(where+".type", fmt.Sprintf("Content type %q", p.Type))
		}
	}
	return out, nil
}

func joinText(parts []chatPart) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Text != nil {
			b.WriteString(*p.Text)
		}
	}
	return b.String()
}

// itemOutput translates a function_call_output item into a tool message:
// its output is a string, or text parts joined.
func itemOutput(at string, it inputItem) (chatMessage, error) {
	if it.CallID == nil || *it.CallID == "" {
		return chatMessage{}, bad(at+".call_id", "A function_call_output item needs the call_id of its call: chat matches a tool result to its call by it.")
	}
	if !given(it.Output) {
		return chatMessage{}, bad(at+".output", "Missing required parameter: '%s.output'.", at)
	}
	m := chatMessage{Role: "tool", ToolCallID: *it.CallID}
	var s string
	if json.Unmarshal(it.Output, &s) == nil {
		m.Content = s
		return m, nil
	}
	var parts []inputPart
	if err := json.Unmarshal(it.Output, &parts); err != nil {
		return chatMessage{}, bad(at+".output", "Invalid type for '%s.output': expected a string or an array of content parts.", at)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "input_text" {
			return chatMessage{}, unsupported(fmt.Sprintf("%s.output[%d].type", at, j), fmt.Sprintf("A function output of type %q", p.Type))
		}
		b.WriteString(p.Text)
	}
	m.Content = b.String()
	return m, nil
}

package responses

import "encoding/json"

// answer is a chat answer, whole or as far as it has streamed, as the
// output items of a Response.
type answer struct {
	model, serviceTier string
	items              []item
	finish             string // the chat finish_reason
	usage              *chatUsage
}

// item is an output item: a message of text and refusal parts, or a
// function call.
type item struct {
	id    string
	call  bool
	parts []part // a message's
	// a call's
	callID, name string
	args         []byte
}

type part struct {
	refusal  bool
	text     []byte
	logprobs []json.RawMessage // an output_text's, as chat gives them
}

// incomplete is why the answer stopped short ("" when it did not): chat's
// length and content_filter finishes.
func (a *answer) incomplete() string {
	switch a.finish {
	case "length":
		return "max_output_tokens"
	case "content_filter":
		return "content_filter"
	}
	return ""
}

// itemStatus is the status of the finished item i: the last one of an
// answer cut short is incomplete.
func (a *answer) itemStatus(i int) string {
	if i == len(a.items)-1 && a.incomplete() != "" {
		return "incomplete"
	}
	return "completed"
}

type outMessage struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Status  string `json:"status"`
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

type outText struct {
	Type        string            `json:"type"`
	Text        string            `json:"text"`
	Annotations []any             `json:"annotations"`
	Logprobs    []json.RawMessage `json:"logprobs"`
}

type outRefusal struct {
	Type    string `json:"type"`
	Refusal string `json:"refusal"`
}

type outCall struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// json is the item as a Response's output shows it, with status.
func (it *item) json(status string) any {
	if it.call {
		return outCall{Type: "function_call", ID: it.id, CallID: it.callID, Name: it.name, Arguments: string(it.args), Status: status}
	}
	m := outMessage{Type: "message", ID: it.id, Status: status, Role: "assistant", Content: make([]any, 0, len(it.parts))}
	for i := range it.parts {
		m.Content = append(m.Content, it.parts[i].json())
	}
	return m
}

// added is the item as response.output_item.added shows it: in progress,
// with no content or arguments yet.
func (it *item) added() any {
	if it.call {
		return outCall{Type: "function_call", ID: it.id, CallID: it.callID, Name: it.name, Arguments: "", Status: "in_progress"}
	}
	return outMessage{Type: "message", ID: it.id, Status: "in_progress", Role: "assistant", Content: []any{}}
}

func (p *part) json() any {
	if p.refusal {
		return outRefusal{Type: "refusal", Refusal: string(p.text)}
	}
	lp := p.logprobs
	if lp == nil {
		lp = []json.RawMessage{}
	}
	return outText{Type: "output_text", Text: string(p.text), Annotations: []any{}, Logprobs: lp}
}

// emptyPart is a part as response.content_part.added shows it.
func emptyPart(refusal bool) any {
	p := part{refusal: refusal}
	return p.json()
}

// assistant is the answer as chat messages, a JSON array: one assistant
// message with its text (a refusal is what it said) and its tool calls.
func (a *answer) assistant() []byte {
	m := chatMessage{Role: "assistant"}
	var text []byte
	hasText := false
	for i := range a.items {
		it := &a.items[i]
		if it.call {
			m.ToolCalls = append(m.ToolCalls, chatToolCall{ID: it.callID, Type: "function",
				Function: chatFunctionCall{Name: it.name, Arguments: string(it.args)}})
			continue
		}
		for _, p := range it.parts {
			text, hasText = append(text, p.text...), true
		}
	}
	if hasText || len(m.ToolCalls) == 0 {
		m.Content = string(text)
	}
	return mustMarshal([]chatMessage{m})
}

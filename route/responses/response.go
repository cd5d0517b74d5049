package responses

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"
)

// NewID returns a fresh response id: "resp_" and 48 hex digits from
// crypto/rand. Output items' ids (msg_…, fc_…) are made the same way.
func NewID() string { return newID("resp_") }

func newID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return prefix + hex.EncodeToString(b[:])
}

// echo is what a Response repeats of its request, with the defaults
// OpenAI's Response shows for what the request left out.
type echo struct {
	Instructions       json.RawMessage `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	TopLogprobs        *int            `json:"top_logprobs"`
	Metadata           json.RawMessage `json:"metadata"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Text               json.RawMessage `json:"text"`
	Reasoning          json.RawMessage `json:"reasoning"`
	Truncation         *string         `json:"truncation"`
	User               *string         `json:"user"`
}

// readEcho reads req's echoed fields; a request that does not decode
// (ToChatRequest refused it) echoes only defaults.
func readEcho(req []byte) *echo {
	var e echo
	if json.Unmarshal(req, &e) != nil {
		e = echo{}
	}
	return &e
}

// response is the Response object, its members in OpenAI's order.
type response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	CompletedAt        *int64             `json:"completed_at"`
	Background         bool               `json:"background"`
	Error              json.RawMessage    `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       json.RawMessage    `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []any              `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          json.RawMessage    `json:"reasoning"`
	ServiceTier        string             `json:"service_tier,omitempty"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	Text               json.RawMessage    `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopLogprobs        *int               `json:"top_logprobs"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *usage             `json:"usage,omitempty"` // not nullable: absent until known
	User               string             `json:"user,omitempty"`  // not nullable: absent when not given
	Metadata           json.RawMessage    `json:"metadata"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

// usage is a ResponseUsage.
type usage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens     int `json:"cached_tokens"`
		CacheWriteTokens int `json:"cache_write_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// chatUsage is a chat completion's usage.
type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (c *chatUsage) responses() *usage {
	if c == nil {
		return nil
	}
	u := &usage{InputTokens: c.PromptTokens, OutputTokens: c.CompletionTokens, TotalTokens: c.TotalTokens}
	if u.TotalTokens == 0 {
		u.TotalTokens = c.PromptTokens + c.CompletionTokens
	}
	if d := c.PromptTokensDetails; d != nil {
		u.InputTokensDetails.CachedTokens = d.CachedTokens
	}
	if d := c.CompletionTokensDetails; d != nil {
		u.OutputTokensDetails.ReasoningTokens = d.ReasoningTokens
	}
	return u
}

// rawOr is raw, or def when it is absent or null.
func rawOr(raw json.RawMessage, def string) json.RawMessage {
	if given(raw) {
		return raw
	}
	return json.RawMessage(def)
}

func valueOr[T any](p *T, def T) T {
	if p != nil {
		return *p
	}
	return def
}

// response is the Response of the answer a: in progress with no output
// while !done, else completed or incomplete with its output and usage.
func (e *echo) response(id string, createdAt int64, a *answer, done bool) *response {
	r := &response{ID: id, Object: "response", CreatedAt: createdAt, Status: "in_progress", Error: json.RawMessage("null"),
		Instructions: rawOr(e.Instructions, "null"), MaxOutputTokens: e.MaxOutputTokens, Model: a.model, Output: []any{},
		ParallelToolCalls: valueOr(e.ParallelToolCalls, true), PreviousResponseID: e.PreviousResponseID,
		Reasoning: rawOr(e.Reasoning, "null"), ServiceTier: a.serviceTier, Store: valueOr(e.Store, true),
		Temperature: valueOr(e.Temperature, 1), Text: rawOr(e.Text, `{"format":{"type":"text"}}`),
		ToolChoice: rawOr(e.ToolChoice, `"auto"`), Tools: rawOr(e.Tools, "[]"), TopLogprobs: e.TopLogprobs,
		TopP: valueOr(e.TopP, 1), Truncation: valueOr(e.Truncation, "disabled"), User: valueOr(e.User, ""),
		Metadata: rawOr(e.Metadata, "{}")}
	if !done {
		return r
	}
	r.Status = "completed"
	if reason := a.incomplete(); reason != "" {
		r.Status, r.IncompleteDetails = "incomplete", &incompleteDetails{Reason: reason}
	} else {
		now := max(time.Now().Unix(), createdAt)
		r.CompletedAt = &now
	}
	for i := range a.items {
		r.Output = append(r.Output, a.items[i].json(a.itemStatus(i)))
	}
	r.Usage = a.usage.responses()
	return r
}

// chatAnswer is a whole chat completion as far as the bridge reads it.
type chatAnswer struct {
	Model       string `json:"model"`
	ServiceTier string `json:"service_tier"`
	Choices     []struct {
		Index        int    `json:"index"`
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		Logprobs *struct {
			Content []json.RawMessage `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// errNotChat is an upstream answer that is not a chat completion: the
// provider's fault, not the client's.
type errNotChat struct{ what string }

func (e errNotChat) Error() string {
	return "responses: the provider's " + e.what + " is not a chat completion"
}

// FromChatAnswer turns chat, a whole chat completion, into the Response
// with id of the Responses request req, whose instructions, tools,
// tool_choice, sampling, max_output_tokens, metadata, store,
// previous_response_id, parallel_tool_calls, text, reasoning, truncation
// and user it echoes. Its model is the chat answer's. It also returns
// assistant, the answer as chat messages (a JSON array) for
// Conversation. An answer that is not a chat completion is an error
// (the provider's, not an *Error).
func FromChatAnswer(chat, req []byte, id string, createdAt int64) (resp, assistant []byte, err error) {
	var c chatAnswer
	if err := json.Unmarshal(chat, &c); err != nil || len(c.Choices) == 0 {
		return nil, nil, errNotChat{"answer"}
	}
	a := &answer{model: c.Model, serviceTier: c.ServiceTier, usage: c.Usage}
	ch := c.Choices[0]
	for _, x := range c.Choices {
		if x.Index == 0 {
			ch = x
		}
	}
	a.finish = ch.FinishReason
	msg := ch.Message
	text, refusal := valueOr(msg.Content, ""), valueOr(msg.Refusal, "")
	if text != "" || refusal != "" || len(msg.ToolCalls) == 0 {
		m := item{id: newID("msg_")}
		if text != "" || refusal == "" {
			p := part{text: []byte(text)}
			if ch.Logprobs != nil {
				p.logprobs = ch.Logprobs.Content
			}
			m.parts = append(m.parts, p)
		}
		if refusal != "" {
			m.parts = append(m.parts, part{refusal: true, text: []byte(refusal)})
		}
		a.items = append(a.items, m)
	}
	for _, tc := range msg.ToolCalls {
		a.items = append(a.items, item{id: newID("fc_"), call: true, callID: tc.ID, name: tc.Function.Name, args: []byte(tc.Function.Arguments)})
	}
	resp, _ = json.Marshal(readEcho(req).response(id, createdAt, a, true))
	return resp, a.assistant(), nil
}

package emulator

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/llmesh/llmesh/route"
)

// msgRequest is an Anthropic Messages request as far as the emulator reads
// it.
type msgRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []msgMessage    `json:"messages"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
}

// msgMessage is one entry of messages: its content a string or blocks.
type msgMessage struct {
	Role    string     `json:"role"`
	Content msgContent `json:"content"`
}

// msgContent is content as blocks, a string being one text block.
type msgContent []msgBlock

// msgBlock is one content block; only the members of its type are set.
type msgBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // a tool_result's: a string or blocks
}

// UnmarshalJSON accepts a string or an array of blocks.
func (c *msgContent) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = msgContent{{Type: "text", Text: s}}
		return nil
	}
	var blocks []msgBlock
	if err := json.Unmarshal(b, &blocks); err != nil {
		return invalidParam("content", "content: Input should be a valid string or a list of content blocks")
	}
	*c = blocks
	return nil
}

// msgTool is a tool a Messages request offers; a client tool has an
// input_schema, a server tool (web search, bash, ...) a type of its own.
type msgTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// msgAnswer is what a Messages request is answered with.
type msgAnswer struct {
	id      string
	model   string
	prompt  int          // input tokens, the cached ones included
	blocks  promptBlocks // the prompt's, when an engine serves it
	cached  int          // input tokens the engine found cached
	text    generated
	call    *toolCall // answer with a tool_use block instead of text
	callID  string
	callOut int    // output tokens of the call
	reason  string // stop_reason
}

// messages answers POST /v1/messages.
func (x *exchange) messages(body []byte) {
	if !x.admit() {
		return
	}
	var req msgRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		x.fail(aerr)
		return
	}
	a, aerr := x.readMessages(&req, true)
	if aerr != nil {
		x.fail(aerr)
		return
	}
	var out []int
	if a.call == nil {
		out = x.piecesIDs(&a.text)
	}
	if !x.served(a.model) || x.unlucky() || !x.startEngine(a.prompt, a.blocks, out, a.outputTokens()) {
		return
	}
	if req.Stream {
		x.streamMessage(a)
	} else {
		x.respondMessage(a)
	}
}

// countTokens answers POST /v1/messages/count_tokens: the input tokens a
// Messages request of the same body would be charged.
func (x *exchange) countTokens(body []byte) {
	var req msgRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		x.fail(aerr)
		return
	}
	a, aerr := x.readMessages(&req, false)
	if aerr != nil {
		x.fail(aerr)
		return
	}
	if !x.served(a.model) {
		return
	}
	b := append([]byte(`{"input_tokens":`), strconv.Itoa(a.prompt)...)
	x.answerOK(append(b, '}'))
}

// readMessages validates req (max_tokens only when generating) and works
// out its answer.
func (x *exchange) readMessages(req *msgRequest, generating bool) (*msgAnswer, *apiError) {
	cfg := x.cfg
	switch {
	case req.Model == "":
		return nil, invalidParam("model", "Field required")
	case generating && req.MaxTokens == nil:
		return nil, invalidParam("max_tokens", "Field required")
	case generating && (*req.MaxTokens < 1 || *req.MaxTokens > maxCompletionTokens):
		return nil, invalidParam("max_tokens", "must be between 1 and "+strconv.Itoa(maxCompletionTokens)+", got "+strconv.Itoa(*req.MaxTokens))
	case len(req.Messages) == 0:
		return nil, invalidParam("messages", "Field required: at least one message")
	}
	msgs, aerr := chatMessages(req)
	if aerr != nil {
		return nil, aerr
	}
	tools, call, aerr := readMsgTools(req.Tools, req.ToolChoice)
	if aerr != nil {
		return nil, aerr
	}
	a := &msgAnswer{model: req.Model}
	a.prompt, a.blocks = x.promptOf(string(tools), msgs)
	if !generating {
		return a, nil
	}
	a.id = string(appendID(nil, "msg_", draw(cfg.Seed, x.seq, saltID)^fnv(cfg.Name), 24))
	if last := req.Messages[len(req.Messages)-1]; call != nil && !hasToolResult(last) {
		a.call, a.reason = call, "tool_use"
		a.callID = string(appendID(nil, "toolu_", draw(cfg.Seed, x.seq, saltCall), 24))
		a.callOut = x.e.tok.Count(call.args)
		return a, nil
	}
	tokens, reason := cfg.DefaultMaxTokens, "end_turn"
	if *req.MaxTokens < tokens {
		tokens, reason = *req.MaxTokens, "max_tokens"
	}
	a.text = generate(draw(cfg.Seed, x.seq, saltText), 0, tokens, req.StopSequences)
	if a.reason = reason; a.text.stop != "" {
		a.reason = "stop_sequence"
	}
	return a, nil
}

// hasToolResult reports whether m is a user turn answering a tool call.
func hasToolResult(m msgMessage) bool {
	return m.Role == "user" && slices.ContainsFunc(m.Content, func(b msgBlock) bool { return b.Type == "tool_result" })
}

// chatMessages is req's system prompt and messages as chat messages, so
// that they are counted as chat prompts are: text blocks as text, tool_use
// blocks as tool calls, tool_result blocks as their content.
func chatMessages(req *msgRequest) ([]route.Message, *apiError) {
	msgs := make([]route.Message, 0, len(req.Messages)+1)
	if len(req.System) > 0 && string(req.System) != "null" {
		var sys msgContent
		if err := json.Unmarshal(req.System, &sys); err != nil {
			return nil, invalidParam("system", "Input should be a valid string or a list of text blocks")
		}
		msgs = append(msgs, route.Message{Role: "system", Content: blockTexts(sys)})
	}
	for i, m := range req.Messages {
		at := "messages." + strconv.Itoa(i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, invalidParam(at+".role", "Input should be 'user' or 'assistant'")
		}
		if m.Content == nil {
			return nil, invalidParam(at+".content", "Field required")
		}
		cm := route.Message{Role: m.Role, Content: blockTexts(m.Content)}
		for j, b := range m.Content {
			bat := at + ".content." + strconv.Itoa(j)
			switch b.Type {
			case "":
				return nil, invalidParam(bat+".type", "Field required")
			case "tool_use":
				if b.ID == "" || b.Name == "" {
					return nil, invalidParam(bat, "a tool_use block needs an id and a name")
				}
				var tc route.ToolCall
				tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = b.ID, "function", b.Name, string(b.Input)
				cm.ToolCalls = append(cm.ToolCalls, tc)
			case "tool_result":
				if b.ToolUseID == "" {
					return nil, invalidParam(bat+".tool_use_id", "Field required")
				}
			}
		}
		msgs = append(msgs, cm)
	}
	return msgs, nil
}

// blockTexts is the text of blocks, tool results' included, as a chat
// content.
func blockTexts(blocks msgContent) route.Content {
	c := route.Content{Set: true, Parts: []route.ContentPart{}}
	for _, b := range blocks {
		switch b.Type {
		case "text":
			c.Parts = append(c.Parts, route.ContentPart{Type: "text", Text: b.Text})
		case "tool_result":
			var inner msgContent
			if json.Unmarshal(b.Content, &inner) == nil {
				c.Parts = append(c.Parts, blockTexts(inner).Parts...)
			}
		}
	}
	return c
}

// readMsgTools finds the call to make: to the tool tool_choice names, else
// to the first client tool, unless tool_choice is none. It returns the
// tools array as sent, counted into the prompt.
func readMsgTools(raw, choice json.RawMessage) (json.RawMessage, *toolCall, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var tools []msgTool
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, nil, invalidParam("tools", "Input should be a valid list")
	}
	for i, t := range tools {
		if t.Name == "" {
			return nil, nil, invalidParam("tools."+strconv.Itoa(i)+".name", "Field required")
		}
	}
	var c struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if len(choice) > 0 && string(choice) != "null" {
		if err := json.Unmarshal(choice, &c); err != nil {
			return nil, nil, invalidParam("tool_choice", "Input should be an object")
		}
	}
	switch c.Type {
	case "", "auto", "any":
	case "none":
		return raw, nil, nil
	case "tool":
		if c.Name == "" {
			return nil, nil, invalidParam("tool_choice.name", "Field required")
		}
	default:
		return nil, nil, invalidParam("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'")
	}
	i := slices.IndexFunc(tools, func(t msgTool) bool {
		return (c.Name == "" && t.InputSchema != nil) || (c.Name != "" && t.Name == c.Name)
	})
	switch {
	case i >= 0:
		return raw, &toolCall{name: tools[i].Name, args: exampleArguments(tools[i].InputSchema)}, nil
	case c.Name != "":
		return nil, nil, invalidParam("tool_choice.name", "names tool "+strconv.Quote(c.Name)+", which is not in tools")
	}
	return raw, nil, nil
}

// outputTokens is the answer's output tokens.
func (a *msgAnswer) outputTokens() int {
	if a.call != nil {
		return a.callOut
	}
	return a.text.tokens
}

// respondMessage sends the whole Message once its tokens are due.
func (x *exchange) respondMessage(a *msgAnswer) {
	out, delivered := a.outputTokens(), 0
	defer func() { x.e.rec.charge(a.prompt, delivered, x.cfg.cost(a.model, a.prompt, delivered)) }()
	if !x.awaitAll(x.whole(out)) {
		return
	}
	a.cached = x.cached()
	bp := x.e.buffer()
	defer x.e.release(bp)
	b := a.appendHead((*bp)[:0])
	if a.call != nil {
		b = a.appendToolUse(b, a.call.args)
	} else {
		b = append(b, `{"type":"text","text":`...)
		b = appendString(b, a.text.text())
		b = append(b, '}')
	}
	b = append(b, "],"...)
	b = a.appendStop(b)
	b = append(b, `,"usage":`...)
	*bp = append(a.appendUsage(b, out), '}')
	x.answerOK(*bp)
	delivered = out
}

// appendHead appends a Message up to the opening of its content; content
// is empty ("[]" once closed) at the start of a stream.
func (a *msgAnswer) appendHead(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, a.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendString(b, a.model)
	return append(b, `,"content":[`...)
}

// appendToolUse appends the tool_use block with input.
func (a *msgAnswer) appendToolUse(b []byte, input string) []byte {
	b = append(b, `{"type":"tool_use","id":`...)
	b = appendString(b, a.callID)
	b = append(b, `,"name":`...)
	b = appendString(b, a.call.name)
	b = append(b, `,"input":`...)
	b = append(b, input...)
	return append(b, '}')
}

// appendStop appends stop_reason and stop_sequence.
func (a *msgAnswer) appendStop(b []byte) []byte {
	b = append(b, `"stop_reason":`...)
	b = appendString(b, a.reason)
	b = append(b, `,"stop_sequence":`...)
	return appendNullableString(b, a.text.stop)
}

// appendUsage appends a Usage object of out output tokens. As Anthropic
// counts them, input_tokens are those not read from the cache.
func (a *msgAnswer) appendUsage(b []byte, out int) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(a.prompt-a.cached), 10)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(a.cached), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(out), 10)
	return append(b, `,"service_tier":"standard"}`...)
}

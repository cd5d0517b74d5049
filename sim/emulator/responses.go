package emulator

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/route"
)

// respRequest is a CreateResponse request as far as the emulator reads it.
type respRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Stream             bool            `json:"stream"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
}

// respItem is one input item: a message (type "message" or none), a
// function_call or a function_call_output. Other item types are read and
// not counted.
type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"` // a string or input parts
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"` // a string or output parts
}

// respAnswer is what a Responses request is answered with.
type respAnswer struct {
	id, itemID, callID string
	model              string
	created            int64
	instructions       *string
	maxOutput          *int
	previous           *string
	store              bool
	tools, toolChoice  json.RawMessage // echoed: as sent, or [] and "auto"
	prompt             int
	blocks             promptBlocks // the prompt's, when an engine serves it
	cached             int          // prompt tokens the engine found cached
	text               generated
	call               *toolCall
	callOut            int
	incomplete         bool            // cut at max_output_tokens
	turn               []route.Message // input and output, for a follow-up
}

// responses answers POST /v1/responses.
func (x *exchange) responses(body []byte) {
	if !x.admit() {
		return
	}
	var req respRequest
	if aerr := decodeBody(body, &req); aerr != nil {
		x.fail(aerr)
		return
	}
	if strings.HasPrefix(x.r.URL.Path, "/openai/") {
		req.Model = x.cfg.deploymentModel(req.Model) // Azure's v1 API names the deployment
	}
	a, aerr := x.readResponses(&req)
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
		x.streamResponse(a)
	} else {
		x.respondResponse(a)
	}
}

// readResponses validates req and works out its answer.
func (x *exchange) readResponses(req *respRequest) (*respAnswer, *apiError) {
	cfg := x.cfg
	a := &respAnswer{model: req.Model, created: time.Now().Unix(), instructions: req.Instructions, maxOutput: req.MaxOutputTokens,
		previous: req.PreviousResponseID, store: req.Store == nil || *req.Store, tools: req.Tools, toolChoice: req.ToolChoice}
	switch {
	case req.Model == "":
		return nil, invalidParam("model", "Missing required parameter: 'model'.")
	case len(req.Input) == 0 || string(req.Input) == "null":
		return nil, invalidParam("input", "Missing required parameter: 'input'.")
	case req.MaxOutputTokens != nil && (*req.MaxOutputTokens < 16 || *req.MaxOutputTokens > maxCompletionTokens):
		return nil, invalidParam("max_output_tokens", "Invalid 'max_output_tokens': expected a value between 16 and "+strconv.Itoa(maxCompletionTokens)+", got "+strconv.Itoa(*req.MaxOutputTokens)+".")
	}
	var history []route.Message
	if id := req.PreviousResponseID; id != nil {
		prev, ok := x.e.stored.get(*id)
		if !ok {
			return nil, &apiError{status: http.StatusNotFound, message: "Previous response with id '" + *id + "' not found.", typ: "invalid_request_error", param: "previous_response_id", code: "previous_response_not_found"}
		}
		history = prev.turn
	}
	items, aerr := readItems(req.Input)
	if aerr != nil {
		return nil, aerr
	}
	input, aerr := itemMessages(items)
	if aerr != nil {
		return nil, aerr
	}
	a.turn = append(slices.Clip(history), input...)
	msgs := a.turn
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append([]route.Message{{Role: "system", Content: route.Content{Set: true, Text: *req.Instructions}}}, msgs...)
	}
	call, aerr := readRespTools(req.Tools, req.ToolChoice)
	if aerr != nil {
		return nil, aerr
	}
	tools := ""
	if call != nil {
		tools = string(req.Tools)
	}
	a.prompt, a.blocks = x.promptOf(tools, msgs)
	key := draw(cfg.Seed, x.seq, saltID) ^ fnv(cfg.Name)
	a.id = string(appendID(nil, "resp_", key^x.e.instance, 48))
	if last := items[len(items)-1]; call != nil && last.Type != "function_call_output" {
		a.call, a.callOut = call, x.e.tok.Count(call.args)
		a.itemID = string(appendID(nil, "fc_", key+1, 48))
		a.callID = string(appendID(nil, "call_", draw(cfg.Seed, x.seq, saltCall), 24))
		var tc route.ToolCall
		tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = a.callID, "function", call.name, call.args
		a.turn = append(a.turn, route.Message{Role: "assistant", ToolCalls: []route.ToolCall{tc}})
		return a, nil
	}
	tokens := cfg.DefaultMaxTokens
	if m := req.MaxOutputTokens; m != nil && *m < tokens {
		tokens, a.incomplete = *m, true
	}
	a.itemID = string(appendID(nil, "msg_", key+1, 48))
	a.text = generate(draw(cfg.Seed, x.seq, saltText), 0, tokens, nil)
	a.turn = append(a.turn, route.Message{Role: "assistant", Content: route.Content{Set: true, Text: a.text.text()}})
	return a, nil
}

// readItems decodes input: a string (one user message) or input items.
func readItems(raw json.RawMessage) ([]respItem, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []respItem{{Type: "message", Role: "user", Content: raw}}, nil
	}
	var items []respItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalidParam("input", "Invalid 'input': expected a string or an array of input items.")
	}
	if len(items) == 0 {
		return nil, invalidParam("input", "Invalid 'input': empty array. Expected at least one input item.")
	}
	return items, nil
}

// itemMessages is items as chat messages, counted as chat prompts are.
func itemMessages(items []respItem) ([]route.Message, *apiError) {
	out := make([]route.Message, 0, len(items))
	for i, it := range items {
		at := "input[" + strconv.Itoa(i) + "]"
		switch it.Type {
		case "", "message":
			switch it.Role {
			case "user", "assistant", "system", "developer":
			default:
				return nil, invalidParam(at+".role", "Invalid value: '"+it.Role+"'. Supported values are: 'user', 'assistant', 'system', and 'developer'.")
			}
			c, ok := partsText(it.Content)
			if !ok {
				return nil, invalidParam(at+".content", "Invalid type for '"+at+".content': expected a string or an array of content parts.")
			}
			out = append(out, route.Message{Role: it.Role, Content: c})
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, invalidParam(at, "A function_call item needs a call_id and a name.")
			}
			var tc route.ToolCall
			tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = it.CallID, "function", it.Name, it.Arguments
			out = append(out, route.Message{Role: "assistant", ToolCalls: []route.ToolCall{tc}})
		case "function_call_output": // call_id is optional in the spec
			if len(it.Output) == 0 {
				return nil, invalidParam(at+".output", "Missing required parameter: '"+at+".output'.")
			}
			c, _ := partsText(it.Output)
			out = append(out, route.Message{Role: "tool", ToolCallID: it.CallID, Content: c})
		}
	}
	return out, nil
}

// partsText reads a string or an array of parts with text (input_text,
// output_text) as a chat content; false if it is neither.
func partsText(raw json.RawMessage) (route.Content, bool) {
	c := route.Content{Set: true}
	if len(raw) == 0 || string(raw) == "null" {
		return c, true
	}
	if json.Unmarshal(raw, &c.Text) == nil {
		return c, true
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return c, false
	}
	c.Parts = []route.ContentPart{}
	for _, p := range parts {
		c.Parts = append(c.Parts, route.ContentPart{Type: p.Type, Text: p.Text})
	}
	return c, true
}

// respTool is a tool a Responses request offers: a function's name and
// parameters at the top level, unlike chat's.
type respTool struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters"`
}

// readRespTools finds the function call to make: to the function
// tool_choice names, else to the first function tool, unless tool_choice
// is "none".
func readRespTools(raw, choice json.RawMessage) (*toolCall, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var tools []respTool
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, invalidParam("tools", "Invalid type for 'tools': expected an array of tools.")
	}
	for i, t := range tools {
		if t.Type == "function" && t.Name == "" {
			return nil, invalidParam("tools["+strconv.Itoa(i)+"].name", "Missing required parameter: 'tools["+strconv.Itoa(i)+"].name'.")
		}
	}
	var want string
	var s string
	var c struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	switch {
	case len(choice) == 0 || string(choice) == "null":
	case json.Unmarshal(choice, &s) == nil:
		if s == "none" {
			return nil, nil
		}
	case json.Unmarshal(choice, &c) == nil:
		if c.Type == "function" {
			want = c.Name
		}
	default:
		return nil, invalidParam("tool_choice", "Invalid type for 'tool_choice': expected a string or an object.")
	}
	i := slices.IndexFunc(tools, func(t respTool) bool {
		return t.Type == "function" && (want == "" || t.Name == want)
	})
	switch {
	case i >= 0:
		return &toolCall{name: tools[i].Name, args: exampleArguments(tools[i].Parameters)}, nil
	case want != "":
		return nil, invalidParam("tool_choice", "Tool choice names function '"+want+"', which is not in tools.")
	}
	return nil, nil
}

// outputTokens is the answer's output tokens.
func (a *respAnswer) outputTokens() int {
	if a.call != nil {
		return a.callOut
	}
	return a.text.tokens
}

// respondResponse sends the whole Response once its tokens are due, and
// stores it unless store is false.
func (x *exchange) respondResponse(a *respAnswer) {
	out, delivered := a.outputTokens(), 0
	defer func() { x.e.rec.charge(a.prompt, delivered, x.cfg.cost(a.model, a.prompt, delivered)) }()
	if !x.awaitAll(x.whole(out)) {
		return
	}
	a.cached = x.cached()
	body := a.appendResponse(nil, true)
	x.keep(a, body)
	x.answerOK(body)
	delivered = out
}

// keep stores the finished response a unless it asked not to be.
func (x *exchange) keep(a *respAnswer, body []byte) {
	if a.store {
		x.e.stored.put(&storedResponse{id: a.id, body: body, turn: a.turn})
	}
}

// storedResponse answers GET and DELETE /v1/responses/{id}.
func (x *exchange) storedResponse() {
	id := x.param
	if x.r.Method == http.MethodDelete {
		if !x.e.stored.remove(id) {
			x.fail(responseNotFound(id))
			return
		}
		b := appendString([]byte(`{"id":`), id)
		x.answerOK(append(b, `,"object":"response","deleted":true}`...))
		return
	}
	x.answerStored(id)
}

// cancelResponse answers POST /v1/responses/{id}/cancel. Every response
// the emulator stores has finished, and cancelling a finished response
// changes nothing: the answer is the response as stored.
func (x *exchange) cancelResponse() { x.answerStored(x.param) }

func (x *exchange) answerStored(id string) {
	r, ok := x.e.stored.get(id)
	if !ok {
		x.fail(responseNotFound(id))
		return
	}
	x.answerOK(r.body)
}

func responseNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, message: "Response with id '" + id + "' not found.", typ: "invalid_request_error"}
}

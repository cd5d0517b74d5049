package responses_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	bridge "github.com/llmesh/llmesh/route/responses"
)

// responseRequired is the spec's required members of a Response.
var responseRequired = []string{"id", "object", "created_at", "error", "incomplete_details", "instructions", "model",
	"tools", "output", "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p"}

// hasMembers fails unless obj has every member named.
func hasMembers(t *testing.T, what string, obj json.RawMessage, names ...string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatalf("%s: %v in %s", what, err, obj)
	}
	for _, n := range names {
		if _, ok := m[n]; !ok {
			t.Errorf("%s has no %q: %s", what, n, obj)
		}
	}
}

func decodeResponse(t *testing.T, b []byte) responses.Response {
	t.Helper()
	var r responses.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	hasMembers(t, "response", b, responseRequired...)
	return r
}

var (
	msgID = regexp.MustCompile(`^msg_[0-9a-f]{48}$`)
	fcID  = regexp.MustCompile(`^fc_[0-9a-f]{48}$`)
)

const echoedRequest = `{"model":"gpt-4.1","input":"x","instructions":"Be brief.","max_output_tokens":100,"temperature":0.5,"top_p":0.9,
	"metadata":{"k":"v"},"store":false,"previous_response_id":"resp_prev","parallel_tool_calls":false,"user":"u1",
	"text":{"format":{"type":"json_object"}},"tool_choice":"required",
	"tools":[{"type":"function","name":"w","parameters":{"type":"object"},"strict":true}]}`

// A text answer is a completed Response with one message, its usage
// mapped and the request echoed.
func TestFromChatAnswerText(t *testing.T) {
	chat := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"llama-3","choices":[{"index":0,
	"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"}],
	"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8},
	"completion_tokens_details":{"reasoning_tokens":1}}}`
	id := bridge.NewID()
	if !regexp.MustCompile(`^resp_[0-9a-f]{48}$`).MatchString(id) || id == bridge.NewID() {
		t.Fatalf("id %q", id)
	}
	b, assistant, err := bridge.FromChatAnswer([]byte(chat), []byte(echoedRequest), id, 1700000000)
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResponse(t, b)
	switch {
	case r.ID != id || r.Object != "response" || r.CreatedAt != 1700000000 || r.Model != "llama-3" || r.Status != responses.ResponseStatusCompleted:
		t.Errorf("response %s", b)
	case r.CompletedAt < 1700000000 || r.JSON.IncompleteDetails.Raw() != "null" || r.JSON.Error.Raw() != "null":
		t.Errorf("completion %s", b)
	case r.OutputText() != "Hello there." || len(r.Output) != 1 || !msgID.MatchString(r.Output[0].ID) || r.Output[0].Status != "completed":
		t.Errorf("output %s", b)
	case r.Usage.InputTokens != 12 || r.Usage.OutputTokens != 3 || r.Usage.TotalTokens != 15 ||
		r.Usage.InputTokensDetails.CachedTokens != 8 || r.Usage.OutputTokensDetails.ReasoningTokens != 1:
		t.Errorf("usage %s", r.Usage.RawJSON())
	case r.Instructions.OfString != "Be brief." || r.MaxOutputTokens != 100 || r.Temperature != 0.5 || r.TopP != 0.9 ||
		r.Metadata["k"] != "v" || r.PreviousResponseID != "resp_prev" || r.ParallelToolCalls || r.User != "u1":
		t.Errorf("echo %s", b)
	case r.Text.Format.Type != "json_object" || r.ToolChoice.OfToolChoiceMode != "required" || len(r.Tools) != 1 || r.Tools[0].Name != "w":
		t.Errorf("echoed tools and format %s", b)
	case !strings.Contains(string(b), `"store":false`):
		t.Errorf("store %s", b)
	}
	part := r.Output[0].Content[0]
	hasMembers(t, "output message", json.RawMessage(r.Output[0].RawJSON()), "id", "type", "role", "content", "status")
	hasMembers(t, "output text", json.RawMessage(part.RawJSON()), "type", "text", "annotations", "logprobs")
	if string(assistant) != `[{"role":"assistant","content":"Hello there."}]` {
		t.Errorf("assistant %s", assistant)
	}
}

// The defaults a request leaves out are shown as OpenAI's Response shows
// them; no usage from chat, no usage in the Response.
func TestFromChatAnswerDefaults(t *testing.T) {
	b, _, err := bridge.FromChatAnswer([]byte(`{"model":"m","choices":[{"index":0,"message":{"content":null},"finish_reason":"stop"}]}`),
		[]byte(`{"input":"x"}`), "resp_1", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResponse(t, b)
	if r.Temperature != 1 || r.TopP != 1 || !r.ParallelToolCalls || r.ToolChoice.OfToolChoiceMode != "auto" || len(r.Tools) != 0 ||
		r.Text.Format.Type != "text" || r.Truncation != "disabled" || r.JSON.Instructions.Raw() != "null" || r.JSON.Usage.Valid() {
		t.Errorf("defaults %s", b)
	}
	if len(r.Output) != 1 || r.Output[0].Type != "message" || r.OutputText() != "" {
		t.Errorf("an empty answer is an empty message: %s", b)
	}
	if !strings.Contains(string(b), `"store":true`) || !strings.Contains(string(b), `"metadata":{}`) || strings.Contains(string(b), `"user"`) {
		t.Errorf("store, metadata, user %s", b)
	}
}

// Tool calls are function_call items with the chat call's id as call_id;
// text before them is a message first.
func TestFromChatAnswerToolCalls(t *testing.T) {
	chat := `{"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Checking.",
	"tool_calls":[{"id":"call_a","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},
	{"id":"call_b","type":"function","function":{"name":"t","arguments":"{}"}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":9}}`
	b, assistant, err := bridge.FromChatAnswer([]byte(chat), []byte(`{"input":"x"}`), "resp_1", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResponse(t, b)
	if len(r.Output) != 3 || r.Output[0].Type != "message" || r.OutputText() != "Checking." || r.Usage.TotalTokens != 14 {
		t.Fatalf("output %s", b)
	}
	for i, want := range []struct{ call, name, args string }{{"call_a", "w", `{"city":"Paris"}`}, {"call_b", "t", "{}"}} {
		c := r.Output[i+1].AsFunctionCall()
		hasMembers(t, "function call", json.RawMessage(c.RawJSON()), "type", "call_id", "name", "arguments", "id", "status")
		if c.CallID != want.call || c.Name != want.name || c.Arguments != want.args || !fcID.MatchString(c.ID) || c.Status != "completed" {
			t.Errorf("call %d: %s", i, c.RawJSON())
		}
	}
	want := `[{"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_a","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"t","arguments":"{}"}}]}]`
	if string(assistant) != want {
		t.Errorf("assistant %s\nwant      %s", assistant, want)
	}
}

// An answer cut at its bound or filtered is incomplete, saying why; a
// refusal is a refusal part.
func TestFromChatAnswerIncomplete(t *testing.T) {
	for finish, reason := range map[string]string{"length": "max_output_tokens", "content_filter": "content_filter"} {
		b, _, err := bridge.FromChatAnswer([]byte(`{"model":"m","choices":[{"index":0,"message":{"content":"Once upon"},"finish_reason":"`+finish+`"}]}`),
			[]byte(`{"input":"x","max_output_tokens":16}`), "resp_1", 1)
		if err != nil {
			t.Fatal(err)
		}
		r := decodeResponse(t, b)
		if r.Status != "incomplete" || r.IncompleteDetails.Reason != reason || r.JSON.CompletedAt.Raw() != "null" ||
			r.Output[0].Status != "incomplete" || r.OutputText() != "Once upon" {
			t.Errorf("%s: %s", finish, b)
		}
	}
	b, assistant, err := bridge.FromChatAnswer([]byte(`{"model":"m","choices":[{"index":0,"message":{"content":null,"refusal":"I can't."},"finish_reason":"stop"}]}`),
		[]byte(`{"input":"x"}`), "resp_1", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResponse(t, b)
	if c := r.Output[0].Content; len(c) != 1 || c[0].Type != "refusal" || c[0].Refusal != "I can't." || string(assistant) != `[{"role":"assistant","content":"I can't."}]` {
		t.Errorf("refusal %s %s", b, assistant)
	}
	for _, notChat := range []string{`{"error":{"message":"x"}}`, `{"choices":[]}`, `nope`} {
		if _, _, err := bridge.FromChatAnswer([]byte(notChat), []byte(`{}`), "resp_1", 1); err == nil {
			t.Errorf("%s was read as a chat completion", notChat)
		}
	}
}

// Logprobs the request included come back on the output text.
func TestFromChatAnswerLogprobs(t *testing.T) {
	chat := `{"model":"m","choices":[{"index":0,"message":{"content":"Hi"},"finish_reason":"stop",
	"logprobs":{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.5,"bytes":[72,105]}]}]}}]}`
	b, _, err := bridge.FromChatAnswer([]byte(chat), []byte(`{"input":"x","include":["message.output_text.logprobs"],"top_logprobs":1}`), "resp_1", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := decodeResponse(t, b)
	lp := r.Output[0].Content[0].Logprobs
	if len(lp) != 1 || lp[0].Token != "Hi" || lp[0].Logprob != -0.5 || len(lp[0].Bytes) != 2 || len(lp[0].TopLogprobs) != 1 || r.TopLogprobs != 1 {
		t.Errorf("logprobs %s", b)
	}
}

// A follow-up continues the conversation: the prior turn's input and
// answer, then the new input, under the new instructions only.
func TestConversationRoundTrip(t *testing.T) {
	first := []byte(`{"instructions":"Be brief.","input":[{"role":"developer","content":"Use metric."},{"role":"user","content":"Weather in Paris?"}]}`)
	chatReq, err := bridge.ToChatRequest(first, nil, "up")
	if err != nil {
		t.Fatal(err)
	}
	_, assistant, err := bridge.FromChatAnswer([]byte(`{"model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"content":null,
	"tool_calls":[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{}"}}]}}]}`), first, "resp_1", 1)
	if err != nil {
		t.Fatal(err)
	}
	conv, err := bridge.Conversation(first, chatReq, assistant)
	if err != nil {
		t.Fatal(err)
	}
	second := []byte(`{"instructions":"Be chatty.","previous_response_id":"resp_1",
	"input":[{"type":"function_call_output","call_id":"call_1","output":"18C"}]}`)
	got, err := bridge.ToChatRequest(second, conv, "up")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"up","messages":[{"role":"system","content":"Be chatty."},{"role":"system","content":"Use metric."},
	{"role":"user","content":"Weather in Paris?"},
	{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{}"}}]},
	{"role":"tool","tool_call_id":"call_1","content":"18C"}]}`
	if !sameJSON(t, got, []byte(want)) {
		t.Errorf("follow-up %s\nwant      %s", got, want)
	}
	// Without instructions, a leading system message is the input's own and stays.
	plain := []byte(`{"input":[{"role":"system","content":"S"},{"role":"user","content":"q"}]}`)
	chatReq, _ = bridge.ToChatRequest(plain, nil, "up")
	conv, err = bridge.Conversation(plain, chatReq, []byte(`[{"role":"assistant","content":"a"}]`))
	if err != nil || string(conv) != `[{"role":"system","content":"S"},{"role":"user","content":"q"},{"role":"assistant","content":"a"}]` {
		t.Errorf("conversation %s, %v", conv, err)
	}
	if _, err := bridge.Conversation(plain, chatReq, []byte(`{}`)); err == nil {
		t.Error("an assistant that is not an array was taken")
	}
}

package anthropic

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A Messages request with a system prompt, a tool use and its result and
// every tool choice becomes the chat request a provider reads the same.
func TestToChat(t *testing.T) {
	body := `{"model":"m","max_tokens":50,"system":[{"type":"text","text":"Be brief."}],"stop_sequences":["END"],
	"metadata":{"user_id":"u1"},"stream":true,"tool_choice":{"type":"tool","name":"w"},
	"tools":[{"name":"w","description":"weather","input_schema":{"type":"object"}}],
	"messages":[{"role":"user","content":"Weather?"},
	{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"w","input":{"city":"Paris"}}]},
	{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18C"}]},{"type":"text","text":"Thanks"}]}]}`
	r, err := ToChat([]byte(body), false)
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		Model      string `json:"model"`
		MaxTokens  int    `json:"max_tokens"`
		Stop       []string
		User       string
		Stream     bool
		ToolChoice json.RawMessage `json:"tool_choice"`
		Tools      []struct {
			Type     string
			Function struct{ Name, Description string }
		}
		Messages []struct {
			Role       string
			Content    json.RawMessage
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		}
	}
	if err := json.Unmarshal(r.Chat, &chat); err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	for _, m := range chat.Messages {
		roles = append(roles, m.Role)
	}
	switch {
	case !r.Stream || r.Model != "m" || chat.MaxTokens != 50 || chat.User != "u1" || chat.Stop[0] != "END":
		t.Fatalf("fields: %s", r.Chat)
	case strings.Join(roles, ",") != "system,user,assistant,tool,user":
		t.Fatalf("roles %v", roles)
	case chat.Messages[2].ToolCalls[0].ID != "toolu_1" || chat.Messages[2].ToolCalls[0].Function.Arguments != `{"city":"Paris"}`:
		t.Fatalf("tool call %+v", chat.Messages[2])
	case chat.Messages[3].ToolCallID != "toolu_1" || string(chat.Messages[3].Content) != `"18C"`:
		t.Fatalf("tool result %+v", chat.Messages[3])
	case string(chat.ToolChoice) != `{"function":{"name":"w"},"type":"function"}` || chat.Tools[0].Function.Name != "w":
		t.Fatalf("tools %s %+v", chat.ToolChoice, chat.Tools)
	}
}

// A body ToChat cannot read is refused naming the member at fault and
// its JSON type, as Anthropic's API does, never in encoding/json's Go
// terms; trailing data after the object is refused too.
func TestToChatRefusals(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":42,"max_tokens":8,"messages":[]}`, "model: must be of type string, not number"},
		{`{"model":"m","max_tokens":"8","messages":[]}`, "max_tokens: must be of type integer, not string"},
		{`{"model":"m","max_tokens":8,"messages":"hi"}`, "messages: must be of type array, not string"},
		{`{"model":"m","max_tokens":8,"stream":"yes","messages":[]}`, "stream: must be of type boolean, not string"},
		{`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]} {}`, "not valid JSON"},
		{`[{"model":"m"}]`, "must be a JSON object"},
	} {
		_, err := ToChat([]byte(tc.body), false)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Msg, tc.want) || strings.Contains(e.Msg, "Go ") {
			t.Errorf("%s: %v; want an Error with %q", tc.body, err, tc.want)
		}
	}
}

// A chat stream of text then a tool call becomes Anthropic's events: a
// text block, a tool_use block with its JSON in deltas, then the stop
// reason and usage.
func TestStream(t *testing.T) {
	s := NewStream("m")
	var out []byte
	for _, c := range []string{
		`{"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"role":"assistant","content":"Let me"}}]}`,
		`{"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"content":" check."}}]}`,
		`{"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"w","arguments":"{\"ci"}}]}}]}`,
		`{"id":"chatcmpl-abc","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\":1}"}}]}}]}`,
		`{"id":"chatcmpl-abc","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"id":"chatcmpl-abc","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":7}}`,
		`[DONE]`,
	} {
		out = s.Chunk(out, []byte(c))
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
	}
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	if !strings.Contains(string(out), `"stop_reason":"tool_use"`) || !strings.Contains(string(out), `"output_tokens":7`) ||
		!strings.Contains(string(out), `"id":"msg_abc"`) || !strings.Contains(string(out), `"partial_json":"{\"ci"`) {
		t.Fatalf("stream:\n%s", out)
	}
}

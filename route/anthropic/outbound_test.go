package anthropic

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// A chat request becomes the Messages request a Messages provider reads
// the same: system and developer messages joined into system, two tool
// results of one turn in one user message, tool choices mapped, the
// completion bound always given.
func TestFromChatRequest(t *testing.T) {
	body := `{"model":"m","stream":true,"stop":"END","tool_choice":"required","user":"u",
	"tools":[{"type":"function","function":{"name":"w","parameters":{"type":"object"}}}],
	"messages":[{"role":"system","content":"A"},{"role":"developer","content":[{"type":"text","text":"B"}]},
	{"role":"user","content":"q"},
	{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"x\":1}"}},{"id":"c2","type":"function","function":{"name":"w","arguments":"{}"}}]},
	{"role":"tool","tool_call_id":"c1","content":"r1"},{"role":"tool","tool_call_id":"c2","content":"r2"}]}`
	b, err := FromChatRequest([]byte(body), 321)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		MaxTokens  int    `json:"max_tokens"`
		System     string `json:"system"`
		Stream     bool
		Stops      []string          `json:"stop_sequences"`
		ToolChoice map[string]string `json:"tool_choice"`
		Metadata   map[string]string
		Messages   []struct {
			Role    string
			Content []map[string]any
		}
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	switch {
	case out.MaxTokens != 321 || out.System != "A\nB" || !out.Stream || out.Stops[0] != "END" || out.ToolChoice["type"] != "any" || out.Metadata["user_id"] != "u":
		t.Fatalf("fields: %s", b)
	case len(out.Messages) != 3 || len(out.Messages[1].Content) != 2 || out.Messages[1].Content[0]["type"] != "tool_use":
		t.Fatalf("messages: %s", b)
	case out.Messages[2].Role != "user" || len(out.Messages[2].Content) != 2 || out.Messages[2].Content[1]["tool_use_id"] != "c2":
		t.Fatalf("tool results: %s", b)
	}
	if _, err := FromChatRequest([]byte(`{"model":"m","n":2,"messages":[{"role":"user","content":"q"}]}`), 5); err == nil {
		t.Fatal("n > 1 was translated")
	}
}

// A Messages stream reads as chat chunks, a usage chunk and [DONE]; an
// error event as chat's error event.
func TestStreamReader(t *testing.T) {
	in := strings.Join([]string{
		`event: message_start`, `data: {"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":5}}}`, ``,
		`event: ping`, `data: {"type":"ping"}`, ``,
		`event: content_block_start`, `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, ``,
		`event: content_block_delta`, `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`, ``,
		`event: content_block_stop`, `data: {"type":"content_block_stop","index":0}`, ``,
		`event: message_delta`, `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`, ``,
		`event: message_stop`, `data: {"type":"message_stop"}`, ``, ``}, "\n")
	b, err := io.ReadAll(StreamReader(io.NopCloser(strings.NewReader(in))))
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{`"id":"chatcmpl-1"`, `"delta":{"content":"Hi"}`, `"finish_reason":"stop"`,
		`"usage":{"completion_tokens":1,"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":6}`, "data: [DONE]\n\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %s in\n%s", want, out)
		}
	}
	errIn := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n"
	b, _ = io.ReadAll(StreamReader(io.NopCloser(strings.NewReader(errIn))))
	if !strings.HasPrefix(string(b), `data: {"error":{"message":"overloaded_error: busy"`) {
		t.Fatalf("error event: %s", b)
	}
}

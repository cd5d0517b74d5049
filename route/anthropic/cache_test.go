package anthropic

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// A Messages provider's cache reads and writes are prompt tokens in
// chat's usage, its reads chat's cached_tokens: whole and streamed.
func TestCacheUsageToChat(t *testing.T) {
	const want = `"usage":{"completion_tokens":5,"prompt_tokens":1210,"prompt_tokens_details":{"cached_tokens":1000},"total_tokens":1215}`
	b, err := ToChatAnswer([]byte(`{"id":"msg_1","type":"message","model":"m","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn",
		"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":1000,"output_tokens":5}}`))
	if err != nil || !strings.Contains(string(b), want) {
		t.Fatalf("whole: %s %v; want %s", b, err, want)
	}
	in := strings.Join([]string{
		`event: message_start`, `data: {"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":1000,"output_tokens":1}}}`, ``,
		`event: content_block_start`, `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, ``,
		`event: content_block_delta`, `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`, ``,
		`event: message_delta`, `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}`, ``,
		`event: message_stop`, `data: {"type":"message_stop"}`, ``, ``}, "\n")
	b, err = io.ReadAll(StreamReader(io.NopCloser(strings.NewReader(in))))
	if err != nil || !strings.Contains(string(b), want) {
		t.Fatalf("stream: %s %v; want %s", b, err, want)
	}
	// message_delta's cumulative counts, cache reads among them, win.
	in = strings.Replace(in, `"usage":{"output_tokens":5}`, `"usage":{"input_tokens":10,"cache_read_input_tokens":1000,"cache_creation_input_tokens":200,"output_tokens":5}`, 1)
	in = strings.Replace(in, `"cache_creation_input_tokens":200,"cache_read_input_tokens":1000,"output_tokens":1`, `"output_tokens":1`, 1)
	b, _ = io.ReadAll(StreamReader(io.NopCloser(strings.NewReader(in))))
	if !strings.Contains(string(b), want) {
		t.Fatalf("stream with the counts in message_delta: %s; want %s", b, want)
	}
}

// Chat's cached tokens reach a /v1/messages client as Anthropic counts
// them: out of input_tokens, into cache_read_input_tokens.
func TestCacheUsageToMessages(t *testing.T) {
	type counts struct {
		Input  int `json:"input_tokens"`
		Read   int `json:"cache_read_input_tokens"`
		Create int `json:"cache_creation_input_tokens"`
		Output int `json:"output_tokens"`
	}
	want := counts{Input: 210, Read: 1000, Output: 5}
	b, err := FromChat([]byte(`{"id":"chatcmpl-1","choices":[{"message":{"content":"Hi"},"finish_reason":"stop"}],
		"usage":{"prompt_tokens":1210,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1000}}}`), "m")
	var m struct{ Usage counts }
	if err != nil || json.Unmarshal(b, &m) != nil || m.Usage != want {
		t.Fatalf("whole: %s %v; want %+v", b, err, want)
	}
	s := NewStream("m")
	var out []byte
	for _, c := range []string{
		`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"Hi"}}]}`,
		`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":1210,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":1000}}}`,
		`[DONE]`,
	} {
		out = s.Chunk(out, []byte(c))
	}
	var delta struct{ Usage counts }
	for _, line := range strings.Split(string(out), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"message_delta"`) {
			_ = json.Unmarshal([]byte(d), &delta)
		}
	}
	if delta.Usage != want {
		t.Fatalf("stream's message_delta usage %+v, want %+v\n%s", delta.Usage, want, out)
	}
	// More cached than prompt is no negative input.
	b, _ = FromChat([]byte(`{"id":"c","choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}}`), "m")
	if m.Usage = (counts{}); json.Unmarshal(b, &m) != nil || m.Usage != (counts{Read: 3, Output: 1}) {
		t.Fatalf("over-reported cache: %s", b)
	}
}

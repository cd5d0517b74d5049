package emulator

import (
	"encoding/json"
	"strings"
	"testing"
)

const weatherTools = `"tools":[
 {"type":"custom","custom":{"name":"grammar"}},
 {"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object",
  "properties":{"city":{"type":"string"},"days":{"type":"integer"},"metric":{"type":"boolean"},"tags":{"type":"array"},"opts":{"type":"object"},"note":{"type":["null","string"]},"any":{}},
  "required":["city","days","metric","tags","opts","note","any","missing"]}}},
 {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"]}}}]`

// checkArguments decodes arguments and checks the values the brief asks for.
func checkArguments(t *testing.T, args string, want map[string]any) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(args), &got); err != nil {
		t.Fatalf("arguments %q: %v", args, err)
	}
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("arguments %s, want %s", gotJSON, wantJSON)
	}
}

var weatherArgs = map[string]any{"city": "emulated", "days": 1.0, "metric": true, "tags": []any{}, "opts": map[string]any{}, "note": "emulated", "any": nil, "missing": nil}

func TestToolCallNonStreaming(t *testing.T) {
	tok := testTokenizer
	e := start(t, DefaultConfig())
	c := newClient(t)
	url := e.URL() + "/v1/chat/completions"
	for _, tc := range []struct {
		name, choice string
		fn           string
		want         map[string]any
	}{
		{"first function", "", "get_weather", weatherArgs},
		{"auto", `,"tool_choice":"auto"`, "get_weather", weatherArgs},
		{"named", `,"tool_choice":{"type":"function","function":{"name":"get_time"}}`, "get_time", map[string]any{"zone": "emulated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := body("gpt-4o", weatherTools+tc.choice+`,"n":2`)
			r := decodeResponse(t, readAll(t, do(t, c, "POST", url, b), 200))
			var args string
			for i, ch := range r.Choices {
				m := ch.Message
				if ch.FinishReason != "tool_calls" || m.Content != nil || len(m.ToolCalls) != 1 {
					t.Fatalf("choice %d: finish %q message %+v", i, ch.FinishReason, m)
				}
				call := m.ToolCalls[0]
				if !strings.HasPrefix(call.ID, "call_") || call.Type != "function" || call.Function.Name != tc.fn {
					t.Errorf("call %+v", call)
				}
				checkArguments(t, call.Function.Arguments, tc.want)
				args = call.Function.Arguments
			}
			if r.Choices[0].Message.ToolCalls[0].ID == r.Choices[1].Message.ToolCalls[0].ID {
				t.Error("two choices share a call id")
			}
			if want := 2 * tok.Count(args); r.Usage.CompletionTokens != want {
				t.Errorf("completion tokens %d, want %d", r.Usage.CompletionTokens, want)
			}
			if want := promptTokens(t, tok, b); r.Usage.PromptTokens != want {
				t.Errorf("prompt tokens %d, want %d (tools counted)", r.Usage.PromptTokens, want)
			}
		})
	}

	// tool_choice "none" and a list of no function tools answer in text.
	for _, extra := range []string{weatherTools + `,"tool_choice":"none"`, `"tools":[]`, `"tools":[{"type":"custom","custom":{"name":"g"}}]`} {
		r := decodeResponse(t, readAll(t, do(t, c, "POST", url, body("m", extra)), 200))
		if r.Choices[0].FinishReason != "stop" || r.Choices[0].Message.Content == nil || r.Choices[0].Message.ToolCalls != nil {
			t.Errorf("%s: %+v", extra, r.Choices[0])
		}
	}
}

func TestToolCallStreaming(t *testing.T) {
	tok := testTokenizer
	e := start(t, DefaultConfig())
	c := newClient(t)
	b := body("gpt-4o", weatherTools+`,"stream":true,"stream_options":{"include_usage":true}`)
	chunks, _ := streamChunks(t, c, e.URL()+"/v1/chat/completions", b)

	first := chunks[0].Choices[0].Delta
	if first.Role != "assistant" || len(first.ToolCalls) != 1 {
		t.Fatalf("first delta %+v", first)
	}
	head := first.ToolCalls[0]
	if head.Index == nil || *head.Index != 0 || !strings.HasPrefix(head.ID, "call_") || head.Type != "function" ||
		head.Function.Name != "get_weather" || head.Function.Arguments != "" {
		t.Errorf("call header %+v", head)
	}
	var args strings.Builder
	fragments := 0
	for _, ch := range chunks[1 : len(chunks)-2] {
		d := ch.Choices[0].Delta
		if len(d.ToolCalls) != 1 || d.ToolCalls[0].ID != "" || d.ToolCalls[0].Function.Name != "" || d.Role != "" {
			t.Fatalf("fragment delta %+v", d)
		}
		args.WriteString(d.ToolCalls[0].Function.Arguments)
		fragments++
	}
	checkArguments(t, args.String(), weatherArgs)
	tokens := tok.Count(args.String())
	if fragments < 2 || fragments > tokens {
		t.Errorf("%d fragments for %d tokens", fragments, tokens)
	}
	if fin := chunks[len(chunks)-2].Choices[0]; fin.FinishReason == nil || *fin.FinishReason != "tool_calls" {
		t.Errorf("finish chunk %+v", fin)
	}
	if u := chunks[len(chunks)-1].Usage; u == nil || u.CompletionTokens != tokens || u.PromptTokens != promptTokens(t, tok, b) {
		t.Errorf("usage %+v, want %d completion tokens", u, tokens)
	}
	if s := settled(t, e); s.CompletionTokens != int64(tokens) {
		t.Errorf("stats count %d completion tokens, want %d", s.CompletionTokens, tokens)
	}
}

func TestExampleArguments(t *testing.T) {
	for _, tc := range []struct{ params, want string }{
		{``, `{}`},
		{`"nonsense"`, `{}`},
		{`{"type":"object","properties":{"a":{"type":"number"}}}`, `{}`},
		{`{"properties":{"a":{"type":"number"},"b":{"type":"string"}},"required":["b","a","b"]}`, `{"b":"emulated","a":1}`},
		{`{"properties":{"q\"x":{"type":"string"}},"required":["q\"x"]}`, `{"q\"x":"emulated"}`},
	} {
		if got := exampleArguments(json.RawMessage(tc.params)); got != tc.want {
			t.Errorf("exampleArguments(%s) = %s, want %s", tc.params, got, tc.want)
		}
	}
}

func TestFragments(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want int
	}{{"{}", 1, 1}, {`{"a":"emulated"}`, 6, 6}, {"ééé", 9, 3}, {"abc", 0, 1}} {
		got := fragments(tc.s, tc.n)
		if len(got) != tc.want || strings.Join(got, "") != tc.s {
			t.Errorf("fragments(%q, %d) = %q", tc.s, tc.n, got)
		}
		for _, f := range got {
			if f == "" {
				t.Errorf("fragments(%q, %d) has an empty piece", tc.s, tc.n)
			}
		}
	}
}

// TestToolLoopEnds: once the last message is a tool's result, the answer
// is text with finish_reason stop, so an agent loop ends in two turns.
func TestToolLoopEnds(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	url := e.URL() + "/v1/chat/completions"
	first := decodeResponse(t, readAll(t, do(t, c, "POST", url, body("gpt-4o", weatherTools)), 200))
	call := first.Choices[0].Message.ToolCalls[0]
	msgs := `"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":` + jsonString(call.ID) +
		`,"type":"function","function":{"name":"get_weather","arguments":` + jsonString(call.Function.Arguments) + `}}]},` +
		`{"role":"tool","tool_call_id":` + jsonString(call.ID) + `,"content":"18 and sunny"}]`
	for _, stream := range []bool{false, true} {
		b := `{"model":"gpt-4o",` + msgs + `,` + weatherTools
		if stream {
			resp := do(t, c, "POST", url, b+`,"stream":true}`)
			evs, err := events(resp.Body)
			resp.Body.Close()
			if err != nil || len(evs) < 3 {
				t.Fatalf("stream: %v, %d events", err, len(evs))
			}
			last, _ := decodeChunk(t, evs[len(evs)-2])
			if f := last.Choices[0].FinishReason; f == nil || *f != "stop" {
				t.Errorf("stream finish %v", f)
			}
			continue
		}
		r := decodeResponse(t, readAll(t, do(t, c, "POST", url, b+`}`), 200))
		if ch := r.Choices[0]; ch.FinishReason != "stop" || ch.Message.Content == nil || *ch.Message.Content == "" || len(ch.Message.ToolCalls) != 0 {
			t.Errorf("after the tool result: finish %q message %+v", ch.FinishReason, ch.Message)
		}
	}
}

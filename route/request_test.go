package route

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseChatRequest(t *testing.T) {
	ok := []struct {
		name string
		body string
		want func(*ChatRequest) bool
	}{
		{"minimal", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			func(r *ChatRequest) bool { return r.Model == "m" && len(r.Messages) == 1 && r.N == 1 && !r.Stream }},
		{"stream with usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			func(r *ChatRequest) bool { return r.Stream && r.IncludeUsage }},
		{"usage ignored without stream", `{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
			func(r *ChatRequest) bool { return !r.IncludeUsage }},
		{"max_completion_tokens wins", `{"model":"m","max_tokens":5,"max_completion_tokens":7,"n":2,"messages":[{"role":"user","content":"hi"}]}`,
			func(r *ChatRequest) bool { return r.MaxTokens == 7 && r.N == 2 }},
		{"nulls", `{"model":"m","n":null,"max_tokens":null,"stream":null,"stream_options":null,"user":null,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"42"}]}`,
			func(r *ChatRequest) bool { return r.N == 1 && r.MaxTokens == 0 && len(r.Messages) == 2 }},
		{"content parts and image", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`,
			func(r *ChatRequest) bool {
				return r.images == 1 && r.Messages[0].Content.Parts[0].Text == "what is this"
			}},
		{"unknown fields pass", `{"model":"m","messages":[{"role":"user","content":"hi","cache_control":{"type":"ephemeral"}}],"tools":[],"x_vendor":{"a":[1,2,{"b":"}"}]}}`,
			func(r *ChatRequest) bool { return len(r.members) == 4 }},
		{"escaped key", `{"mod\u0065l":"m","messages":[{"role":"user","content":"hi"}]}`,
			func(r *ChatRequest) bool { return r.Model == "m" }},
		{"prompt_cache_key", `{"model":"m","prompt_cache_key":"tenant-docs-v2","messages":[{"role":"user","content":"hi"}]}`,
			func(r *ChatRequest) bool { return r.CacheKey == "tenant-docs-v2" }},
		{"prompt_cache_key null", `{"model":"m","prompt_cache_key":null,"messages":[{"role":"user","content":"hi"}]}`,
			func(r *ChatRequest) bool { return r.CacheKey == "" }},
		{"whitespace", " \n{ \"model\" : \"m\" ,\n \"messages\" : [ {\"role\":\"user\",\"content\":\"hi\"} ] }\n",
			func(r *ChatRequest) bool { return r.Model == "m" }},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseChatRequest([]byte(tc.body))
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !tc.want(r) {
				t.Fatalf("decoded wrongly: %+v", r)
			}
		})
	}

	bad := []struct {
		name, body, param, msg string
	}{
		{"not json", `{"model":`, "", "not valid JSON"},
		{"trailing data", `{"model":"m","messages":[{"role":"user","content":"hi"}]} {}`, "", "not valid JSON"},
		{"empty", " \n", "", "is empty"},
		{"invalid UTF-8", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", "", "not valid UTF-8"},
		{"not an object", `[1,2]`, "", "must be a JSON object"},
		{"no model", `{"messages":[{"role":"user","content":"hi"}]}`, "model", "required"},
		{"model not string", `{"model":3,"messages":[{"role":"user","content":"hi"}]}`, "model", "must be of type string"},
		{"no messages", `{"model":"m"}`, "messages", "required"},
		{"empty messages", `{"model":"m","messages":[]}`, "messages", "at least one"},
		{"messages not array", `{"model":"m","messages":"hi"}`, "messages", "array"},
		{"message not object", `{"model":"m","messages":["hi"]}`, "messages[0]", "object"},
		{"bad role", `{"model":"m","messages":[{"role":"wizard","content":"hi"}]}`, "messages[0].role", "must be one of"},
		{"role not string", `{"model":"m","messages":[{"role":1,"content":"hi"}]}`, "messages[0].role", "string"},
		{"no content", `{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content", "required"},
		{"content number", `{"model":"m","messages":[{"role":"user","content":5}]}`, "messages[0].content", "string, an array"},
		{"part without type", `{"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type", "required"},
		{"tool without id", `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id", "required"},
		{"stream not bool", `{"model":"m","stream":"yes","messages":[{"role":"user","content":"hi"}]}`, "stream", "boolean"},
		{"stream_options not object", `{"model":"m","stream":true,"stream_options":true,"messages":[{"role":"user","content":"hi"}]}`, "stream_options", "object"},
		{"n too big", `{"model":"m","n":1000,"messages":[{"role":"user","content":"hi"}]}`, "n", "between 1 and 128"},
		{"max_tokens zero", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "between"},
		{"max_tokens float", `{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "integer"},
		{"prompt_cache_key not string", `{"model":"m","prompt_cache_key":7,"messages":[{"role":"user","content":"hi"}]}`, "prompt_cache_key", "must be of type string"},
		{"duplicate model", `{"model":"a","messages":[{"role":"user","content":"hi"}],"model":"b"}`, "model", "more than once"},
		{"duplicate escaped", `{"model":"a","messages":[{"role":"user","content":"hi"}],"m\u006fdel":"b"}`, "model", "more than once"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseChatRequest([]byte(tc.body))
			var ie *InvalidRequestError
			if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("got %v, want an InvalidRequestError", err)
			}
			if ie.Param != tc.param || !strings.Contains(ie.Msg, tc.msg) {
				t.Fatalf("got param %q msg %q, want param %q msg containing %q", ie.Param, ie.Msg, tc.param, tc.msg)
			}
		})
	}
}

func TestUpstreamBodyKeepsEverythingElse(t *testing.T) {
	body := `{"model":"small","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","response_format":{"type":"json_object"},"seed":7,"logprobs":true,"x_vendor":{"k":"\"}"},"messages":[{"role":"user","content":"hi"}]}`
	r, err := ParseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.UpstreamBody("small"); string(got) != body {
		t.Fatalf("unchanged model must pass the body untouched:\n%s", got)
	}
	out := r.UpstreamBody("org/Big-Model")
	var got, want map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("rewritten body is not JSON: %v\n%s", err, out)
	}
	_ = json.Unmarshal([]byte(body), &want)
	want["model"] = "org/Big-Model"
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Fatalf("rewritten body:\n got %s\nwant %s", gb, wb)
	}
}

func TestUpstreamBodyAsksForStreamUsage(t *testing.T) {
	for _, tc := range []struct{ body, wantOptions string }{
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, `{"include_usage":true}`},
		{`{"model":"m","stream":true,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}`, `{"include_usage":true}`},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":false,"include_obfuscation":false},"messages":[{"role":"user","content":"hi"}]}`, `{"include_obfuscation":false,"include_usage":true}`},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, `{"include_usage":true}`},
	} {
		r, err := ParseChatRequest([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(r.UpstreamBody("m"), &doc); err != nil {
			t.Fatal(err)
		}
		if string(doc["stream_options"]) != tc.wantOptions {
			t.Errorf("%s: stream_options = %s, want %s", tc.body, doc["stream_options"], tc.wantOptions)
		}
	}
	// A non-streamed request never gets stream_options (OpenAI refuses it).
	r, _ := ParseChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if strings.Contains(string(r.UpstreamBody("other")), "stream_options") {
		t.Fatal("stream_options added to a non-streamed request")
	}
}

func TestPromptEstimateBoundsExactCount(t *testing.T) {
	var tk Tokenizer
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Explain the CAP theorem in one paragraph, with an example from a real database. 日本語も少し。"}]}`,
		`{"model":"m","messages":[{"role":"user","name":"bob","content":[{"type":"text","text":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}]}]}`,
	} {
		r, err := ParseChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		exact := tk.CountMessages(r.Messages)
		expected, upper := r.PromptEstimate()
		if upper < exact {
			t.Errorf("upper bound %d below exact count %d for %s", upper, exact, body)
		}
		if expected <= 0 || expected > upper {
			t.Errorf("expected estimate %d out of (0, %d]", expected, upper)
		}
	}
}

func FuzzParseChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"n":2,"max_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}],"tools":[{"type":"function"}]}`,
		`{"mod\u0065l":"m","messages":[]}`, `[]`, `{}`, `null`, `{"model":"m","model":"n"}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9 \xff\"}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChatRequest(body)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not match ErrInvalidRequest", err)
			}
			return
		}
		if r.Model == "" || len(r.Messages) == 0 || r.N < 1 {
			t.Fatalf("accepted an invalid request: %+v", r)
		}
		// Messages decode as encoding/json decodes them into plain
		// fields, where member names cannot match in another case (which
		// encoding/json allows), escapes included. (A body not in UTF-8 is
		// refused.)
		if !bytes.ContainsFunc(body, func(r rune) bool { return r >= 'A' && r <= 'Z' }) && !bytes.Contains(body, []byte(`\u`)) {
			var doc struct {
				Messages []struct {
					Role, Name string
					ToolCallID string `json:"tool_call_id"`
					Content    json.RawMessage
				}
			}
			if err := json.Unmarshal(body, &doc); err != nil {
				t.Fatalf("accepted what encoding/json refuses: %v", err)
			}
			for i, m := range doc.Messages {
				g := r.Messages[i]
				var text string
				if len(m.Content) > 0 && m.Content[0] == '"' {
					_ = json.Unmarshal(m.Content, &text)
				}
				if g.Role != m.Role || g.Name != m.Name || g.ToolCallID != m.ToolCallID || g.Content.Text != text {
					t.Fatalf("message %d decoded as %+v, encoding/json says %+v (text %q)", i, g, m, text)
				}
			}
		}
		// Whatever was accepted must rewrite to valid JSON with the new
		// model and the same other members.
		for _, model := range []string{r.Model, "other/\"model\""} {
			out := r.UpstreamBody(model)
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatalf("upstream body is not JSON: %v\n%s", err, out)
			}
			var got string
			if err := json.Unmarshal(doc["model"], &got); err != nil || got != model {
				t.Fatalf("upstream model = %q, want %q", got, model)
			}
			r2, err := ParseChatRequest(out)
			if err != nil {
				t.Fatalf("upstream body does not parse again: %v\n%s", err, out)
			}
			if len(r2.Messages) != len(r.Messages) || r2.Stream != r.Stream || r2.MaxTokens != r.MaxTokens || r2.N != r.N {
				t.Fatalf("rewrite changed the request:\n%s\n%s", body, out)
			}
		}
		_, upper := r.PromptEstimate()
		if upper < len(r.Messages) {
			t.Fatalf("upper bound %d too small", upper)
		}
	})
}

// A body with very many top-level fields is decoded in linear time.
func TestManyFieldsAreLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":"hi"}]`)
	for i := range 200000 {
		fmt.Fprintf(&b, `,"k%d":0`, i)
	}
	b.WriteString("}")
	start := time.Now()
	if _, err := ParseChatRequest([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	// Quadratic checking took minutes here; linear takes well under one
	// second even under the race detector.
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("200,000 fields took %v", d)
	}
	dupAtEnd := b.String()[:b.Len()-1] + `,"k7":1}`
	if _, err := ParseChatRequest([]byte(dupAtEnd)); err == nil || !strings.Contains(err.Error(), "k7: is given more than once") {
		t.Fatalf("late duplicate: %v", err)
	}
}

// BenchmarkLargePrompt is what an 8,000-token prompt costs the hot path:
// parsing the request and estimating its tokens. For contrast, exact is
// what counting it with the tokenizer would cost, which the hot path does
// not do.
func BenchmarkLargePrompt(b *testing.B) {
	var words strings.Builder
	vocab := strings.Fields("the mesh routes every request to the cheapest provider that is healthy fast enough within quota and budget and allowed to see the data")
	for i := 0; words.Len() < 45000; i++ {
		words.WriteString(vocab[i%len(vocab)])
		words.WriteByte(' ')
	}
	text := words.String()
	content, _ := json.Marshal(text)
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":` + string(content) + `}]}`)
	tokens := Tokenizer{}.Count(text)
	if tokens < 7000 || tokens > 9000 {
		b.Fatalf("the prompt is %d tokens, want about 8,000", tokens)
	}
	b.Run("parse+estimate", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			r, err := ParseChatRequest(body)
			if err != nil {
				b.Fatal(err)
			}
			if _, upper := r.PromptEstimate(); upper < tokens {
				b.Fatalf("upper bound %d below the %d tokens", upper, tokens)
			}
		}
	})
	b.Run("exact", func(b *testing.B) {
		for b.Loop() {
			Tokenizer{}.Count(text)
		}
	})
}

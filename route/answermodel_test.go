package route

import "testing"

func TestWithModel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"id":"x","model":"meta-llama/Meta-Llama-3-8B-Instruct","choices":[]}`, `{"id":"x","model":"llama-3-8b","choices":[]}`},
		{`{"id":"x", "model" : "up\"stream" ,"choices":[]}`, `{"id":"x", "model" : "llama-3-8b" ,"choices":[]}`},
		{`{"choices":[{"model":"inner"}],"model":"up"}`, `{"choices":[{"model":"inner"}],"model":"llama-3-8b"}`},
		{`{"model":"llama-3-8b","choices":[]}`, ""},       // already named
		{`{"choices":[{"delta":{"model":"inner"}}]}`, ""}, // no top-level model
		{`{"model":null}`, ""},                            // not a string
		{`{"model":"unterminated`, ""},                    // malformed
		{`{"error":{"message":"bad","model":"up"}}`, ""},  // an error event
		{`not json "model"`, ""},
	} {
		got, ok := withModel(nil, []byte(tc.in), "llama-3-8b")
		if tc.want == "" {
			if ok {
				t.Errorf("%s: renamed to %s", tc.in, got)
			}
			continue
		}
		if !ok || string(got) != tc.want {
			t.Errorf("%s: got %s (%v), want %s", tc.in, got, ok, tc.want)
		}
	}
	if got, _ := withModel(nil, []byte(`{"model":"x"}`), "a\"b"); string(got) != `{"model":"a\"b"}` {
		t.Errorf("quoted name: %s", got)
	}
}

func TestWithModelAllocs(t *testing.T) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"meta-llama/Meta-Llama-3-8B-Instruct","choices":[{"index":0,"delta":{"content":"hi"}}]}`)
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf, _ = withModel(buf, data, "llama-3-8b") }); n != 0 {
		t.Fatalf("%v allocations a chunk", n)
	}
}

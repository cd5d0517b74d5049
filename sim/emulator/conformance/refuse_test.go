package conformance

import (
	"net/http"
	"strings"
	"testing"
)

// TestChecksRefuse shows that each check the conformance tests make can
// fail: each kind refuses a document that breaks its schema in one place,
// and passes the same document mended.
func TestChecksRefuse(t *testing.T) {
	s := getSpec(t)
	answer := func(body string) func() error {
		return func() error {
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
			return s.checkAnswer("POST", "/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"a"}]}`), resp, []byte(body))
		}
	}
	request := func(path, body string) func() error {
		return func() error { return s.checkRequest("POST", path, []byte(body)) }
	}
	schema := func(name, doc string) func() error {
		return func() error { return s.checkSchema(name, doc) }
	}
	chunk := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"a"},"finish_reason":null,"logprobs":null}],"usage":null}`
	completion := `{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"text":"a","index":0,"logprobs":null,"finish_reason":null}]}`
	// A file search's result attributes have names of 64 characters at
	// most (propertyNames), which only kin's JSON Schema 2020-12
	// validator checks: ResponseStreamEvent is compiled, not left to
	// kin's OpenAPI 3.0 validator (see as31 on $recursiveRef).
	event := `{"type":"response.output_item.done","output_index":0,"sequence_number":1,"item":{"id":"fs","type":"file_search_call","status":"completed","queries":["q"],"results":[{"file_id":"f","attributes":{"NAME":"v"}}]}}`
	for _, tc := range []struct {
		what       string
		good, bad  func() error
		badSubject string // what the bad one's error names
	}{
		{"chat request", request("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":1}`),
			request("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],"max_tokens":"1"}`), "/max_tokens"},
		{"chat request's tools", request("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],`+tools+`}`),
			request("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"a"}],`+strings.Replace(tools, `"name":"f"`, `"name":1`, 1)+`}`), "/function/name"},
		{"completions request", request("/v1/completions", `{"model":"m","prompt":"a","max_tokens":1}`),
			request("/v1/completions", `{"model":"m","prompt":"a","max_tokens":"1"}`), "/max_tokens"},
		{"embeddings request", request("/v1/embeddings", `{"model":"m","input":"a"}`),
			request("/v1/embeddings", `{"model":"m","input":{}}`), "/input"},
		{"chat answer", answer(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a","refusal":null},"finish_reason":"stop","logprobs":null}]}`),
			answer(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a","refusal":null},"finish_reason":"done","logprobs":null}]}`), "/finish_reason"},
		{"chat stream chunk", schema("CreateChatCompletionStreamResponse", chunk),
			schema("CreateChatCompletionStreamResponse", strings.Replace(chunk, `"chat.completion.chunk"`, `""`, 1)), "/object"},
		{"chat stream chunk's finish", schema("CreateChatCompletionStreamResponse", chunk),
			schema("CreateChatCompletionStreamResponse", strings.Replace(chunk, `"finish_reason":null`, `"finish_reason":"done"`, 1)), "/finish_reason"},
		{"completions stream chunk", schema(completionChunk, completion),
			schema(completionChunk, strings.Replace(completion, `"finish_reason":null`, `"finish_reason":"done"`, 1)), "/finish_reason"},
		{"Responses stream event", schema("ResponseStreamEvent", strings.Replace(event, "NAME", strings.Repeat("n", 64), 1)),
			schema("ResponseStreamEvent", strings.Replace(event, "NAME", strings.Repeat("n", 65), 1)), "maxLength"},
		{"refusal", schema("ErrorResponse", `{"error":{"message":"m","type":"t","param":null,"code":null}}`),
			schema("ErrorResponse", `{"error":{"message":"m","type":"t","param":null}}`), `"code"`},
	} {
		if err := tc.good(); err != nil {
			t.Errorf("%s: the good one: %v", tc.what, err)
		}
		if err := tc.bad(); err == nil || !strings.Contains(err.Error(), tc.badSubject) {
			t.Errorf("%s: the bad one: %v; want an error about %s", tc.what, err, tc.badSubject)
		}
	}
}

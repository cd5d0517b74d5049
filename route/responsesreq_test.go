package route

import (
	"errors"
	"strings"
	"testing"
)

// A Responses request's fields are read (model, input items, tokens,
// stream, store, previous_response_id) and its bad ones refused naming
// the parameter.
func TestParseResponsesRequest(t *testing.T) {
	r, err := ParseResponsesRequest([]byte(`{"model":"m","input":[` +
		`{"role":"user","content":"Weather in Paris?"},` +
		`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"18 and sunny"},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"And tomorrow?"},{"type":"input_image","image_url":"https://x/y.png"}]}],` +
		`"max_output_tokens":64,"stream":true,"store":false,"previous_response_id":"resp_1","user":"u1",` +
		`"instructions":"Be brief.","prompt_cache_key":"k1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "m" || !r.Stream || r.Store || r.MaxTokens != 64 || r.PreviousResponseID != "resp_1" || r.User != "u1" || r.images != 1 || r.CacheKey != "k1" {
		t.Fatalf("%+v", r)
	}
	if r.Inputs()[0] != "Be brief." {
		t.Errorf("the instructions, given last, are not the prompt's start: %q", r.Inputs())
	}
	text := strings.Join(r.Inputs(), "|")
	for _, want := range []string{"Be brief.", "Weather in Paris?", "get_weather", `{"city":"Paris"}`, "18 and sunny", "And tomorrow?"} {
		if !strings.Contains(text, want) {
			t.Errorf("the prompt's text %q lacks %q", text, want)
		}
	}
	if up := string(r.UpstreamBody("up")); strings.Contains(up, "stream_options") || !strings.Contains(up, `"model":"up"`) {
		t.Errorf("a native Responses body gains nothing but its model: %s", up)
	}
	for _, c := range []struct{ body, param, msg string }{
		{`{"model":"m","input":`, "", "not valid JSON"},
		{`{"input":"hi"}`, "model", "is required"},
		{`{"model":"m"}`, "input", "is required"},
		{`{"model":7,"input":"hi"}`, "model", "must be of type string"},
		{`{"model":"m","input":7}`, "input", "must be a string or an array"},
		{`{"model":"m","input":[7]}`, "input[0]", "must be an object"},
		{`{"model":"m","input":[{"content":"x"}]}`, "input[0].type", "is required"},
		{`{"model":"m","input":[{"role":"user","content":7}]}`, "input[0].content", "must be a string"},
		{`{"model":"m","input":"hi","stream":"yes"}`, "stream", "must be of type boolean"},
		{`{"model":"m","input":"hi","max_output_tokens":0}`, "max_output_tokens", "between"},
		{`{"model":"m","input":"hi","max_output_tokens":"a"}`, "max_output_tokens", "integer"},
		{`{"model":"m","input":"hi","previous_response_id":""}`, "previous_response_id", "must be a response id"},
		{`{"model":"m","input":"hi","tools":{}}`, "tools", "must be an array"},
		{`{"model":"m","model":"m","input":"hi"}`, "model", "more than once"},
		{`{"model":"m","input":"hi","prompt_cache_key":[]}`, "prompt_cache_key", "must be of type string"},
	} {
		_, err := ParseResponsesRequest([]byte(c.body))
		var ie *InvalidRequestError
		if !errors.As(err, &ie) || ie.Param != c.param || !strings.Contains(ie.Msg, c.msg) {
			t.Errorf("%s: %v; want %q: %q", c.body, err, c.param, c.msg)
		}
	}
	// A follow-up may give no input: the stored context continues.
	if _, err := ParseResponsesRequest([]byte(`{"model":"m","previous_response_id":"resp_1"}`)); err != nil {
		t.Errorf("a follow-up without input: %v", err)
	}
}

// A Responses request's escrow bound holds its whole body and the context
// a follow-up continues; what it sends on, native or bridged, is within
// it.
func TestResponsesBound(t *testing.T) {
	body := `{"model":"m","input":"` + strings.Repeat("word ", 200) + `","max_output_tokens":16}`
	r, err := ParseResponsesRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	var tok Tokenizer
	_, upper := r.PromptEstimate()
	if n := tok.CountPrompt(r); upper < len(body) || n > upper || n < 200 {
		t.Fatalf("bound %d for a %d-byte body whose prompt counts %d", upper, len(body), n)
	}
	r.Prior = &Prior{ID: "resp_1", Provider: "p", Tokens: 5000}
	_, withPrior := r.PromptEstimate()
	if withPrior != upper+5000 || tok.CountPrompt(r) < 5000 {
		t.Fatalf("a follow-up's bound %d; want %d", withPrior, upper+5000)
	}
}

// A Responses request is sent to a provider's Responses endpoint: below
// /v1 for OpenAI's kind, Azure's v1 API for Azure's.
func TestResponsesURL(t *testing.T) {
	for _, c := range []struct{ ep, want string }{
		{"https://api.openai.com/v1/chat/completions", "https://api.openai.com/v1/responses/resp_1"},
		{"https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21", "https://r.openai.azure.com/openai/v1/responses/resp_1"},
	} {
		kind := KindOpenAI
		if strings.Contains(c.ep, "azure") {
			kind = KindAzure
		}
		tg := &Target{Offer: &Offer{Provider: &Provider{Kind: kind}, Endpoints: []string{c.ep}}}
		if got := responsesURL(tg, "/resp_1"); got != c.want {
			t.Errorf("%s: %s; want %s", c.ep, got, c.want)
		}
	}
}

// A Responses event's type is read and the model of the Response it
// carries renamed, every other byte kept.
func TestResponsesEvents(t *testing.T) {
	ev := []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"upstream","output":[]}}`)
	if string(eventType(ev)) != "response.created" {
		t.Fatalf("%s", eventType(ev))
	}
	if got := testing.AllocsPerRun(100, func() { _ = eventType(ev) }); got != 0 {
		t.Fatalf("reading an event's type allocates %v times", got)
	}
	if eventType([]byte(`{"type":"a\u0062"}`)) != nil || eventType([]byte(`{"delta":"x"}`)) != nil {
		t.Fatal("a type with escapes, or none, is read")
	}
	got, ok := withResponseModel(nil, ev, "mesh")
	if want := `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"mesh","output":[]}}`; !ok || string(got) != want {
		t.Fatalf("%s", got)
	}
	if _, ok := withResponseModel(nil, []byte(`{"type":"response.output_text.delta","delta":"x"}`), "mesh"); ok {
		t.Fatal("renamed an event without a Response")
	}
	var u Usage
	if err := u.UnmarshalJSON([]byte(`{"input_tokens":7,"output_tokens":3}`)); err != nil || u != (Usage{PromptTokens: 7, CompletionTokens: 3}) {
		t.Fatalf("%+v %v", u, err)
	}
}

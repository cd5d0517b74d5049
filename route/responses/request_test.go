package responses_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/route/responses"
)

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v in %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return reflect.DeepEqual(x, y)
}

// Every rule of the translation, each as the chat body it must give.
func TestToChatRequest(t *testing.T) {
	for _, tc := range []struct {
		name, body, prior, want string
	}{
		{"a string input is one user message; the model is the upstream's",
			`{"model":"gpt-4.1","input":"Hi"}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"Hi"}]}`},
		{"instructions come first, then the prior conversation, then the input",
			`{"instructions":"Be brief.","input":"And then?"}`,
			`[{"role":"user","content":"Where?"},{"role":"assistant","content":"Here."}]`,
			`{"model":"up","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Where?"},
			{"role":"assistant","content":"Here."},{"role":"user","content":"And then?"}]}`},
		{"message items: every role, string and part contents, images; developer is system, an assistant's parts its text",
			`{"input":[{"role":"system","content":"S"},{"type":"message","role":"developer","content":[{"type":"input_text","text":"D"}]},
			{"role":"user","content":[{"type":"input_text","text":"Look:"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"},
			{"type":"input_image","image_url":"data:image/png;base64,AA==","detail":"original"},{"type":"input_text","text":""}]},
			{"type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"A ","annotations":[]},{"type":"refusal","refusal":"no"}]}]}`, ``,
			`{"model":"up","messages":[{"role":"system","content":"S"},{"role":"system","content":[{"type":"text","text":"D"}]},
			{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}},
			{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}},{"type":"text","text":""}]},
			{"role":"assistant","content":"A no"}]}`},
		{"function calls join the assistant message before them; outputs are tool messages; reasoning is dropped",
			`{"input":[{"role":"user","content":"Weather?"},{"type":"reasoning","id":"rs_1","summary":[]},
			{"type":"message","role":"assistant","content":"Checking."},
			{"type":"function_call","id":"fc_1","call_id":"c1","name":"w","arguments":"{\"city\":\"Paris\"}"},
			{"type":"function_call","call_id":"c2","name":"w","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"18C"},
			{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"2"},{"type":"input_text","text":"0C"}]},
			{"type":"function_call","call_id":"c3","name":"w","arguments":"{}"}]}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"Weather?"},
			{"role":"assistant","content":"Checking.","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"c2","type":"function","function":{"name":"w","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"18C"},{"role":"tool","tool_call_id":"c2","content":"20C"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c3","type":"function","function":{"name":"w","arguments":"{}"}}]}]}`},
		{"function tools nest under function; tool_choice and parallel_tool_calls go with them",
			`{"input":"x","parallel_tool_calls":false,"tool_choice":{"type":"function","name":"w"},
			"tools":[{"type":"function","name":"w","description":"weather","parameters":{"type":"object"},"strict":true},
			{"type":"function","name":"v","parameters":null,"strict":null}]}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}],"parallel_tool_calls":false,
			"tool_choice":{"type":"function","function":{"name":"w"}},
			"tools":[{"type":"function","function":{"name":"w","description":"weather","parameters":{"type":"object"},"strict":true}},
			{"type":"function","function":{"name":"v"}}]}`},
		{"a tool_choice mode as it is",
			`{"input":"x","tool_choice":"required","tools":[{"type":"function","name":"w","parameters":{},"strict":false}]}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}],"tool_choice":"required",
			"tools":[{"type":"function","function":{"name":"w","parameters":{},"strict":false}}]}`},
		{"without tools, tool_choice and parallel_tool_calls change nothing and are not sent",
			`{"input":"x","tool_choice":"none","parallel_tool_calls":true,"tools":[]}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}]}`},
		{"sampling, bound, user, effort, verbosity, stream with usage",
			`{"input":"x","max_output_tokens":64,"temperature":0,"top_p":0.5,"user":"u1","stream":true,
			"reasoning":{"effort":"low","summary":"auto"},"text":{"format":{"type":"text"},"verbosity":"low"}}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}],"max_tokens":64,"temperature":0,"top_p":0.5,"user":"u1",
			"stream":true,"stream_options":{"include_usage":true},"reasoning_effort":"low","verbosity":"low"}`},
		{"json_schema structured output",
			`{"input":"x","text":{"format":{"type":"json_schema","name":"p","description":"a point","schema":{"type":"object"},"strict":true}}}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}],
			"response_format":{"type":"json_schema","json_schema":{"name":"p","description":"a point","schema":{"type":"object"},"strict":true}}}`},
		{"json_object",
			`{"input":"x","text":{"format":{"type":"json_object"}}}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`},
		{"logprobs when include asks for them",
			`{"input":"x","top_logprobs":2,"include":["reasoning.encrypted_content","message.output_text.logprobs"]}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":2}`},
		{"what does not change the answer, and what the bridge does not know, is not sent",
			`{"model":"m","input":"x","metadata":{"k":"v"},"store":false,"previous_response_id":"resp_1","truncation":"auto",
			"include":[],"prompt_cache_key":"p","safety_identifier":"s","service_tier":"flex","max_tool_calls":3,
			"background":false,"stream":false,"stream_options":{"include_obfuscation":false},"conversation":null,"vendor_x":1}`, ``,
			`{"model":"up","messages":[{"role":"user","content":"x"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prior []byte
			if tc.prior != "" {
				prior = []byte(tc.prior)
			}
			got, err := responses.ToChatRequest([]byte(tc.body), prior, "up")
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, got, []byte(tc.want)) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// What chat cannot carry is refused, naming the field.
func TestToChatRequestRefuses(t *testing.T) {
	const chatOnly = "is not supported by this provider: it serves Chat Completions only"
	for _, tc := range []struct{ body, param, msg string }{
		{`{"input":[{"role":"user","content":"x"},{"type":"item_reference","id":"msg_1"}]}`, "input[1].type", chatOnly},
		{`{"input":[{"type":"web_search_call","id":"ws_1"}]}`, "input[0].type", chatOnly},
		{`{"input":[{"role":"user","content":"x"},{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_file","file_id":"f"}]}]}`, "input[1].content[1].type", chatOnly},
		{`{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1"}]}]}`, "input[0].content[0].file_id", chatOnly},
		{`{"input":[{"role":"user","content":[{"type":"input_audio"}]}]}`, "input[0].content[0].type", chatOnly},
		{`{"input":[{"role":"assistant","content":[{"type":"input_image","image_url":"https://x"}]}]}`, "input[0].content[0].type", "assistant"},
		{`{"input":[{"role":"robot","content":"x"}]}`, "input[0].role", "robot"},
		{`{"input":[{"role":"user"}]}`, "input[0].content", "content"},
		{`{"input":[{"role":"user","content":7}]}`, "input[0].content", "string"},
		{`{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0]", "call_id"},
		{`{"input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", "call_id"},
		{`{"input":[{"type":"function_call_output","call_id":"c"}]}`, "input[0].output", "output"},
		{`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"https://x"}]}]}`, "input[0].output[0].type", chatOnly},
		{`{"input":"x","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}`, "tools[1].type", chatOnly},
		{`{"input":"x","tools":[{"type":"file_search","vector_store_ids":["v"]}]}`, "tools[0].type", chatOnly},
		{`{"input":"x","tools":[{"type":"mcp","server_label":"s"}]}`, "tools[0].type", chatOnly},
		{`{"input":"x","tools":[{"type":"code_interpreter","container":"auto"}]}`, "tools[0].type", chatOnly},
		{`{"input":"x","tools":[{"type":"computer_use_preview"}]}`, "tools[0].type", chatOnly},
		{`{"input":"x","tools":[{"type":"custom","name":"c"}]}`, "tools[0].type", chatOnly},
		{`{"input":"x","tools":[{"type":"function"}]}`, "tools[0].name", "name"},
		{`{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"file_search"}}`, "tool_choice.type", chatOnly},
		{`{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, "tool_choice.type", chatOnly},
		{`{"input":"x","tool_choice":"sometimes"}`, "tool_choice", "sometimes"},
		{`{"input":"x","background":true}`, "background", chatOnly},
		{`{"input":"x","conversation":"conv_1"}`, "conversation", chatOnly},
		{`{"input":"x","prompt":{"id":"pmpt_1"}}`, "prompt", chatOnly},
		{`{"input":"x","text":{"format":{"type":"yaml"}}}`, "text.format.type", "yaml"},
		{`{"input":"x","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format.name", "name"},
		{`{"input":"x","temperature":"hot"}`, "temperature", "number"},
		{`{"input":7}`, "input", "string"},
		{`{"model":"m"}`, "input", "input"},
		{`{"input":[]}`, "input", "input"},
		{`{"input":`, "", "valid"},
		{`["input"]`, "", "object"},
	} {
		_, err := responses.ToChatRequest([]byte(tc.body), nil, "up")
		var e *responses.Error
		switch {
		case !errors.As(err, &e):
			t.Errorf("%s: got %v, want an *Error", tc.body, err)
		case e.Param != tc.param || !strings.Contains(e.Msg, tc.msg):
			t.Errorf("%s: got param %q, %q; want %q, saying %q", tc.body, e.Param, e.Msg, tc.param, tc.msg)
		}
	}
	// A broken stored conversation is the caller's, not the client's.
	_, err := responses.ToChatRequest([]byte(`{"input":"x"}`), []byte(`{"not":"an array"}`), "up")
	if e := (*responses.Error)(nil); err == nil || errors.As(err, &e) {
		t.Errorf("a bad prior: %v", err)
	}
}

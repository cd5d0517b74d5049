package emulator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

func userInput(text string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}
}

func TestResponsesClient(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = map[string]Price{"gpt-4.1": {InputUSDPerMTok: 2, OutputUSDPerMTok: 8}}
	e := start(t, cfg)
	c := openaiClient(t, e)
	ctx := context.Background()

	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("Where does the mesh route?"), Instructions: openai.String("Be terse.")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Status != responses.ResponseStatusCompleted || len(r.Output) != 1 ||
		r.Output[0].Type != "message" || r.Instructions.OfString != "Be terse." {
		t.Fatalf("response %s", r.RawJSON())
	}
	if n := testTokenizer.Count(r.OutputText()); n != 16 || r.Usage.OutputTokens != 16 || r.Usage.TotalTokens != r.Usage.InputTokens+16 {
		t.Errorf("text %q: %d tokens, usage %+v", r.OutputText(), n, r.Usage)
	}

	// A follow-up counts the stored turn into its prompt.
	f, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("And then?"), PreviousResponseID: openai.String(r.ID)})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("And then?")})
	if err != nil {
		t.Fatal(err)
	}
	if f.PreviousResponseID != r.ID || f.Usage.InputTokens <= alone.Usage.InputTokens+16 {
		t.Errorf("follow-up input %d tokens, alone %d; previous %q", f.Usage.InputTokens, alone.Usage.InputTokens, f.PreviousResponseID)
	}
	got, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != r.ID || got.OutputText() != r.OutputText() {
		t.Fatalf("retrieve: %v, %+v", err, got)
	}
	if cancelled, err := c.Responses.Cancel(ctx, r.ID); err != nil || cancelled.ID != r.ID {
		t.Errorf("cancel: %v", err)
	}
	if err := c.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	for _, call := range []func() error{
		func() error { _, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); return err },
		func() error { return c.Responses.Delete(ctx, r.ID) },
		func() error {
			_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("x"), PreviousResponseID: openai.String(r.ID)})
			return err
		},
	} {
		var apiErr *openai.Error
		if err := call(); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Errorf("after delete: %v, want 404", err)
		}
	}
	// store: false keeps nothing; max_output_tokens cuts short.
	n, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("x"), Store: openai.Bool(false), MaxOutputTokens: openai.Int(16)})
	if err != nil || !strings.Contains(n.RawJSON(), `"store":false`) || n.Usage.OutputTokens != 16 {
		t.Fatalf("store false: %v %s", err, n.RawJSON())
	}
	if _, err := c.Responses.Get(ctx, n.ID, responses.ResponseGetParams{}); err == nil {
		t.Error("a response with store false was stored")
	}
	if st := settled(t, e); st.CompletionTokens != 4*16 {
		t.Errorf("stats %+v", st)
	}
}

func TestResponsesToolLoop(t *testing.T) {
	e := start(t, DefaultConfig())
	c := openaiClient(t, e)
	ctx := context.Background()
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Parameters: map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"},
	}}}}
	first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("Weather in Paris?"), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Output) != 1 || first.Output[0].Type != "function_call" {
		t.Fatalf("turn 1: %s", first.RawJSON())
	}
	call := first.Output[0]
	if call.Name != "get_weather" || call.Arguments.OfString != `{"city":"emulated"}` || !strings.HasPrefix(call.CallID, "call_") {
		t.Fatalf("call %s", call.RawJSON())
	}
	out := responses.ResponseInputItemParamOfFunctionCallOutput("18 and sunny")
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	second, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Tools: tools, PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Output) != 1 || second.Output[0].Type != "message" || second.OutputText() == "" || second.Status != "completed" {
		t.Errorf("turn 2: %s", second.RawJSON())
	}
}

func TestResponsesStream(t *testing.T) {
	e := start(t, DefaultConfig())
	c := openaiClient(t, e)
	ctx := context.Background()
	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("Stream, please.")})
	var types []string
	var text string
	var final responses.Response
	for i := 0; st.Next(); i++ {
		ev := st.Current()
		if ev.SequenceNumber != int64(i) {
			t.Errorf("event %d (%s) has sequence_number %d", i, ev.Type, ev.SequenceNumber)
		}
		if n := len(types); n == 0 || types[n-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events %s\nwant   %s", got, want)
	}
	if testTokenizer.Count(text) != 16 || final.OutputText() != text || final.Usage.OutputTokens != 16 {
		t.Errorf("streamed %q, final %s", text, final.RawJSON())
	}
	// The streamed response is stored, and a follow-up may name it.
	got, err := c.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != text {
		t.Fatalf("retrieve streamed: %v", err)
	}
	// A call streams its arguments.
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "f", Parameters: map[string]any{"type": "object"}}}}
	st = c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("x"), Tools: tools, PreviousResponseID: openai.String(final.ID)})
	var args string
	var done bool
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args += ev.Delta
		case "response.function_call_arguments.done":
			done = ev.Arguments == args
		}
	}
	if err := st.Err(); err != nil || args != "{}" || !done {
		t.Errorf("call stream: args %q done %v err %v", args, done, err)
	}
}

func TestNoResponses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NoResponses = true
	e := start(t, cfg)
	c := newClient(t)
	for _, p := range []string{"/v1/responses", "/v1/responses/resp_1", "/v1/responses/resp_1/cancel"} {
		method := "POST"
		if p == "/v1/responses/resp_1" {
			method = "GET"
		}
		wantError(t, do(t, c, method, e.URL()+p, `{"model":"m","input":"x"}`), 404, "invalid_request_error", "", "")
	}
	readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 200)
}

func TestResponsesBadInput(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	url := e.URL() + "/v1/responses"
	for _, tc := range []struct {
		body        string
		status      int
		param, code string
	}{
		{`{"model":"m","input":`, 400, "", ""},
		{`{"input":"x"}`, 400, "model", ""},
		{`{"model":"m"}`, 400, "input", ""},
		{`{"model":"m","input":[]}`, 400, "input", ""},
		{`{"model":"m","input":7}`, 400, "input", ""},
		{`{"model":"m","input":[{"role":"robot","content":"x"}]}`, 400, "input[0].role", ""},
		{`{"model":"m","input":[{"type":"function_call_output","call_id":"c"}]}`, 400, "input[0].output", ""},
		{`{"model":"m","input":"x","max_output_tokens":8}`, 400, "max_output_tokens", ""},
		{`{"model":"m","input":"x","tools":{}}`, 400, "tools", ""},
		{`{"model":"m","input":"x","previous_response_id":"resp_nope"}`, 404, "previous_response_id", "previous_response_not_found"},
	} {
		wantError(t, do(t, c, "POST", url, tc.body), tc.status, "invalid_request_error", tc.param, tc.code)
	}
}

func TestResponsesStoreBounded(t *testing.T) {
	var s responseStore
	for i := range storedResponsesKept + 5 {
		s.put(&storedResponse{id: fmt.Sprint(i)})
	}
	if _, ok := s.get("0"); ok || s.len() != storedResponsesKept {
		t.Errorf("%d kept, oldest kept %v", s.len(), ok)
	}
	if _, ok := s.get("5"); !ok {
		t.Error("a recent response was dropped")
	}
	s.put(&storedResponse{id: "x"}) // drops 6, not 5 which was just used
	if _, ok := s.get("5"); !ok {
		t.Error("the response used last was dropped")
	}
	if _, ok := s.get("6"); ok {
		t.Error("the least recently used response was kept")
	}
}

// TestResponsesIncomplete: max_output_tokens below the natural length
// ends the response incomplete, whole or streamed.
func TestResponsesIncomplete(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DefaultMaxTokens = 40
	e := start(t, cfg)
	c := openaiClient(t, e)
	p := responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("x"), MaxOutputTokens: openai.Int(20)}
	r, err := c.Responses.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 20 {
		t.Errorf("whole: %s", r.RawJSON())
	}
	st := c.Responses.NewStreaming(context.Background(), p)
	last := ""
	for st.Next() {
		last = st.Current().Type
	}
	if err := st.Err(); err != nil || last != "response.incomplete" {
		t.Errorf("stream ended with %q, %v", last, err)
	}
}

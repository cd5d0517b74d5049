package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
)

// anthropicClient returns an anthropic-sdk-go client of e that does not
// retry; it sends x-api-key and anthropic-version.
func anthropicClient(t *testing.T, e *Emulator, opts ...aoption.RequestOption) anthropic.Client {
	t.Helper()
	return anthropic.NewClient(append([]aoption.RequestOption{
		aoption.WithBaseURL(e.URL()), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0),
		aoption.WithHTTPClient(newClient(t)),
	}, opts...)...)
}

func anthropicConfig() Config {
	cfg := DefaultConfig()
	cfg.APIKey = "sk-ant-test"
	cfg.Models = map[string]Price{"claude-emu": {InputUSDPerMTok: 3, OutputUSDPerMTok: 15}}
	return cfg
}

func TestMessagesClient(t *testing.T) {
	e := start(t, anthropicConfig())
	c := anthropicClient(t, e)
	ctx := context.Background()
	params := anthropic.MessageNewParams{
		Model: "claude-emu", MaxTokens: 1024,
		System:   []anthropic.TextBlockParam{{Text: "You are terse."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Where does the mesh route my request?"))},
	}
	m, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != "claude-emu" ||
		m.StopReason != anthropic.StopReasonEndTurn || len(m.Content) != 1 || m.Content[0].Type != "text" {
		t.Fatalf("message %s", m.RawJSON())
	}
	if n := testTokenizer.Count(m.Content[0].Text); n != 16 || m.Usage.OutputTokens != 16 {
		t.Errorf("text %q: %d tokens, usage %+v", m.Content[0].Text, n, m.Usage)
	}
	count, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: "claude-emu", Messages: params.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("You are terse.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if count.InputTokens != m.Usage.InputTokens || count.InputTokens < 10 {
		t.Errorf("count_tokens %d, message input_tokens %d", count.InputTokens, m.Usage.InputTokens)
	}
	if st := settled(t, e); st.PromptTokens != m.Usage.InputTokens || st.CompletionTokens != 16 {
		t.Errorf("stats %+v", st)
	}

	// max_tokens below the default length stops there; a stop sequence
	// ends the text before it.
	params.MaxTokens = 5
	short, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if short.StopReason != anthropic.StopReasonMaxTokens || short.Usage.OutputTokens != 5 {
		t.Errorf("short message %s", short.RawJSON())
	}
	params.MaxTokens = 1024
	params.StopSequences = []string{"e"} // in most words of the vocabulary
	stopped, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if stopped.StopReason != anthropic.StopReasonStopSequence || stopped.StopSequence != "e" || strings.Contains(stopped.Content[0].Text, "e") {
		t.Errorf("stop sequence %q: %s", params.StopSequences[0], stopped.RawJSON())
	}
}

func TestMessagesStream(t *testing.T) {
	cfg := anthropicConfig()
	cfg.TTFT = 10 * time.Millisecond
	cfg.TPS = 1000
	e := start(t, cfg)
	c := anthropicClient(t, e)
	st := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "claude-emu", MaxTokens: 12,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Stream, please."))},
	})
	var msg anthropic.Message
	var types []string
	for st.Next() {
		ev := st.Current()
		if n := len(types); n == 0 || types[n-1] != ev.Type {
			types = append(types, ev.Type)
		}
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := "message_start content_block_start content_block_delta content_block_stop message_delta message_stop" // the client drops pings
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events %s\nwant   %s", got, want)
	}
	if msg.StopReason != anthropic.StopReasonMaxTokens || msg.Usage.OutputTokens != 12 || msg.Usage.InputTokens == 0 ||
		len(msg.Content) != 1 || testTokenizer.Count(msg.Content[0].Text) != 12 {
		t.Errorf("accumulated %+v", msg)
	}
	if s := settled(t, e); s.StreamsCompleted != 1 || s.CompletionTokens != 12 {
		t.Errorf("stats %+v", s)
	}
}

func TestMessagesToolRoundTrip(t *testing.T) {
	e := start(t, anthropicConfig())
	c := anthropicClient(t, e)
	tools := []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}},
		Required:   []string{"city", "days"},
	}, "get_weather")}
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))}
	for _, stream := range []bool{false, true} {
		params := anthropic.MessageNewParams{Model: "claude-emu", MaxTokens: 256, Tools: tools, Messages: msgs}
		first := send(t, c, params, stream)
		if first.StopReason != anthropic.StopReasonToolUse || len(first.Content) != 1 || first.Content[0].Type != "tool_use" {
			t.Fatalf("stream %v, turn 1: %s", stream, first.RawJSON())
		}
		call := first.Content[0]
		var input map[string]any
		if err := json.Unmarshal(call.Input, &input); err != nil || call.Name != "get_weather" || !strings.HasPrefix(call.ID, "toolu_") ||
			input["city"] != "emulated" || input["days"] != 1.0 {
			t.Fatalf("call %+v input %s: %v", call, call.Input, err)
		}
		params.Messages = append(msgs, first.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "18°C and sunny", false)))
		second := send(t, c, params, stream)
		if second.StopReason != anthropic.StopReasonEndTurn || len(second.Content) != 1 || second.Content[0].Type != "text" || second.Content[0].Text == "" {
			t.Errorf("stream %v, turn 2: %s", stream, second.RawJSON())
		}
	}
}

// send sends a Messages request, streaming and accumulating it or not.
func send(t *testing.T, c anthropic.Client, p anthropic.MessageNewParams, stream bool) *anthropic.Message {
	t.Helper()
	if !stream {
		m, err := c.Messages.New(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	st := c.Messages.NewStreaming(context.Background(), p)
	var m anthropic.Message
	for st.Next() {
		if err := m.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return &m
}

func TestMessagesErrors(t *testing.T) {
	cfg := anthropicConfig()
	e := start(t, cfg)
	cfg.RPM = 1
	limited := start(t, cfg)
	c, lc := anthropicClient(t, e), anthropicClient(t, limited)
	ctx := context.Background()
	ok := anthropic.MessageNewParams{Model: "claude-emu", MaxTokens: 8, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	unknown := ok
	unknown.Model = "claude-none"
	for _, tc := range []struct {
		name   string
		c      anthropic.Client
		p      anthropic.MessageNewParams
		opts   []aoption.RequestOption
		status int
		typ    string
	}{
		{"bad key", c, ok, []aoption.RequestOption{aoption.WithAPIKey("sk-wrong")}, 401, "authentication_error"},
		{"unknown model", c, unknown, nil, 404, "not_found_error"},
		{"allowed", lc, ok, nil, 200, ""},
		{"rate limited", lc, ok, nil, 429, "rate_limit_error"},
	} {
		_, err := tc.c.Messages.New(ctx, tc.p, tc.opts...)
		var apiErr *anthropic.Error
		switch {
		case tc.status == 200 && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.status != 200 && (!errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || string(apiErr.Type()) != tc.typ || apiErr.Message == ""):
			t.Errorf("%s: %v, want %d %s", tc.name, err, tc.status, tc.typ)
		}
	}
}

func TestMessagesBadInput(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	url := e.URL() + "/v1/messages"
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	v := []string{"anthropic-version", "2023-06-01"}
	for _, tc := range []struct {
		body   string
		header []string
		status int
		typ    string
	}{
		{`{"model":"m","max_tokens":8,` + msgs + `}`, nil, 400, "invalid_request_error"}, // no anthropic-version
		{`{"model":"m",` + msgs + `}`, v, 400, "invalid_request_error"},
		{`{"max_tokens":8,` + msgs + `}`, v, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":8}`, v, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":"8",` + msgs + `}`, v, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":8,"messages":[{"role":"system","content":"hi"}]}`, v, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":7}]}`, v, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}`, v, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":8,` + msgs + `,"tool_choice":{"type":"tool","name":"x"},"tools":[{"name":"y","input_schema":{}}]}`, v, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":8,` + msgs, v, 400, "invalid_request_error"},
	} {
		resp := do(t, c, "POST", url, tc.body, tc.header...)
		b := readAll(t, resp, tc.status)
		var doc struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &doc); err != nil || doc.Type != "error" || doc.Error.Type != tc.typ || doc.Error.Message == "" {
			t.Errorf("%s: %s", tc.body, b)
		}
	}
	// Bearer is accepted as well as x-api-key.
	cfg := anthropicConfig()
	k := start(t, cfg)
	readAll(t, do(t, c, "POST", k.URL()+"/v1/messages", `{"model":"claude-emu","max_tokens":8,`+msgs+`}`, "anthropic-version", "2023-06-01", "Authorization", "Bearer sk-ant-test"), 200)
}

// TestMessagesStreamEvents reads a stream's events as sent: each an event
// line naming the type its data has, the ping included.
func TestMessagesStreamEvents(t *testing.T) {
	e := start(t, DefaultConfig())
	resp := do(t, newClient(t), "POST", e.URL()+"/v1/messages",
		`{"model":"m","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "anthropic-version", "2023-06-01")
	b := readAll(t, resp, 200)
	var names []string
	for _, ev := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		name, data, ok := strings.Cut(ev, "\n")
		var doc struct{ Type string }
		if !ok || json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &doc) != nil || "event: "+doc.Type != name {
			t.Fatalf("event %q", ev)
		}
		names = append(names, doc.Type)
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("events %s\nwant   %s", got, want)
	}
}

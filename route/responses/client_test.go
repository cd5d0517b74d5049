package responses_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	bridge "github.com/llmesh/llmesh/route/responses"
)

// bridgeServer serves POST /v1/responses as a node does for a chat-only
// provider: each request is translated, answered with the next canned
// chat answer (a chat completion, or a stream when the request streams)
// and translated back; finished turns are kept for previous_response_id.
type bridgeServer struct {
	t       *testing.T
	mu      sync.Mutex
	answers []string // the chat answers still to give, in order
	chats   [][]byte // the chat requests made, in order
	stored  map[string][]byte
}

func newBridgeServer(t *testing.T) (*bridgeServer, openai.Client) {
	b := &bridgeServer{t: t, stored: map[string][]byte{}}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithHTTPClient(srv.Client()))
}

func (b *bridgeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct {
		Stream   bool   `json:"stream"`
		Previous string `json:"previous_response_id"`
	}
	_ = json.Unmarshal(body, &in)
	b.mu.Lock()
	prior := b.stored[in.Previous]
	b.mu.Unlock()
	chatReq, err := bridge.ToChatRequest(body, prior, "upstream-model")
	if e := (*bridge.Error)(nil); errors.As(err, &e) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": e.Msg, "type": "invalid_request_error", "param": e.Param, "code": nil}})
		return
	} else if err != nil {
		b.t.Errorf("ToChatRequest: %v", err)
		return
	}
	b.mu.Lock()
	b.chats = append(b.chats, chatReq)
	answer := b.answers[0]
	b.answers = b.answers[1:]
	b.mu.Unlock()
	id := bridge.NewID()
	var assistant []byte
	if in.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		s := bridge.StreamReader(io.NopCloser(strings.NewReader(answer)), body, id, 1700000000, 0)
		_, _ = io.Copy(w, s)
		assistant = s.Assistant()
	} else {
		var resp []byte
		resp, assistant, err = bridge.FromChatAnswer([]byte(answer), body, id, 1700000000)
		if err != nil {
			b.t.Errorf("FromChatAnswer: %v", err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	}
	if assistant == nil {
		return // a broken stream is no turn to continue
	}
	conv, err := bridge.Conversation(body, chatReq, assistant)
	if err != nil {
		b.t.Errorf("Conversation: %v", err)
	}
	b.mu.Lock()
	b.stored[id] = conv
	b.mu.Unlock()
}

// answer queues chat answers and returns the chat request the next call
// makes.
func (b *bridgeServer) answer(answers ...string) func() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.answers = append(b.answers, answers...)
	n := len(b.chats)
	return func() []byte {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.chats[n]
	}
}

func userInput(text string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}
}

// openai-go's client.Responses.New, through the bridge: text, a tool call
// and its output sent back with previous_response_id, as from OpenAI.
func TestClientResponsesNew(t *testing.T) {
	b, c := newBridgeServer(t)
	ctx := context.Background()
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}
	chat := b.answer(`{"id":"c1","model":"upstream-model","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
	"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}}],
	"usage":{"prompt_tokens":30,"completion_tokens":8,"total_tokens":38}}`)
	first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("Weather in Paris?"),
		Instructions: openai.String("Be terse."), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != "completed" || len(first.Output) != 1 || first.Output[0].Type != "function_call" || first.Usage.TotalTokens != 38 {
		t.Fatalf("turn 1: %s", first.RawJSON())
	}
	call := first.Output[0].AsFunctionCall()
	if call.CallID != "call_1" || call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` {
		t.Fatalf("call %s", call.RawJSON())
	}
	if !strings.Contains(string(chat()), `"tools":[{"type":"function","function":{"name":"get_weather"`) {
		t.Errorf("chat request 1: %s", chat())
	}

	chat = b.answer(`{"id":"c2","model":"upstream-model","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"18C and sunny."}}],
	"usage":{"prompt_tokens":45,"completion_tokens":5,"total_tokens":50,"prompt_tokens_details":{"cached_tokens":30}}}`)
	out := responses.ResponseInputItemParamOfFunctionCallOutput("18 and sunny")
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	second, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Tools: tools, PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}})
	if err != nil {
		t.Fatal(err)
	}
	if second.OutputText() != "18C and sunny." || second.PreviousResponseID != first.ID || second.Usage.InputTokensDetails.CachedTokens != 30 {
		t.Errorf("turn 2: %s", second.RawJSON())
	}
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(chat(), &req)
	var roles []string
	for _, m := range req.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,tool" || req.Messages[2].ToolCallID != "call_1" {
		t.Errorf("turn 2's chat request, without turn 1's instructions: %s", chat())
	}

	// What chat cannot carry is a 400 naming the field.
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("x"),
		Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: "web_search"}}}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "tools[0].type" {
		t.Errorf("web_search: %v", err)
	}
}

// openai-go's client.Responses.NewStreaming, through the bridge: the
// deltas, the call's arguments and the final response agree.
func TestClientResponsesStreaming(t *testing.T) {
	b, c := newBridgeServer(t)
	b.answer(textAndCalls)
	st := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("x")})
	var text, args string
	var final responses.Response
	n := 0
	for ; st.Next(); n++ {
		ev := st.Current()
		if ev.SequenceNumber != int64(n) {
			t.Errorf("event %d (%s) has sequence_number %d", n, ev.Type, ev.SequenceNumber)
		}
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.function_call_arguments.delta":
			args += ev.Delta
		case "response.completed":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if text != "Let me check." || args != `{"city":"Paris"}{}` || final.OutputText() != text || final.Status != "completed" ||
		final.Usage.OutputTokens != 11 || len(final.Output) != 3 || final.Output[2].AsFunctionCall().Name != "t" {
		t.Errorf("%d events: text %q, arguments %q, final %s", n, text, args, final.RawJSON())
	}

	// A stream that breaks off ends without response.completed.
	b.answer(sse(`{"model":"m","choices":[{"index":0,"delta":{"content":"Hal"}}]}`))
	st = c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "gpt-4.1", Input: userInput("x")})
	last := ""
	for st.Next() {
		last = st.Current().Type
	}
	if last != "response.output_text.delta" {
		t.Errorf("a broken stream's last event is %q", last)
	}
}

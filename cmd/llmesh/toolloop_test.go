package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// loopTurns is the most model calls a one-tool loop may take: the call
// of the tool, then the answer to its result.
const loopTurns = 2

// weatherSchema is get_weather's parameters: a city, required.
var weatherSchema = map[string]any{"city": map[string]any{"type": "string"}}

// runTool is the agent's side of the loop: it runs the tool the model
// called, get_weather, and returns its result, failing the test on any
// other tool or arguments without a city.
func runTool(t *testing.T, name string, args []byte) string {
	t.Helper()
	var in struct {
		City *string `json:"city"`
	}
	if err := json.Unmarshal(args, &in); err != nil || name != "get_weather" || in.City == nil {
		t.Fatalf("the model called %s(%s): %v", name, args, err)
	}
	return fmt.Sprintf(`{"city":%q,"temp_c":18}`, *in.City)
}

// counted is a client middleware counting the requests the client sends:
// the model calls as the wire sees them, retries included.
func counted(n *atomic.Int32) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(r *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		n.Add(1)
		return next(r)
	}
}

// A tool loop against `llmesh agent -dev`, run as an agent runs it with
// the official clients, ends by itself within two model calls: the first
// answers a call of the tool, the agent runs it and sends its result, the
// second answers in text and stops. openai-go's Chat Completions
// (tool_calls, then stop) and anthropic-sdk-go's Messages (tool_use, then
// end_turn) and the Responses API (function_call, then a message),
// whole and streamed, with the key the dev agent prints. A
// loop that would call the model a third time fails.
func TestToolLoopAgainstAgentDevEndsInTwoTurns(t *testing.T) {
	a := startDevAgent(t, t.TempDir(), loopbackAddr(t))
	m := regexp.MustCompile(`dev tenant key: (\S+)`).FindStringSubmatch(strings.Join(a.lines, "\n"))
	if m == nil {
		t.Fatalf("the banner prints no dev tenant key:\n%s", strings.Join(a.lines, "\n"))
	}
	key := m[1]
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "streamed"}[stream]
		t.Run("openai/"+name, func(t *testing.T) {
			var calls atomic.Int32
			c := openai.NewClient(option.WithBaseURL(a.base+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0),
				option.WithMiddleware(counted(&calls)))
			openAIToolLoop(t, c, stream)
			if n := calls.Load(); n != loopTurns {
				t.Fatalf("%d model calls on the wire; want %d", n, loopTurns)
			}
		})
		// The Responses API: gpt-4o-mini passed through to Azure,
		// llama-3-8b bridged to the GPU cluster's chat completions; the
		// tool's result continues the first response by its id.
		for _, model := range []string{"gpt-4o-mini", "llama-3-8b"} {
			t.Run("responses/"+model+"/"+name, func(t *testing.T) {
				var calls atomic.Int32
				c := openai.NewClient(option.WithBaseURL(a.base+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0),
					option.WithMiddleware(counted(&calls)))
				responsesToolLoop(t, c, model, stream)
				if n := calls.Load(); n != loopTurns {
					t.Fatalf("%d model calls on the wire; want %d", n, loopTurns)
				}
			})
		}
		t.Run("anthropic/"+name, func(t *testing.T) {
			var calls atomic.Int32
			c := anthropic.NewClient(aoption.WithBaseURL(a.base), aoption.WithAPIKey(key), aoption.WithMaxRetries(0),
				aoption.WithMiddleware(counted(&calls)))
			anthropicToolLoop(t, c, stream)
			if n := calls.Load(); n != loopTurns {
				t.Fatalf("%d model calls on the wire; want %d", n, loopTurns)
			}
		})
	}
	a.stop(t)
}

// openAIToolLoop runs a Chat Completions agent loop with get_weather
// until the model answers without calling a tool.
func openAIToolLoop(t *testing.T, c openai.Client, stream bool) {
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Current weather for a city"),
		Parameters: shared.FunctionParameters{"type": "object", "properties": weatherSchema, "required": []string{"city"}},
	})}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")}
	for turn := 1; ; turn++ {
		if turn > loopTurns {
			t.Fatalf("the loop did not end within %d model calls", loopTurns)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, Tools: tools}
		var choice openai.ChatCompletionChoice
		if stream {
			st := c.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for st.Next() {
				acc.AddChunk(st.Current())
			}
			if err := st.Err(); err != nil || len(acc.Choices) != 1 {
				t.Fatalf("turn %d: %v, %d choices", turn, err, len(acc.Choices))
			}
			choice = acc.Choices[0]
		} else {
			resp, err := c.Chat.Completions.New(ctx, params)
			if err != nil || len(resp.Choices) != 1 {
				t.Fatalf("turn %d: %v", turn, err)
			}
			choice = resp.Choices[0]
		}
		cancel()
		msg := choice.Message
		if len(msg.ToolCalls) == 0 { // the model answered: the loop ends
			if turn != loopTurns || choice.FinishReason != "stop" || msg.Content == "" {
				t.Fatalf("turn %d answered %q, finish_reason %q; want text and stop on turn %d", turn, msg.Content, choice.FinishReason, loopTurns)
			}
			return
		}
		if turn != 1 || choice.FinishReason != "tool_calls" {
			t.Fatalf("turn %d called %d tools, finish_reason %q; want the call on turn 1 with tool_calls", turn, len(msg.ToolCalls), choice.FinishReason)
		}
		asst := msg.ToParam()
		if asst.OfAssistant == nil || len(asst.OfAssistant.ToolCalls) != len(msg.ToolCalls) {
			t.Fatalf("the assistant's turn sent back lacks its tool calls: %+v", asst)
		}
		msgs = append(msgs, asst)
		for _, call := range msg.ToolCalls {
			if call.ID == "" {
				t.Fatalf("a tool call without an id: %+v", call)
			}
			msgs = append(msgs, openai.ToolMessage(runTool(t, call.Function.Name, []byte(call.Function.Arguments)), call.ID))
		}
	}
}

// anthropicToolLoop runs a Messages agent loop with get_weather until
// the model answers without a tool_use.
func anthropicToolLoop(t *testing.T, c anthropic.Client, stream bool) {
	tools := []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: weatherSchema, Required: []string{"city"},
	}, "get_weather")}
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is the weather in Paris?"))}
	for turn := 1; ; turn++ {
		if turn > loopTurns {
			t.Fatalf("the loop did not end within %d model calls", loopTurns)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		params := anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 256, Tools: tools, Messages: msgs}
		var m anthropic.Message
		if stream {
			st := c.Messages.NewStreaming(ctx, params)
			for st.Next() {
				if err := m.Accumulate(st.Current()); err != nil {
					t.Fatalf("turn %d: %v", turn, err)
				}
			}
			if err := st.Err(); err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
		} else {
			got, err := c.Messages.New(ctx, params)
			if err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
			m = *got
		}
		cancel()
		msgs = append(msgs, m.ToParam())
		var results []anthropic.ContentBlockParamUnion
		text := ""
		for _, b := range m.Content {
			switch b.Type {
			case "tool_use":
				if b.ID == "" {
					t.Fatalf("a tool_use without an id: %s", m.RawJSON())
				}
				results = append(results, anthropic.NewToolResultBlock(b.ID, runTool(t, b.Name, b.Input), false))
			case "text":
				text += b.Text
			}
		}
		if len(results) == 0 { // the model answered: the loop ends
			if turn != loopTurns || m.StopReason != anthropic.StopReasonEndTurn || text == "" {
				t.Fatalf("turn %d answered %q, stop_reason %q; want text and end_turn on turn %d", turn, text, m.StopReason, loopTurns)
			}
			return
		}
		if turn != 1 || m.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("turn %d used %d tools, stop_reason %q; want the tool_use on turn 1", turn, len(results), m.StopReason)
		}
		msgs = append(msgs, anthropic.NewUserMessage(results...))
	}
}

// responsesToolLoop runs a Responses API agent loop with get_weather
// until the model answers without a function call: each turn continues
// the last response by previous_response_id with the tools' outputs.
func responsesToolLoop(t *testing.T, c openai.Client, model string, stream bool) {
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Strict: openai.Bool(false),
		Parameters: map[string]any{"type": "object", "properties": weatherSchema, "required": []string{"city"}}}}}
	input := responses.ResponseNewParamsInputUnion{OfString: openai.String("What is the weather in Paris?")}
	previous := ""
	for turn := 1; ; turn++ {
		if turn > loopTurns {
			t.Fatalf("the loop did not end within %d model calls", loopTurns)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		params := responses.ResponseNewParams{Model: model, Input: input, Tools: tools}
		if previous != "" {
			params.PreviousResponseID = openai.String(previous)
		}
		var r *responses.Response
		if stream {
			st := c.Responses.NewStreaming(ctx, params)
			for st.Next() {
				if ev := st.Current(); ev.Type == "response.completed" {
					done := ev.Response
					r = &done
				}
			}
			if err := st.Err(); err != nil || r == nil {
				t.Fatalf("turn %d: %v, completed %v", turn, err, r != nil)
			}
		} else {
			var err error
			if r, err = c.Responses.New(ctx, params); err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
		}
		cancel()
		var outputs responses.ResponseInputParam
		for _, item := range r.Output {
			if item.Type == "function_call" {
				out := responses.ResponseInputItemParamOfFunctionCallOutput(runTool(t, item.Name, []byte(item.Arguments.OfString)))
				out.OfFunctionCallOutput.CallID = openai.String(item.CallID)
				outputs = append(outputs, out)
			}
		}
		if len(outputs) == 0 { // the model answered: the loop ends
			if turn != loopTurns || r.Status != responses.ResponseStatusCompleted || r.OutputText() == "" {
				t.Fatalf("turn %d answered %q, status %q; want text on turn %d", turn, r.OutputText(), r.Status, loopTurns)
			}
			return
		}
		if turn != 1 {
			t.Fatalf("turn %d called %d tools; want the call on turn 1", turn, len(outputs))
		}
		previous, input = r.ID, responses.ResponseNewParamsInputUnion{OfInputItemList: outputs}
	}
}

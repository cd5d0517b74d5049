package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/llmesh/llmesh/route"
)

func client(f *fixture, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(f.url + "/v1/"), option.WithAPIKey(testKey), option.WithMaxRetries(0),
	}, opts...)...)
}

// TestOpenAIClient drives a node with the official openai-go client against
// an emulated OpenAI provider and an emulated Azure OpenAI provider.
func TestOpenAIClient(t *testing.T) {
	for _, kind := range []string{"openai", "azure"} {
		t.Run(kind, func(t *testing.T) {
			f := startNode(t, []upstream{{name: kind + "-p", kind: kind, in: 0.15, out: 0.6, apiKey: "provider-secret-" + kind}}, nil)
			c := client(f)
			prompt := "Write a haiku about routing."
			var tk route.Tokenizer
			wantPrompt := tk.CountMessages([]route.Message{{Role: "user", Content: route.Content{Text: prompt, Set: true}}})
			clientCompletion(t, c, kind, prompt, wantPrompt)
			clientStream(t, c, prompt, wantPrompt)
			clientTools(t, f, c, kind)
		})
	}
}

// clientCompletion checks a completion through the SDK: its length,
// usage and routing headers.
func clientCompletion(t *testing.T, c openai.Client, kind, prompt string, wantPrompt int) {
	var tk route.Tokenizer
	var hdr *http.Response
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "gpt-4o-mini",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(12),
	}, option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	content := resp.Choices[0].Message.Content
	if tk.Count(content) != 12 || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("content %q (%d tokens), finish %q", content, tk.Count(content), resp.Choices[0].FinishReason)
	}
	if resp.Usage.PromptTokens != int64(wantPrompt) || resp.Usage.CompletionTokens != 12 || resp.Usage.TotalTokens != int64(wantPrompt+12) {
		t.Fatalf("usage %+v, want prompt %d completion 12", resp.Usage, wantPrompt)
	}
	if hdr.Header.Get("X-LLMesh-Node") != "test-1" || hdr.Header.Get("X-LLMesh-Provider") != kind+"-p" ||
		hdr.Header.Get("X-LLMesh-Via") != "test-1" || !strings.Contains(hdr.Header.Get("X-LLMesh-Route"), "policy=cost") {
		t.Fatalf("routing headers: %v", hdr.Header)
	}
}

// clientStream checks a stream with usage through the SDK.
func clientStream(t *testing.T, c openai.Client, prompt string, wantPrompt int) {
	var tk route.Tokenizer
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "gpt-4o-mini",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens:     openai.Int(20),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; tk.Count(got) != 20 || chunks < 20 {
		t.Fatalf("streamed %q in %d chunks", got, chunks)
	}
	if acc.Usage.PromptTokens != int64(wantPrompt) || acc.Usage.CompletionTokens != 20 {
		t.Fatalf("streamed usage %+v", acc.Usage)
	}
}

// clientTools checks tools: a tool call comes back with arguments
// filling the required parameters, streamed and not, and the node passes
// tools, tool_choice and seed through untouched, without the tenant's key.
func clientTools(t *testing.T, f *fixture, c openai.Client, kind string) {
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        "get_weather",
			Description: openai.String("Current weather for a city"),
			Parameters: shared.FunctionParameters{
				"type":       "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}},
				"required":   []string{"city", "days"},
			},
		})},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
		Seed:       openai.Int(42),
	}
	tresp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	checkToolCall(t, tresp.Choices[0].FinishReason, tresp.Choices[0].Message.ToolCalls, tresp.Usage)
	var sent map[string]json.RawMessage
	rec := f.emus[kind+"-p"].Received()
	if err := json.Unmarshal(rec[len(rec)-1].Body, &sent); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tools", "tool_choice", "seed"} {
		if len(sent[k]) == 0 {
			t.Fatalf("%s did not reach the provider: %s", k, rec[len(rec)-1].Body)
		}
	}
	if auth := rec[len(rec)-1].Header; auth.Get("Authorization") == "Bearer "+testKey || auth.Get("Api-Key") == testKey {
		t.Fatal("the tenant's key was forwarded to the provider")
	}

	ts := c.Chat.Completions.NewStreaming(ctx, params, option.WithJSONSet("stream_options", map[string]any{"include_usage": true}))
	var tacc openai.ChatCompletionAccumulator
	for ts.Next() {
		tacc.AddChunk(ts.Current())
	}
	if err := ts.Err(); err != nil {
		t.Fatal(err)
	}
	checkToolCall(t, tacc.Choices[0].FinishReason, tacc.Choices[0].Message.ToolCalls, tacc.Usage)
}

func checkToolCall(t *testing.T, finish string, calls []openai.ChatCompletionMessageToolCallUnion, usage openai.CompletionUsage) {
	t.Helper()
	if finish != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
		t.Fatalf("finish %q, calls %+v", finish, calls)
	}
	var args struct {
		City *string `json:"city"`
		Days *int    `json:"days"`
	}
	if err := json.Unmarshal([]byte(calls[0].Function.Arguments), &args); err != nil || args.City == nil || args.Days == nil {
		t.Fatalf("arguments %q: %v", calls[0].Function.Arguments, err)
	}
	if usage.CompletionTokens == 0 || usage.PromptTokens == 0 {
		t.Fatalf("usage %+v", usage)
	}
}

// A refusal of chat's own is in OpenAI's shape, and openai-go surfaces
// refusals as typed API errors. The bad input every endpoint refuses
// alike (malformed JSON, wrong types, oversize, keys) is
// TestBadInputOnEveryEndpoint's table.
func TestErrorsInOpenAIShape(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, nil)
	for _, tc := range []struct {
		name, body, key string
		status          int
		code            string
	}{
		{"empty messages", `{"model":"gpt-4o-mini","messages":[]}`, testKey, 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(tc.body))
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var doc struct {
				Error struct {
					Message, Type, Code string
				}
			}
			if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || doc.Error.Code != tc.code || doc.Error.Message == "" || doc.Error.Type == "" {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, doc.Error, tc.status, tc.code)
			}
		})
	}
	// The official client surfaces these as typed API errors.
	bad := client(f, option.WithAPIKey("sk-wrong"))
	_, err := bad.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Code != "invalid_api_key" {
		t.Fatalf("openai-go saw %v", err)
	}
	// And the node is still serving.
	if resp := f.post(hello); resp.StatusCode != 200 {
		t.Fatalf("after bad input: %d", resp.StatusCode)
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "us", kind: "openai", juris: []string{"us"}, models: []string{"gpt-4o"}},
		{name: "eu", kind: "openai", juris: []string{"eu"}, models: []string{"gpt-4o-mini"}},
	}, nil)
	c := client(f)
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "gpt-4o,gpt-4o-mini" {
		t.Fatalf("models %v", ids)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(f.url + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	if resp := f.post(hello); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	resp, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	for _, want := range []string{
		`llmesh_requests_total{code="200",endpoint="chat",model="gpt-4o-mini",provider="eu"} 1`,
		`llmesh_tokens_total{direction="completion",model="gpt-4o-mini",provider="eu"} 16`,
		`llmesh_upstream_attempts_total{outcome="ok",provider="eu"} 1`,
		`llmesh_requests_in_flight 0`,
		`llmesh_cost_usd_total{model="gpt-4o-mini",provider="eu",tenant="t1"}`,
		`llmesh_request_duration_seconds_bucket`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/audit"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

func anthropicAt(url, key string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
}

// sendMessage sends a Messages request, streaming and accumulating it or
// not; it returns the response headers too.
func sendMessage(t *testing.T, c anthropic.Client, p anthropic.MessageNewParams, stream bool) (*anthropic.Message, http.Header) {
	t.Helper()
	var hdr *http.Response
	if !stream {
		m, err := c.Messages.New(context.Background(), p, aoption.WithResponseInto(&hdr))
		if err != nil {
			t.Fatal(err)
		}
		return m, hdr.Header
	}
	st := c.Messages.NewStreaming(context.Background(), p, aoption.WithResponseInto(&hdr))
	var m anthropic.Message
	for st.Next() {
		if err := m.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return &m, hdr.Header
}

// anthropic-sdk-go against POST /v1/messages, an eu tenant entering at
// the us node: served by an eu provider through eu-1, whole and streamed,
// with a tool round trip that ends in text on the second turn; refusals
// in Anthropic's error shape.
func TestMessagesAcrossTheMesh(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	before := f.requests()
	c := anthropicAt(f.urls["us"], euKey)
	tools := []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"},
	}, "get_weather")}
	for _, stream := range []bool{false, true} {
		plain, hdr := sendMessage(t, c, anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 10,
			System:   []anthropic.TextBlockParam{{Text: "Be brief."}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Bonjour"))}}, stream)
		if plain.Model != "gpt-4o-mini" || plain.StopReason != anthropic.StopReasonMaxTokens || len(plain.Content) != 1 ||
			plain.Content[0].Text == "" || plain.Usage.OutputTokens != 10 || plain.Usage.InputTokens == 0 {
			t.Fatalf("stream %v: %s", stream, plain.RawJSON())
		}
		if p, via := hdr.Get("X-LLMesh-Provider"), hdr.Get("X-LLMesh-Via"); p != "gpu-eu" || via != "eu-1" {
			t.Fatalf("stream %v: served by %q via %q", stream, p, via)
		}
		msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))}
		params := anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 64, Tools: tools, Messages: msgs}
		first, _ := sendMessage(t, c, params, stream)
		if first.StopReason != anthropic.StopReasonToolUse || len(first.Content) != 1 || first.Content[0].Type != "tool_use" {
			t.Fatalf("stream %v, turn 1: %s", stream, first.RawJSON())
		}
		call := first.Content[0]
		var input map[string]any
		if err := json.Unmarshal(call.Input, &input); err != nil || call.Name != "get_weather" || call.ID == "" {
			t.Fatalf("stream %v: call %+v: %v", stream, call, err)
		}
		params.Messages = append(msgs, first.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(call.ID, "18°C", false)))
		second, _ := sendMessage(t, c, params, stream)
		if second.StopReason != anthropic.StopReasonEndTurn || len(second.Content) != 1 || second.Content[0].Type != "text" {
			t.Fatalf("stream %v, turn 2: %s", stream, second.RawJSON())
		}
	}
	after := f.requests()
	if after["openai-us"] != before["openai-us"] || after["gpu-ap"] != before["gpu-ap"] {
		t.Fatal("a us or ap provider received the eu tenant's messages")
	}
	awaitMetric(t, f.urls["us"], `llmesh_requests_total{code="200",endpoint="messages",model="gpt-4o-mini",provider="gpu-eu"} 6`)

	// Refusals, in Anthropic's shape.
	ok := anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 8, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	unknown := ok
	unknown.Model = "claude-none"
	for _, tc := range []struct {
		name   string
		c      anthropic.Client
		p      anthropic.MessageNewParams
		status int
		typ    string
	}{
		{"bad key", anthropicAt(f.urls["us"], "sk-wrong-key-0123456789"), ok, 401, "authentication_error"},
		{"unknown model", c, unknown, 404, "not_found_error"},
	} {
		_, err := tc.c.Messages.New(context.Background(), tc.p)
		var apiErr *anthropic.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status || string(apiErr.Type()) != tc.typ {
			t.Errorf("%s: %v; want %d %s", tc.name, err, tc.status, tc.typ)
		}
	}
	for _, tc := range []struct{ body, version, msg string }{
		{`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, "2023-06-01", "max_tokens"},
		{`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"robot","content":"hi"}]}`, "2023-06-01", "messages[0].role"},
		{`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document"}]}]}`, "2023-06-01", "not supported"},
	} {
		req, _ := http.NewRequest(http.MethodPost, f.urls["us"]+"/v1/messages", strings.NewReader(tc.body))
		req.Header.Set("X-Api-Key", euKey)
		if tc.version != "" {
			req.Header.Set("Anthropic-Version", tc.version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, `"invalid_request_error"`) || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %d %s; want 400 invalid_request_error with %q", tc.body, resp.StatusCode, body, tc.msg)
		}
	}
}

// count_tokens counts the translated prompt at the node, tools included.
func TestMessagesCountTokens(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, nil)
	c := anthropicAt(f.url, testKey)
	plain, err := c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: "gpt-4o-mini",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("How many tokens is this?"))}})
	if err != nil {
		t.Fatal(err)
	}
	withTools, err := c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: "gpt-4o-mini",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("How many tokens is this?"))},
		Tools: []anthropic.MessageCountTokensToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if plain.InputTokens < 6 || withTools.InputTokens <= plain.InputTokens {
		t.Fatalf("counted %d, and %d with a tool", plain.InputTokens, withTools.InputTokens)
	}
	_, err = c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: "claude-none",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || string(apiErr.Type()) != "not_found_error" {
		t.Fatalf("counting for an unknown model: %v", err)
	}
}

// A provider of kind anthropic (the emulator speaking Messages) serves
// chat clients: openai-go's whole and streamed completions and a tool
// round trip are translated to Messages and back; Anthropic's clients
// reach it through both translations, Responses clients through the
// bridge and the translation; legacy completions skip it.
func TestAnthropicProviderKind(t *testing.T) {
	f := startNode(t, []upstream{{name: "claude", kind: "anthropic"}}, nil)
	ctx := context.Background()
	oc := regionClient(f.url, testKey)
	var hdr *http.Response
	resp, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(7),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Hello")}},
		option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "gpt-4o-mini" || resp.Choices[0].Message.Content == "" || resp.Choices[0].FinishReason != "length" ||
		resp.Usage.CompletionTokens != 7 || resp.Usage.PromptTokens == 0 || hdr.Header.Get("X-LLMesh-Provider") != "claude" {
		t.Fatalf("whole: %s", resp.RawJSON())
	}
	stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(9),
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Usage.CompletionTokens != 9 || acc.Choices[0].Message.Content == "" || acc.Choices[0].FinishReason != "length" {
		t.Fatalf("stream: %+v", acc.ChatCompletion)
	}
	// A tool round trip over chat.
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})}
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")}
	first, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(64), Tools: tools, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if first.Choices[0].FinishReason != "tool_calls" || len(first.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("turn 1: %s", first.RawJSON())
	}
	call := first.Choices[0].Message.ToolCalls[0]
	msgs = append(msgs, first.Choices[0].Message.ToParam(), openai.ToolMessage("18°C", call.ID))
	second, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", MaxTokens: openai.Int(64), Tools: tools, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if second.Choices[0].FinishReason != "stop" || second.Choices[0].Message.Content == "" {
		t.Fatalf("turn 2: %s", second.RawJSON())
	}
	// Anthropic's client, through both translations.
	m, _ := sendMessage(t, anthropicAt(f.url, testKey), anthropic.MessageNewParams{Model: "gpt-4o-mini", MaxTokens: 5,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}, true)
	if m.StopReason != anthropic.StopReasonMaxTokens || m.Usage.OutputTokens != 5 {
		t.Fatalf("messages through a Messages provider: %s", m.RawJSON())
	}
	// The Responses API, bridged to chat and on to Messages, whole and
	// streamed, and a follow-up the node continues from what it keeps.
	for _, stream := range []bool{false, true} {
		r, hdr := newResponse(t, oc, responses.ResponseNewParams{Model: "gpt-4o-mini", Input: userText("Hello"),
			Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(10)}, stream)
		if hdr.Get("X-LLMesh-Provider") != "claude" || r.Status != responses.ResponseStatusIncomplete || r.IncompleteDetails.Reason != "max_output_tokens" ||
			r.Usage.OutputTokens != 10 || r.OutputText() == "" {
			t.Fatalf("responses through a Messages provider (stream %v): %s", stream, r.RawJSON())
		}
		next, _ := newResponse(t, oc, responses.ResponseNewParams{Model: "gpt-4o-mini", Input: userText("More"),
			PreviousResponseID: openai.String(r.ID), MaxOutputTokens: openai.Int(16)}, stream)
		if next.Usage.InputTokens <= r.Usage.InputTokens {
			t.Fatalf("the follow-up read %d input tokens, the first %d", next.Usage.InputTokens, r.Usage.InputTokens)
		}
	}
	// Legacy completions have no Messages equivalent.
	resp2 := postPath(t, f.url+"/v1/completions", testKey, `{"model":"gpt-4o-mini","prompt":"hi"}`)
	if body := readAll(t, resp2.Body); resp2.StatusCode != 503 || !strings.Contains(body, "neither legacy completions") {
		t.Fatalf("completions at an anthropic provider: %d %s", resp2.StatusCode, body)
	}
}

// Every endpoint is charged to the tenant's budget in the ledger and is
// in the audit trail: an eu tenant with a budget sends an embeddings, a
// legacy completion, a Messages and a Responses request to the us node
// (each served in the eu through eu-1); both nodes audit each with its
// endpoint, and the ledger's settled spend comes to what the decisions
// say they cost, with no overspend.
func TestEveryEndpointChargesTheBudget(t *testing.T) {
	dirs := map[string]string{}
	f := startRegions(t, embeddingUpstreams(), func(region string, c *node.Config) {
		dirs[region] = t.TempDir()
		c.Audit = node.AuditSection{Dir: dirs[region]}
		c.Node.Voter, c.Node.BootstrapExpect = true, 3
		c.Node.Raft, c.Node.DataDir = "127.0.0.1:0", t.TempDir()
		for i := range c.Tenants {
			if c.Tenants[i].Name == "acme-eu" {
				c.Tenants[i].Budget = &node.BudgetSection{USD: 5, Period: "month"}
			}
		}
	})
	us := f.urls["us"]
	for _, r := range []struct{ path, body string }{
		{"/v1/embeddings", `{"model":"emb","input":["Bonjour le monde","Guten Tag"]}`},
		{"/v1/completions", `{"model":"gpt-4o-mini","prompt":"Once upon a time","max_tokens":8}`},
		{"/v1/messages", `{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"Bonjour"}]}`},
		{"/v1/responses", `{"model":"gpt-4o-mini","max_output_tokens":16,"input":"Bonjour"}`},
	} {
		resp := postPath(t, us+r.path, euKey, r.body, "Anthropic-Version", "2023-06-01", "X-Request-Id", "charged"+r.path)
		if body := readAll(t, resp.Body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", r.path, resp.StatusCode, body)
		}
	}
	var doc views.Decisions
	wait.For(t, 10*time.Second, "the four decisions", func() bool {
		doc = views.Decisions{}
		getJSON(t, us+"/v1/mesh/decisions?limit=4", "", &doc)
		return len(doc.Decisions) == 4
	})
	// Each is in the audit trail of both nodes it passed, with its
	// endpoint, provider and jurisdiction.
	for _, region := range []string{"us", "eu"} {
		got := map[string]audit.Record{}
		wait.For(t, 5*time.Second, "the four records in "+region+"'s audit trail", func() bool {
			_, err := audit.Scan(dirs[region], func(r audit.Record) error { got[r.RequestID] = r; return nil })
			return err == nil && len(got) >= 4
		})
		for _, ep := range []string{"embeddings", "completions", "messages", "responses"} {
			r := got["charged/v1/"+ep]
			if r.Endpoint != ep || r.Tenant != "acme-eu" || r.Provider != "gpu-eu" || r.ProviderJurisdictions != "eu" || r.Outcome != "ok" {
				t.Errorf("%s's audit record of %s: %+v", region, ep, r)
			}
		}
	}
	cost := 0.0
	for _, d := range doc.Decisions {
		if d.CostUSD <= 0 || d.Provider != "gpu-eu" {
			t.Fatalf("decision %+v: want a cost, served by gpu-eu", d)
		}
		cost += d.CostUSD
	}
	var books views.Budgets
	wait.For(t, 20*time.Second, "the ledger to settle the four requests", func() bool {
		books = views.Budgets{}
		getJSON(t, us+"/v1/mesh/budgets", "", &books)
		for _, b := range books.Budgets {
			if b.Tenant == "acme-eu" {
				return math.Abs(b.SettledUSD-cost) < 1e-9
			}
		}
		return false
	})
	for _, b := range books.Budgets {
		if b.OverspendUSD != 0 {
			t.Fatalf("overspend: %+v", b)
		}
	}
}

package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
)

// filterUpstreams are an Azure OpenAI in the eu (the eu's cheapest), an
// OpenAI-compatible provider in the eu and an OpenAI in the us cheaper
// than both, each serving gpt-4o-mini and an embedding model.
func filterUpstreams() []upstream {
	emb := []string{"text-embedding-3-small"}
	return []upstream{
		{name: "azure-eu", kind: "azure", in: 0.1, out: 0.1, juris: []string{"eu"}, embeddings: emb},
		{name: "openai-eu", kind: "openai", in: 1, out: 1, juris: []string{"eu"}, embeddings: emb},
		{name: "openai-us", kind: "openai", in: 0.01, out: 0.01, region: "us-east", juris: []string{"us"}, embeddings: emb},
	}
}

// withFilterGroups adds the eu tenant and the groups smart (gpt-4o-mini)
// and embed (the embedding model), falling back on the classes given.
func withFilterGroups(classes ...string) func(*node.Config) {
	return func(c *node.Config) {
		c.Tenants = append(c.Tenants, node.TenantSection{Name: "acme-eu", KeySHA256: []string{sha(euKey)}, Residency: "eu"})
		c.Groups = []node.GroupSection{
			{Name: "smart", Members: []string{"gpt-4o-mini"}, FallbackOn: classes},
			{Name: "embed", Members: []string{"text-embedding-3-small"}, FallbackOn: classes},
		}
	}
}

// An Azure content filter's 400 with fallback_on: [content_filter] is
// answered by the next compliant provider, on every endpoint, whole and
// streamed; an eu tenant's fallback stays in the eu though a cheaper us
// provider serves the model; the route header says why, and the
// fallbacks are counted.
func TestFallbackOnContentFilter(t *testing.T) {
	f := startNode(t, filterUpstreams(), withFilterGroups("content_filter"))
	if err := f.emus["azure-eu"].SetMode(emulator.ModeContentFilter); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	oc := regionClient(f.url, euKey)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the weather")}
	answered := map[string]http.Header{}
	var hdr *http.Response
	if _, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "smart", Messages: msgs, MaxTokens: openai.Int(5)},
		option.WithResponseInto(&hdr)); err != nil {
		t.Fatal(err)
	}
	answered["chat"] = hdr.Header
	st := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "smart", Messages: msgs, MaxTokens: openai.Int(5)},
		option.WithResponseInto(&hdr))
	chunks := 0
	for st.Next() {
		chunks++
	}
	if err := st.Err(); err != nil || chunks == 0 {
		t.Fatalf("stream: %v after %d chunks", err, chunks)
	}
	answered["chat stream"] = hdr.Header
	if _, err := oc.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("Bonjour")}}, option.WithResponseInto(&hdr)); err != nil {
		t.Fatal(err)
	}
	answered["embeddings"] = hdr.Header
	if _, err := oc.Completions.New(ctx, openai.CompletionNewParams{Model: "smart", MaxTokens: openai.Int(5),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}}, option.WithResponseInto(&hdr)); err != nil {
		t.Fatal(err)
	}
	answered["completions"] = hdr.Header
	if _, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: "smart", Input: userText("Hello"), MaxOutputTokens: openai.Int(16)},
		option.WithResponseInto(&hdr)); err != nil {
		t.Fatal(err)
	}
	answered["responses"] = hdr.Header
	_, answered["messages"] = sendMessage(t, anthropicAt(f.url, euKey), anthropic.MessageNewParams{Model: "smart", MaxTokens: 5,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))}}, false)

	for api, h := range answered {
		if p, route := h.Get("X-LLMesh-Provider"), h.Get("X-LLMesh-Route"); p != "openai-eu" || !strings.Contains(route, "; fallback: content_filter from azure-eu") {
			t.Errorf("%s: served by %q, route %q", api, p, route)
		}
	}
	if st := f.emus["azure-eu"].Stats(); st.ByStatus[400] != int64(len(answered)) {
		t.Errorf("azure-eu refused %d requests, want %d", st.ByStatus[400], len(answered))
	}
	if n := f.emus["openai-us"].Stats().Requests; n != 0 {
		t.Errorf("the eu tenant's fallback reached the us provider %d times", n)
	}
	body := readAll(t, mustGet(t, f.url+"/metrics").Body)
	if want := `llmesh_fallbacks_total{class="content_filter",provider="azure-eu"} 6`; !strings.Contains(body, want) {
		t.Errorf("metrics lack %s", want)
	}
}

// An eu tenant whose every eu provider filters the prompt gets the first
// refusal as the provider gave it: the cheaper us provider, which would
// answer, is never called.
func TestFallbackNeverLeavesResidency(t *testing.T) {
	f := startNode(t, filterUpstreams(), withFilterGroups("content_filter", "server_error"))
	for _, p := range []string{"azure-eu", "openai-eu"} {
		if err := f.emus[p].SetMode(emulator.ModeContentFilter); err != nil {
			t.Fatal(err)
		}
	}
	want := azureRefusal(t, f)
	for _, stream := range []bool{false, true} {
		body := `{"model":"smart","messages":[{"role":"user","content":"hi"}]` + map[bool]string{true: `,"stream":true}`, false: `}`}[stream]
		resp := postAs(t, f.url, euKey, body)
		got := readAll(t, resp.Body)
		if resp.StatusCode != 400 || got != want || resp.Header.Get("X-LLMesh-Provider") != "azure-eu" {
			t.Fatalf("stream %v: %d from %q: %s\nwant the first refusal: %s", stream, resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"), got, want)
		}
	}
	if n := f.emus["openai-us"].Stats().Requests; n != 0 {
		t.Fatalf("the us provider was called %d times", n)
	}
	if n := f.emus["openai-eu"].Stats().ByStatus[400]; n != 2 {
		t.Fatalf("openai-eu refused %d requests, want both", n)
	}
}

// Without fallback_on, a provider's content filter refusal reaches the
// client as the provider gave it, byte for byte, whether the client named
// a group or a model; no other provider is called.
func TestNoFallbackRelaysTheRefusal(t *testing.T) {
	f := startNode(t, filterUpstreams(), withFilterGroups())
	if err := f.emus["azure-eu"].SetMode(emulator.ModeContentFilter); err != nil {
		t.Fatal(err)
	}
	direct := azureResponse(t, f)
	want := readAll(t, direct.Body)
	for _, model := range []string{"smart", "gpt-4o-mini"} {
		for _, stream := range []bool{false, true} {
			body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			resp := postAs(t, f.url, euKey, body)
			got := readAll(t, resp.Body)
			if resp.StatusCode != direct.StatusCode || got != want || resp.Header.Get("Content-Type") != direct.Header.Get("Content-Type") {
				t.Fatalf("%s, stream %v: %d %q %s\nwant %d %q %s", model, stream, resp.StatusCode, resp.Header.Get("Content-Type"), got,
					direct.StatusCode, direct.Header.Get("Content-Type"), want)
			}
			if strings.Contains(resp.Header.Get("X-LLMesh-Route"), "fallback") {
				t.Fatalf("a fallback named without the option: %q", resp.Header.Get("X-LLMesh-Route"))
			}
		}
	}
	if n := f.emus["openai-eu"].Stats().Requests + f.emus["openai-us"].Stats().Requests; n != 0 {
		t.Fatalf("other providers were called %d times", n)
	}
}

// A prompt a provider refuses as too long moves, with fallback_on:
// [context_length], to the larger-context model the group names, past
// the other providers of the same model; the answer names the model that
// answered. The refusal comes in OpenAI's shape and, from an Anthropic
// provider, in Anthropic's. Explain shows the larger model's targets.
func TestFallbackOnContextLength(t *testing.T) {
	for _, kind := range []string{"openai", "anthropic"} {
		t.Run(kind, func(t *testing.T) {
			f := startNode(t, []upstream{
				{name: "small", kind: kind, in: 0.1, out: 0.1},
				{name: "small-2", kind: "openai", in: 0.2, out: 0.2},
				{name: "big", kind: "openai", in: 5, out: 5, models: []string{"gpt-4o-128k"}},
			}, func(c *node.Config) {
				c.Groups = []node.GroupSection{{Name: "smart", Members: []string{"gpt-4o-mini"},
					FallbackOn: []string{"context_length"}, ContextFallback: []string{"gpt-4o-128k"}}}
			})
			if err := f.emus["small"].SetMode(emulator.ModeContextLength); err != nil {
				t.Fatal(err)
			}
			c := client(f)
			params := openai.ChatCompletionNewParams{Model: "smart", MaxTokens: openai.Int(5),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("a long document ", 50))}}
			var hdr *http.Response
			resp, err := c.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&hdr))
			if err != nil {
				t.Fatal(err)
			}
			if p, route := hdr.Header.Get("X-LLMesh-Provider"), hdr.Header.Get("X-LLMesh-Route"); resp.Model != "gpt-4o-128k" || p != "big" ||
				!strings.Contains(route, "; fallback: context_length from small") {
				t.Fatalf("model %q from %q, route %q", resp.Model, p, route)
			}
			st := c.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&hdr))
			var acc openai.ChatCompletionAccumulator
			for st.Next() {
				acc.AddChunk(st.Current())
			}
			if err := st.Err(); err != nil || acc.Model != "gpt-4o-128k" || hdr.Header.Get("X-LLMesh-Provider") != "big" {
				t.Fatalf("stream: %v, model %q from %q", err, acc.Model, hdr.Header.Get("X-LLMesh-Provider"))
			}
			if n := f.emus["small-2"].Stats().Requests; n != 0 {
				t.Fatalf("the same model's other provider was tried %d times", n)
			}
			if n := f.emus["small"].Stats().ByStatus[400]; n != 2 {
				t.Fatalf("small refused %d requests, want 2", n)
			}
			ex := explainGroup(t, f, `{"model":"smart","messages":[{"role":"user","content":"hi"}]}`)
			last := ex.Targets[len(ex.Targets)-1]
			if len(ex.FallbackOn) != 1 || ex.FallbackOn[0] != "context_length" || last.Provider != "big" || !last.ContextFallback ||
				ex.Targets[0].ContextFallback {
				t.Fatalf("explain: %+v", ex)
			}
		})
	}
}

// azureResponse is what azure-eu answers a chat request of its own,
// called directly: what a node without fallback relays.
func azureResponse(t *testing.T, f *fixture) *http.Response {
	t.Helper()
	resp, err := http.Post(f.emus["azure-eu"].URL()+"/openai/deployments/gpt-4o-mini-dep/chat/completions?api-version=2024-10-21",
		"application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// azureRefusal is azure-eu's refusal's body.
func azureRefusal(t *testing.T, f *fixture) string {
	t.Helper()
	return readAll(t, azureResponse(t, f).Body)
}

// explainGroup asks the node to explain body's plan for the test key.
func explainGroup(t *testing.T, f *fixture, body string) views.Explanation {
	t.Helper()
	resp := postPath(t, f.url+"/v1/route/explain", testKey, body)
	var ex views.Explanation
	b, _ := io.ReadAll(resp.Body)
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&ex); err != nil || resp.StatusCode != 200 {
		t.Fatalf("explain: %d %s", resp.StatusCode, b)
	}
	return ex
}

// Through a forward: a us node plans an eu tenant's request for the eu
// GPU cluster through eu-1, whose provider filters the prompt; eu-1
// relays the refusal as it was, and the us node, which knows the group's
// fallback_on, moves on to the next compliant target, Azure in the eu,
// never to the us provider.
func TestFallbackThroughAForward(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), func(_ string, c *node.Config) {
		c.Groups = []node.GroupSection{{Name: "smart", Members: []string{"gpt-4o-mini"}, FallbackOn: []string{"content_filter"}}}
	})
	if err := f.emus["gpu-eu"].SetMode(emulator.ModeContentFilter); err != nil {
		t.Fatal(err)
	}
	before := f.requests()
	c := regionClient(f.urls["us"], euKey)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
	var hdr *http.Response
	if _, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "smart", Messages: msgs, MaxTokens: openai.Int(4)},
		option.WithResponseInto(&hdr)); err != nil {
		t.Fatal(err)
	}
	if p, route := hdr.Header.Get("X-LLMesh-Provider"), hdr.Header.Get("X-LLMesh-Route"); p != "azure-eu" ||
		!strings.Contains(route, "; fallback: content_filter from gpu-eu") {
		t.Fatalf("served by %q, route %q", p, route)
	}
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: "smart", Messages: msgs, MaxTokens: openai.Int(4)},
		option.WithResponseInto(&hdr))
	for st.Next() {
	}
	if err := st.Err(); err != nil || hdr.Header.Get("X-LLMesh-Provider") != "azure-eu" {
		t.Fatalf("stream: %v from %q", err, hdr.Header.Get("X-LLMesh-Provider"))
	}
	after := f.requests()
	if after["gpu-eu"]-before["gpu-eu"] != 2 || after["openai-us"] != before["openai-us"] {
		t.Fatalf("requests before %v, after %v", before, after)
	}
	// Without the option the refusal comes back through the hop unchanged.
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "invalid_prompt" {
		t.Fatalf("the model named directly: %v", err)
	}
}

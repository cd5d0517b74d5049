package node_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
)

const llamaUpstream = "meta-llama/Meta-Llama-3-8B-Instruct"

// asLlama renames the provider's upstream model llamaUpstream to the
// mesh's llama-3-8b, as agent -dev's configuration does.
func asLlama(ps []node.ProviderSection, provider string) []node.ProviderSection {
	ps = slices.Clone(ps)
	for i := range ps {
		if ps[i].Name != provider {
			continue
		}
		ps[i].Models = slices.Clone(ps[i].Models)
		for j := range ps[i].Models {
			if m := &ps[i].Models[j]; m.Name == llamaUpstream {
				m.Name, m.Upstream = "llama-3-8b", llamaUpstream
			}
		}
	}
	return ps
}

// checkNames asks c for llama-3-8b, unstreamed and streamed, and checks
// that the answer and every chunk name llama-3-8b while the upstream name
// is only in X-LLMesh-Upstream-Model; it returns the last answer's
// headers.
func checkNames(t *testing.T, c openai.Client) http.Header {
	t.Helper()
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "llama-3-8b", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(6),
	}
	var hdr *http.Response
	resp, err := c.Chat.Completions.New(ctx, params, option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "llama-3-8b" || resp.Choices[0].Message.Content == "" {
		t.Fatalf("answer names %q (content %q)", resp.Model, resp.Choices[0].Message.Content)
	}
	if got := hdr.Header.Get("X-LLMesh-Upstream-Model"); got != llamaUpstream {
		t.Fatalf("X-LLMesh-Upstream-Model %q", got)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&hdr))
	chunks := 0
	for stream.Next() {
		if m := stream.Current().Model; m != "llama-3-8b" {
			t.Fatalf("chunk %d names %q", chunks, m)
		}
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 6 || hdr.Header.Get("X-LLMesh-Upstream-Model") != llamaUpstream {
		t.Fatalf("%d chunks, X-LLMesh-Upstream-Model %q", chunks, hdr.Header.Get("X-LLMesh-Upstream-Model"))
	}
	return hdr.Header
}

// An answer names the model the client asked for, not the provider's name
// for it, streamed and not.
func TestAnswersKeepTheModelName(t *testing.T) {
	f := startNode(t, []upstream{{name: "gpu", in: 0.05, out: 0.1, models: []string{llamaUpstream}}},
		func(c *node.Config) { c.Providers = asLlama(c.Providers, "gpu") })
	checkNames(t, client(f))
}

// Through a forward the far node renames the answer, once: the client
// still sees llama-3-8b.
func TestForwardedAnswersKeepTheModelName(t *testing.T) {
	ups := regionsUpstreams(emulator.Config{})
	ups[0].models = []string{llamaUpstream}
	f := startRegions(t, ups, func(_ string, c *node.Config) { c.Providers = asLlama(c.Providers, "gpu-eu") })
	h := checkNames(t, regionClient(f.urls["us"], euKey))
	if h.Get("X-LLMesh-Via") != "eu-1" || h.Get("X-LLMesh-Provider") != "gpu-eu" {
		t.Fatalf("via %q provider %q", h.Get("X-LLMesh-Via"), h.Get("X-LLMesh-Provider"))
	}
}

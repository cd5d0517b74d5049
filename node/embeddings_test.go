package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// embeddingUpstreams are the three regions' providers, each also serving
// the embedding model emb (gpu-eu reached only from eu-west).
func embeddingUpstreams() []upstream {
	ups := regionsUpstreams(emulator.Config{})
	for i := range ups {
		ups[i].embeddings = []string{"emb"}
	}
	return ups
}

// The official client's Embeddings call, from an eu tenant entering at
// the us node: served by an eu provider only (the region-reach GPU
// cluster through eu-1, the cheapest), the vectors and usage relayed, the
// client's model name kept, the cost counted, the decision and metrics
// labelled with the endpoint.
func TestEmbeddingsAcrossTheMesh(t *testing.T) {
	f := startRegions(t, embeddingUpstreams(), nil)
	before := f.requests()
	client := regionClient(f.urls["us"], euKey)
	var hdr *http.Response
	resp, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "emb",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"Bonjour le monde", "Guten Tag"}},
	}, option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || len(resp.Data[0].Embedding) == 0 || resp.Model != "emb" || resp.Usage.PromptTokens == 0 {
		t.Fatalf("answer: %d vectors, model %q, usage %+v", len(resp.Data), resp.Model, resp.Usage)
	}
	if p, via := hdr.Header.Get("X-LLMesh-Provider"), hdr.Header.Get("X-LLMesh-Via"); p != "gpu-eu" || via != "eu-1" {
		t.Fatalf("served by %q via %q; want gpu-eu via eu-1 (the eu tenant's cheapest, region-reach provider)", p, via)
	}
	after := f.requests()
	for _, p := range []string{"openai-us", "gpu-ap"} {
		if after[p] != before[p] {
			t.Fatalf("%s received the eu tenant's embeddings", p)
		}
	}
	// The decision at the us node names the endpoint and the cost.
	var doc views.Decisions
	wait.For(t, 5*time.Second, "the decision", func() bool {
		doc = views.Decisions{}
		getJSON(t, f.urls["us"]+"/v1/mesh/decisions?limit=1", "", &doc)
		return len(doc.Decisions) == 1
	})
	if d := doc.Decisions[0]; d.Endpoint != "embeddings" || d.CostUSD <= 0 || d.Provider != "gpu-eu" {
		t.Fatalf("decision %+v", d)
	}
	awaitMetric(t, f.urls["us"], `llmesh_requests_total{code="200",endpoint="embeddings",model="emb",provider="gpu-eu"} 1`)
}

// awaitAnswered waits for node's llmesh_requests_total to count want
// requests of endpoint, whatever their providers and codes (a stream whose
// client closes as it reads [DONE] may be counted 499: seen once in CI,
// not yet understood), and names the series it saw when they never come.
func awaitAnswered(t *testing.T, node, endpoint string, want int) {
	t.Helper()
	wait.Until(t, 5*time.Second, fmt.Sprintf("%d %s requests in llmesh_requests_total", want, endpoint), func() error {
		var seen []string
		n := 0
		for line := range strings.SplitSeq(readAll(t, mustGet(t, node+"/metrics").Body), "\n") {
			if strings.HasPrefix(line, `llmesh_requests_total{`) && strings.Contains(line, `,endpoint="`+endpoint+`"`) {
				seen = append(seen, line)
				var v int
				fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
				n += v
			}
		}
		if n < want {
			return fmt.Errorf("%d counted: %q", n, seen)
		}
		return nil
	})
}

// awaitMetric waits for node's /metrics to hold line: a request is
// counted as it is accounted, just after its client has the answer.
func awaitMetric(t *testing.T, node, line string) {
	t.Helper()
	wait.For(t, 5*time.Second, "/metrics to show "+line, func() bool {
		return strings.Contains(readAll(t, mustGet(t, node+"/metrics").Body), line)
	})
}

// Bad embeddings requests get 400s in OpenAI's shape naming the
// parameter, as chat's do; a chat model sent to /v1/embeddings, or an
// embedding model to /v1/chat/completions, is told where to go. (What
// every endpoint refuses alike is TestBadInputOnEveryEndpoint's table.)
func TestEmbeddingsBadInput(t *testing.T) {
	f := startNode(t, []upstream{{name: "p", kind: "openai", embeddings: []string{"emb"}}}, nil)
	post := func(path, body string) (int, string) {
		resp := postPath(t, f.url+path, testKey, body)
		return resp.StatusCode, readAll(t, resp.Body)
	}
	for _, c := range []struct{ body, param, msg string }{
		{`{"model":"emb","input":""}`, "input", "must not be an empty string"},
		{`{"model":"emb","input":[]}`, "input", "must not be empty"},
		{`{"model":"emb","input":{"a":1}}`, "input", "must be a string"},
		{`{"model":"emb","input":["a",7.5]}`, "input[1]", "token id"},
		{`{"model":"emb","input":[[1,-2]]}`, "input[0][1]", "token id"},
		{`{"model":"emb","input":"hi","encoding_format":"int8"}`, "encoding_format", "must be float or base64"},
		{`{"model":"emb","input":"hi","dimensions":0}`, "dimensions", "between"},
		{`{"model":"emb","input":"hi","stream":true}`, "stream", "not a parameter"},
		{`{"model":"gpt-4o-mini","input":"hi"}`, "model", "POST /v1/chat/completions"},
	} {
		code, body := post("/v1/embeddings", c.body)
		if code != 400 || !strings.Contains(body, `"invalid_request_error"`) || !strings.Contains(body, c.msg) ||
			(c.param != "" && !strings.Contains(body, `"param":"`+c.param+`"`)) {
			t.Errorf("%s: %d %s; want 400 naming %q with %q", c.body, code, body, c.param, c.msg)
		}
	}
	code, body := post("/v1/chat/completions", `{"model":"emb","messages":[{"role":"user","content":"hi"}]}`)
	if code != 400 || !strings.Contains(body, "POST /v1/embeddings") {
		t.Errorf("an embedding model at chat: %d %s", code, body)
	}
}

// Legacy completions through the mesh with the official client, whole
// and streamed: an eu tenant at the us node, served in the eu, the
// client's model name kept, usage relayed, the endpoint named.
func TestCompletionsAcrossTheMesh(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	client := regionClient(f.urls["us"], euKey)
	ctx := context.Background()
	var hdr *http.Response
	resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model: "gpt-4o-mini", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(8),
	}, option.WithResponseInto(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Text == "" || resp.Model != "gpt-4o-mini" || resp.Usage.CompletionTokens != 8 {
		t.Fatalf("answer %+v", resp)
	}
	if p := hdr.Header.Get("X-LLMesh-Provider"); p != "gpu-eu" {
		t.Fatalf("served by %q; want gpu-eu", p)
	}
	stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: "gpt-4o-mini", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"Il était une fois"}},
		MaxTokens: openai.Int(12), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, option.WithResponseInto(&hdr))
	chunks, text, usage := 0, "", int64(0)
	for stream.Next() {
		c := stream.Current()
		chunks++
		if c.Model != "gpt-4o-mini" {
			t.Fatalf("chunk names model %q", c.Model)
		}
		for _, ch := range c.Choices {
			text += ch.Text
		}
		usage = max(usage, c.Usage.CompletionTokens)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if chunks < 12 || text == "" || usage != 12 || hdr.Header.Get("X-LLMesh-Via") != "eu-1" {
		t.Fatalf("stream: %d chunks, %q, usage %d, via %q", chunks, text, usage, hdr.Header.Get("X-LLMesh-Via"))
	}
	awaitAnswered(t, f.urls["us"], "completions", 2)
	// Bad input, in OpenAI's shape.
	for _, c := range []struct{ body, param string }{
		{`{"model":"gpt-4o-mini"}`, "prompt"},
		{`{"model":"gpt-4o-mini","prompt":{"x":1}}`, "prompt"},
		{`{"model":"gpt-4o-mini","prompt":"x","max_tokens":-1}`, "max_tokens"},
		{`{"model":"gpt-4o-mini","prompt":"x","n":3,"best_of":2}`, "best_of"},
		{`{"model":"gpt-4o-mini","prompt":"x","best_of":2,"stream":true}`, "best_of"},
	} {
		resp := postPath(t, f.urls["us"]+"/v1/completions", euKey, c.body)
		if body := readAll(t, resp.Body); resp.StatusCode != 400 || !strings.Contains(body, `"param":"`+c.param+`"`) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, body)
		}
	}
}

// GET /v1/models and /v1/models/{id} with the official client: a model
// names the providers the tenant's residency allows and when it became
// available; one the tenant may not use is not found, in OpenAI's shape.
func TestModelsListAndRetrieve(t *testing.T) {
	ups := embeddingUpstreams()
	f := startRegions(t, ups, nil)
	ctx := context.Background()
	eu := regionClient(f.urls["us"], euKey)
	page, err := eu.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		if m.Created <= 0 || m.Object != "model" {
			t.Errorf("model %+v: created and object must be set", m)
		}
	}
	if strings.Join(ids, ",") != "emb,gpt-4o-mini" {
		t.Fatalf("models %v", ids)
	}
	m, err := eu.Models.Get(ctx, "gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	if m.OwnedBy != "gpu-eu,azure-eu" {
		t.Fatalf("gpt-4o-mini owned by %q; want the eu tenant's providers only", m.OwnedBy)
	}
	_, err = eu.Models.Get(ctx, "nope")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Fatalf("an unknown model: %v", err)
	}
}

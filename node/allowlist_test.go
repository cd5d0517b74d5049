package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// openaiAt is openai-go against a node's API with key.
func openaiAt(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// notAllowed reports whether err is the official client's 403
// model_not_allowed.
func notAllowed(err error) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == 403 && apiErr.Code == "model_not_allowed"
}

// A key allowed only llama-3-8b, by a live change at one node of three,
// is refused gpt-4o with 403 model_not_allowed by every node within
// seconds: on every endpoint, streamed or not, in Anthropic's shape on
// /v1/messages; llama-3-8b it may use; GET /v1/models shows it only
// that; explain shows the refusal; another key of the tenant is
// unaffected. Cleared, the key may use gpt-4o again everywhere.
func TestModelAllowListOnEveryNode(t *testing.T) {
	const other = "sk-test-other-key-0123456789"
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai", models: []string{"gpt-4o", "llama-3-8b"}, embeddings: []string{"emb"}}},
		voters(t, 3, func(i int, c *node.Config) { c.Tenants[0].KeySHA256 = append(c.Tenants[0].KeySHA256, sha(other)) }), fastRaft)
	id := consensus.KeyID(sha(testKey))
	put := func(body any) {
		t.Helper()
		wait.For(t, 30*time.Second, "a Raft leader to take the change", func() bool {
			return adminCall(t, http.MethodPut, m.urls[1]+"/v1/mesh/tenants/t1/keys/"+id, "", body) == 200
		})
	}
	ctx := context.Background()
	chat := func(url, key, model string) error {
		c := openaiAt(url, key)
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(4),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		return err
	}
	put(map[string]any{"name": "app", "models": []string{"llama-3-8b"}})
	took := wait.For(t, 5*time.Second, "every node to refuse gpt-4o to the key", func() bool {
		for _, u := range m.urls {
			if !notAllowed(chat(u, testKey, "gpt-4o")) {
				return false
			}
		}
		return true
	})
	t.Logf("every node refused gpt-4o %v after the change was committed", took.Round(time.Millisecond))

	for i, u := range m.urls {
		if err := chat(u, testKey, "llama-3-8b"); err != nil {
			t.Fatalf("node %d: llama-3-8b: %v", i, err)
		}
		if err := chat(u, other, "gpt-4o"); err != nil {
			t.Fatalf("node %d: the other key: %v", i, err)
		}
		refusedEverywhere(t, u, i)
	}

	// Each node counted its refusals, by tenant, key name and reason.
	for i, u := range m.urls {
		if !strings.Contains(readAll(t, mustGet(t, u+"/metrics").Body), `llmesh_key_refusals_total{key="app",reason="model_not_allowed",tenant="t1"}`) {
			t.Errorf("node %d counted no model_not_allowed refusal", i)
		}
	}

	// Explain shows the refusal as the key's plan.
	req, _ := http.NewRequest(http.MethodPost, m.urls[2]+"/v1/route/explain", strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ex views.Explanation
	_ = json.NewDecoder(resp.Body).Decode(&ex)
	resp.Body.Close()
	if resp.StatusCode != 200 || ex.Error == nil || ex.Error.Status != 403 || ex.Error.Code != "model_not_allowed" || len(ex.Targets) != 0 {
		t.Fatalf("explain: %d %+v", resp.StatusCode, ex)
	}

	// The tenants view shows the key's settings, by id and name.
	var doc views.Tenants
	getJSON(t, m.urls[0]+"/v1/mesh/tenants", "", &doc)
	if ks := doc.Tenants[0].KeySettings; len(ks) != 1 || ks[0].ID != id || ks[0].Name != "app" || ks[0].Source != "live" || ks[0].Models[0] != "llama-3-8b" {
		t.Fatalf("key settings %+v", ks)
	}

	put(map[string]any{"models": []string{}})
	wait.For(t, 5*time.Second, "every node to let the key use gpt-4o again", func() bool {
		for _, u := range m.urls {
			if chat(u, testKey, "gpt-4o") != nil {
				return false
			}
		}
		return true
	})
}

// refusedEverywhere checks that node i (at u) refuses gpt-4o to testKey
// on every endpoint, streamed too, in Anthropic's shape on /v1/messages,
// and lists it only llama-3-8b.
func refusedEverywhere(t *testing.T, u string, i int) {
	t.Helper()
	ctx := context.Background()
	c := openaiAt(u, testKey)
	st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	for st.Next() {
	}
	_, cerr := c.Completions.New(ctx, openai.CompletionNewParams{Model: "gpt-4o", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}})
	_, rerr := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	_, eerr := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "emb", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hi")}})
	for what, err := range map[string]error{"stream": st.Err(), "completions": cerr, "responses": rerr, "embeddings": eerr} {
		if !notAllowed(err) {
			t.Errorf("node %d, %s: %v", i, what, err)
		}
	}
	ac := anthropicAt(u, testKey)
	_, aerr := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "gpt-4o", MaxTokens: 4,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var apiErr *anthropic.Error
	if !errors.As(aerr, &apiErr) || apiErr.StatusCode != 403 || string(apiErr.Type()) != "permission_error" ||
		!strings.Contains(apiErr.RawJSON(), "may not use model") {
		t.Errorf("node %d, messages: %v", i, aerr)
	}
	var list struct{ Data []struct{ ID string } }
	if code := getJSON(t, u+"/v1/models", testKey, &list); code != 200 || len(list.Data) != 1 || list.Data[0].ID != "llama-3-8b" {
		t.Errorf("node %d lists %+v to the key (%d)", i, list.Data, code)
	}
	if code := getJSON(t, u+"/v1/models/gpt-4o", testKey, &list); code != 404 {
		t.Errorf("node %d: GET /v1/models/gpt-4o: %d", i, code)
	}
}

package emulator

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/llmesh/llmesh/sim/engine"
)

// prefixText is a text of n tokens (words of the vocabulary, each one
// token), the same for the same key.
func prefixText(key uint64, n int) string { return string(appendWords(nil, key, 0, n)) }

// engineConfig is an emulator that is an engine replica of eng.
func engineConfig(eng EngineConfig) Config {
	cfg := DefaultConfig()
	cfg.Engine = &eng
	cfg.DefaultMaxTokens = 8
	return cfg
}

// fastEngine steps quickly, for tests about what is cached rather than
// how long it takes.
func fastEngine() EngineConfig {
	return EngineConfig{MaxRunning: 64, KVBlocks: 4096, PrefillTokensPerSecond: 1e7, DecodeBase: 200 * time.Microsecond}
}

// A repeated 4,000-token system prompt is found in the engine's prefix
// cache: the second request reports it as cached_tokens and its first
// token comes several times sooner than the first request's, on both
// presets. Ratios, not durations: the machine may be slow, but a cold
// prefill (160 ms on the 8B preset, 400 ms on the 70B) costs many times
// what a warm one does (a step, about 6 or 14 ms).
func TestEngineCachedPrefixLowersTTFT(t *testing.T) {
	presets := []struct {
		name  string
		cfg   EngineConfig
		ratio float64
	}{
		{"llama-3.1-8b-h100", engine.Llama8BOnH100(), 2},
		{"llama-3.1-70b-4xh100", engine.Llama70BOn4H100(), 3},
	}
	for _, p := range presets {
		t.Run(p.name, func(t *testing.T) {
			e := start(t, engineConfig(p.cfg))
			c := openaiClient(t, e)
			system := prefixText(42, 4000)
			ttft(t, c, "warm-up", "Hello.") // the connection and the tokenizer, before timing anything
			cold, u1 := ttft(t, c, system, "What is a mesh?")
			warm, u2 := ttft(t, c, system, "What is a route?")
			t.Logf("4,000-token prefix: TTFT cold %v (cached %d of %d), warm %v (cached %d of %d)",
				cold, u1.PromptTokensDetails.CachedTokens, u1.PromptTokens, warm, u2.PromptTokensDetails.CachedTokens, u2.PromptTokens)
			if u1.PromptTokensDetails.CachedTokens != 0 {
				t.Errorf("first request: cached_tokens %d, want 0", u1.PromptTokensDetails.CachedTokens)
			}
			if got := u2.PromptTokensDetails.CachedTokens; got < 4000 || got > u2.PromptTokens-5 {
				t.Errorf("second request: cached_tokens %d of %d, want the system prompt's 4,000 and more, not the question", got, u2.PromptTokens)
			}
			if float64(cold) < p.ratio*float64(warm) {
				t.Errorf("TTFT cold %v, warm %v: want the cold one at least %g× the warm", cold, warm, p.ratio)
			}
		})
	}
}

// ttft streams a chat of system and user and returns the time to its
// first token and its usage.
func ttft(t *testing.T, c openai.Client, system, user string) (time.Duration, openai.CompletionUsage) {
	t.Helper()
	sent := time.Now()
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "llama-3.1-8b",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer st.Close()
	var first time.Duration
	var u openai.CompletionUsage
	for st.Next() {
		ch := st.Current()
		if first == 0 && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			first = time.Since(sent)
		}
		if ch.Usage.PromptTokens > 0 {
			u = ch.Usage
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if first == 0 || u.PromptTokens == 0 {
		t.Fatalf("no token (%v) or no usage (%+v)", first, u)
	}
	return first, u
}

// A conversation's next turn finds the previous answer cached as well
// as the previous prompt: the engine caches the blocks it generates, and
// the next prompt repeats them.
func TestEngineCachesTheAnswerForTheNextTurn(t *testing.T) {
	cfg := engineConfig(fastEngine())
	cfg.DefaultMaxTokens = 200
	e := start(t, cfg)
	c := openaiClient(t, e)
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(prefixText(7, 1000)), openai.UserMessage("Tell me about routing.")}
	first, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	msgs = append(msgs, openai.AssistantMessage(first.Choices[0].Message.Content), openai.UserMessage("And then?"))
	second, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	turn1 := first.Usage.PromptTokens + first.Usage.CompletionTokens
	if got := second.Usage.PromptTokensDetails.CachedTokens; got < turn1-2*16 || got > second.Usage.PromptTokens {
		t.Errorf("second turn: cached_tokens %d of %d, want about the first turn's prompt and answer, %d", got, second.Usage.PromptTokens, turn1)
	}
}

// Every API reports what the engine found cached where its usage says
// so: legacy completions' prompt_tokens_details, the Responses API's
// input_tokens_details, and Anthropic's cache_read_input_tokens, whose
// input_tokens are then only those not read from the cache.
func TestEngineCachedTokensInEveryAPI(t *testing.T) {
	e := start(t, engineConfig(fastEngine()))
	c := newClient(t)
	system := prefixText(9, 600)
	twice := func(path, b string, header ...string) map[string]json.RawMessage {
		readAll(t, do(t, c, "POST", e.URL()+path, b, header...), http.StatusOK)
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(readAll(t, do(t, c, "POST", e.URL()+path, b, header...), http.StatusOK), &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	var legacy struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	doc := twice("/v1/completions", `{"model":"m","prompt":`+jsonString(system)+`,"max_tokens":4}`)
	_ = json.Unmarshal(doc["usage"], &legacy.Usage)
	if u := legacy.Usage; u.Details.Cached < 560 || u.Details.Cached >= u.PromptTokens {
		t.Errorf("completions: usage %+v", u)
	}
	var resp struct {
		Input   int `json:"input_tokens"`
		Details struct {
			Cached int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	}
	doc = twice("/v1/responses", `{"model":"m","instructions":`+jsonString(system)+`,"input":"Hi."}`)
	_ = json.Unmarshal(doc["usage"], &resp)
	if resp.Details.Cached < 560 || resp.Details.Cached >= resp.Input {
		t.Errorf("responses: usage %+v", resp)
	}
	var msg struct {
		Input     int `json:"input_tokens"`
		CacheRead int `json:"cache_read_input_tokens"`
	}
	mb := `{"model":"m","max_tokens":8,"system":` + jsonString(system) + `,"messages":[{"role":"user","content":"Hi."}]}`
	doc = twice("/v1/messages", mb, "anthropic-version", "2023-06-01")
	_ = json.Unmarshal(doc["usage"], &msg)
	var count struct {
		Input int `json:"input_tokens"`
	}
	_ = json.Unmarshal(readAll(t, do(t, c, "POST", e.URL()+"/v1/messages/count_tokens", mb, "anthropic-version", "2023-06-01"), http.StatusOK), &count)
	if msg.CacheRead < 560 || msg.Input+msg.CacheRead != count.Input {
		t.Errorf("messages: usage %+v, count_tokens %d", msg, count.Input)
	}
}

// A request larger than the whole KV cache is refused as vLLM refuses a
// prompt over the model's context.
func TestEngineRefusesWhatCannotFit(t *testing.T) {
	eng := fastEngine()
	eng.KVBlocks = 64 // 1,024 tokens
	e := start(t, engineConfig(eng))
	resp := do(t, newClient(t), "POST", e.URL()+"/v1/chat/completions", body("m", `"max_tokens":2000`))
	wantError(t, resp, http.StatusBadRequest, "invalid_request_error", "messages", "context_length_exceeded")
}

// Without an engine nothing changes: the timing is TTFT and TPS, and
// cached_tokens is 0 however often a prompt comes.
func TestNoEngineCachesNothing(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	b := body("m", "")
	b = strings.Replace(b, `"messages":[`, `"messages":[{"role":"system","content":`+jsonString(prefixText(3, 500))+`},`, 1)
	for range 2 {
		doc := decodeResponse(t, readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", b), http.StatusOK))
		if doc.Usage.PromptTokensDetails["cached_tokens"] != 0 {
			t.Errorf("cached_tokens %d without an engine", doc.Usage.PromptTokensDetails["cached_tokens"])
		}
	}
}

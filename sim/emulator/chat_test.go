package emulator

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/route"
)

// promptTokens counts a body's prompt as the brief defines it, with a
// Tokenizer of the test's own.
func promptTokens(t *testing.T, tok *route.Tokenizer, body string) int {
	t.Helper()
	req, err := route.ParseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	n := tok.CountMessages(req.Messages)
	var f struct {
		Tools json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Tools) > 0 {
		n += tok.Count(string(f.Tools))
	}
	return n
}

func TestChatNonStreaming(t *testing.T) {
	tok := testTokenizer
	e := start(t, DefaultConfig())
	c := newClient(t)
	for _, tc := range []struct {
		name   string
		extra  string
		n      int
		tokens int
		finish string
	}{
		{"default length", "", 1, 16, "stop"},
		{"max_tokens", `"max_tokens":7`, 1, 7, "length"},
		{"max_completion_tokens wins", `"max_tokens":7,"max_completion_tokens":5`, 1, 5, "length"},
		{"n=2", `"n":2,"max_tokens":3`, 2, 3, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := body("gpt-4o", tc.extra)
			resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", b)
			raw := readAll(t, resp, http.StatusOK)
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			r := decodeResponse(t, raw)
			if r.Model != "gpt-4o" {
				t.Errorf("model %q", r.Model)
			}
			if len(r.Choices) != tc.n {
				t.Fatalf("%d choices, want %d", len(r.Choices), tc.n)
			}
			for i, ch := range r.Choices {
				if ch.Index != i || ch.FinishReason != tc.finish || string(ch.Logprobs) != "null" {
					t.Errorf("choice %d: index %d finish %q logprobs %s", i, ch.Index, ch.FinishReason, ch.Logprobs)
				}
				m := ch.Message
				if m.Role != "assistant" || m.Content == nil || m.Refusal != nil || m.ToolCalls != nil {
					t.Fatalf("choice %d message %+v", i, m)
				}
				if got := tok.Count(*m.Content); got != tc.tokens {
					t.Errorf("choice %d content %q is %d tokens, want %d", i, *m.Content, got, tc.tokens)
				}
			}
			u := r.Usage
			want := promptTokens(t, tok, b)
			if u.PromptTokens != want || u.CompletionTokens != tc.n*tc.tokens || u.TotalTokens != want+tc.n*tc.tokens {
				t.Errorf("usage %+v, want prompt %d completion %d", u, want, tc.n*tc.tokens)
			}
			wantDetails := map[string]int{"cached_tokens": 0, "audio_tokens": 0}
			if len(u.PromptTokensDetails) != 2 || u.PromptTokensDetails["cached_tokens"] != 0 {
				t.Errorf("prompt_tokens_details %v, want %v", u.PromptTokensDetails, wantDetails)
			}
			if len(u.CompletionDetails) != 4 {
				t.Errorf("completion_tokens_details %v", u.CompletionDetails)
			}
			if r.PromptFilterResults != nil || r.Choices[0].ContentFilterResults != nil {
				t.Error("OpenAI answer carries Azure content filter results")
			}
		})
	}
}

// stream sends a streaming request and returns its events, which must end
// cleanly with [DONE], decoded.
func streamChunks(t *testing.T, c *http.Client, url, b string, header ...string) ([]chunkDoc, []map[string]json.RawMessage) {
	t.Helper()
	resp := do(t, c, "POST", url, b, header...)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	data, err := events(resp.Body)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", data)
	}
	var chunks []chunkDoc
	var raws []map[string]json.RawMessage
	for _, d := range data[:len(data)-1] {
		ch, raw := decodeChunk(t, d)
		chunks = append(chunks, ch)
		raws = append(raws, raw)
	}
	return chunks, raws
}

func TestChatStreaming(t *testing.T) {
	tok := testTokenizer
	e := start(t, DefaultConfig())
	c := newClient(t)
	for _, tc := range []struct {
		name   string
		extra  string
		usage  bool
		n      int
		tokens int
		finish string
	}{
		{"no usage", `"stream":true`, false, 1, 16, "stop"},
		{"include_usage", `"stream":true,"stream_options":{"include_usage":true},"max_tokens":5`, true, 1, 5, "length"},
		{"include_usage false", `"stream":true,"stream_options":{"include_usage":false},"max_tokens":5`, false, 1, 5, "length"},
		{"n=2 with usage", `"stream":true,"stream_options":{"include_usage":true},"n":2,"max_tokens":4`, true, 2, 4, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := body("gpt-4o-mini", tc.extra)
			chunks, raws := streamChunks(t, c, e.URL()+"/v1/chat/completions", b)
			id := chunks[0].ID
			text := make([]string, tc.n)
			roles := make([]int, tc.n)
			finishes := make([]string, tc.n)
			var usage *usageDoc
			for i, ch := range chunks {
				if ch.ID != id || ch.Object != "chat.completion.chunk" || ch.Model != "gpt-4o-mini" || ch.Created == 0 {
					t.Errorf("chunk %d: id %q object %q model %q", i, ch.ID, ch.Object, ch.Model)
				}
				u, hasUsage := raws[i]["usage"]
				if tc.usage != hasUsage {
					t.Errorf("chunk %d: usage member present %v, want %v", i, hasUsage, tc.usage)
				}
				if len(ch.Choices) == 0 {
					if i != len(chunks)-1 || !tc.usage || ch.Usage == nil {
						t.Fatalf("chunk %d has no choices: %s", i, raws[i]["choices"])
					}
					usage = ch.Usage
					continue
				}
				if hasUsage && string(u) != "null" {
					t.Errorf("chunk %d: usage %s before the last chunk", i, u)
				}
				if len(ch.Choices) != 1 {
					t.Fatalf("chunk %d has %d choices", i, len(ch.Choices))
				}
				cc := ch.Choices[0]
				if finishes[cc.Index] != "" {
					t.Errorf("chunk %d for choice %d after its finish", i, cc.Index)
				}
				if cc.Delta.Role != "" {
					if text[cc.Index] != "" || cc.Delta.Role != "assistant" {
						t.Errorf("chunk %d: role %q not first", i, cc.Delta.Role)
					}
					roles[cc.Index]++
				}
				if cc.Delta.Content != nil {
					if tok.Count(*cc.Delta.Content) != 1 {
						t.Errorf("chunk %d: content %q is not one token", i, *cc.Delta.Content)
					}
					text[cc.Index] += *cc.Delta.Content
				}
				if cc.FinishReason != nil {
					if cc.Delta.Content != nil || cc.Delta.Role != "" {
						t.Errorf("finish chunk %d has a non-empty delta", i)
					}
					finishes[cc.Index] = *cc.FinishReason
				}
			}
			for i := range tc.n {
				if roles[i] != 1 || finishes[i] != tc.finish || tok.Count(text[i]) != tc.tokens {
					t.Errorf("choice %d: %d role deltas, finish %q, text %q", i, roles[i], finishes[i], text[i])
				}
			}
			if tc.usage {
				want := promptTokens(t, tok, b)
				if usage == nil || usage.PromptTokens != want || usage.CompletionTokens != tc.n*tc.tokens || usage.TotalTokens != want+tc.n*tc.tokens {
					t.Errorf("usage %+v, want prompt %d completion %d", usage, want, tc.n*tc.tokens)
				}
				if usage != nil && (usage.PromptTokensDetails == nil || usage.CompletionDetails == nil) {
					t.Error("usage lacks its details")
				}
			}
		})
	}
	s := settled(t, e)
	if s.Streams != 4 || s.StreamsCompleted != 4 {
		t.Errorf("streams %d completed %d, want 4 and 4", s.Streams, s.StreamsCompleted)
	}
}

func TestChatStreamIsDeterministic(t *testing.T) {
	run := func(seed int64) []string {
		cfg := DefaultConfig()
		cfg.Seed = seed
		e := start(t, cfg)
		c := newClient(t)
		var out []string
		for range 3 {
			resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", `"n":2`))
			r := decodeResponse(t, readAll(t, resp, http.StatusOK))
			out = append(out, r.ID, *r.Choices[0].Message.Content, *r.Choices[1].Message.Content)
		}
		return out
	}
	a, b, other := run(7), run(7), run(8)
	if strings.Join(a, "|") != strings.Join(b, "|") {
		t.Errorf("same seed, different answers:\n%q\n%q", a, b)
	}
	if strings.Join(a, "|") == strings.Join(other, "|") {
		t.Error("different seeds, same answers")
	}
	if a[1] == a[2] || a[1] == a[4] {
		t.Errorf("choices or requests repeat each other: %q", a)
	}
}

func TestChatRejectsInvalidRequests(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = map[string]Price{"gpt-4o": {}}
	e := start(t, cfg)
	c := newClient(t)
	url := e.URL() + "/v1/chat/completions"
	for _, tc := range []struct {
		body   string
		status int
		param  string
		code   string
	}{
		{`not json`, 400, "", ""},
		{`{"model":"gpt-4o"}`, 400, "messages", ""},
		{`{"model":"gpt-4o","messages":[{"role":"robot","content":"x"}]}`, 400, "messages[0].role", ""},
		{`{"model":"gpt-4o","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, 400, "max_tokens", ""},
		{`{"model":"gpt-4o","messages":[{"role":"user","content":"x"}],"max_tokens":40000}`, 400, "max_tokens", ""},
		{`{"model":"gpt-4o","messages":[{"role":"user","content":"x"}],"tools":{}}`, 400, "tools", ""},
		{`{"model":"gpt-4o","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice", ""},
		{`{"model":"gpt-5","messages":[{"role":"user","content":"x"}]}`, 404, "", "model_not_found"},
	} {
		wantError(t, do(t, c, "POST", url, tc.body), tc.status, "invalid_request_error", tc.param, tc.code)
	}
}

func TestModelsAndPrices(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = map[string]Price{"gpt-4o": {InputUSDPerMTok: 2.5, OutputUSDPerMTok: 10}, "cheap": {InputUSDPerMTok: 0.1, OutputUSDPerMTok: 0.2}}
	cfg.Deployments = map[string]string{"prod": "gpt-4o"}
	e := start(t, cfg)
	c := newClient(t)

	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := json.Unmarshal(readAll(t, do(t, c, "GET", e.URL()+"/v1/models", ""), 200), &list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "cheap" || list.Data[1].ID != "gpt-4o" ||
		list.Data[0].Object != "model" || list.Data[0].OwnedBy != "emulator" || list.Data[0].Created == 0 {
		t.Errorf("models list %+v", list)
	}

	r := decodeResponse(t, readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("gpt-4o", `"max_tokens":10`)), 200))
	want := (float64(r.Usage.PromptTokens)*2.5 + 10*10) / 1e6
	s := settled(t, e)
	if s.PromptTokens != int64(r.Usage.PromptTokens) || s.CompletionTokens != 10 {
		t.Errorf("stats tokens %d/%d, usage %+v", s.PromptTokens, s.CompletionTokens, r.Usage)
	}
	if diff := s.ChargedUSD - want; diff > 1e-12 || diff < -1e-12 {
		t.Errorf("charged %v, want %v", s.ChargedUSD, want)
	}
}

func TestAzure(t *testing.T) {
	tok := testTokenizer
	cfg := DefaultConfig()
	cfg.APIKey = "azure-key"
	cfg.Deployments = map[string]string{"prod-4o": "gpt-4o-2024-08-06"}
	e := start(t, cfg)
	c := newClient(t)
	url := e.URL() + "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21"
	b := body("ignored", "")

	wantError(t, do(t, c, "POST", url, b), 401, "invalid_request_error", "", "invalid_api_key")
	wantError(t, do(t, c, "POST", url, b, "Authorization", "Bearer azure-key"), 401, "invalid_request_error", "", "invalid_api_key")
	wantError(t, do(t, c, "POST", strings.TrimSuffix(url, "?api-version=2024-10-21"), b, "api-key", "azure-key"), 400, "invalid_request_error", "api-version", "")

	r := decodeResponse(t, readAll(t, do(t, c, "POST", url, b, "api-key", "azure-key"), 200))
	if r.Model != "gpt-4o-2024-08-06" {
		t.Errorf("model %q, want the deployment's", r.Model)
	}
	var pfr []struct {
		PromptIndex          int                        `json:"prompt_index"`
		ContentFilterResults map[string]json.RawMessage `json:"content_filter_results"`
	}
	if err := json.Unmarshal(r.PromptFilterResults, &pfr); err != nil || len(pfr) != 1 || len(pfr[0].ContentFilterResults) == 0 {
		t.Errorf("prompt_filter_results %s: %v", r.PromptFilterResults, err)
	}
	var cfr map[string]struct {
		Filtered bool   `json:"filtered"`
		Severity string `json:"severity"`
	}
	if err := json.Unmarshal(r.Choices[0].ContentFilterResults, &cfr); err != nil || cfr["hate"].Severity != "safe" {
		t.Errorf("content_filter_results %s: %v", r.Choices[0].ContentFilterResults, err)
	}
	if r.Usage.PromptTokens != promptTokens(t, tok, b) {
		t.Errorf("prompt tokens %d", r.Usage.PromptTokens)
	}

	// Azure clients may leave the model out; an unlisted deployment
	// reports its own name.
	noModel := `{"messages":[{"role":"user","content":"hi"}]}`
	r = decodeResponse(t, readAll(t, do(t, c, "POST", strings.Replace(url, "prod-4o", "other", 1), noModel, "api-key", "azure-key"), 200))
	if r.Model != "other" {
		t.Errorf("model %q, want the deployment name", r.Model)
	}

	// A stream starts as Azure's does, with the prompt's filter results in
	// a chunk of its own, and every choice carries content filter results.
	resp := do(t, c, "POST", url, body("x", `"stream":true,"stream_options":{"include_usage":true},"max_tokens":3`), "api-key", "azure-key")
	data, err := events(resp.Body)
	resp.Body.Close()
	if err != nil || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream %q: %v", data, err)
	}
	var first chunkDoc
	if err := json.Unmarshal([]byte(data[0]), &first); err != nil || len(first.Choices) != 0 || first.PromptFilterResults == nil {
		t.Errorf("first Azure chunk %s: %v", data[0], err)
	}
	for _, d := range data[1 : len(data)-2] {
		ch, _ := decodeChunk(t, d)
		if ch.Model != "gpt-4o-2024-08-06" || len(ch.Choices) != 1 || ch.Choices[0].ContentFilterResults == nil {
			t.Errorf("Azure chunk %s", d)
		}
	}
	if last, _ := decodeChunk(t, data[len(data)-2]); last.Usage == nil || last.Usage.CompletionTokens != 3 {
		t.Errorf("usage chunk %s", data[len(data)-2])
	}
}

func TestAuth(t *testing.T) {
	cfg := DefaultConfig()
	cfg.APIKey = "sk-test"
	e := start(t, cfg)
	c := newClient(t)
	url := e.URL() + "/v1/chat/completions"
	wantError(t, do(t, c, "POST", url, body("m", "")), 401, "invalid_request_error", "", "invalid_api_key")
	wantError(t, do(t, c, "POST", url, body("m", ""), "Authorization", "Bearer sk-wrong"), 401, "invalid_request_error", "", "invalid_api_key")
	wantError(t, do(t, c, "POST", url, body("m", ""), "api-key", "sk-test"), 401, "invalid_request_error", "", "invalid_api_key")
	wantError(t, do(t, c, "GET", e.URL()+"/v1/models", ""), 401, "invalid_request_error", "", "invalid_api_key")
	readAll(t, do(t, c, "POST", url, body("m", ""), "Authorization", "Bearer sk-test"), 200)
	readAll(t, do(t, c, "GET", e.URL()+"/v1/models", "", "Authorization", "Bearer sk-test"), 200)
	if s := settled(t, e); s.ByStatus[401] != 4 || s.ByStatus[200] != 2 || s.Requests != 6 {
		t.Errorf("stats %+v", s)
	}
}

func TestUnknownPathAndMethod(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	wantError(t, do(t, c, "POST", e.URL()+"/v1/audio/speech", "{}"), 404, "invalid_request_error", "", "")
	wantError(t, do(t, c, "POST", e.URL()+"/openai/deployments//chat/completions?api-version=1", "{}"), 404, "invalid_request_error", "", "")
	resp := do(t, c, "GET", e.URL()+"/v1/chat/completions", "")
	if allow := resp.Header.Get("Allow"); allow != "POST" {
		t.Errorf("Allow %q", allow)
	}
	wantError(t, resp, 405, "invalid_request_error", "", "")
	wantError(t, do(t, c, "POST", e.URL()+"/v1/models", ""), 405, "invalid_request_error", "", "")
}

func TestBodyTooLarge(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", maxBodyBytes) + `"}]}`
	wantError(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", big), 413, "invalid_request_error", "", "request_too_large")
}

func TestErrorRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ErrorRate = 1
	e := start(t, cfg)
	c := newClient(t)
	for range 3 {
		wantError(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 500, "server_error", "", "")
	}
	if s := settled(t, e); s.ByStatus[500] != 3 || s.PromptTokens != 0 {
		t.Errorf("stats %+v", s)
	}

	// A fractional rate fails about that fraction, the same requests for
	// the same seed.
	statuses := func() string {
		cfg := DefaultConfig()
		cfg.ErrorRate = 0.3
		cfg.DefaultMaxTokens = 1
		e := start(t, cfg)
		var out []byte
		for range 200 {
			resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", ""))
			resp.Body.Close()
			out = append(out, byte('0'+resp.StatusCode/100))
		}
		return string(out)
	}
	a, b := statuses(), statuses()
	if a != b {
		t.Errorf("same seed, different failures:\n%s\n%s", a, b)
	}
	if n := strings.Count(a, "5"); n < 30 || n > 90 {
		t.Errorf("%d of 200 failed at rate 0.3", n)
	}
}

func TestReceivedKeepsTheLastRequests(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	var sent []string
	for i := range receivedKept + 4 {
		b := body("m", `"user":"u`+strings.Repeat("x", i)+`"`)
		sent = append(sent, b)
		readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions?trace=1", b, "X-Test", "yes"), 200)
	}
	got := e.Received()
	if len(got) != receivedKept {
		t.Fatalf("%d received, want %d", len(got), receivedKept)
	}
	for i, r := range got {
		if string(r.Body) != sent[4+i] || r.Method != "POST" || r.Path != "/v1/chat/completions" || r.RawQuery != "trace=1" || r.Header.Get("X-Test") != "yes" {
			t.Errorf("received[%d] = %s %s?%s %q", i, r.Method, r.Path, r.RawQuery, r.Body)
		}
	}
	got[0].Body[0] = 'X'
	got[0].Header.Set("X-Test", "changed")
	if again := e.Received(); again[0].Body[0] != '{' || again[0].Header.Get("X-Test") != "yes" {
		t.Error("Received returns the emulator's own buffers")
	}
}

func TestStatsCounters(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = map[string]Price{"m": {InputUSDPerMTok: 1, OutputUSDPerMTok: 2}}
	e := start(t, cfg)
	c := newClient(t)
	url := e.URL() + "/v1/chat/completions"
	r := decodeResponse(t, readAll(t, do(t, c, "POST", url, body("m", `"max_tokens":4`)), 200))
	chunks, _ := streamChunks(t, c, url, body("m", `"stream":true,"max_tokens":6,"n":2`))
	if len(chunks) != 2*6+2 {
		t.Errorf("%d chunks", len(chunks))
	}
	readAll(t, do(t, c, "POST", url, body("nope", "")), 404)
	readAll(t, do(t, c, "GET", url, ""), 405)

	s := settled(t, e)
	prompt := int64(r.Usage.PromptTokens)
	want := Stats{
		Requests:         4,
		ByStatus:         map[int]int64{200: 2, 404: 1, 405: 1},
		Streams:          1,
		StreamsCompleted: 1,
		PromptTokens:     2 * prompt,
		CompletionTokens: 4 + 12,
		ChargedUSD:       (2*float64(prompt) + 2*16) / 1e6,
	}
	if d := s.ChargedUSD - want.ChargedUSD; d > 1e-15 || d < -1e-15 {
		t.Errorf("charged %v, want %v", s.ChargedUSD, want.ChargedUSD)
	}
	s.ChargedUSD = want.ChargedUSD
	gotJSON, _ := json.Marshal(s)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("stats\n got %s\nwant %s", gotJSON, wantJSON)
	}
}

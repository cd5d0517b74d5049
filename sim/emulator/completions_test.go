package emulator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

func TestCompletionsClient(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = map[string]Price{"gpt-3.5-turbo-instruct": {InputUSDPerMTok: 1, OutputUSDPerMTok: 2}}
	e := start(t, cfg)
	c := openaiClient(t, e)
	ctx := context.Background()
	prompt := "Say this is a test"
	wantPrompt := testTokenizer.Count(prompt)

	r, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:  openai.CompletionNewParamsModelGPT3_5TurboInstruct,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		N:      openai.Int(2), MaxTokens: openai.Int(7),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || len(r.Choices) != 2 || r.Model != "gpt-3.5-turbo-instruct" {
		t.Fatalf("completion %s", r.RawJSON())
	}
	for i, ch := range r.Choices {
		if ch.Index != int64(i) || ch.FinishReason != "length" || testTokenizer.Count(ch.Text) != 7 {
			t.Errorf("choice %d: %+v (%d tokens)", i, ch, testTokenizer.Count(ch.Text))
		}
	}
	if r.Choices[0].Text == r.Choices[1].Text {
		t.Error("two choices, one text")
	}
	if u := r.Usage; u.PromptTokens != int64(wantPrompt) || u.CompletionTokens != 14 || u.TotalTokens != int64(wantPrompt)+14 {
		t.Errorf("usage %+v", u)
	}
	if st := settled(t, e); st.PromptTokens != int64(wantPrompt) || st.CompletionTokens != 14 {
		t.Errorf("stats %+v", st)
	}

	// Default length (16, finish stop); echo; a stop sequence.
	d, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:  openai.CompletionNewParamsModelGPT3_5TurboInstruct,
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{prompt, "Other"}}, Echo: openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Choices) != 2 || !strings.HasPrefix(d.Choices[0].Text, prompt) || !strings.HasPrefix(d.Choices[1].Text, "Other") ||
		d.Choices[0].FinishReason != "stop" || testTokenizer.Count(strings.TrimPrefix(d.Choices[0].Text, prompt)) != 16 {
		t.Errorf("default completion %s", d.RawJSON())
	}
	stop := strings.Fields(d.Choices[1].Text)[3] // the fourth word generated
	s, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:  openai.CompletionNewParamsModelGPT3_5TurboInstruct,
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 2, 3}}, MaxTokens: openai.Int(64),
		Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String(" " + stop)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ch := s.Choices[0]; ch.FinishReason != "stop" || strings.Contains(ch.Text, " "+stop) || s.Usage.CompletionTokens >= 64 || s.Usage.PromptTokens != 3 {
		t.Errorf("stopped at %q: %s", stop, s.RawJSON())
	}
}

func TestCompletionsStream(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TTFT = 20 * time.Millisecond
	cfg.TPS = 500
	e := start(t, cfg)
	c := openaiClient(t, e)
	prompt := "Stream me a line"
	t0 := time.Now()
	st := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:  "davinci-002",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		N:      openai.Int(2), MaxTokens: openai.Int(10),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	texts := make([]string, 2)
	finish := make([]string, 2)
	var usage openai.CompletionUsage
	chunks := 0
	for st.Next() {
		ch := st.Current()
		if ch.Object != "text_completion" || !strings.HasPrefix(ch.ID, "cmpl-") {
			t.Fatalf("chunk %s", ch.RawJSON())
		}
		chunks++
		for _, c := range ch.Choices {
			texts[c.Index] += c.Text
			if c.FinishReason != "" {
				finish[c.Index] = string(c.FinishReason)
			}
		}
		if ch.JSON.Usage.Valid() {
			usage = ch.Usage
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(t0); elapsed < cfg.TTFT+9*time.Second/500 {
		t.Errorf("stream took %v, less than TTFT and 9 tokens at 500/s", elapsed)
	}
	for i := range texts {
		if testTokenizer.Count(texts[i]) != 10 || finish[i] != "length" {
			t.Errorf("choice %d: %q (%d tokens), finish %q", i, texts[i], testTokenizer.Count(texts[i]), finish[i])
		}
	}
	if chunks != 2*10+2+1 {
		t.Errorf("%d chunks, want 23", chunks)
	}
	if usage.PromptTokens != int64(testTokenizer.Count(prompt)) || usage.CompletionTokens != 20 {
		t.Errorf("usage %+v", usage)
	}
	if s := settled(t, e); s.StreamsCompleted != 1 || s.CompletionTokens != 20 {
		t.Errorf("stats %+v", s)
	}
}

func TestCompletionsBadInput(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	url := e.URL() + "/v1/completions"
	for _, tc := range []struct{ body, param string }{
		{`{"model":"m","prompt":`, ""},
		{`"x"`, ""},
		{`{"prompt":"x"}`, "model"},
		{`{"model":"m"}`, "prompt"},
		{`{"model":"m","prompt":""}`, "prompt"},
		{`{"model":"m","prompt":"x","max_tokens":-1}`, "max_tokens"},
		{`{"model":"m","prompt":"x","max_tokens":"5"}`, "max_tokens"},
		{`{"model":"m","prompt":"x","n":0}`, "n"},
		{`{"model":"m","prompt":"x","stop":["a","b","c","d","e"]}`, "stop"},
		{`{"model":"m","prompt":"x","stop":7}`, "stop"},
		{`{"model":"m","prompt":"x","stream":"yes"}`, "stream"},
	} {
		wantError(t, do(t, c, "POST", url, tc.body), 400, "invalid_request_error", tc.param, "")
	}
	// Azure: the deployment names the model, and api-version is required.
	wantError(t, do(t, c, "POST", e.URL()+"/openai/deployments/d/completions", `{"prompt":"x"}`), 400, "invalid_request_error", "api-version", "")
	b := readAll(t, do(t, c, "POST", e.URL()+"/openai/deployments/d/completions?api-version=2024-10-21", `{"prompt":"x"}`), 200)
	if !strings.Contains(string(b), `"model":"d"`) {
		t.Errorf("Azure completion %s", b)
	}
}

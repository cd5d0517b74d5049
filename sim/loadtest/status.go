package loadtest

import (
	"context"
	"errors"
	"testing"

	"github.com/openai/openai-go/v3"
)

// ChatStatus sends one chat completion of gpt-4o-mini, at most maxTokens
// long, with the official client c (built with retries off, so that the
// status is the first answer's), and returns the answer's HTTP status:
// 200 on success. A request that got no answer at all fails t and
// returns 0. With -v a 429's message is logged, since a test of
// admission wants to see why it came.
func ChatStatus(t testing.TB, c openai.Client, maxTokens int64) int {
	t.Helper()
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "gpt-4o-mini",
		MaxTokens: openai.Int(maxTokens),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("spend")},
	})
	var apiErr *openai.Error
	switch {
	case err == nil:
		return 200
	case errors.As(err, &apiErr):
		if apiErr.StatusCode == 429 && testing.Verbose() {
			t.Logf("429: %s", apiErr.Message)
		}
		return apiErr.StatusCode
	}
	t.Errorf("request failed without an answer: %v", err)
	return 0
}

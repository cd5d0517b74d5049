package emulator

import (
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// openaiClient returns an openai-go client of e that does not retry.
func openaiClient(t *testing.T, e *Emulator, opts ...option.RequestOption) openai.Client {
	t.Helper()
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(e.URL() + "/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithHTTPClient(newClient(t)),
	}, opts...)...)
}

package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/llmesh/llmesh/sim/emulator"
)

// TestMetricsFollowConventions scrapes every node of a three-region mesh
// after forwarded, streamed and refused requests with distinct sessions
// and request ids: the exposition passes Prometheus's own linter (names,
// units, _total counters, help), every family is llmesh_ (or the Go and
// process collectors'), and no label carries a request id, a session or
// a key: label values come from bounded sets.
func TestMetricsFollowConventions(t *testing.T) {
	f := startRegions(t, regionsUpstreams(emulator.Config{}), nil)
	ctx := context.Background()
	var ids []string
	for i := range 6 {
		id, session := fmt.Sprintf("req-lint-%d-7c1e", i), fmt.Sprintf("sess-lint-%d-93ab", i)
		ids = append(ids, id, session)
		c := regionClient(f.urls[[]string{"us", "eu", "ap"}[i%3]], euKey)
		params := openai.ChatCompletionNewParams{
			Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(4),
		}
		opts := []option.RequestOption{option.WithHeader("X-Request-Id", id), option.WithHeader("X-LLMesh-Session", session)}
		if i%2 == 0 {
			s := c.Chat.Completions.NewStreaming(ctx, params, opts...)
			for s.Next() {
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		} else if _, err := c.Chat.Completions.New(ctx, params, opts...); err != nil {
			t.Fatal(err)
		}
	}
	// A refusal: a model nobody serves.
	us := regionClient(f.urls["eu"], usKey)
	if _, err := us.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "no-such-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}, option.WithMaxRetries(0)); err == nil {
		t.Fatal("an unknown model was served")
	}
	for region, url := range f.urls {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		problems, err := promlint.New(strings.NewReader(body)).Lint()
		if err != nil {
			t.Fatalf("%s: %v", region, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s: %s", region, p.Metric, p.Text)
		}
		for _, line := range strings.Split(body, "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name := line[:strings.IndexAny(line, "{ ")]
			if !strings.HasPrefix(name, "llmesh_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "promhttp_") {
				t.Errorf("%s: %s is not named llmesh_", region, name)
			}
			for _, id := range append(ids, euKey, usKey) {
				if strings.Contains(line, id) {
					t.Errorf("%s: a label carries %q: %s", region, id, line)
				}
			}
		}
	}
}

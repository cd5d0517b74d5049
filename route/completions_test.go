package route

import (
	"strings"
	"testing"
)

// A legacy completion's bound counts n (or best_of) completions for each
// of its prompts, and the 16 tokens priced when it gives no max_tokens are
// written into what is sent on.
func TestCompletionsBound(t *testing.T) {
	for _, c := range []struct {
		body    string
		choices int
		sent    string // in the upstream body
	}{
		{`{"model":"m","prompt":"a"}`, 1, `"max_tokens":16`},
		{`{"model":"m","prompt":"a","max_tokens":null}`, 1, `"max_tokens":16`},
		{`{"model":"m","prompt":["a","b","c"],"n":2,"max_tokens":5}`, 6, `"max_tokens":5`},
		{`{"model":"m","prompt":[1,2,3],"best_of":3,"max_tokens":5}`, 3, `"max_tokens":5`},
		{`{"model":"m","prompt":[[1,2],[3]],"max_tokens":5}`, 2, `"max_tokens":5`},
	} {
		r, err := ParseCompletionsRequest([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		if got := r.Choices(); got != c.choices {
			t.Errorf("%s: %d completions bounded; want %d", c.body, got, c.choices)
		}
		up := string(r.UpstreamBody("m"))
		if !strings.Contains(up, c.sent) || strings.Count(up, `"max_tokens"`) != 1 {
			t.Errorf("%s: sent %s; want %s once", c.body, up, c.sent)
		}
	}
}

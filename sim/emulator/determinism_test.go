package emulator

import (
	"strings"
	"testing"
)

// TestNewEndpointsDeterministic: two emulators of one seed, sent the same
// requests in the same order, answer the same text; another seed does
// not. Response ids are left out: they carry a random part.
func TestNewEndpointsDeterministic(t *testing.T) {
	run := func(seed int64) []string {
		cfg := DefaultConfig()
		cfg.Seed = seed
		e := start(t, cfg)
		c := newClient(t)
		var out []string
		for _, r := range []struct {
			path, body string
			header     []string
		}{
			{"/v1/completions", `{"model":"m","prompt":"x","n":2}`, nil},
			{"/v1/messages", `{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"x"}]}`, []string{"anthropic-version", "2023-06-01"}},
			{"/v1/responses", `{"model":"m","input":"x","stream":true}`, nil},
		} {
			b := string(readAll(t, do(t, c, "POST", e.URL()+r.path, r.body, r.header...), 200))
			if i := strings.Index(b, `"text":`); i >= 0 {
				b = b[i:]
			}
			if r.path == "/v1/responses" { // the text, from its done event
				i := strings.Index(b, "response.output_text.done")
				b = b[i : i+strings.Index(b[i:], "\n\n")]
				b = b[strings.Index(b, `"text":`):]
			}
			out = append(out, b)
		}
		return out
	}
	a, b, other := run(7), run(7), run(8)
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("request %d: same seed, different text:\n%s\n%s", i, a[i], b[i])
		}
		if a[i] == other[i] {
			t.Errorf("request %d: another seed, same text %s", i, a[i])
		}
	}
}

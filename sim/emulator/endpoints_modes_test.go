package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// newEndpoints is a request to each endpoint added beside chat, with the
// headers it needs.
var newEndpoints = []struct {
	name, path, body string
	header           []string
	stream           bool
}{
	{"embeddings", "/v1/embeddings", `{"model":"m","input":"x"}`, nil, false},
	{"completions", "/v1/completions", `{"model":"m","prompt":"x","max_tokens":8,"stream":true}`, nil, true},
	{"messages", "/v1/messages", `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}`, []string{"anthropic-version", "2023-06-01"}, true},
	{"responses", "/v1/responses", `{"model":"m","input":"x","stream":true}`, nil, true},
	{"responses whole", "/v1/responses", `{"model":"m","input":"x"}`, nil, false},
	{"messages whole", "/v1/messages", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"x"}]}`, []string{"anthropic-version", "2023-06-01"}, false},
}

// TestNewEndpointsModeError: every endpoint answers 503 in its own shape.
func TestNewEndpointsModeError(t *testing.T) {
	e := start(t, DefaultConfig())
	if err := e.SetMode(ModeError); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	for _, ep := range newEndpoints {
		b := readAll(t, do(t, c, "POST", e.URL()+ep.path, ep.body, ep.header...), 503)
		var doc struct {
			Type  string          `json:"type"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %s", ep.name, b)
		}
		anthropic := strings.HasPrefix(ep.path, "/v1/messages")
		if anthropic && (doc.Type != "error" || !strings.Contains(string(doc.Error), `"overloaded_error"`)) ||
			!anthropic && !strings.Contains(string(doc.Error), `"server_error"`) {
			t.Errorf("%s: %s", ep.name, b)
		}
	}
}

// TestNewEndpointsModeCut: streams end broken part-way, whole answers
// after their headers.
func TestNewEndpointsModeCut(t *testing.T) {
	e := start(t, DefaultConfig())
	if err := e.SetMode(ModeCut); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	for _, ep := range newEndpoints {
		resp := do(t, c, "POST", e.URL()+ep.path, ep.body, ep.header...)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: status %d, read %v (%d bytes)", ep.name, resp.StatusCode, err, len(b))
		}
		if ep.stream && (len(b) == 0 || strings.Contains(string(b), "[DONE]") || strings.Contains(string(b), "message_stop") || strings.Contains(string(b), "response.completed")) {
			t.Errorf("%s: cut stream %q", ep.name, b)
		}
	}
}

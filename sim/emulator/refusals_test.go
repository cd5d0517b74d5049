package emulator

import (
	"encoding/json"
	"strings"
	"testing"
)

// ModeContentFilter and ModeContextLength refuse every generating
// request 400 in the real shape of its path's API, over HTTP control too;
// what does not generate is served as before, and ModeUp serves again.
func TestRefusalModes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Deployments = map[string]string{"dep": "gpt-4o-mini"}
	e := start(t, cfg)
	c := newClient(t)
	azure := e.URL() + "/openai/deployments/dep/chat/completions?api-version=2024-10-21"
	chat, messages := e.URL()+"/v1/chat/completions", e.URL()+"/v1/messages"
	msg := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	anthropicError := func(t *testing.T, b []byte) string {
		var doc struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(b, &doc); err != nil || doc.Type != "error" || doc.Error.Type != "invalid_request_error" {
			t.Fatalf("not Anthropic's error: %s", b)
		}
		return doc.Error.Message
	}

	readAll(t, do(t, c, "POST", e.URL()+"/emulator/mode?m=content_filter", ""), 200)
	var az struct {
		Error struct {
			Code       string `json:"code"`
			Param      string `json:"param"`
			Status     int    `json:"status"`
			InnerError struct {
				Code   string                     `json:"code"`
				Result map[string]json.RawMessage `json:"content_filter_result"`
			} `json:"innererror"`
		} `json:"error"`
	}
	if err := json.Unmarshal(readAll(t, do(t, c, "POST", azure, body("", "")), 400), &az); err != nil || az.Error.Code != "content_filter" ||
		az.Error.Status != 400 || az.Error.Param != "prompt" || az.Error.InnerError.Code != "ResponsibleAIPolicyViolation" || len(az.Error.InnerError.Result) == 0 {
		t.Fatalf("azure: %+v %v", az, err)
	}
	wantError(t, do(t, c, "POST", chat, body("m", "")), 400, "invalid_request_error", "", "invalid_prompt")
	wantError(t, do(t, c, "POST", e.URL()+"/v1/embeddings", `{"model":"e","input":"hi"}`), 400, "invalid_request_error", "", "invalid_prompt")
	if m := anthropicError(t, readAll(t, do(t, c, "POST", messages, msg, "anthropic-version", "2023-06-01"), 400)); m != "Output blocked by content filtering policy" {
		t.Fatalf("messages: %q", m)
	}
	readAll(t, do(t, c, "GET", e.URL()+"/v1/models", ""), 200)

	if err := e.SetMode(ModeContextLength); err != nil {
		t.Fatal(err)
	}
	wantError(t, do(t, c, "POST", azure, body("", `"stream":true`)), 400, "invalid_request_error", "messages", "context_length_exceeded")
	wantError(t, do(t, c, "POST", e.URL()+"/v1/responses", `{"model":"m","input":"hi"}`), 400, "invalid_request_error", "messages", "context_length_exceeded")
	if m := anthropicError(t, readAll(t, do(t, c, "POST", messages, msg, "anthropic-version", "2023-06-01"), 400)); !strings.HasPrefix(m, "prompt is too long: ") ||
		!strings.HasSuffix(m, " tokens > 200000 maximum") {
		t.Fatalf("messages: %q", m)
	}

	if err := e.SetMode(ModeUp); err != nil {
		t.Fatal(err)
	}
	readAll(t, do(t, c, "POST", chat, body("m", "")), 200)
	if st := e.Stats(); st.ByStatus[400] != 7 || st.ByStatus[200] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

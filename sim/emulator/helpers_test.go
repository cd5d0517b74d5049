package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// TestMain fails the run if goroutines of the emulator, of an HTTP server
// or of an HTTP client connection outlive the tests.
func TestMain(m *testing.M) {
	os.Exit(wait.NoLeaks(m))
}

// testTokenizer is shared by the tests' emulators and checks: loading one
// takes a second under the race detector.
var testTokenizer = new(route.Tokenizer)

// start returns a started emulator that the test shuts down.
func start(t *testing.T, cfg Config) *Emulator {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.tok = testTokenizer
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return e
}

// newClient returns a client whose idle connections close with the test.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// do sends a request with a JSON body and optional header pairs.
func do(t *testing.T, c *http.Client, method, url, body string, header ...string) *http.Response {
	t.Helper()
	return doCtx(t, context.Background(), c, method, url, body, header...)
}

func doCtx(t *testing.T, ctx context.Context, c *http.Client, method, url, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// readAll reads and closes the body of resp, which must have status want.
func readAll(t *testing.T, resp *http.Response, want int) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, want, b)
	}
	return b
}

// wantError checks an OpenAI error document: all four members present,
// with the given type, param and code ("" for null).
func wantError(t *testing.T, resp *http.Response, status int, typ, param, code string) {
	t.Helper()
	b := readAll(t, resp, status)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var doc struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := doc.Error[k]; !ok {
			t.Errorf("error body %s lacks %q", b, k)
		}
	}
	check := func(k, want string) {
		w := "null"
		if want != "" {
			w = `"` + want + `"`
		}
		if got := string(doc.Error[k]); got != w {
			t.Errorf("error.%s = %s, want %s (body %s)", k, got, w, b)
		}
	}
	check("type", typ)
	check("param", param)
	check("code", code)
	var msg string
	if json.Unmarshal(doc.Error["message"], &msg) != nil || msg == "" {
		t.Errorf("error.message empty in %s", b)
	}
}

// events reads a server-sent event stream to its end and returns the data
// of each event, and the error that ended it (nil at a clean end).
func events(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return out, io.ErrUnexpectedEOF
		}
		out = append(out, data)
	}
	return out, sc.Err()
}

// requireKeys checks that the JSON object raw has every key.
func requireKeys(t *testing.T, what string, raw []byte, keys ...string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v in %s", what, err, raw)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s lacks %q: %s", what, k, raw)
		}
	}
	return m
}

// Wire types as the OpenAPI spec defines them.
type (
	usageDoc struct {
		PromptTokens        int            `json:"prompt_tokens"`
		CompletionTokens    int            `json:"completion_tokens"`
		TotalTokens         int            `json:"total_tokens"`
		PromptTokensDetails map[string]int `json:"prompt_tokens_details"`
		CompletionDetails   map[string]int `json:"completion_tokens_details"`
	}
	toolCallDoc struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	messageDoc struct {
		Role      string        `json:"role"`
		Content   *string       `json:"content"`
		Refusal   *string       `json:"refusal"`
		ToolCalls []toolCallDoc `json:"tool_calls"`
	}
	responseDoc struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index                int             `json:"index"`
			Message              messageDoc      `json:"message"`
			Logprobs             json.RawMessage `json:"logprobs"`
			FinishReason         string          `json:"finish_reason"`
			ContentFilterResults json.RawMessage `json:"content_filter_results"`
		} `json:"choices"`
		Usage               *usageDoc       `json:"usage"`
		PromptFilterResults json.RawMessage `json:"prompt_filter_results"`
	}
	chunkDoc struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index                int             `json:"index"`
			Delta                messageDoc      `json:"delta"`
			FinishReason         *string         `json:"finish_reason"`
			ContentFilterResults json.RawMessage `json:"content_filter_results"`
		} `json:"choices"`
		Usage               *usageDoc       `json:"usage"`
		PromptFilterResults json.RawMessage `json:"prompt_filter_results"`
	}
)

// decodeResponse checks and decodes a non-streaming answer.
func decodeResponse(t *testing.T, b []byte) responseDoc {
	t.Helper()
	m := requireKeys(t, "response", b, "id", "object", "created", "model", "choices", "usage")
	var choices []json.RawMessage
	if err := json.Unmarshal(m["choices"], &choices); err != nil {
		t.Fatal(err)
	}
	for _, c := range choices {
		requireKeys(t, "choice", c, "index", "message", "logprobs", "finish_reason")
	}
	requireKeys(t, "usage", m["usage"], "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details")
	var r responseDoc
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") || r.Created == 0 {
		t.Errorf("object %q id %q created %d", r.Object, r.ID, r.Created)
	}
	return r
}

// decodeChunk checks and decodes one stream event.
func decodeChunk(t *testing.T, data string) (chunkDoc, map[string]json.RawMessage) {
	t.Helper()
	m := requireKeys(t, "chunk", []byte(data), "id", "object", "created", "model", "choices")
	var choices []json.RawMessage
	if err := json.Unmarshal(m["choices"], &choices); err != nil {
		t.Fatal(err)
	}
	for _, c := range choices {
		requireKeys(t, "chunk choice", c, "index", "delta", "finish_reason")
	}
	var c chunkDoc
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatal(err)
	}
	return c, m
}

func body(model string, extra string) string {
	b := `{"model":` + jsonString(model) + `,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Where does the mesh route my request today?"}]`
	if extra != "" {
		b += "," + extra
	}
	return b + "}"
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func compact(t *testing.T, s string) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// settled returns e's stats once no request is in flight: a client has
// the end of its answer a moment before the handler that wrote it has
// counted it.
func settled(t *testing.T, e *Emulator) Stats {
	t.Helper()
	var s Stats
	wait.For(t, 5*time.Second, "the emulator's requests to end", func() bool { s = e.Stats(); return s.InFlight == 0 })
	return s
}

package conformance

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
)

func startEmulator(t *testing.T) string {
	t.Helper()
	e, err := emulator.New(emulator.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return srv.URL
}

// send sends body (none if empty) and returns the answer, read whole.
func send(t *testing.T, method, url, body, key string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// reqBody is body as a request's, nil for none.
func reqBody(body string) []byte {
	if body == "" {
		return nil
	}
	return []byte(body)
}

// tools is a chat request's tools member: one function, which the
// emulator calls.
const tools = `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}}}]`

// TestAnswers validates whole answers against their operation's response.
// An embeddings answer in base64 is left out: the document types the
// embedding as an array only, though the API (and its clients) send a
// string for encoding_format base64.
func TestAnswers(t *testing.T) {
	s := getSpec(t)
	url := startEmulator(t)
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/embeddings", `{"model":"text-embedding-3-small","input":["a","b"],"dimensions":8}`},
		{"POST", "/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"a","n":2,"max_tokens":4}`},
		{"POST", "/v1/responses", `{"model":"gpt-4.1","input":"a","instructions":"b"}`},
		{"POST", "/v1/responses", `{"model":"gpt-4.1","input":"a","max_output_tokens":16,"tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":false}]}`},
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"a"}]}`},
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o","n":2,"max_tokens":4,"messages":[{"role":"system","content":"b"},{"role":"user","content":"a"}]}`},
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"a"}],` + tools + `}`},
		{"GET", "/v1/models", ""},
		{"GET", "/v1/models/gpt-4o", ""},
	} {
		what := tc.method + " " + tc.path
		report(t, "the test's own "+what, s.checkRequest(tc.method, tc.path, reqBody(tc.body)), []byte(tc.body))
		resp, b := send(t, tc.method, url+tc.path, tc.body, "")
		report(t, what+" answered", s.checkAnswer(tc.method, tc.path, reqBody(tc.body), resp, b), b)
	}
}

// events are the data of the server-sent events in b, without the
// closing data: [DONE].
func events(b []byte) []string {
	var data []string
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" {
			data = append(data, d)
		}
	}
	return data
}

// emulatorStreams are the streams TestStreamEvents reads, with the schema
// of each of their events and the fewest events each must have.
var emulatorStreams = []struct {
	path, body, schema string
	min                int
}{
	{"/v1/responses", `{"model":"gpt-4.1","input":"a","stream":true}`, "ResponseStreamEvent", 6},
	{"/v1/responses", `{"model":"gpt-4.1","input":"a","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]},"strict":true}]}`, "ResponseStreamEvent", 6},
	{"/v1/chat/completions", `{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_tokens":6,"messages":[{"role":"user","content":"a"}]}`, "CreateChatCompletionStreamResponse", 8},
	{"/v1/chat/completions", `{"model":"gpt-4o","stream":true,"n":2,"max_tokens":3,"messages":[{"role":"user","content":"a"}]}`, "CreateChatCompletionStreamResponse", 8},
	{"/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"a"}],` + tools + `}`, "CreateChatCompletionStreamResponse", 3},
	{"/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"a","stream":true,"stream_options":{"include_usage":true},"max_tokens":4}`, completionChunk, 6},
}

// TestStreamEvents validates every event of the emulator's streams,
// Responses, chat and legacy completions, text and tool calls, against
// the schema of its kind.
func TestStreamEvents(t *testing.T) {
	s := getSpec(t)
	url := startEmulator(t)
	for _, tc := range emulatorStreams {
		report(t, "the test's own POST "+tc.path, s.checkRequest("POST", tc.path, []byte(tc.body)), []byte(tc.body))
		_, b := send(t, "POST", url+tc.path, tc.body, "")
		ev := events(b)
		for _, e := range ev {
			report(t, tc.path+" streamed an event", s.checkSchema(tc.schema, e), []byte(e))
		}
		if len(ev) < tc.min {
			t.Errorf("%d events in %s; want %d at least", len(ev), b, tc.min)
		}
	}
}

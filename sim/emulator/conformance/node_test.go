package conformance

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// upstreamChecker validates every request a node sends a provider
// against the operation OpenAI's document gives its path (an Azure
// deployment's path is read as OpenAI's, without its api-version), then
// passes it on.
type upstreamChecker struct {
	t    *testing.T
	s    *spec
	mu   sync.Mutex
	seen map[string]int // requests by OpenAI path
}

// in front of next.
func (c *upstreamChecker) in(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.check(w, r, next) })
}

func (c *upstreamChecker) check(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if r.URL.Path == "/metrics" { // the node reading a vLLM's engine metrics: no API of OpenAI's
		next.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	if rest, ok := strings.CutPrefix(path, "/openai/v1/"); ok { // Azure's v1 Responses API
		path = "/v1/" + rest
	}
	if i := strings.Index(path, "/openai/deployments/"); i >= 0 {
		rest := path[i+len("/openai/deployments/"):]
		if _, op, ok := strings.Cut(rest, "/"); ok {
			path = "/v1/" + op
		}
	}
	report(c.t, "the node sent "+r.Method+" "+path, c.s.checkRequest(r.Method, path, body), body)
	c.mu.Lock()
	c.seen[path]++
	c.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	next.ServeHTTP(w, r)
}

// nodeStreams are the streams TestNodeConformance reads through the node:
// the dev stack serves gpt-4o-mini from Azure, llama-3-8b from an
// OpenAI-compatible provider.
var nodeStreams = []struct {
	path, body, schema string
	min                int
}{
	{"/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":6,"messages":[{"role":"user","content":"a"}]}`, "CreateChatCompletionStreamResponse", 8},
	{"/v1/chat/completions", `{"model":"llama-3-8b","stream":true,"n":2,"max_tokens":3,"messages":[{"role":"user","content":"a"}]}`, "CreateChatCompletionStreamResponse", 8},
	{"/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"a"}],` + tools + `}`, "CreateChatCompletionStreamResponse", 3},
	{"/v1/completions", `{"model":"gpt-4o-mini","prompt":"a","stream":true,"stream_options":{"include_usage":true},"max_tokens":4}`, completionChunk, 6},
	{"/v1/completions", `{"model":"llama-3-8b","prompt":["a","b"],"stream":true,"max_tokens":3}`, completionChunk, 8},
	// Responses: passed through to Azure, bridged to the GPU cluster's
	// chat completions.
	{"/v1/responses", `{"model":"gpt-4o-mini","stream":true,"instructions":"b","input":"a","max_output_tokens":16}`, "ResponseStreamEvent", 8},
	{"/v1/responses", `{"model":"llama-3-8b","stream":true,"instructions":"b","input":"a","max_output_tokens":16}`, "ResponseStreamEvent", 8},
	{"/v1/responses", `{"model":"llama-3-8b","stream":true,"input":"a",` + respTools + `}`, "ResponseStreamEvent", 5},
}

// respTools is a function tool in the Responses API's shape, and
// respToolTurn a conversation in input items that ends in its result.
const (
	respTools    = `"tools":[{"type":"function","name":"f","strict":false,"parameters":{"type":"object","properties":{"x":{"type":"string"}}}}]`
	respToolTurn = `"input":[{"role":"user","content":"a"},{"type":"function_call","call_id":"call_1","name":"f","arguments":"{\"x\":\"y\"}"},{"type":"function_call_output","call_id":"call_1","output":"z"}]`
)

// TestNodeConformance runs the dev stack's node with every provider
// behind an upstreamChecker, and validates what the node answers a client
// on every OpenAI endpoint it serves, whole answers, refusals and every
// chat and completions stream chunk, against the document; and every
// request the node sent.
func TestNodeConformance(t *testing.T) {
	s := getSpec(t)
	dev, err := harness.StartDev("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Shutdown(t.Context()) })
	checker := &upstreamChecker{t: t, s: s, seen: map[string]int{}}
	for i := range dev.Config.Providers {
		p := &dev.Config.Providers[i]
		u, _ := url.Parse(p.BaseURL)
		srv := httptest.NewServer(checker.in(dev.Emulators[p.Name].Handler()))
		t.Cleanup(srv.Close)
		p.BaseURL = srv.URL + u.Path
	}
	n := harness.StartNode(t, dev.Config, node.Options{LedgerTuning: harness.DevLedger})
	// As a load balancer would: nothing is sent before /readyz says the
	// node is ready (its ledger elected and the tenant's escrow asked for).
	wait.For(t, 30*time.Second, "the dev node to be ready", n.Ready)
	base := "http://" + n.HTTPAddr()
	// A tool call's result, sent back: the node relays a conversation with
	// tool_calls and a tool message.
	const toolTurn = `"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":\"y\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"z"}]`
	for _, tc := range []struct {
		method, path, body, key string
		status                  int
	}{
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a"}],"max_tokens":8}`, dev.Key, 200},
		{"POST", "/v1/chat/completions", `{"model":"llama-3-8b","messages":[{"role":"system","content":"b"},{"role":"user","content":"a"}],"n":2,"max_tokens":4}`, dev.Key, 200},
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a"}],` + tools + `}`, dev.Key, 200},
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o-mini",` + toolTurn + `,` + tools + `}`, dev.Key, 200},
		{"POST", "/v1/embeddings", `{"model":"text-embedding-3-small","input":["a","b"]}`, dev.Key, 200},
		{"POST", "/v1/embeddings", `{"model":"bge-m3","input":"a"}`, dev.Key, 200},
		{"POST", "/v1/completions", `{"model":"gpt-4o-mini","prompt":"a","max_tokens":4}`, dev.Key, 200},
		{"POST", "/v1/completions", `{"model":"llama-3-8b","prompt":["a","b"]}`, dev.Key, 200},
		{"GET", "/v1/models", "", dev.Key, 200},
		{"GET", "/v1/models/gpt-4o-mini", "", dev.Key, 200},
		{"GET", "/v1/models/nope", "", dev.Key, 404},
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, dev.Key, 400},
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a"}]}`, "sk-wrong", 401},
		{"POST", "/v1/embeddings", `{"model":"nope","input":"a"}`, dev.Key, 404},
		// An input message with a string content: one with an array of
		// input_text parts is both an EasyInputMessage and an InputMessage
		// to the document, whose oneOf then refuses it.
		{"POST", "/v1/responses", `{"model":"gpt-4o-mini","instructions":"b","input":[{"role":"user","content":"a"}]}`, dev.Key, 200},
		{"POST", "/v1/responses", `{"model":"llama-3-8b","instructions":"b","input":"a","max_output_tokens":16}`, dev.Key, 200},
		{"POST", "/v1/responses", `{"model":"llama-3-8b","input":"a",` + respTools + `}`, dev.Key, 200},
		{"POST", "/v1/responses", `{"model":"llama-3-8b",` + respToolTurn + `,` + respTools + `}`, dev.Key, 200},
		{"POST", "/v1/responses", `{"model":"gpt-4o-mini",` + respToolTurn + `,` + respTools + `}`, dev.Key, 200},
		{"POST", "/v1/responses", `{"model":"gpt-4o-mini","input":7}`, dev.Key, 400},
		{"POST", "/v1/responses", `{"model":"gpt-4o-mini","input":"a","previous_response_id":"resp_nope"}`, dev.Key, 404},
		{"GET", "/v1/responses/resp_nope", "", dev.Key, 404},
	} {
		what := tc.method + " " + tc.path
		resp, b := send(t, tc.method, base+tc.path, tc.body, tc.key)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s; want %d", what, tc.body, resp.StatusCode, b, tc.status)
			continue
		}
		if tc.status != 200 {
			// The document gives the operations no error responses: a
			// refusal is checked against its ErrorResponse schema.
			report(t, what+" refused", s.checkSchema("ErrorResponse", string(b)), b)
			continue
		}
		report(t, what+" answered", s.checkAnswer(tc.method, tc.path, reqBody(tc.body), resp, b), b)
	}
	for _, tc := range nodeStreams {
		resp, b := send(t, "POST", base+tc.path, tc.body, dev.Key)
		ev := events(b)
		for _, e := range ev {
			report(t, tc.path+" streamed a chunk", s.checkSchema(tc.schema, e), []byte(e))
		}
		if resp.StatusCode != 200 || len(ev) < tc.min {
			t.Errorf("%s %s: %d, %d events in %s; want 200 and %d at least", tc.path, tc.body, resp.StatusCode, len(ev), b, tc.min)
		}
	}
	checkStoredResponses(t, s, base, dev.Key)
	checker.mu.Lock()
	defer checker.mu.Unlock()
	t.Logf("requests the node sent, checked: %v", checker.seen)
	for _, p := range []string{"/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"} {
		if checker.seen[p] == 0 {
			t.Errorf("the node sent no request to %s: nothing of it was checked", p)
		}
	}
}

// checkStoredResponses validates a follow-up, a retrieve and a delete of
// a response the node passed through and of one it bridged.
func checkStoredResponses(t *testing.T, s *spec, base, key string) {
	t.Helper()
	for _, model := range []string{"gpt-4o-mini", "llama-3-8b"} {
		body := `{"model":"` + model + `","input":"a","max_output_tokens":16}`
		resp, b := send(t, "POST", base+"/v1/responses", body, key)
		var r struct{ ID string }
		if err := json.Unmarshal(b, &r); resp.StatusCode != 200 || err != nil || r.ID == "" {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, b)
		}
		follow := `{"model":"` + model + `","input":"b","previous_response_id":"` + r.ID + `","max_output_tokens":16}`
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/responses", follow},
			{"GET", "/v1/responses/" + r.ID, ""},
			{"DELETE", "/v1/responses/" + r.ID, ""},
		} {
			what := model + ": " + c.method + " " + c.path
			resp, b := send(t, c.method, base+c.path, c.body, key)
			if resp.StatusCode != 200 {
				t.Errorf("%s: %d %s", what, resp.StatusCode, b)
				continue
			}
			report(t, what+" answered", s.checkAnswer(c.method, c.path, reqBody(c.body), resp, b), b)
		}
	}
}

package conformance

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/pb33f/libopenapi-validator/schema_validation"
)

// upstreamChecker validates every request a node sends a provider
// against the operation OpenAI's document gives its path (an Azure
// deployment's path is read as OpenAI's), then passes it on.
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
	body, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	if i := strings.Index(path, "/openai/deployments/"); i >= 0 {
		rest := path[i+len("/openai/deployments/"):]
		if _, op, ok := strings.Cut(rest, "/"); ok {
			path = "/v1/" + op
		}
	}
	req, _ := http.NewRequest(r.Method, "https://api.openai.com"+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	// The dev providers take no key; the document requires one, which is
	// no part of the body's format.
	req.Header.Set("Authorization", "Bearer sk-conformance")
	if ok, errs := c.s.v.ValidateHttpRequest(req); !ok {
		for _, ve := range errs {
			if uncompilable(ve.Message) {
				c.t.Logf("the validator cannot compile the schema of %s %s's body: not checked", r.Method, path)
				continue
			}
			c.t.Errorf("the node sent %s %s: %s", r.Method, path, ve.Message)
			for _, f := range ve.SchemaValidationErrors {
				c.t.Errorf("  %s: %s", f.FieldPath, f.Reason)
			}
			c.t.Logf("body %s", body)
		}
	}
	c.mu.Lock()
	c.seen[path]++
	c.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	next.ServeHTTP(w, r)
}

// TestNodeConformance runs the dev stack's node with every provider
// behind an upstreamChecker, and validates what the node answers a client
// on every OpenAI endpoint it serves, whole answers, refusals and chat
// stream chunks, against the document; and every request the node sent.
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
	base := "http://" + n.HTTPAddr()
	call := func(method, path, body, key string) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return resp, b
	}
	for _, tc := range []struct {
		method, path, body, key string
		status                  int
	}{
		{"POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"a"}],"max_tokens":8}`, dev.Key, 200},
		{"POST", "/v1/chat/completions", `{"model":"llama-3-8b","messages":[{"role":"system","content":"b"},{"role":"user","content":"a"}],"n":2,"max_tokens":4}`, dev.Key, 200},
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
	} {
		resp, b := call(tc.method, tc.path, tc.body, tc.key)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s; want %d", tc.method, tc.path, resp.StatusCode, b, tc.status)
			continue
		}
		if tc.status != 200 {
			// The document gives the operations no error responses: a
			// refusal is checked against its ErrorResponse schema.
			validateSchema(t, s, "ErrorResponse", string(b), tc.method+" "+tc.path)
			continue
		}
		req, _ := http.NewRequest(tc.method, "https://api.openai.com"+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		if ok, errs := s.v.ValidateHttpResponse(req, resp); !ok {
			for _, ve := range errs {
				t.Errorf("%s %s answered %d: %s", tc.method, tc.path, resp.StatusCode, ve.Message)
				for _, f := range ve.SchemaValidationErrors {
					t.Errorf("  %s: %s", f.FieldPath, f.Reason)
				}
			}
			t.Logf("answer %s", b)
		}
	}
	// Every chunk of a chat stream, with usage asked for.
	_, b := call("POST", "/v1/chat/completions", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":6,"messages":[{"role":"user","content":"a"}]}`, dev.Key)
	chunks := 0
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		chunks++
		validateSchema(t, s, "CreateChatCompletionStreamResponse", data, "a chat stream's chunk")
	}
	if chunks < 6 {
		t.Errorf("%d chunks in %s", chunks, b)
	}
	checker.mu.Lock()
	defer checker.mu.Unlock()
	for _, p := range []string{"/v1/chat/completions", "/v1/embeddings", "/v1/completions"} {
		if checker.seen[p] == 0 {
			t.Errorf("the node sent no request to %s: nothing of it was checked", p)
		}
	}
}

// uncompilable reports a validator error that says the document's schema
// could not be compiled: the validator's limit, not a finding.
func uncompilable(msg string) bool { return strings.Contains(msg, "schema compilation") }

// validateSchema checks doc against the document's component schema name.
func validateSchema(t *testing.T, s *spec, name, doc, what string) {
	t.Helper()
	schema := s.model.Components.Schemas.GetOrZero(name).Schema()
	if ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaString(schema, doc); !ok {
		for _, ve := range errs {
			if uncompilable(ve.Message) {
				t.Logf("the validator cannot compile %s: %s not checked", name, what)
				return
			}
			t.Errorf("%s: %s", what, ve.Message)
			for _, f := range ve.SchemaValidationErrors {
				t.Errorf("  %s: %s", f.FieldPath, f.Reason)
			}
		}
		t.Logf("%s: %s", what, doc)
	}
}

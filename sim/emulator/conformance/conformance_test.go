package conformance

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
)

// specPath is OpenAI's OpenAPI document: $LLMESH_OPENAI_SPEC, else the
// copy in testdata.
func specPath() string {
	if p := os.Getenv("LLMESH_OPENAI_SPEC"); p != "" {
		return p
	}
	return "testdata/openai/openapi.yaml"
}

type spec struct {
	v     validator.Validator
	model *v3.Document
}

// loadSpec builds the document's validator once.
var loadSpec = sync.OnceValues(func() (*spec, error) {
	doc, err := os.ReadFile(specPath())
	if err != nil {
		return nil, err
	}
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		return nil, err
	}
	m, err := d.BuildV3Model()
	if err != nil {
		return nil, err
	}
	return &spec{v: validator.NewValidatorFromV3Model(&m.Model), model: &m.Model}, nil
})

func getSpec(t *testing.T) *spec {
	t.Helper()
	s, err := loadSpec()
	if os.IsNotExist(err) {
		t.Skipf("no OpenAPI document at %s", specPath())
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

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

func post(t *testing.T, method, url, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, b
}

// TestAnswers validates whole answers against their operation's schema.
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
		{"GET", "/v1/models", ""},
		{"GET", "/v1/models/gpt-4o", ""},
	} {
		resp, b := post(t, tc.method, url+tc.path, tc.body)
		req, _ := http.NewRequest(tc.method, "https://api.openai.com"+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		if ok, errs := s.v.ValidateHttpResponse(req, resp); !ok {
			for _, ve := range errs {
				t.Errorf("%s %s: %s", tc.method, tc.path, ve.Message)
				for _, f := range ve.SchemaValidationErrors {
					t.Errorf("  %s: %s", f.FieldPath, f.Reason)
				}
			}
			t.Logf("answer %s", b)
		}
	}
}

// TestResponseStreamEvents validates every event of a Responses stream,
// text and function call, against ResponseStreamEvent.
func TestResponseStreamEvents(t *testing.T) {
	s := getSpec(t)
	url := startEmulator(t)
	schema := s.model.Components.Schemas.GetOrZero("ResponseStreamEvent").Schema()
	sv := schema_validation.NewSchemaValidator()
	for _, body := range []string{
		`{"model":"gpt-4.1","input":"a","stream":true}`,
		`{"model":"gpt-4.1","input":"a","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]},"strict":true}]}`,
	} {
		_, b := post(t, "POST", url+"/v1/responses", body)
		sc := bufio.NewScanner(bytes.NewReader(b))
		n := 0
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			n++
			if ok, errs := sv.ValidateSchemaString(schema, data); !ok {
				for _, ve := range errs {
					t.Errorf("event %s: %s", data, ve.Message)
					for _, f := range ve.SchemaValidationErrors {
						t.Errorf("  %s: %s", f.FieldPath, f.Reason)
					}
				}
			}
		}
		if n < 6 {
			t.Errorf("%d events in %s", n, b)
		}
	}
}

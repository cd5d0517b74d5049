package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// specPath is OpenAI's OpenAPI document: $LLMESH_OPENAI_SPEC, else the
// copy in testdata.
func specPath() string {
	if p := os.Getenv("LLMESH_OPENAI_SPEC"); p != "" {
		return p
	}
	return "testdata/openai/openapi.yaml"
}

// spec is the document loaded with kin-openapi, which validates requests
// and answers with openapi3filter and single JSON documents (stream
// events, refusals) with a component schema's VisitJSON. The document
// declares OpenAPI 3.1, so both read it as JSON Schema 2020-12: a schema
// that reaches a keyword only 2020-12 has (ResponseStreamEvent reaches
// propertyNames) is compiled by santhosh-tekuri/jsonschema, the others
// are checked by kin's own validator, which reads their keywords alike.
type spec struct {
	doc      *openapi3.T
	router   routers.Router
	rewrites rewrites // what as31 rewrote in the document
}

// loadSpec loads the document once.
var loadSpec = sync.OnceValues(func() (*spec, error) {
	b, err := os.ReadFile(specPath())
	if err != nil {
		return nil, err
	}
	b, n, err := as31(b)
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, err
	}
	if err := addCompletionChunk(doc); err != nil {
		return nil, err
	}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &spec{doc: doc, router: r, rewrites: n}, nil
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

// input is the validation input of a request to path on OpenAI's server
// (path starts with /v1), with its JSON body if any.
func (s *spec) input(method, path string, body []byte) (*openapi3filter.RequestValidationInput, error) {
	req, err := http.NewRequest(method, "https://api.openai.com"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	o := &openapi3filter.Options{
		// The key is no part of the format, and the dev providers take none.
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
		MultiError:         true,
		// Validation must not change the body it is given.
		SkipSettingDefaults: true,
		// An answer's status must be one the document gives.
		IncludeResponseStatus: true,
	}
	o.WithCustomSchemaErrorFunc(schemaMessage)
	return &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: o}, nil
}

// checkRequest validates a request: its operation's parameters and body.
func (s *spec) checkRequest(method, path string, body []byte) error {
	in, err := s.input(method, path, body)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateRequest(context.Background(), in)
}

// checkAnswer validates the answer to a request: its status, headers and
// body against the operation's response.
func (s *spec) checkAnswer(method, path string, reqBody []byte, resp *http.Response, body []byte) error {
	in, err := s.input(method, path, reqBody)
	if err != nil {
		return err
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                in.Options,
	}
	out.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// checkSchema validates doc, one JSON document of an answer, against the
// component schema name.
func (s *spec) checkSchema(name, doc string) error {
	ref := s.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("the document has no schema %s", name)
	}
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return err
	}
	return ref.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse(),
		openapi3.MultiErrors(), openapi3.SetSchemaErrorMessageCustomizer(schemaMessage))
}

// schemaMessage is a schema error's message without the schema and value
// that kin appends, which for OpenAI's schemas run to pages.
func schemaMessage(e *openapi3.SchemaError) string {
	var b strings.Builder
	if p := e.JSONPointer(); len(p) > 0 && !strings.HasPrefix(e.Reason, "error at ") {
		fmt.Fprintf(&b, "at /%s: ", strings.Join(p, "/"))
	}
	if e.Origin != nil {
		b.WriteString(e.Origin.Error())
		return b.String()
	}
	if e.Reason == "" {
		fmt.Fprintf(&b, "doesn't match %q", e.SchemaField)
	} else {
		b.WriteString(e.Reason)
	}
	if v, err := json.Marshal(e.Value); err == nil && len(v) < 200 {
		fmt.Fprintf(&b, " (value %s)", v)
	}
	return b.String()
}

// report fails t with err, one finding a line, if err is not nil.
func report(t *testing.T, what string, err error, doc []byte) {
	t.Helper()
	if err == nil {
		return
	}
	var me openapi3.MultiError
	if errors.As(err, &me) && len(me) > 1 {
		for _, e := range me {
			t.Errorf("%s: %v", what, e)
		}
	} else {
		t.Errorf("%s: %v", what, err)
	}
	t.Logf("%s: %s", what, doc)
}

// completionChunk names the schema of a legacy completions stream's chunk,
// which the document gives no schema of its own: CreateCompletionResponse
// says "both the streamed and non-streamed response objects share the
// same shape", but requires a finish_reason, and the API streams
// "finish_reason": null in every chunk before a choice's last (an
// example is in openai/openai-openapi#100, which was not merged). The
// schema is CreateCompletionResponse with that null admitted.
const completionChunk = "CreateCompletionResponse (stream chunk)"

// addCompletionChunk adds the schema completionChunk names to doc's
// components, changing none of the others.
func addCompletionChunk(doc *openapi3.T) error {
	answer := doc.Components.Schemas["CreateCompletionResponse"]
	if answer == nil || answer.Value.Properties["choices"] == nil || answer.Value.Properties["choices"].Value.Items == nil {
		return errors.New("CreateCompletionResponse has no choices")
	}
	chunk, choices := *answer.Value, *answer.Value.Properties["choices"].Value
	choice := *choices.Items.Value
	reason := choice.Properties["finish_reason"]
	if reason == nil || reason.Value.Type == nil {
		return errors.New("CreateCompletionResponse's choices have no finish_reason")
	}
	nullable := *reason.Value
	nullable.Type = &openapi3.Types{"string", "null"}
	nullable.Enum = append(slices.Clone(nullable.Enum), nil)
	choice.Properties = maps.Clone(choice.Properties)
	choice.Properties["finish_reason"] = openapi3.NewSchemaRef("", &nullable)
	choices.Items = openapi3.NewSchemaRef("", &choice)
	chunk.Properties = maps.Clone(chunk.Properties)
	chunk.Properties["choices"] = openapi3.NewSchemaRef("", &choices)
	doc.Components.Schemas[completionChunk] = openapi3.NewSchemaRef("", &chunk)
	return nil
}
